/* examples/common/clireport.h — `--report FILE.html|.json` for the CLIs
 * (tsr-svd, tsr-pca, tsr-cluster, tsr-tiles; docs/report.md), together
 * with their progress bar: one recorder (tessera/report.h) fed by the
 * bar's progress callback. Public API only. */
#ifndef TSR_EXAMPLES_CLIREPORT_H
#define TSR_EXAMPLES_CLIREPORT_H

#include <stdbool.h>

#include "progressbar.h"
#include "tessera/report.h"

typedef struct clireport {
  tsr_report *rec;        /* NULL without --report */
  progressbar *bar;       /* NULL with --no-progress and no report */
  const char *path;       /* --report's FILE, or NULL */
  const char *program;
  tsr_client *client;
} clireport;

/* Checks --report's FILE before anything runs: it must end in .html,
 * .htm or .json. 0, or -1 after a message naming the flag and the file. */
int clireport_check_path(const char *program, const char *path);
/* Starts the bar (when progress) and the recorder (when path != NULL) on
 * client; the command line (argc, argv) goes into the report. A recorder
 * that cannot start is reported on stderr and returns its error; the
 * bar alone never fails the run. 0 or a negative TSR_E*. */
int clireport_begin(clireport *cr, tsr_client *client, const char *program, int argc, char **argv, const char *path,
                    bool progress);
/* Ends both: finishes the recorder with exit_code (about a second, for the
 * workers' last heartbeat), stops the bar, writes the report and says
 * where on stderr. Returns exit_code, or 1 when it was 0 and the report
 * could not be written. Before tsr_client_close. */
int clireport_end(clireport *cr, int exit_code);
/* Stops drawing the bar (its line ends), e.g. before printing results;
 * the recorder keeps getting progress. */
void clireport_stop_bar(clireport *cr);

#endif
