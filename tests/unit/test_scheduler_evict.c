/* Unit tests of the recompute-vs-spill policy (scheduler/policy_evict.c)
 * and of deferred recomputation (transitions.c) on synthetic scheduler
 * states, without sockets: workers and clients say hello through frames,
 * graphs go in through sched_graph_add, tasks are dispatched by the
 * placement pass and finished as a task_done would, and tier moves arrive
 * as real `chunks_moved` frames.
 *
 * Cases: a random root is dropped; a cheap chain random -> add -> add is
 * cheaper than a spill and dropped, with its cost memoized along the
 * lineage; an expensive op (long measured duration, small output) is
 * spilled; the lineage stops at chunks that stay in memory; a spilled
 * input adds its reload; wanted keys and --recompute never/always; the
 * tier accounting and the status; a dropped key with pending consumers is
 * recomputed only when a consumer is otherwise ready, with that consumer's
 * priority, recursively through released inputs, one consumer at a time;
 * a dropped wanted key is lost and recomputed at once; stale reports are
 * ignored; a 10^6-long chain's cost and its deferred recomputation need no
 * deep recursion. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "policy_evict.h"
#include "sched.h"
#include "sched_fixtures.h"

/* The ops every worker here offers. */
#define OPS "gen add sum mm"

static sched_state *evict_state(sched_recompute_mode mode) { return new_state_with((sched_config){.recompute = mode}); }

/* A heartbeat carrying measured spill throughput. */
static void spill_speed(sched_state *st, const char *worker, uint64_t write_bps, uint64_t read_bps)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "heartbeat", 4);
  tsr_pack_kv_uint(&wb.pk, "memory_used", 1);
  tsr_pack_kv_uint(&wb.pk, "spill_write_bps", write_bps);
  tsr_pack_kv_uint(&wb.pk, "spill_read_bps", read_bps);
  feed(st, worker, &wb);
}

/* What a task_done does (handlers.c): the policy's accounting, then the
 * transition. */
static void finish_id(sched_state *st, uint32_t id, uint64_t duration_us, uint64_t nbytes)
{
  uint16_t w = st->tasks[id].processing_on;
  tsr_meta meta = {.dtype = TSR_U8, .ndim = 1, .shape = {(int64_t)nbytes}};
  sched_evict_on_done(st, id, w, duration_us, nbytes);
  sched_tr_done(st, id, w, nbytes, &meta);
  sched_settle(st);
}

/* Places, then finishes key (which must have been dispatched). */
static int run(sched_state *st, const char *key, uint64_t duration_us, uint64_t nbytes)
{
  sched_place_pass(st);
  uint32_t id = id_of(st, key);
  if (id == SCHED_NONE || st->tasks[id].state != TS_PROCESSING) return -1;
  finish_id(st, id, duration_us, nbytes);
  return 0;
}

/* The client `client` could not fetch key from the worker at `from`. */
static void key_missing(sched_state *st, const char *client, const char *key, const char *from)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "key_missing", 3);
  tsr_pack_kv_str(&wb.pk, "key", key);
  tsr_pack_kv_str(&wb.pk, "from", from);
  feed(st, client, &wb);
  sched_settle(st);
}

/* Sends worker's `chunks_moved` with one key under field. */
static void moved(sched_state *st, const char *worker, const char *field, const char *key)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "chunks_moved", 2);
  tsr_pack_str(&wb.pk, field);
  msgpack_pack_array(&wb.pk, 1);
  tsr_pack_str(&wb.pk, key);
  feed(st, worker, &wb);
}

/* A bool field (`recompute`, `awaited`) of the last `compute` of key in
 * worker's outbox: 1 true, 0 false, -1 not found. */
