/* Unit tests of the scheduler's memory-related behaviour on synthetic
 * states, linked from tsr_sched without sockets: a worker's heartbeat
 * `paused` stops placement on it until it resumes (and the status carries
 * it); root tasks (no inputs) of a wide graph are handed out only as the
 * workers free slots — never more in flight than the slots, whatever the
 * graph's width — and the rest wait queued in the scheduler; on a worker
 * with a memory limit the window that short tasks widen is capped by the
 * bytes their outputs would take. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "sched.h"
#include "sched_fixtures.h"

/* n independent root tasks "r<i>" of op, all wanted. */
static int add_roots(sched_state *st, uint32_t client, uint64_t gid, int n, const char *op)
{
  sched_task_spec *specs = calloc((size_t)n, sizeof *specs);
  char (*keys)[16] = calloc((size_t)n, sizeof *keys);
  for (int i = 0; i < n; i++) {
    snprintf(keys[i], sizeof keys[i], "r%d", i);
    specs[i].key = (sched_strref){keys[i], (uint32_t)strlen(keys[i])};
    specs[i].op = (sched_strref){op, (uint32_t)strlen(op)};
  }
  tsr_errbuf err;
  int rc = sched_graph_add(st, client, gid, specs, (uint32_t)n, NULL, 0, &err);
  free(keys);
  free(specs);
  return rc;
}

/* Finishes every task in flight on worker w; returns how many. */
static uint32_t finish_all_on(sched_state *st, uint16_t w)
{
  uint32_t n = 0;
  for (uint32_t id = 0; id < st->ntasks; id++)
    if (st->tasks[id].state == TS_PROCESSING && st->tasks[id].processing_on == w) {
      done_id(st, id, 8);
      n++;
    }
  return n;
}

/* The worker `name` reports task id done, as its message thread would. */
static void report_done(sched_state *st, const char *name, uint32_t id, uint64_t nbytes, uint64_t duration_us)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "task_done", 7);
  tsr_pack_kv_uint(&wb.pk, "id", id);
  tsr_pack_kv_str(&wb.pk, "key", st->tasks[id].key);
  tsr_pack_kv_uint(&wb.pk, "nbytes", nbytes);
  tsr_pack_kv_uint(&wb.pk, "dtype", TSR_U8);
  tsr_pack_str(&wb.pk, "shape");
  msgpack_pack_array(&wb.pk, 1);
  msgpack_pack_uint64(&wb.pk, nbytes);
  tsr_pack_kv_uint(&wb.pk, "duration_us", duration_us);
  feed(st, name, &wb);
  sched_settle(st);
}

/* Reports the first task in flight on w done; returns its id or SCHED_NONE. */
static uint32_t report_one(sched_state *st, const char *name, uint16_t w, uint64_t nbytes, uint64_t duration_us)
{
  for (uint32_t id = 0; id < st->ntasks; id++)
    if (st->tasks[id].state == TS_PROCESSING && st->tasks[id].processing_on == w) {
      report_done(st, name, id, nbytes, duration_us);
      return id;
    }
  return SCHED_NONE;
}

TEST(paused_worker_gets_no_new_tasks)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t w0 = add_worker(st, "w0", 1, "gen");
  uint16_t w1 = add_worker(st, "w1", 1, "gen");
  ASSERT_EQ(add_roots(st, c, 1, 20, "gen"), 20);
  heartbeat(st, "w0", true);
  ASSERT_TRUE(st->workers[w0].paused);
  ASSERT_EQ(sched_worker_free_slots(&st->workers[w0]), 0);
  ASSERT_EQ(sched_place_pass(st), 2);  /* w1's 1 thread x 2 slots only */
  ASSERT_EQ(st->workers[w0].nprocessing, 0);
  ASSERT_EQ(st->workers[w1].nprocessing, 2);
  /* the status says so */
  sched_emit_status(st, sched_peer_find(st, "c", 1), 1);
  heartbeat(st, "w0", false);
  ASSERT_TRUE(!st->workers[w0].paused);
  ASSERT_EQ(sched_place_pass(st), 2);
  ASSERT_EQ(st->workers[w0].nprocessing, 2);
  /* a heartbeat without the field (an older worker) means not paused */
  heartbeat(st, "w1", true);
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "heartbeat", 2);
  tsr_pack_kv_uint(&wb.pk, "memory_used", 1);
  feed(st, "w1", &wb);
  ASSERT_TRUE(!st->workers[w1].paused);
  sched_state_destroy(&st);
}

