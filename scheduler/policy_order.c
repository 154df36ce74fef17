/* Ordering policy: the priority of each task of a new graph.
 *
 * A depth-first post-order from the graph's sinks (tasks without
 * dependents), taken in submission order, visiting each task's inputs in
 * their listed order. A task is numbered right after the last of its
 * inputs, so the scheduler finishes one branch (and frees its
 * intermediates) before starting the next, which keeps memory bounded, as
 * Dask's `order` does. Lower numbers run first. Every graph's numbers
 * follow the previous graph's (the caller passes a running base), so
 * earlier graphs run before later ones.
 *
 * The walk is iterative with an explicit stack: a 10^6-long chain is
 * 10^6 stack entries on the heap, not 10^6 C frames. */
#include "sched.h"

#include <stdlib.h>

#define UNSEEN INT64_MIN
#define ON_STACK (INT64_MIN + 1)

int sched_policy_order(sched_state *st, const uint32_t *ids, uint32_t n, int64_t base, uint32_t *order_out)
{
  uint32_t *stack = malloc((size_t)(n ? n : 1) * sizeof *stack);
  uint32_t *next = malloc((size_t)(n ? n : 1) * sizeof *next);
  if (stack == NULL || next == NULL) {
    free(stack);
    free(next);
    return TSR_ENOMEM;
  }
  for (uint32_t i = 0; i < n; i++) st->tasks[ids[i]].priority = UNSEEN;
  uint32_t count = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t sink = ids[i];
    if (st->tasks[sink].ndependents != 0 || st->tasks[sink].priority != UNSEEN) continue;
    uint32_t sp = 0;
    stack[sp] = sink;
    next[sp++] = 0;
    st->tasks[sink].priority = ON_STACK;
    while (sp > 0) {
      sched_task *t = &st->tasks[stack[sp - 1]];
      if (next[sp - 1] < t->ndeps) {
        uint32_t d = t->deps[next[sp - 1]++];
        sched_task *dt = &st->tasks[d];
        if (dt->state == TS_NEW && dt->priority == UNSEEN) {
          dt->priority = ON_STACK;
          stack[sp] = d;
          next[sp++] = 0;
        }
        continue;
      }
      t->priority = base + count;
      order_out[count++] = stack[--sp];
    }
  }
  /* Only a cycle leaves tasks unreached, and the caller rejects cycles
   * first; number any leftovers anyway so every task has a priority. */
  for (uint32_t i = 0; i < n && count < n; i++)
    if (st->tasks[ids[i]].priority == UNSEEN) {
      st->tasks[ids[i]].priority = base + count;
      order_out[count++] = ids[i];
    }
  free(stack);
  free(next);
  return 0;
}