static int compute_field(sched_state *st, const char *worker, const char *key, const char *field)
{
  const tsr_wbuf *out = &st->peers[sched_peer_find(st, worker, strlen(worker))].out;
  int flag = -1;
  size_t off = 0;
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  while (msgpack_unpack_next(&u, out->sbuf.data, out->sbuf.size, &off) == MSGPACK_UNPACK_SUCCESS) {
    const char *s;
    size_t len;
    bool b;
    if (tsr_wire_str(&u.data, "op", 64, &s, &len, NULL) != 0 || len != 7 || memcmp(s, "compute", 7) != 0) continue;
    if (tsr_wire_str(&u.data, "key", 1024, &s, &len, NULL) != 0 || len != strlen(key) || memcmp(s, key, len) != 0) continue;
    if (tsr_wire_opt_bool(&u.data, field, false, &b, NULL) == 0 && tsr_wire_field(&u.data, field)) flag = b;
  }
  msgpack_unpacked_destroy(&u);
  return flag;
}

static int compute_flag(sched_state *st, const char *worker, const char *key)
{
  return compute_field(st, worker, key, "recompute");
}

#define MiB (1ull << 20)

TEST(random_root_and_cheap_chain_are_dropped)
{
  sched_state *st = evict_state(SCHED_RECOMPUTE_AUTO);
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 1, OPS);
  /* 100 MB/s write, 200 MB/s read: 1 MiB costs ~15.7 ms to spill and reload */
  spill_speed(st, "w", 100000000, 200000000);
  const char *g[] = {"r:gen", "a1:add:r", "a2:add:a1", "s:sum:a2", NULL};
  const char *wants[] = {"s", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, wants, NULL), 4);
  sched_place_pass(st);
  ASSERT_EQ(compute_flag(st, "w", "r"), 1);      /* a root: dropped */
  finish_id(st, id_of(st, "r"), 1000, MiB);
  ASSERT_EQ(task_of(st, "r")->cost_us, 1000);
  sched_place_pass(st);
  /* add never measured: ~1 ms for 1 MiB at the default rate, plus r's
   * 1 ms (a1 is r's last consumer) — far below 15.7 ms */
  ASSERT_EQ(compute_flag(st, "w", "a1"), 1);
  finish_id(st, id_of(st, "a1"), 500, MiB);
  ASSERT_EQ(state_of(st, "r"), TS_RELEASED);
  ASSERT_EQ(task_of(st, "a1")->cost_us, 1500);  /* its own 500 + r's 1000 */
  ASSERT_OK(run(st, "a2", 700, MiB));
  ASSERT_EQ(compute_flag(st, "w", "a2"), 1);
  ASSERT_EQ(task_of(st, "a2")->cost_us, 2200);  /* along the whole released lineage */
  ASSERT_EQ(st->ops[task_of(st, "a2")->op].avg_us, (7 * 500 + 700) / 8);
  /* the sink is wanted, and droppable like any result (a client that finds
   * it dropped asks for it again): estimated at its input's size (sum is
   * not measured yet), making it again is cheaper than writing it */
  ASSERT_OK(run(st, "s", 10, 8));
  ASSERT_EQ(compute_flag(st, "w", "s"), 1);
  ASSERT_EQ(st->workers[0].tasks_recomputed, 0);
  sched_state_destroy(&st);
}

/* `awaited` tells the worker whether a task waits to read the output: a
 * chunk only a client wants (a persist) may be dropped before any read. */
TEST(compute_says_whether_a_task_awaits_the_output)
{
  sched_state *st = evict_state(SCHED_RECOMPUTE_AUTO);
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 4, OPS);
  const char *g[] = {"r:gen", "s:sum:r", "p:gen", NULL};
  const char *wants[] = {"s", "p", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, wants, NULL), 3);
  sched_place_pass(st);
  ASSERT_EQ(compute_field(st, "w", "r", "awaited"), 1);
  ASSERT_EQ(compute_field(st, "w", "p", "awaited"), 0);
  finish_id(st, id_of(st, "r"), 1000, MiB);
  sched_place_pass(st);
  ASSERT_EQ(compute_field(st, "w", "s", "awaited"), 0);
  /* made again for a client whose gather found it missing: awaited */
  finish_id(st, id_of(st, "p"), 1000, MiB);
  moved(st, "w", "dropped", "p");
  key_missing(st, "c", "p", "tcp://w:1");
  sched_place_pass(st);
  ASSERT_EQ(state_of(st, "p"), TS_PROCESSING);
  ASSERT_EQ(compute_field(st, "w", "p", "awaited"), 1);
  sched_state_destroy(&st);
}