TEST(root_tasks_only_as_slots_free)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t w = add_worker(st, "w", 2, "gen");
  ASSERT_EQ(add_roots(st, c, 1, 1000, "gen"), 1000);
  uint32_t slots = sched_worker_free_slots(&st->workers[w]);
  ASSERT_EQ(slots, 2 * SCHED_SLOTS_PER_THREAD);
  uint32_t finished = 0, max_in_flight = 0;
  for (int round = 0; round < 2000 && finished < 1000; round++) {
    sched_place_pass(st);
    uint32_t in_flight = st->workers[w].nprocessing;
    if (in_flight > max_in_flight) max_in_flight = in_flight;
    ASSERT_TRUE(in_flight <= slots);
    ASSERT_EQ(st->count_by_state[TS_PROCESSING], in_flight);
    /* everything not in flight waits here, queued */
    ASSERT_EQ(st->count_by_state[TS_QUEUED] + st->count_by_state[TS_READY] + in_flight + finished, 1000);
    /* one task finishes per round: one slot frees, one more is handed out */
    for (uint32_t id = 0; id < st->ntasks; id++)
      if (st->tasks[id].state == TS_PROCESSING) {
        done_id(st, id, 8);
        finished++;
        break;
      }
  }
  ASSERT_EQ(finished, 1000);
  ASSERT_EQ(max_in_flight, slots);
  ASSERT_EQ(finish_all_on(st, w), 0);
  sched_state_destroy(&st);
}

/* 10 us tasks widen the window to SCHED_INFLIGHT_US / 10 per thread; with
 * 16 MiB outputs on a 64 MiB worker it closes to one task per thread (a
 * quarter of the limit holds one output), and reopens when outputs shrink.
 * Without a limit the same outputs do not narrow it. */
TEST(window_capped_by_memory_limit)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t lim = add_worker_limited(st, "lim", 2, "gen", 64u << 20);
  uint16_t big = add_worker(st, "big", 2, "gen");
  ASSERT_EQ(add_roots(st, c, 1, 4000, "gen"), 4000);
  sched_place_pass(st);
  for (int i = 0; i < 16; i++) {  /* the averages settle */
    ASSERT_TRUE(report_one(st, "lim", lim, 16u << 20, 10) != SCHED_NONE);
    ASSERT_TRUE(report_one(st, "big", big, 16u << 20, 10) != SCHED_NONE);
    sched_place_pass(st);
  }
  ASSERT_EQ(st->workers[lim].nprocessing, 2);  /* threads, not 2 x 200 */
  ASSERT_TRUE(st->workers[big].nprocessing > 100);
  /* 1 MiB outputs: up to 16 MiB / 1 MiB = 16 in flight (the moving
   * average still remembers a little of the 16 MiB ones) */
  for (int i = 0; i < 40; i++) {
    ASSERT_TRUE(report_one(st, "lim", lim, 1u << 20, 10) != SCHED_NONE);
    sched_place_pass(st);
  }
  ASSERT_TRUE(st->workers[lim].nprocessing >= 12 && st->workers[lim].nprocessing <= 16);
  sched_state_destroy(&st);
}

/* Roots bigger than a quarter of the limit, with nothing unread (nobody
 * reads them here): still one per thread, not one at a time. */
TEST(big_roots_still_run_one_per_thread)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t w = add_worker_limited(st, "w", 2, "gen", 64u << 20);
  ASSERT_EQ(add_roots(st, c, 1, 100, "gen"), 100);
  sched_place_pass(st);
  for (int i = 0; i < 16; i++) {
    ASSERT_TRUE(report_one(st, "w", w, 40u << 20, 10) != SCHED_NONE);
    sched_place_pass(st);
  }
  ASSERT_EQ(st->workers[w].unread_bytes, 0);
  ASSERT_EQ(st->workers[w].nprocessing, 2);
  sched_state_destroy(&st);
}

