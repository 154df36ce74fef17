/* Unit tests of the scheduler's indexes for many workers and tasks, on
 * synthetic states linked from tsr_sched, no sockets:
 * - placement through the by_load heaps chooses exactly the worker a scan
 *   of every worker chooses (inputs' bytes, then occupancy, then index;
 *   op eligibility, GPU-native preference, paused workers), through a
 *   random run of passes, completions, a pause, a departure and a join;
 * - every task running on or held by a worker is in that worker's placed
 *   list, and a departure reschedules / loses exactly its tasks;
 * - the placed lists stay within twice what they index under churn, and
 *   go when the state shrinks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "sched.h"
#include "sched_fixtures.h"

#define NCPU 40
#define NGPU 3
#define NROOTS 400
#define NMIDS 200

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state % n);
}

static void drop_outboxes(sched_state *st)
{
  for (uint32_t p = 0; p < st->npeers_slots; p++)
    if (st->peers[p].in_use) tsr_wbuf_reset(&st->peers[p].out);
}

/* The placement rule written as the scan it replaced: among live eligible
 * workers with a free slot, most input bytes held, then least occupied,
 * then lowest index (no memory limits here: every window fits). */
static uint16_t place_by_scan(const sched_state *st, uint32_t id)
{
  static uint64_t bytes[SCHED_MAX_WORKERS];
  const sched_task *t = &st->tasks[id];
  memset(bytes, 0, st->nworkers_slots * sizeof *bytes);
  for (uint32_t i = 0; i < t->ndeps; i++) {
    const sched_task *d = &st->tasks[t->deps[i]];
    if (d->who_has != SCHED_NO_WORKER) bytes[d->who_has] += d->nbytes + 1;
  }
  uint16_t best = SCHED_NO_WORKER;
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    const sched_worker *wk = &st->workers[w];
    if (!wk->alive || !sched_worker_eligible(st, wk, t->op) || sched_worker_free_slots(wk) == 0) continue;
    if (best == SCHED_NO_WORKER || bytes[w] > bytes[best]) {
      best = (uint16_t)w;
      continue;
    }
    const sched_worker *b = &st->workers[best];
    uint64_t tw = wk->threads ? wk->threads : 1, tb = b->threads ? b->threads : 1;
    if (bytes[w] == bytes[best] && (uint64_t)wk->nprocessing * tb < (uint64_t)b->nprocessing * tw) best = (uint16_t)w;
  }
  return best;
}

/* Compares the index's choice with the scan's for every runnable task;
 * adds how many were compared to *compared. */
static void check_placement(sched_state *st, uint32_t *compared)
{
  for (uint32_t id = 0; id < st->ntasks; id++) {
    int s = st->tasks[id].state;
    if (s != TS_READY && s != TS_QUEUED) continue;
    uint16_t want = place_by_scan(st, id), got = sched_policy_place(st, id);
    if (got != want) fprintf(stderr, "task '%s': placed on %u, a scan says %u\n", st->tasks[id].key, got, want);
    ASSERT_EQ(got, want);
    (*compared)++;
  }
}

static bool in_placed(const sched_worker *wk, uint32_t id)
{
  for (uint32_t i = 0; i < wk->nplaced; i++)
    if (wk->placed[i] == id) return true;
  return false;
}

/* Every task running on or held by a worker is in its placed list. */
static void check_placed_lists(const sched_state *st)
{
  for (uint32_t id = 0; id < st->ntasks; id++) {
    const sched_task *t = &st->tasks[id];
    if (t->state == TS_PROCESSING) ASSERT_TRUE(in_placed(&st->workers[t->processing_on], id));
    if (t->state == TS_MEMORY && t->who_has != SCHED_NO_WORKER) ASSERT_TRUE(in_placed(&st->workers[t->who_has], id));
  }
}

static int add_specs(sched_state *st, uint32_t c, uint64_t gid, uint32_t nroots, uint32_t nmids)
{
  static const char *const root_ops[] = {"a", "a", "a", "a", "c", "g"};
  uint32_t n = nroots + nmids;
  sched_task_spec *specs = calloc(n, sizeof *specs);
  char (*keys)[24] = calloc(n, sizeof *keys);
  sched_strref *inputs = calloc((size_t)nmids * 4, sizeof *inputs);
  for (uint32_t i = 0; i < n; i++) {
    snprintf(keys[i], sizeof keys[i], "%s%llu-%u", i < nroots ? "r" : "m", (unsigned long long)gid, i);
    specs[i].key = (sched_strref){keys[i], (uint32_t)strlen(keys[i])};
    const char *op = i < nroots ? root_ops[rnd(6)] : rnd(3) ? "a" : "g";
    specs[i].op = (sched_strref){op, 1};
    if (i < nroots) continue;
    sched_strref *mine = &inputs[(size_t)(i - nroots) * 4];
    specs[i].inputs = mine;
    specs[i].ninputs = 1 + rnd(4);
    for (uint32_t k = 0; k < specs[i].ninputs; k++) mine[k] = specs[rnd(nroots)].key;
  }
  tsr_errbuf err;
  int rc = sched_graph_add(st, c, gid, specs, n, NULL, 0, &err);
  if (rc < 0) fprintf(stderr, "%s\n", err.text);
  free(inputs);
  free(keys);
  free(specs);
  return rc;
}

/* Finishes about half the running tasks, with outputs of random sizes. */
static uint32_t finish_some(sched_state *st)
{
  uint32_t *ids = malloc(st->ntasks * sizeof *ids), n = 0;
  for (uint32_t id = 0; id < st->ntasks; id++)
    if (st->tasks[id].state == TS_PROCESSING && rnd(2)) ids[n++] = id;
  for (uint32_t i = 0; i < n; i++) done_id(st, ids[i], 8 * (1 + rnd(1000)));
  free(ids);
  return n;
}