TEST(expensive_op_with_small_output_is_spilled)
{
  sched_state *st = evict_state(SCHED_RECOMPUTE_AUTO);
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 1, OPS);
  const char *g[] = {"r0:gen", "r1:gen", "m0:mm:r0", "m1:mm:r1", "s:add:m0,m1", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, NULL), 5);
  ASSERT_OK(run(st, "r0", 1000, MiB));
  ASSERT_OK(run(st, "m0", 200000, 64 << 10));  /* 200 ms for 64 KiB */
  ASSERT_OK(run(st, "r1", 1000, MiB));
  sched_place_pass(st);
  ASSERT_EQ(state_of(st, "m1"), TS_PROCESSING);
  /* measured: 200 ms (+1 ms of r1) against ~0.25 ms to spill 64 KiB */
  ASSERT_TRUE(!sched_evict_may_drop(st, id_of(st, "m1"), 0));
  ASSERT_EQ(compute_flag(st, "w", "m1"), 0);
  ASSERT_TRUE(sched_evict_spill_cost_us(st, 0, 64 << 10) < 1000);
  sched_state_destroy(&st);
}

TEST(lineage_stops_at_wanted_chunks_and_reloads_spilled_ones)
{
  sched_state *st = evict_state(SCHED_RECOMPUTE_AUTO);
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 1, OPS);
  spill_speed(st, "w", 100000000, 100000000);
  /* r and p are wanted (they stay); q and p have two consumers each */
  const char *g[] = {"r:gen", "a:add:r", "q:gen", "b:add:q", "d:add:q",
                     "p:gen", "e:add:p", "f:add:p", "s:add:a,b,d,e,f", NULL};
  const char *wants[] = {"r", "p", "s", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, wants, NULL), 9);
  ASSERT_OK(run(st, "r", 5000, MiB));
  ASSERT_OK(run(st, "a", 100, MiB));
  ASSERT_EQ(task_of(st, "a")->cost_us, 100);  /* r is wanted: it stays, not counted */
  ASSERT_OK(run(st, "q", 3000, MiB));
  ASSERT_OK(run(st, "b", 100, MiB));
  /* d still needs q now, but q goes once d has run: b counts it whole */
  ASSERT_EQ(task_of(st, "b")->cost_us, 3100);
  ASSERT_EQ(sched_evict_lineage_us(st, id_of(st, "d")), 3000);
  ASSERT_OK(run(st, "d", 100, MiB));
  ASSERT_EQ(state_of(st, "q"), TS_RELEASED);
  ASSERT_EQ(task_of(st, "d")->cost_us, 3100);
  /* a wanted input on disk: recomputing reads it back (1 MiB at 100 MB/s) */
  ASSERT_OK(run(st, "p", 4000, MiB));
  moved(st, "w", "spilled", "p");
  ASSERT_TRUE(task_of(st, "p")->evict & SCHED_EV_ON_DISK);
  ASSERT_EQ(st->workers[0].held_disk, MiB);
  ASSERT_EQ(sched_evict_lineage_us(st, id_of(st, "e")), 10485);
  ASSERT_OK(run(st, "e", 100, MiB));
  ASSERT_EQ(task_of(st, "e")->cost_us, 10585);
  moved(st, "w", "loaded", "p");
  ASSERT_EQ(st->workers[0].held_disk, 0);
  ASSERT_TRUE(!(task_of(st, "p")->evict & SCHED_EV_ON_DISK));
  ASSERT_EQ(sched_evict_lineage_us(st, id_of(st, "f")), 0);  /* wanted and in memory */
  sched_state_destroy(&st);
}

