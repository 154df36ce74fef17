/* Per-op priority queues of runnable tasks: binary min-heaps on
 * (priority, id). Each task records its position (heap_pos) so it can be
 * removed in O(log n) when it stops being runnable (a lost input, its
 * client left). Invariant: a task is in its op's heap iff its state is
 * READY or QUEUED, and then heap_pos is its index. */
#include "sched.h"

static bool before(const sched_state *st, uint32_t a, uint32_t b)
{
  const sched_task *ta = &st->tasks[a], *tb = &st->tasks[b];
  return ta->priority < tb->priority || (ta->priority == tb->priority && a < b);
}

static void place(sched_state *st, sched_heap *h, uint32_t i, uint32_t id)
{
  h->ids[i] = id;
  st->tasks[id].heap_pos = i;
}

static void sift_up(sched_state *st, sched_heap *h, uint32_t i)
{
  uint32_t id = h->ids[i];
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (!before(st, id, h->ids[parent])) break;
    place(st, h, i, h->ids[parent]);
    i = parent;
  }
  place(st, h, i, id);
}

static void sift_down(sched_state *st, sched_heap *h, uint32_t i)
{
  uint32_t id = h->ids[i];
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= h->n) break;
    if (child + 1 < h->n && before(st, h->ids[child + 1], h->ids[child])) child++;
    if (!before(st, h->ids[child], id)) break;
    place(st, h, i, h->ids[child]);
    i = child;
  }
  place(st, h, i, id);
}

int sched_queue_push(sched_state *st, uint32_t id)
{
  sched_heap *h = &st->ops[st->tasks[id].op].queue;
  if (sched_grow((void **)&h->ids, &h->cap, h->n + 1, sizeof *h->ids) != 0) return TSR_ENOMEM;
  h->n++;
  place(st, h, h->n - 1, id);
  sift_up(st, h, h->n - 1);
  return 0;
}

void sched_queue_remove(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  if (t->heap_pos == SCHED_NONE) return;
  sched_heap *h = &st->ops[t->op].queue;
  uint32_t i = t->heap_pos;
  t->heap_pos = SCHED_NONE;
  h->n--;
  if (i == h->n) return;
  uint32_t last = h->ids[h->n];
  place(st, h, i, last);
  sift_up(st, h, i);
  if (st->tasks[last].heap_pos == i) sift_down(st, h, i);
}

uint32_t sched_queue_peek(const sched_state *st, uint32_t op)
{
  const sched_heap *h = &st->ops[op].queue;
  return h->n ? h->ids[0] : SCHED_NONE;
}
