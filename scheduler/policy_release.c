/* When results and task records may go. Pure predicates over one task;
 * transitions.c applies them.
 *
 * A result in memory is freed on its worker (a batched `free`) as soon as
 * no client wants it and no active dependent (waiting, ready, queued or
 * processing) still needs it as an input. The record then stays RELEASED
 * while any dependent record exists, because that dependent's result may be
 * lost later and must be recomputable from the graph; it is forgotten when
 * the last dependent record goes and nobody wants it. */
#include "sched.h"

bool sched_needed(const sched_task *t) { return t->nwanted > 0 || t->nneeded > 0; }

bool sched_releasable(const sched_task *t) { return t->state == TS_MEMORY && !sched_needed(t); }

bool sched_forgettable(const sched_task *t)
{
  return (t->state == TS_RELEASED || t->state == TS_ERRED) && t->nwanted == 0 && t->nlive_dependents == 0 &&
         (t->state == TS_ERRED || t->nneeded == 0);
}