TEST(modes_never_and_always)
{
  for (int mode = SCHED_RECOMPUTE_NEVER; mode <= SCHED_RECOMPUTE_ALWAYS; mode++) {
    sched_state *st = evict_state((sched_recompute_mode)mode);
    uint32_t c = add_client(st, "c");
    add_worker(st, "w", 1, OPS);
    const char *g[] = {"r:gen", "m:mm:r", "s:sum:m", NULL};
    ASSERT_EQ(add_graph(st, c, 1, g, NULL, NULL), 3);
    ASSERT_OK(run(st, "r", 10, MiB));
    ASSERT_OK(run(st, "m", 10000000, 8));  /* 10 s for 8 bytes */
    bool always = mode == SCHED_RECOMPUTE_ALWAYS;
    ASSERT_EQ(compute_flag(st, "w", "r"), always);
    ASSERT_EQ(compute_flag(st, "w", "m"), always);
    sched_place_pass(st);
    ASSERT_EQ(compute_flag(st, "w", "s"), always);  /* behind 10 s of m: spilled unless always */
    sched_state_destroy(&st);
  }
  ASSERT_EQ(sched_recompute_mode_parse("auto"), SCHED_RECOMPUTE_AUTO);
  ASSERT_EQ(sched_recompute_mode_parse("never"), SCHED_RECOMPUTE_NEVER);
  ASSERT_EQ(sched_recompute_mode_parse("always"), SCHED_RECOMPUTE_ALWAYS);
  ASSERT_EQ(sched_recompute_mode_parse("sometimes"), -1);
}

/* Two passes over x_i = add(r_i): p_i = sum(x_i) and S = add(p_*); then
 * q_i = mm(x_i, S) and T = add(q_*), wanted. */
static int two_pass_graph(sched_state *st, uint32_t c, int n)
{
  char buf[32][64];
  const char *g[40];
  int k = 0;
  char ps[256] = "S:add:", qs[256] = "T:add:";
  for (int i = 0; i < n; i++) {
    snprintf(buf[k], 64, "r%d:gen", i), g[k] = buf[k], k++;
    snprintf(buf[k], 64, "x%d:add:r%d", i, i), g[k] = buf[k], k++;
    snprintf(buf[k], 64, "p%d:sum:x%d", i, i), g[k] = buf[k], k++;
    snprintf(buf[k], 64, "q%d:mm:x%d,S", i, i), g[k] = buf[k], k++;
    snprintf(ps + strlen(ps), sizeof ps - strlen(ps), "%sp%d", i ? "," : "", i);
    snprintf(qs + strlen(qs), sizeof qs - strlen(qs), "%sq%d", i ? "," : "", i);
  }
  g[k++] = ps;
  g[k++] = qs;
  g[k] = NULL;
  const char *wants[] = {"T", NULL};
  return add_graph(st, c, 1, g, wants, NULL);
}

