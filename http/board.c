/* Published snapshots (board.h): one mutex, one condition variable, texts
 * swapped in whole. The poll time is an atomic so tsr_board_wanted costs
 * the loop one load. */
#include "board.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/util.h"

typedef struct board_slot {
  char *text;
  size_t len;
  uint64_t at_ms;       /* 0: never published */
  uint64_t seq;         /* publishes so far */
} board_slot;

struct tsr_board {
  pthread_mutex_t lock;
  pthread_cond_t published;
  board_slot *slots;
  unsigned nslots;
  _Atomic uint64_t polled_ms;   /* last copy, tsr_now_ms(); 0: never */
};

tsr_board *tsr_board_new(unsigned nslots)
{
  tsr_board *b = calloc(1, sizeof *b);
  if (b == NULL) return NULL;
  b->slots = calloc(nslots ? nslots : 1, sizeof *b->slots);
  if (b->slots == NULL) {
    free(b);
    return NULL;
  }
  b->nslots = nslots;
  pthread_mutex_init(&b->lock, NULL);
  /* waits are timed on the monotonic clock, the one tsr_now_ms reads */
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&b->published, &attr);
  pthread_condattr_destroy(&attr);
  return b;
}

void tsr_board_destroy(tsr_board **board_p)
{
  if (board_p == NULL || *board_p == NULL) return;
  tsr_board *b = *board_p;
  for (unsigned i = 0; i < b->nslots; i++) free(b->slots[i].text);
  free(b->slots);
  pthread_mutex_destroy(&b->lock);
  pthread_cond_destroy(&b->published);
  free(b);
  *board_p = NULL;
}

void tsr_board_publish(tsr_board *board, unsigned slot, char *text, size_t len, uint64_t now_ms)
{
  if (slot >= board->nslots) {
    free(text);
    return;
  }
  pthread_mutex_lock(&board->lock);
  board_slot *s = &board->slots[slot];
  char *old = s->text;
  s->text = text;
  s->len = len;
  s->at_ms = now_ms ? now_ms : 1;
  s->seq++;
  pthread_cond_broadcast(&board->published);
  pthread_mutex_unlock(&board->lock);
  free(old);
}

bool tsr_board_wanted(tsr_board *board, uint64_t now_ms, uint64_t window_ms)
{
  uint64_t polled = atomic_load_explicit(&board->polled_ms, memory_order_relaxed);
  return polled != 0 && now_ms - polled <= window_ms;
}

static void wait_for_publish(tsr_board *b, board_slot *s, uint64_t wait_ms)
{
  uint64_t seq = s->seq;
  uint64_t deadline_ns = tsr_now_ns() + wait_ms * 1000000u;
  struct timespec ts = {(time_t)(deadline_ns / 1000000000u), (long)(deadline_ns % 1000000000u)};
  while (s->seq == seq)
    if (pthread_cond_timedwait(&b->published, &b->lock, &ts) == ETIMEDOUT) break;
}

int tsr_board_copy(tsr_board *board, unsigned slot, uint64_t fresh_ms, uint64_t wait_ms, char **text_p,
                   size_t *len_p)
{
  uint64_t now = tsr_now_ms();
  atomic_store_explicit(&board->polled_ms, now ? now : 1, memory_order_relaxed);
  if (slot >= board->nslots) return TSR_EINVAL;
  pthread_mutex_lock(&board->lock);
  board_slot *s = &board->slots[slot];
  if (s->at_ms == 0 || now - s->at_ms > fresh_ms) wait_for_publish(board, s, wait_ms);
  size_t len = s->text ? s->len : 0;
  char *copy = malloc(len + 1);
  if (copy != NULL) {
    if (len) memcpy(copy, s->text, len);
    copy[len] = '\0';
  }
  pthread_mutex_unlock(&board->lock);
  if (copy == NULL) return TSR_ENOMEM;
  *text_p = copy;
  *len_p = len;
  return 0;
}
