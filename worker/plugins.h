/* worker/plugins.h — op plugins loaded into the worker's registry
 * (tessera/plugin.h has the ABI; docs/plugins.md). Called from main()
 * before any thread starts. */
#ifndef TSR_WORKER_PLUGINS_H
#define TSR_WORKER_PLUGINS_H

#include "util/util.h"

/* Removes every "--op-plugin PATH" from argv (argc updated) and appends
 * the paths to TESSERA_OP_PLUGINS (colon-separated). 0 or TSR_EINVAL. */
int tsr_plugins_take_flags(int *argc, char **argv, tsr_errbuf *err);
/* Loads each library named in TESSERA_OP_PLUGINS; the first failure
 * (cannot open, missing symbol, wrong ABI version, a name taken) stops
 * it with a message naming the file. */
int tsr_plugins_load_env(tsr_errbuf *err);
int tsr_plugin_load(const char *path, tsr_errbuf *err);

#endif