TEST(dropped_chunks_recomputed_by_consumer_priority)
{
  sched_state *st = evict_state(SCHED_RECOMPUTE_AUTO);
  uint32_t c = add_client(st, "c");
  uint16_t w = add_worker(st, "w", 1, OPS);
  ASSERT_EQ(two_pass_graph(st, c, 4), 18);
  char key[16];
  /* pass 1, except S */
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof key, "r%d", i);
    ASSERT_OK(run(st, key, 1000, MiB));
    snprintf(key, sizeof key, "x%d", i);
    ASSERT_OK(run(st, key, 500, MiB));
    snprintf(key, sizeof key, "p%d", i);
    ASSERT_OK(run(st, key, 10, 8));
  }
  /* the worker drops every x: nothing is recomputed yet (q waits for S) */
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof key, "x%d", i);
    ASSERT_EQ(state_of(st, key), TS_MEMORY);
    moved(st, "w", "dropped", key);
    ASSERT_EQ(state_of(st, key), TS_RELEASED);
    ASSERT_TRUE(task_of(st, key)->evict & SCHED_EV_DEFERRED);
    snprintf(key, sizeof key, "q%d", i);
    ASSERT_EQ(task_of(st, key)->ndeferred_deps, 1);
  }
  ASSERT_EQ(st->workers[w].bytes_held, 4 * 8);  /* only the p's */
  /* a stale report (not on this worker any more) changes nothing */
  moved(st, "w", "dropped", "x0");
  moved(st, "w", "spilled", "r0");
  ASSERT_EQ(st->workers[w].held_disk, 0);
  ASSERT_EQ(st->count_by_state[TS_READY] + st->count_by_state[TS_QUEUED], 1);  /* S only */
  /* S done: every q is otherwise ready; each x (and its released r) goes
   * back with its consumer's priority, not its own (a pass earlier) */
  ASSERT_OK(run(st, "S", 10, 8));
  for (int i = 0; i < 4; i++) {
    char r[16], x[16], q[16];
    snprintf(r, sizeof r, "r%d", i), snprintf(x, sizeof x, "x%d", i), snprintf(q, sizeof q, "q%d", i);
    ASSERT_TRUE(!(task_of(st, x)->evict & SCHED_EV_DEFERRED));
    ASSERT_EQ(task_of(st, q)->ndeferred_deps, 0);
    ASSERT_EQ(task_of(st, x)->priority, task_of(st, q)->priority);
    ASSERT_EQ(task_of(st, r)->priority, task_of(st, q)->priority);
  }
  /* one worker thread, 2 slots: r0 r1 go first; once r0 is done, x0 (q0's
   * priority) goes before r2 — a consumer at a time, not a pass ahead */
  sched_place_pass(st);
  ASSERT_EQ(state_of(st, "r0"), TS_PROCESSING);
  ASSERT_EQ(state_of(st, "r1"), TS_PROCESSING);
  ASSERT_EQ(state_of(st, "r2"), TS_QUEUED);
  finish_id(st, id_of(st, "r0"), 1000, MiB);
  sched_place_pass(st);
  ASSERT_EQ(state_of(st, "x0"), TS_PROCESSING);
  ASSERT_EQ(state_of(st, "r2"), TS_QUEUED);
  finish_id(st, id_of(st, "x0"), 500, MiB);
  sched_place_pass(st);
  ASSERT_EQ(state_of(st, "q0"), TS_PROCESSING);  /* q0 runs before r2 starts */
  ASSERT_EQ(state_of(st, "r2"), TS_QUEUED);
  ASSERT_EQ(st->workers[w].tasks_recomputed, 2);  /* r0, x0 */
  ASSERT_EQ(st->workers[w].bytes_recomputed, 2 * MiB);
  /* finish everything */
  for (int round = 0; round < 100 && state_of(st, "T") != TS_MEMORY; round++) {
    sched_place_pass(st);
    for (uint32_t id = 0; id < st->ntasks; id++)
      if (st->tasks[id].state == TS_PROCESSING) finish_id(st, id, 100, 8);
  }
  ASSERT_EQ(state_of(st, "T"), TS_MEMORY);
  ASSERT_EQ(st->workers[w].tasks_recomputed, 8);  /* every r and x once more */
  sched_state_destroy(&st);
}

