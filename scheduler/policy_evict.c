/* Recompute or spill (policy_evict.h): the costs, the decision sent in
 * `compute`, and the accounting fed by task_done and chunks_moved. The
 * state changes a drop causes (deferred recomputation) are transitions.c's
 * sched_tr_dropped. */
#include "policy_evict.h"

#include <string.h>

#include "sched.h"

int sched_recompute_mode_parse(const char *s)
{
  if (strcmp(s, "auto") == 0) return SCHED_RECOMPUTE_AUTO;
  if (strcmp(s, "never") == 0) return SCHED_RECOMPUTE_NEVER;
  if (strcmp(s, "always") == 0) return SCHED_RECOMPUTE_ALWAYS;
  return -1;
}

const char *sched_recompute_mode_name(sched_recompute_mode mode)
{
  return mode == SCHED_RECOMPUTE_NEVER ? "never" : mode == SCHED_RECOMPUTE_ALWAYS ? "always" : "auto";
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

/* Microseconds to move nbytes at bps bytes per second. */
static uint64_t transfer_us(uint64_t nbytes, uint64_t bps)
{
  return bps == 0 ? 0 : (uint64_t)((double)nbytes * 1e6 / (double)bps);
}

static uint64_t read_bps(const sched_worker *w)
{
  return w->spill_read_bps ? w->spill_read_bps : SCHED_SPILL_READ_BPS_DEFAULT;
}

uint64_t sched_evict_spill_cost_us(const sched_state *st, uint16_t w, uint64_t nbytes)
{
  const sched_worker *wk = w < st->nworkers_slots ? &st->workers[w] : NULL;
  uint64_t wbps = wk && wk->spill_write_bps ? wk->spill_write_bps : SCHED_SPILL_WRITE_BPS_DEFAULT;
  uint64_t rbps = wk ? read_bps(wk) : SCHED_SPILL_READ_BPS_DEFAULT;
  return sat_add(transfer_us(nbytes, wbps), transfer_us(nbytes, rbps));
}

/* Input d of a task: what recomputing that task would have to redo or
 * reload for d. Only a wanted input is sure to be there when the task is
 * made again; any other is released once its present consumers finish,
 * and a memo cannot grow afterwards, so it counts whole even while it is
 * held. (Counting a held input as free made a dropped TSQR slice "cheap"
 * whose recomputation, once its inputs were gone, redid a whole pass: a
 * 4-thread worker at a quarter of X looped for minutes.) */
static uint64_t input_cost_us(const sched_state *st, const sched_task *d)
{
  bool held = d->state == TS_MEMORY && d->who_has != SCHED_NO_WORKER;
  if (!held || d->nwanted == 0) return d->cost_us;
  if (d->evict & SCHED_EV_ON_DISK) return transfer_us(d->nbytes, read_bps(&st->workers[d->who_has]));
  return 0;
}

uint64_t sched_evict_lineage_us(const sched_state *st, uint32_t id)
{
  const sched_task *t = &st->tasks[id];
  uint64_t sum = 0;
  for (uint32_t i = 0; i < t->ndeps; i++) sum = sat_add(sum, input_cost_us(st, &st->tasks[t->deps[i]]));
  return sum;
}

static uint64_t largest_input(const sched_state *st, const sched_task *t)
{
  uint64_t most = 0;
  for (uint32_t i = 0; i < t->ndeps; i++)
    if (st->tasks[t->deps[i]].nbytes > most) most = st->tasks[t->deps[i]].nbytes;
  return most;
}

/* Estimates scale with the task's largest input where the op has been
 * measured per input byte (one op serves chunks of very different sizes:
 * an add of two 2 MiB chunks and an add of two scalars), else they are the
 * op's plain averages, else an elementwise guess. */
uint64_t sched_evict_estimate_bytes(const sched_state *st, uint32_t id)
{
  const sched_task *t = &st->tasks[id];
  const sched_op *op = &st->ops[t->op];
  uint64_t in = largest_input(st, t);
  if (in > 0 && op->measured_in) return (uint64_t)(op->out_per_in * (double)in);
  return op->measured ? op->avg_bytes : in;
}

uint64_t sched_evict_estimate_us(const sched_state *st, uint32_t id)
{
  const sched_task *t = &st->tasks[id];
  const sched_op *op = &st->ops[t->op];
  uint64_t in = largest_input(st, t);
  if (in > 0 && op->measured_in) return (uint64_t)(op->us_per_in * (double)in);
  return op->measured ? op->avg_us : transfer_us(in, SCHED_OP_BPS_DEFAULT);
}

bool sched_evict_may_drop(const sched_state *st, uint32_t id, uint16_t w)
{
  const sched_task *t = &st->tasks[id];
  if (st->cfg.recompute == SCHED_RECOMPUTE_NEVER || (t->evict & SCHED_EV_NODROP)) return false;
  /* a fused task without inputs may be many steps: it is priced, not assumed cheap */
  if (st->cfg.recompute == SCHED_RECOMPUTE_ALWAYS || (t->ndeps == 0 && sched_task_fused_parts(t) == 0)) return true;
  uint64_t recompute = sat_add(sched_evict_estimate_us(st, id), sched_evict_lineage_us(st, id));
  return recompute <= sched_evict_spill_cost_us(st, w, sched_evict_estimate_bytes(st, id));
}

/* Moving average with weight 1/8 for the new sample; the first sample
 * starts it. */
static uint64_t ewma(uint64_t avg, uint64_t sample, bool first)
{
  return first ? sample : (7 * avg + sample) / 8;
}

static double ewma_f(double avg, double sample, bool first) { return first ? sample : (7 * avg + sample) / 8; }

static void measure_op(sched_op *op, uint64_t in, uint64_t duration_us, uint64_t nbytes)
{
  op->avg_us = ewma(op->avg_us, duration_us, !op->measured);
  op->avg_bytes = ewma(op->avg_bytes, nbytes, !op->measured);
  op->measured = true;
  if (in == 0) return;
  op->us_per_in = ewma_f(op->us_per_in, (double)duration_us / (double)in, !op->measured_in);
  op->out_per_in = ewma_f(op->out_per_in, (double)nbytes / (double)in, !op->measured_in);
  op->measured_in = true;
}

void sched_evict_on_done(sched_state *st, uint32_t id, uint16_t w, uint64_t duration_us, uint64_t nbytes)
{
  sched_task *t = &st->tasks[id];
  uint64_t cost = sat_add(duration_us, sched_evict_lineage_us(st, id));
  t->cost_us = cost > UINT32_MAX ? UINT32_MAX : (uint32_t)cost;
  measure_op(&st->ops[t->op], largest_input(st, t), duration_us, nbytes);
  if (t->evict & SCHED_EV_RAN) {
    st->workers[w].tasks_recomputed++;
    st->workers[w].bytes_recomputed += nbytes;
  }
  t->evict = (uint8_t)((t->evict & ~(SCHED_EV_REDONE | SCHED_EV_CONSUMED | SCHED_EV_GONE)) | SCHED_EV_RAN |
                       ((t->evict & SCHED_EV_RAN) ? SCHED_EV_REDONE : 0));
  for (uint32_t i = 0; i < t->ndeps; i++) st->tasks[t->deps[i]].evict |= SCHED_EV_CONSUMED;
}

bool sched_evict_moved(sched_state *st, uint16_t w, sched_move move, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  if (t->state != TS_MEMORY || t->who_has != w) return false;
  sched_worker *wk = &st->workers[w];
  bool on_disk = (t->evict & SCHED_EV_ON_DISK) != 0;
  switch (move) {
  case SCHED_MOVE_SPILLED:
    if (!on_disk) wk->held_disk += t->nbytes;
    t->evict |= SCHED_EV_ON_DISK;
    return true;
  case SCHED_MOVE_LOADED:
    if (on_disk) wk->held_disk -= t->nbytes <= wk->held_disk ? t->nbytes : wk->held_disk;
    t->evict &= (uint8_t)~SCHED_EV_ON_DISK;
    return true;
  case SCHED_MOVE_DROPPED:
    /* Recomputed for dependents, then dropped again before any of them
     * read it: the worker's memory is too tight for drop-and-recompute to
     * make progress (it would loop: make, drop, make...). Spill it
     * instead. (A client's own gather is not seen here: a key only a
     * client reads keeps being dropped. Roots are exempt: a random or
     * file chunk is never written, and the worker keeps unread ones last.) */
    if ((t->evict & SCHED_EV_REDONE) && !(t->evict & SCHED_EV_CONSUMED) && t->nneeded > 0 && t->ndeps > 0 &&
        !(t->evict & SCHED_EV_NODROP)) {
      /* (Waiting for a second waste let a 16 MiB GPU worker loop again.) */
      TSR_INFO("task '%s' was dropped again before any dependent read it; it will be spilled, not dropped", t->key);
      t->evict |= SCHED_EV_NODROP;
    }
    /* A dropped root (no inputs: random data, a file read) stays placed
     * here until a consumer or a client finds it missing (missing_input,
     * key_missing) and it is made again right then. Deferring roots
     * eagerly made a persisted random array larger than the workers'
     * memory thrash: when one small shared input (the test matrix) came
     * back, every consumer became otherwise ready at once and all their
     * dropped random blocks were made again, filling memory with unread
     * chunks that were dropped before being read (bench/RESULTS.md).
     * Marked gone, it is made again when a reader is about to be sent
     * (sched_tr_inputs_gone), not one round trip later. */
    if (t->ndeps == 0 && sched_task_fused_parts(t) == 0) {
      t->evict |= SCHED_EV_GONE;
      return true;
    }
    sched_tr_dropped(st, id);
    return true;
  }
  return false;
}