/* A recomputation whose own input is the worker's unread result is not
 * held back by it: sending it reads that input. */
TEST(a_recomputation_is_not_held_back_by_its_own_unread_input)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t w = add_worker_limited(st, "w", 2, "gen add slow", 16u << 20);
  const char *g[] = {"s:slow", "r:gen", "d:add:r", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, NULL), 3);
  task_of(st, "d")->evict |= SCHED_EV_RAN;  /* d makes a dropped result again */
  sched_place_pass(st);
  ASSERT_EQ(state_of(st, "s"), TS_PROCESSING);
  ASSERT_EQ(state_of(st, "r"), TS_PROCESSING);
  done(st, "r", 5u << 20);  /* 5 MiB unread: more than a quarter of 16 MiB */
  ASSERT_EQ(st->workers[w].unread_bytes, 5u << 20);
  sched_place_pass(st);
  ASSERT_EQ(state_of(st, "d"), TS_PROCESSING);  /* s still runs: not by the idle escape */
  ASSERT_EQ(st->workers[w].unread_bytes, 0);
  sched_state_destroy(&st);
}

/* Roots whose readers cannot run yet (each reader also needs s, still
 * running) stop at a quarter of a tight worker's limit of unread results
 * instead of filling it; once s is done the readers run, clear the unread
 * bytes, and the rest of the roots follow. On a worker without a limit
 * they all run ahead. */
static int reader_graph(sched_state *st, uint32_t c, int n)
{
  char (*keys)[48] = calloc((size_t)(2 * n + 1), sizeof *keys);
  const char **tasks = calloc((size_t)(2 * n + 2), sizeof *tasks);
  snprintf(keys[0], sizeof keys[0], "s:slow");
  tasks[0] = keys[0];
  for (int i = 0; i < n; i++) {
    snprintf(keys[1 + 2 * i], sizeof keys[0], "r%d:gen", i);
    snprintf(keys[2 + 2 * i], sizeof keys[0], "m%d:mm:r%d,s", i, i);
    tasks[1 + 2 * i] = keys[1 + 2 * i];
    tasks[2 + 2 * i] = keys[2 + 2 * i];
  }
  int rc = add_graph(st, c, 1, tasks, NULL, NULL);
  free(tasks);
  free(keys);
  return rc;
}

/* Finishes every root in flight with 1 MiB outputs, placing after each,
 * until none is in flight; returns how many it finished. */
static int finish_roots(sched_state *st, uint32_t s_id)
{
  int finished = 0;
  for (bool any = true; any;) {
    any = false;
    for (uint32_t id = 0; id < st->ntasks; id++)
      if (id != s_id && st->tasks[id].state == TS_PROCESSING && st->tasks[id].ndeps == 0) {
        done_id(st, id, 1u << 20);
        sched_place_pass(st);
        finished++;
        any = true;
      }
  }
  return finished;
}