TEST(drop_of_a_ready_consumers_input_and_of_a_wanted_key)
{
  sched_state *st = evict_state(SCHED_RECOMPUTE_AUTO);
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 1, OPS);
  const char *g[] = {"r:gen", "x:add:r", "y:sum:x", "k:gen", NULL};
  const char *wants[] = {"y", "k", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, wants, NULL), 4);
  ASSERT_OK(run(st, "r", 10, MiB));
  ASSERT_OK(run(st, "x", 10, MiB));
  ASSERT_EQ(state_of(st, "k"), TS_PROCESSING);  /* since r's pass */
  finish_id(st, id_of(st, "k"), 10, MiB);
  ASSERT_EQ(state_of(st, "y"), TS_READY);
  /* y was ready: dropping x makes it wait, and x is recomputed at once */
  moved(st, "w", "dropped", "x");
  ASSERT_EQ(state_of(st, "y"), TS_WAITING);
  ASSERT_EQ(state_of(st, "x"), TS_WAITING);
  ASSERT_EQ(state_of(st, "r"), TS_READY);
  /* a dropped wanted root stays placed, silently (made again now it could
   * be dropped again, unread, under the same pressure: a loop; roots are
   * found missing lazily, see policy_evict.c) ... */
  tsr_wbuf_reset(&st->peers[sched_peer_find(st, "c", 1)].out);
  moved(st, "w", "dropped", "k");
  ASSERT_EQ(state_of(st, "k"), TS_MEMORY);
  const tsr_wbuf *out = &st->peers[sched_peer_find(st, "c", 1)].out;
  ASSERT_EQ(out->nmsgs, 0);
  /* ... until the client's fetch finds it missing: key_lost, made now */
  key_missing(st, "c", "k", "tcp://w:1");
  ASSERT_EQ(state_of(st, "k"), TS_READY);
  out = &st->peers[sched_peer_find(st, "c", 1)].out;
  ASSERT_TRUE(out->nmsgs == 1 && memmem(out->sbuf.data, out->sbuf.size, "key_lost", 8) != NULL);
  /* a key_missing the scheduler knows to be stale (the key is not held at
   * that address) changes nothing */
  ASSERT_OK(run(st, "k", 10, MiB));
  ASSERT_EQ(state_of(st, "k"), TS_MEMORY);
  key_missing(st, "c", "k", "tcp://elsewhere:1");
  ASSERT_EQ(state_of(st, "k"), TS_MEMORY);
  /* the holder's own address: the drop's report has not come yet; lost there */
  key_missing(st, "c", "k", "tcp://w:1");
  ASSERT_EQ(state_of(st, "k"), TS_READY);
  /* a malformed report is refused; the scheduler goes on */
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "chunks_moved", 2);
  tsr_pack_kv_uint(&wb.pk, "dropped", 7);
  feed(st, "w", &wb);
  out = &st->peers[sched_peer_find(st, "w", 1)].out;
  ASSERT_TRUE(memmem(out->sbuf.data, out->sbuf.size, "dropped", 7) != NULL);
  sched_state_destroy(&st);
}

/* A dropped root stays placed (lazily) until a reader is about to be sent:
 * then it is made again first, and the reader is not sent to find it
 * missing (a round trip through the worker). */
TEST(a_dropped_root_is_made_again_before_its_reader_is_sent)
{
  sched_state *st = evict_state(SCHED_RECOMPUTE_AUTO);
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 1, OPS);
  const char *g[] = {"r:gen", "g:gen", "s:add:r,g", NULL};
  const char *wants[] = {"s", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, wants, NULL), 3);
  ASSERT_OK(run(st, "r", 10, MiB));
  sched_place_pass(st);
  ASSERT_EQ(state_of(st, "g"), TS_PROCESSING);
  moved(st, "w", "dropped", "r");
  ASSERT_EQ(state_of(st, "r"), TS_MEMORY);  /* still placed: no reader is being sent */
  finish_id(st, id_of(st, "g"), 10, MiB);
  ASSERT_EQ(state_of(st, "s"), TS_READY);
  tsr_wbuf_reset(&st->peers[sched_peer_find(st, "w", 1)].out);
  sched_place_pass(st);
  ASSERT_EQ(compute_field(st, "w", "s", "awaited"), -1);  /* s was not sent */
  ASSERT_EQ(state_of(st, "s"), TS_WAITING);
  sched_settle(st);
  ASSERT_EQ(state_of(st, "r"), TS_READY);
  ASSERT_OK(run(st, "r", 10, MiB));
  ASSERT_EQ(st->workers[0].tasks_recomputed, 1);
  ASSERT_OK(run(st, "s", 10, MiB));
  ASSERT_EQ(state_of(st, "s"), TS_MEMORY);
  sched_state_destroy(&st);
}

/* Drop-and-recompute that cannot make progress (memory too tight: the
 * recomputed chunk is dropped again before its consumer reads it) turns
 * into spilling that chunk; a drop after a read is the normal multi-pass
 * case and changes nothing. */
