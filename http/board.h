/* http/board.h — the latest snapshots a daemon published, read by the
 * HTTP server's thread: the hand-over between a single-threaded event loop
 * (which builds texts now and then) and HTTP requests (which copy them).
 *
 * The loop never blocks on a reader for longer than a pointer swap, and
 * builds snapshots only while someone polled recently
 * (tsr_board_wanted), so an unwatched daemon pays nothing but one atomic
 * load per tick. A reader that finds a snapshot stale (nobody polled for
 * a while, so the loop stopped publishing) waits briefly for the next one
 * instead of serving old numbers.
 *
 * Threading: publish from the daemon's thread, copy from any thread. */
#ifndef TSR_HTTP_BOARD_H
#define TSR_HTTP_BOARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tsr_board tsr_board;

/* A board of nslots texts (all empty). NULL on ENOMEM. */
tsr_board *tsr_board_new(unsigned nslots);
/* NULL and *NULL are no-ops. */
void tsr_board_destroy(tsr_board **board_p);

/* Replaces slot's text with text (malloc'd, len bytes; taken, freed by the
 * board), stamped now_ms, and wakes readers waiting for it. */
void tsr_board_publish(tsr_board *board, unsigned slot, char *text, size_t len, uint64_t now_ms);
/* True when a reader copied anything within window_ms before now_ms. */
bool tsr_board_wanted(tsr_board *board, uint64_t now_ms, uint64_t window_ms);

/* A malloc'd copy of slot's text (NUL-terminated; *len_p without the
 * NUL). When the text is older than fresh_ms (or was never published), waits
 * up to wait_ms for the next publish first, and serves what there is
 * then ("" when nothing ever was). Records the poll. 0 or TSR_ENOMEM. */
int tsr_board_copy(tsr_board *board, unsigned slot, uint64_t fresh_ms, uint64_t wait_ms, char **text_p,
                   size_t *len_p);

#endif
