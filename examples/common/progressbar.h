/* examples/common/progressbar.h — the CLIs' progress display (tsr-svd,
 * tsr-pca, tsr-cluster, tsr-tiles; docs/progress.md).
 *
 * It follows every graph the client submits (tsr_client_on_progress) and
 * shows their sum: on a terminal (isatty(2)) one line redrawn in place,
 *   [#########...........] 45%  1234/2741 tasks  3.1 GB  00:12
 * at most every 100 ms; otherwise a plain line
 *   progress: 45% 1234/2741 tasks 3.1 GB 00:12
 * every few seconds (TESSERA_PROGRESS_INTERVAL, e.g. "500ms"; default 5s)
 * and when a graph finishes. All on stderr. Uses the public API only. */
#ifndef TSR_EXAMPLES_PROGRESSBAR_H
#define TSR_EXAMPLES_PROGRESSBAR_H

#include <stdbool.h>

#include "tessera/tessera.h"

typedef struct progressbar progressbar;

/* Starts following client's graphs; NULL when !enabled (--no-progress) or
 * on ENOMEM: the CLI then runs without one. */
progressbar *progressbar_start(tsr_client *client, const char *label, bool enabled);
/* The same, and every progress report also goes to tee(tee_user, p) (on
 * the client's I/O thread; an efficiency recorder, tessera/report.h).
 * With !enabled and a tee nothing is drawn, but the tee is fed. */
progressbar *progressbar_start_tee(tsr_client *client, const char *label, bool enabled, tsr_progress_fn tee, void *tee_user);
/* Stops the calls (none after it returns), ends a terminal line with a
 * newline, frees; NULL is a no-op. Before tsr_client_close. */
void progressbar_stop(progressbar **bar_p);

#endif