TEST(dropped_again_before_any_read_is_spilled_from_then_on)
{
  sched_state *st = evict_state(SCHED_RECOMPUTE_AUTO);
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 1, OPS);
  spill_speed(st, "w", 100000000, 200000000);
  /* z reads x again, after k (which waits for y, x's first reader) */
  const char *g[] = {"r:gen", "x:add:r", "y:sum:x", "k:sum:y", "z:add:x,k", NULL};
  const char *wants[] = {"z", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, wants, NULL), 5);
  ASSERT_OK(run(st, "r", 100, MiB));
  ASSERT_OK(run(st, "x", 100, MiB));
  ASSERT_EQ(compute_flag(st, "w", "x"), 1);
  ASSERT_OK(run(st, "y", 10, 8));          /* y read x */
  moved(st, "w", "dropped", "x");          /* read, then dropped: fine */
  ASSERT_EQ(task_of(st, "x")->evict & SCHED_EV_NODROP, 0);
  ASSERT_OK(run(st, "k", 10, 8));          /* z otherwise ready: r, then x again */
  ASSERT_OK(run(st, "r", 100, MiB));
  tsr_wbuf_reset(&st->peers[sched_peer_find(st, "w", 1)].out);
  ASSERT_OK(run(st, "x", 100, MiB));
  ASSERT_EQ(compute_flag(st, "w", "x"), 1);
  moved(st, "w", "dropped", "x");          /* recomputed and dropped unread */
  ASSERT_TRUE(task_of(st, "x")->evict & SCHED_EV_NODROP);
  ASSERT_OK(run(st, "r", 100, MiB));
  tsr_wbuf_reset(&st->peers[sched_peer_find(st, "w", 1)].out);
  ASSERT_OK(run(st, "x", 100, MiB));
  ASSERT_EQ(compute_flag(st, "w", "x"), 0);  /* spilled from now on */
  ASSERT_OK(run(st, "z", 10, 8));
  ASSERT_EQ(state_of(st, "z"), TS_MEMORY);
  sched_state_destroy(&st);
}

TEST(status_carries_tiers_and_recompute_counts)
{
  sched_state *st = evict_state(SCHED_RECOMPUTE_AUTO);
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 1, OPS);
  const char *g[] = {"r:gen", "a:add:r", NULL};
  const char *wants[] = {"r", "a", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, wants, NULL), 2);
  ASSERT_OK(run(st, "r", 10, 3 * MiB));
  ASSERT_OK(run(st, "a", 10, MiB));
  moved(st, "w", "spilled", "r");
  st->workers[0].tasks_recomputed = 5;
  st->workers[0].bytes_recomputed = 7;
  uint32_t p = sched_peer_find(st, "c", 1);
  tsr_wbuf_reset(&st->peers[p].out);
  sched_emit_status(st, p, 9);
  const tsr_wbuf *out = &st->peers[p].out;
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  ASSERT_TRUE(msgpack_unpack_next(&u, out->sbuf.data, out->sbuf.size, &off) == MSGPACK_UNPACK_SUCCESS);
  const msgpack_object *workers;
  size_t n;
  ASSERT_OK(tsr_wire_array(&u.data, "workers", 10, &workers, &n, NULL));
  ASSERT_EQ(n, 1);
  uint64_t mem, disk, tasks, bytes;
  ASSERT_OK(tsr_wire_uint(&workers[0], "memory_held", &mem, NULL));
  ASSERT_OK(tsr_wire_uint(&workers[0], "disk_held", &disk, NULL));
  ASSERT_OK(tsr_wire_uint(&workers[0], "tasks_recomputed", &tasks, NULL));
  ASSERT_OK(tsr_wire_uint(&workers[0], "bytes_recomputed", &bytes, NULL));
  ASSERT_EQ(mem, MiB);
  ASSERT_EQ(disk, 3 * MiB);
  ASSERT_EQ(tasks, 5);
  ASSERT_EQ(bytes, 7);
  msgpack_unpacked_destroy(&u);
  sched_state_destroy(&st);
}

