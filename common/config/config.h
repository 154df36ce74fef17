/* common/config — a daemon's settings from the command line, the
 * environment and a config file, one machinery for tessera-scheduler and
 * tessera-worker (docs/deploy.md has the table of every setting).
 *
 * A daemon describes its settings once, as a table of tsr_config_key (one
 * per flag). Each setting can then come from:
 *
 *   1. the command line: `--memory-limit 4GB` or `--memory-limit=4GB`;
 *      a switch (TSR_CONFIG_SWITCH) alone, `--no-fuse`, or with a value
 *      after `=`: `--no-fuse=false`;
 *   2. the environment: the key's `env` name (TESSERA_MEMORY_LIMIT), else
 *      its `env_alias` (an older name) when that is set. An empty variable
 *      counts as unset (compose files often write `VAR: ${VAR:-}`);
 *   3. a config file: `--config FILE`, else $TESSERA_CONFIG. Lines
 *      `memory-limit = 4GB` (the flag's name without dashes; `:` also
 *      separates), comments starting with `#` or `;`, `;` after a blank
 *      ends a value, one pair of surrounding double quotes is stripped.
 *      Keys before any section are this daemon's; `[scheduler]` and
 *      `[worker]` sections let one file serve both daemons: each reads its
 *      own section and skips the other's. A key set twice, an unknown key
 *      or section, or a line that is not `key = value` is an error.
 *      Parsed by libinih, lines at most 200 bytes;
 *   4. the default, which the daemon set in its options beforehand.
 *
 * Precedence: flag > environment > file > default, per setting. Each
 * setting is applied once, with its winning value, through the daemon's
 * apply callback; lower sources of the same setting are not parsed. The
 * built-in setting `config` (--config FILE, TESSERA_CONFIG) names the file
 * and is never passed to the callback.
 *
 * Errors name the setting and where it came from, so a deployment's typo is
 * found where it was made:
 *   --memory-limit: "12XB" is not a size (e.g. 4GiB)
 *   TESSERA_MEMORY_LIMIT (environment): "12XB" is not a size (e.g. 4GiB)
 *   /etc/tessera.conf:3: memory-limit: "12XB" is not a size (e.g. 4GiB)
 * (the daemon prefixes its own name when it prints them).
 *
 * Threading: a tsr_config belongs to one thread; the daemons use it in
 * main() before starting anything. Nothing here prints. */
#ifndef TSR_COMMON_CONFIG_H
#define TSR_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "util/util.h"

/* Key flags. */
#define TSR_CONFIG_SWITCH 1u   /* no value on the command line; elsewhere true/false, 1/0, yes/no, on/off.
                                  The callback gets "true" or "false". */
#define TSR_CONFIG_NO_ENV 2u   /* not read from the environment (--help, --list-gpus) */
#define TSR_CONFIG_NO_FILE 4u  /* not a config file key */
#define TSR_CONFIG_ACTION (TSR_CONFIG_SWITCH | TSR_CONFIG_NO_ENV | TSR_CONFIG_NO_FILE)

typedef struct tsr_config_key {
  const char *name;       /* "memory-limit": the flag --memory-limit and the file key */
  const char *env;        /* "TESSERA_MEMORY_LIMIT", or NULL with TSR_CONFIG_NO_ENV */
  const char *env_alias;  /* read when env is unset (an older name), or NULL */
  unsigned flags;
} tsr_config_key;

typedef struct tsr_config_spec {
  const char *section;         /* this daemon's file section: "scheduler" or "worker" */
  const tsr_config_key *keys;  /* borrowed for the tsr_config's life */
  size_t n_keys;
} tsr_config_spec;

typedef enum {
  TSR_CONFIG_UNSET = 0,
  TSR_CONFIG_FROM_FILE,
  TSR_CONFIG_FROM_ENV,
  TSR_CONFIG_FROM_FLAG,
} tsr_config_source;

typedef struct tsr_config tsr_config;

/* Applies one setting: value is the winning text (a switch's is "true" or
 * "false"). Returns 0, or a negative TSR_E* with a message in err that
 * names the value and the problem ("\"12XB\" is not a size (e.g. 4GiB)");
 * the caller adds where it came from. */
typedef int (*tsr_config_apply_fn)(void *ctx, const char *name, const char *value, tsr_errbuf *err);

/* A configuration with nothing set yet. 0 or TSR_ENOMEM. The spec (and its
 * keys) must outlive it. */
int tsr_config_new(const tsr_config_spec *spec, tsr_config **cfg_p);
void tsr_config_destroy(tsr_config **cfg_p);   /* NULL and *NULL are no-ops */

/* Records the command line (argv[1..argc-1]; argv is borrowed until
 * destroy). "-h" means --help when the spec has a "help" key. Only the
 * syntax is checked here: TSR_EINVAL for an unknown option, a missing
 * value, a switch's `=VALUE` that is not a boolean, or a positional
 * argument. */
int tsr_config_parse_args(tsr_config *cfg, int argc, char **argv, tsr_errbuf *err);

/* Reads the environment, then the config file (--config, else
 * $TESSERA_CONFIG, else none). TSR_EIO when the file cannot be read,
 * TSR_EINVAL for a bad line, key, section, duplicate or switch value, each
 * message "FILE:LINE: ..." (or "TESSERA_X (environment): ..."). */
int tsr_config_load(tsr_config *cfg, tsr_errbuf *err);

/* The winning text of a setting, or NULL when unset (or unknown). Valid
 * until destroy. */
const char *tsr_config_get(const tsr_config *cfg, const char *name);
tsr_config_source tsr_config_source_of(const tsr_config *cfg, const char *name);

/* Where a setting came from, for messages, into buf (returned):
 * "--memory-limit", "TESSERA_MEMORY_LIMIT (environment)",
 * "FILE:3: memory-limit", or "--memory-limit (default)" when unset. */
const char *tsr_config_origin(const tsr_config *cfg, const char *name, char *buf, size_t cap);

/* Calls apply for every set setting, in the spec's order. Stops at the
 * first failure: returns its code with err = "ORIGIN: MESSAGE". */
int tsr_config_apply(const tsr_config *cfg, tsr_config_apply_fn apply, void *ctx, tsr_errbuf *err);

/* Writes every set setting except actions as `name = value  # ORIGIN`, one
 * a line, in the spec's order (--print-config: what a deployment actually
 * gave the daemon). */
void tsr_config_print(const tsr_config *cfg, FILE *out);

/* "true"/"1"/"yes"/"on" -> 1, "false"/"0"/"no"/"off" -> 0 (any case),
 * anything else -> -1. */
int tsr_config_parse_bool(const char *text);

#endif