TEST(roots_wait_for_their_readers_on_a_tight_worker)
{
  for (int limited = 1; limited >= 0; limited--) {
    sched_state *st = new_state();
    uint32_t c = add_client(st, "c");
    uint16_t w = add_worker_limited(st, "w", 4, "gen mm slow", limited ? 16u << 20 : 0);
    ASSERT_EQ(reader_graph(st, c, 64), 129);
    sched_place_pass(st);
    uint32_t s_id = id_of(st, "s");
    ASSERT_EQ(st->tasks[s_id].state, TS_PROCESSING);
    int made = finish_roots(st, s_id);
    if (!limited) {
      ASSERT_EQ(made, 64);
      sched_state_destroy(&st);
      continue;
    }
    /* a quarter of 16 MiB: 4 unread roots of 1 MiB, plus what was in
     * flight when the first ones reported */
    ASSERT_TRUE(made >= 4 && made < 16);
    ASSERT_TRUE(st->workers[w].unread_bytes >= (4u << 20));
    ASSERT_EQ(state_of(st, "m0"), TS_WAITING);
    uint64_t unread = st->workers[w].unread_bytes;
    done_id(st, s_id, 8);
    sched_place_pass(st);
    ASSERT_EQ(state_of(st, "m0"), TS_PROCESSING);
    ASSERT_TRUE(st->workers[w].unread_bytes < unread);  /* r0 is being read */
    /* readers and roots now alternate until everything is done */
    for (int round = 0; round < 1000 && st->count_by_state[TS_PROCESSING] > 0; round++) {
      for (uint32_t id = 0; id < st->ntasks; id++)
        if (st->tasks[id].state == TS_PROCESSING) {
          done_id(st, id, st->tasks[id].ndeps == 0 ? 1u << 20 : 8);
          break;
        }
      sched_place_pass(st);
    }
    for (int i = 0; i < 64; i++) {
      char key[16];
      snprintf(key, sizeof key, "m%d", i);
      ASSERT_EQ(state_of(st, key), TS_MEMORY);
    }
    ASSERT_EQ(st->workers[w].unread_bytes, 0);
    sched_state_destroy(&st);
  }
}

/* Tasks running on a GPU hold their inputs and outputs on the device,
 * where its tier cannot move them: the scheduler sends a GPU worker no
 * more at once than its device limit holds (three sums of 16 MiB inputs
 * on 48 MiB each waited for the others' memory until they failed), but
 * always one, whatever its size. */
TEST(gpu_tasks_in_flight_fit_the_device_together)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t w = add_gpu_worker(st, "g", 4, "gen sum", "gen sum", 48u << 20);
  const char *g[] = {"r0:gen", "r1:gen", "r2:gen", "s0:sum:r0", "s1:sum:r1", "s2:sum:r2", NULL};
  const char *wants[] = {"s0", "s1", "s2", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, wants, NULL), 6);
  sched_place_pass(st);
  for (int i = 0; i < 3; i++) {
    char key[4] = {'r', (char)('0' + i), 0};
    ASSERT_EQ(state_of(st, key), TS_PROCESSING);
    report_done(st, "g", id_of(st, key), 16u << 20, 10);
  }
  sched_place_pass(st);
  /* a sum's estimate (not measured yet) is its input's size: 32 MiB each */
  ASSERT_EQ(st->workers[w].nprocessing, 1);
  ASSERT_TRUE(st->workers[w].working_bytes <= (48u << 20));
  report_one(st, "g", w, 8, 10);  /* measured now: 8 bytes out */
  sched_place_pass(st);
  ASSERT_EQ(st->workers[w].nprocessing, 2);  /* 16 MiB + 8 each; a third would pass 48 MiB */
  while (report_one(st, "g", w, 8, 10) != SCHED_NONE) sched_place_pass(st);
  ASSERT_EQ(state_of(st, "s2"), TS_MEMORY);
  ASSERT_EQ(st->workers[w].working_bytes, 0);
  /* a task larger than the device alone still runs (the worker decides) */
  const char *big[] = {"b:sum:s0", NULL};
  const char *big_wants[] = {"b", NULL};
  ASSERT_EQ(add_graph(st, c, 2, big, big_wants, NULL), 1);
  sched_place_pass(st);
  ASSERT_EQ(state_of(st, "b"), TS_PROCESSING);
  sched_state_destroy(&st);
}

int main(void)
{
  tsr_log_set_level(TSR_LOG_ERROR);
  RUN(paused_worker_gets_no_new_tasks);
  RUN(root_tasks_only_as_slots_free);
  RUN(window_capped_by_memory_limit);
  RUN(big_roots_still_run_one_per_thread);
  RUN(roots_wait_for_their_readers_on_a_tight_worker);
  RUN(a_recomputation_is_not_held_back_by_its_own_unread_input);
  RUN(gpu_tasks_in_flight_fit_the_device_together);
  return kit_summary();
}