/* A chain t0 -> ... -> t(n-1) of 1 µs tasks, then end = add(t(n-1), gate). */
TEST(million_chain_cost_and_deferred_recompute_without_recursion)
{
  const uint32_t n = 1000000;
  sched_state *st = evict_state(SCHED_RECOMPUTE_AUTO);
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 1, OPS);
  sched_task_spec *specs = calloc(n + 2, sizeof *specs);
  sched_strref *refs = calloc(n + 2, sizeof *refs);
  char *keys = malloc((size_t)n * 16);
  for (uint32_t i = 0; i < n; i++) {
    char *k = keys + (size_t)i * 16;
    specs[i].key = (sched_strref){k, (uint32_t)snprintf(k, 16, "t-%u", i)};
    specs[i].op = (sched_strref){"add", 3};
    if (i > 0) {
      refs[i] = specs[i - 1].key;
      specs[i].inputs = &refs[i];
      specs[i].ninputs = 1;
    }
  }
  specs[n] = (sched_task_spec){.key = {"gate", 4}, .op = {"gen", 3}};
  sched_strref end_in[2] = {specs[n - 1].key, {"gate", 4}};
  specs[n + 1] = (sched_task_spec){.key = {"end", 3}, .op = {"add", 3}, .inputs = end_in, .ninputs = 2};
  sched_strref want = {"end", 3};
  tsr_errbuf err;
  ASSERT_EQ(sched_graph_add(st, c, 1, specs, n + 2, &want, 1, &err), (int)n + 2);
  /* the chain runs first (graph order), one link at a time */
  uint32_t first = id_of(st, "t-0");
  for (uint32_t i = 0; i < n; i++) {
    sched_place_pass(st);
    uint32_t id = first + i;  /* ids follow submission order */
    if (st->tasks[id].state != TS_PROCESSING) break;
    finish_id(st, id, 1, 8);
  }
  uint32_t last = id_of(st, "t-999999");
  ASSERT_EQ(st->tasks[last].state, TS_MEMORY);
  ASSERT_EQ(st->tasks[last].cost_us, n);  /* every link released: the whole lineage */
  ASSERT_EQ(state_of(st, "t-0"), TS_RELEASED);
  /* dropped while end waits for gate: deferred; gate done: the whole chain
   * goes back with end's priority, walked without recursion */
  moved(st, "w", "dropped", "t-999999");
  ASSERT_EQ(st->tasks[last].state, TS_RELEASED);
  ASSERT_EQ(state_of(st, "t-0"), TS_RELEASED);
  ASSERT_EQ(state_of(st, "gate"), TS_PROCESSING);
  finish_id(st, id_of(st, "gate"), 1, 8);
  ASSERT_EQ(state_of(st, "t-0"), TS_READY);
  ASSERT_EQ(task_of(st, "t-0")->priority, task_of(st, "end")->priority);
  ASSERT_EQ(st->tasks[last].state, TS_WAITING);
  ASSERT_EQ(st->count_by_state[TS_WAITING], n);  /* t-1 .. t-999999 and end */
  free(specs);
  free(refs);
  sched_peer_drop(st, sched_peer_find(st, "c", 1), "test");
  ASSERT_EQ(st->nlive, 0);
  free(keys);
  sched_state_destroy(&st);
}

int main(void)
{
  tsr_log_set_level(TSR_LOG_ERROR);
  RUN(random_root_and_cheap_chain_are_dropped);
  RUN(compute_says_whether_a_task_awaits_the_output);
  RUN(expensive_op_with_small_output_is_spilled);
  RUN(lineage_stops_at_wanted_chunks_and_reloads_spilled_ones);
  RUN(modes_never_and_always);
  RUN(dropped_chunks_recomputed_by_consumer_priority);
  RUN(drop_of_a_ready_consumers_input_and_of_a_wanted_key);
  RUN(a_dropped_root_is_made_again_before_its_reader_is_sent);
  RUN(dropped_again_before_any_read_is_spilled_from_then_on);
  RUN(status_carries_tiers_and_recompute_counts);
  RUN(million_chain_cost_and_deferred_recompute_without_recursion);
  return kit_summary();
}