static uint32_t unfinished(const sched_state *st)
{
  return st->count_by_state[TS_WAITING] + st->count_by_state[TS_READY] + st->count_by_state[TS_QUEUED] +
         st->count_by_state[TS_PROCESSING];
}

/* A CPU worker that runs tasks and holds results now, or NULL. */
static const char *busy_worker(const sched_state *st)
{
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    uint32_t running = 0, held = 0;
    for (uint32_t id = 0; id < st->ntasks; id++) {
      running += st->tasks[id].state == TS_PROCESSING && st->tasks[id].processing_on == w;
      held += st->tasks[id].state == TS_MEMORY && st->tasks[id].who_has == w;
    }
    if (st->workers[w].alive && !st->workers[w].gpu && running > 0 && held > 0) return st->workers[w].name;
  }
  return NULL;
}

/* Drops worker `name` and checks that exactly its tasks moved. */
static void drop_and_check(sched_state *st, const char *name)
{
  ASSERT_TRUE(name != NULL);
  uint16_t w = (uint16_t)peer_index(st, name);
  uint32_t running = 0, held = 0;
  uint16_t *before = malloc(st->ntasks * sizeof *before);
  for (uint32_t id = 0; id < st->ntasks; id++) {
    const sched_task *t = &st->tasks[id];
    running += t->state == TS_PROCESSING && t->processing_on == w;
    held += t->state == TS_MEMORY && t->who_has == w;
    before[id] = t->state == TS_PROCESSING ? t->processing_on : SCHED_NO_WORKER;
  }
  ASSERT_TRUE(running > 0);
  ASSERT_TRUE(held > 0);
  sched_peer_drop(st, sched_peer_find(st, name, strlen(name)), "test");
  for (uint32_t id = 0; id < st->ntasks; id++) {
    const sched_task *t = &st->tasks[id];
    if (t->state == TS_FREE) continue;
    ASSERT_TRUE(t->processing_on != w && t->who_has != w);
    /* the others' running tasks stay where they run */
    if (before[id] != SCHED_NO_WORKER && before[id] != w) ASSERT_EQ(t->processing_on, before[id]);
    if (before[id] == w) ASSERT_TRUE(t->state != TS_PROCESSING);
  }
  free(before);
}

TEST(index_places_as_a_scan_of_every_worker)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  char name[32];
  for (int i = 0; i < NCPU; i++) {
    snprintf(name, sizeof name, "w%d", i);
    ASSERT_TRUE(add_worker(st, name, 1 + i % 4, i % 5 == 0 ? "a c" : "a") != SCHED_NO_WORKER);
  }
  for (int i = 0; i < NGPU; i++) {
    snprintf(name, sizeof name, "gpu%d", i);
    ASSERT_TRUE(add_gpu_worker(st, name, 1 + i, "a g", "g", 1ull << 50) != SCHED_NO_WORKER);
  }
  ASSERT_EQ(add_specs(st, c, 1, NROOTS, NMIDS), NROOTS + NMIDS);
  uint32_t compared = 0, steps = 0;
  while (unfinished(st) > 0 && steps < 400) {
    check_placement(st, &compared);
    check_placed_lists(st);
    sched_place_pass(st);
    drop_outboxes(st);
    check_placed_lists(st);
    finish_some(st);
    drop_outboxes(st);
    if (steps == 3) heartbeat(st, "w2", true);
    if (steps == 2) drop_and_check(st, busy_worker(st));
    if (steps == 8) ASSERT_TRUE(add_worker(st, "late", 3, "a c g") != SCHED_NO_WORKER);
    if (steps == 10) heartbeat(st, "w2", false);
    steps++;
  }
  ASSERT_EQ(unfinished(st), 0);
  ASSERT_TRUE(compared > 500);
  /* the paused worker got nothing while paused (it was compared above) and
   * the run needed more than one pass */
  ASSERT_TRUE(steps > 12);
  sched_state_destroy(&st);
}

TEST(placed_lists_stay_compact_and_go_when_the_state_shrinks)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t w = add_worker(st, "w", 4, "a c g");
  uint32_t appended = 0;
  for (uint64_t gid = 1; gid <= 20; gid++) {
    ASSERT_EQ(add_specs(st, c, gid, 150, 50), 200);
    while (unfinished(st) > 0) {
      appended += sched_place_pass(st);
      drop_outboxes(st);
      finish_some(st);
      drop_outboxes(st);
      check_placed_lists(st);
      /* grown only when half of it is live after a compaction: at most 4x
       * the 200 tasks a round places there (without compaction: all 4,000) */
      ASSERT_TRUE(st->workers[w].cap_placed <= 4 * 200);
    }
    /* the client lets go of everything: the records are forgotten */
    for (uint32_t id = 0; id < st->ntasks; id++)
      if (st->tasks[id].state != TS_FREE && st->tasks[id].nwanted > 0) sched_tr_unwant(st, c, id);
    sched_settle(st);
    ASSERT_EQ(st->nlive, 0);
  }
  ASSERT_TRUE(appended >= 20 * 200);
  ASSERT_TRUE(sched_state_shrink(st));
  ASSERT_TRUE(st->workers[w].placed == NULL && st->workers[w].nplaced == 0);
  /* and it works again from nothing */
  ASSERT_EQ(add_specs(st, c, 99, 10, 2), 12);
  ASSERT_TRUE(sched_place_pass(st) > 0);
  drop_outboxes(st);
  check_placed_lists(st);
  sched_state_destroy(&st);
}

int main(void)
{
  RUN(index_places_as_a_scan_of_every_worker);
  RUN(placed_lists_stay_compact_and_go_when_the_state_shrinks);
  return kit_summary();
}
