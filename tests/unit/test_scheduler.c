/* Unit tests of the scheduler's state, transitions and policies, linked
 * from tsr_sched without sockets: synthetic states (a chain, a fan-in
 * tree, a diamond, two graphs, workers with different ops and holdings)
 * built through the same entry points the daemon uses (hello frames,
 * sched_graph_add, sched_place_pass, sched_tr_*), then orders, choices and
 * states asserted. Also a 10^6-task memory and ingest measurement. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "sched.h"
#include "sched_fixtures.h"

/* The device memory the GPU workers here announce (an H200's 80 GB; one
 * test reads it back from the worker's record). */
#define GPU_MEMORY 80000000000ull

static int64_t prio(sched_state *st, const char *key) { return st->tasks[id_of(st, key)].priority; }

/* Keys in priority order, space separated. */
static const char *order_of(sched_state *st, const char *const *keys, char *buf, size_t cap)
{
  const char *sorted[64];
  int n = 0;
  while (keys[n]) sorted[n] = keys[n], n++;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && prio(st, sorted[j]) < prio(st, sorted[j - 1]); j--) {
      const char *t = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = t;
    }
  buf[0] = '\0';
  for (int i = 0; i < n; i++) snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? " " : "", sorted[i]);
  return buf;
}

static void drop_outboxes(sched_state *st)
{
  for (uint32_t p = 0; p < st->npeers_slots; p++)
    if (st->peers[p].in_use) tsr_wbuf_reset(&st->peers[p].out);
}

/* ---------- ordering ---------- */

TEST(order_chain_runs_inputs_first)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  const char *const g[] = {"d:x:c", "c:x:b", "b:x:a", "a:x", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 4);
  char buf[128];
  const char *const keys[] = {"a", "b", "c", "d", NULL};
  ASSERT_STREQ(order_of(st, keys, buf, sizeof buf), "a b c d");
  sched_state_destroy(&st);
}

TEST(order_fan_in_tree_finishes_one_branch_first)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  const char *const g[] = {"l0:x", "l1:x", "l2:x", "l3:x", "m0:add:l0,l1", "m1:add:l2,l3", "r:add:m0,m1", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 7);
  char buf[128];
  const char *const keys[] = {"l0", "l1", "l2", "l3", "m0", "m1", "r", NULL};
  ASSERT_STREQ(order_of(st, keys, buf, sizeof buf), "l0 l1 m0 l2 l3 m1 r");
  sched_state_destroy(&st);
}

TEST(order_diamond_and_two_sinks_in_submission_order)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  const char *const g[] = {"s2:x:c", "d:add:b,c", "a:x", "b:x:a", "c:x:a", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 5);
  char buf[128];
  const char *const keys[] = {"a", "b", "c", "d", "s2", NULL};
  /* sinks in submission order: s2 first (with its inputs c, a), then d */
  ASSERT_STREQ(order_of(st, keys, buf, sizeof buf), "a c s2 b d");
  sched_state_destroy(&st);
}

TEST(order_earlier_graphs_first)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  const char *const g1[] = {"a:x", "b:x:a", NULL};
  const char *const g2[] = {"p:x", "q:x:p,b", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g1, NULL, &err), 2);
  ASSERT_EQ(add_graph(st, c, 2, g2, NULL, &err), 2);
  ASSERT_TRUE(prio(st, "b") < prio(st, "p"));
  ASSERT_TRUE(prio(st, "p") < prio(st, "q"));
  sched_state_destroy(&st);
}

/* ---------- validation ---------- */

TEST(rejections_keep_nothing)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  tsr_errbuf err;
  const char *const cyc[] = {"a:x:c", "b:x:a", "c:x:b", "z:x", NULL};
  ASSERT_EQ(add_graph(st, c, 1, cyc, NULL, &err), TSR_ECYCLE);
  ASSERT_CONTAINS(err.text, "'a'");
  ASSERT_EQ(st->nlive, 0);
  ASSERT_EQ(st->keyidx.count, 0);
  const char *const miss[] = {"a:x:nope", NULL};
  ASSERT_EQ(add_graph(st, c, 2, miss, NULL, &err), TSR_EMISSING);
  ASSERT_CONTAINS(err.text, "'nope'");
  const char *const ok[] = {"a:x", "b:y:a", NULL};
  ASSERT_EQ(add_graph(st, c, 3, ok, NULL, &err), 2);
  const char *const diff[] = {"b:y", NULL};
  ASSERT_EQ(add_graph(st, c, 4, diff, NULL, &err), TSR_EEXIST);
  ASSERT_CONTAINS(err.text, "inputs");
  const char *const same[] = {"a:x", "b:y:a", "e:z:b", NULL};
  ASSERT_EQ(add_graph(st, c, 5, same, NULL, &err), 1);
  ASSERT_EQ(st->nlive, 3);
  /* unknown op only counts once a worker is connected */
  add_worker(st, "w", 1, "x y");
  const char *const unk[] = {"f:z", NULL};
  ASSERT_EQ(add_graph(st, c, 6, unk, NULL, &err), TSR_EUNKNOWNOP);
  ASSERT_CONTAINS(err.text, "'z'");
  ASSERT_EQ(st->nlive, 3);
  sched_state_destroy(&st);
}

/* ---------- placement ---------- */

/* Sets worker w's tasks in flight as if sent or returned, and tells the
 * placement index (what sched_tr_dispatch / task_done do). */
static void set_in_flight(sched_state *st, uint16_t w, uint32_t n)
{
  st->workers[w].nprocessing = n;
  sched_place_worker_changed(st, w);
}

TEST(place_fits_ops_then_locality_then_occupancy)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t w0 = add_worker(st, "w0", 1, "load x");
  uint16_t w1 = add_worker(st, "w1", 2, "load x y");
  uint16_t w2 = add_worker(st, "w2", 1, "load y");
  tsr_errbuf err;
  const char *const g[] = {"a:load", "b:load", "c:load", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 3);
  /* three idle workers: least occupied, ties by index */
  ASSERT_EQ(sched_place_pass(st), 3);
  ASSERT_EQ(st->tasks[id_of(st, "a")].processing_on, w0);
  ASSERT_EQ(st->tasks[id_of(st, "b")].processing_on, w1);
  ASSERT_EQ(st->tasks[id_of(st, "c")].processing_on, w2);
  done(st, "a", 100);
  done(st, "b", 10);
  done(st, "c", 1000);
  drop_outboxes(st);
  /* y runs only on w1 or w2; w2 holds the most input bytes */
  const char *const g2[] = {"p:y:a,b,c", "q:x:a,b", "r:x", NULL};
  ASSERT_EQ(add_graph(st, c, 2, g2, NULL, &err), 3);
  ASSERT_EQ(sched_policy_place(st, id_of(st, "p")), w2);
  /* x: w0 holds a (100 B) against w1's b (10 B) */
  ASSERT_EQ(sched_policy_place(st, id_of(st, "q")), w0);
  /* r has no inputs: w1 has 2 threads, 0 in flight = least occupied with w0; w0 by index */
  ASSERT_EQ(sched_policy_place(st, id_of(st, "r")), w0);
  set_in_flight(st, w0, 1);
  ASSERT_EQ(sched_policy_place(st, id_of(st, "r")), w1);
  /* a full worker is not a candidate, whatever it holds */
  set_in_flight(st, w2, 2);
  ASSERT_EQ(sched_policy_place(st, id_of(st, "p")), w1);
  set_in_flight(st, w1, 4);
  ASSERT_EQ(sched_policy_place(st, id_of(st, "p")), SCHED_NO_WORKER);
  set_in_flight(st, w0, 0);
  set_in_flight(st, w1, 0);
  set_in_flight(st, w2, 0);
  sched_state_destroy(&st);
}

TEST(place_prefers_native_then_locality)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t cpu = add_worker(st, "cpu", 2, "gen mm load");
  uint16_t gpu = add_gpu_worker(st, "gpu", 1, "gen mm load", "gen mm", GPU_MEMORY);
  ASSERT_STREQ(st->workers[gpu].gpu_name, "NVIDIA H200");
  ASSERT_EQ(st->workers[gpu].device_memory_limit, 80000000000ull);
  ASSERT_EQ(st->workers[gpu].gpu_util, -1);
  tsr_errbuf err;
  const char *const g[] = {"a:gen", "b:load", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 2);
  /* gen has a CUDA variant: the GPU worker, though the CPU worker is idler
   * (2 threads) and comes first; load is CPU-only: the CPU worker */
  ASSERT_EQ(sched_place_pass(st), 2);
  ASSERT_EQ(st->tasks[id_of(st, "a")].processing_on, gpu);
  ASSERT_EQ(st->tasks[id_of(st, "b")].processing_on, cpu);
  done(st, "a", 10);
  done(st, "b", 1000000);
  drop_outboxes(st);
  /* native beats locality: mm's big input is on the CPU worker */
  const char *const g2[] = {"q:mm:b", "r:load:a", "s:mm:a,b", NULL};
  ASSERT_EQ(add_graph(st, c, 2, g2, NULL, &err), 3);
  ASSERT_EQ(sched_policy_place(st, id_of(st, "q")), gpu);
  ASSERT_EQ(sched_policy_place(st, id_of(st, "r")), cpu);
  /* a busy GPU is waited for, not bypassed by the CPU worker */
  set_in_flight(st, gpu, 2);
  ASSERT_EQ(sched_policy_place(st, id_of(st, "q")), SCHED_NO_WORKER);
  ASSERT_EQ(sched_place_pass(st), 1);   /* r only */
  ASSERT_EQ(state_of(st, "q"), TS_QUEUED);
  ASSERT_EQ(state_of(st, "s"), TS_QUEUED);
  set_in_flight(st, gpu, 0);
  ASSERT_EQ(sched_place_pass(st), 2);
  ASSERT_EQ(st->tasks[id_of(st, "q")].processing_on, gpu);
  ASSERT_EQ(st->tasks[id_of(st, "s")].processing_on, gpu);
  sched_state_destroy(&st);
}

TEST(place_falls_back_to_non_native_workers)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t cpu = add_worker(st, "cpu", 1, "gen load");
  uint16_t gpu = add_gpu_worker(st, "gpu", 1, "gen load", "gen", GPU_MEMORY);
  tsr_errbuf err;
  const char *const g[] = {"a:gen", "b:gen:a", NULL};
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 2);
  ASSERT_EQ(sched_place_pass(st), 1);
  ASSERT_EQ(st->tasks[id_of(st, "a")].processing_on, gpu);
  /* the GPU worker dies mid-graph: its work goes to the CPU worker */
  sched_peer_drop(st, sched_peer_find(st, "gpu", 3), "test");
  ASSERT_EQ(st->ops[st->tasks[id_of(st, "a")].op].ngpu_native, 0);
  ASSERT_EQ(sched_place_pass(st), 1);
  ASSERT_EQ(st->tasks[id_of(st, "a")].processing_on, cpu);
  done(st, "a", 8);
  ASSERT_EQ(sched_place_pass(st), 1);
  ASSERT_EQ(st->tasks[id_of(st, "b")].processing_on, cpu);
  done(st, "b", 8);
  /* a CPU-only op with only a GPU worker left runs there (on its host) */
  uint16_t gpu2 = add_gpu_worker(st, "gpu2", 1, "gen load", "gen", GPU_MEMORY);
  sched_peer_drop(st, sched_peer_find(st, "cpu", 3), "test");
  const char *const g2[] = {"l:load", NULL};
  ASSERT_EQ(add_graph(st, c, 2, g2, NULL, &err), 1);
  /* l, and a (b was lost with the CPU worker and is recomputed from a) */
  ASSERT_EQ(sched_place_pass(st), 2);
  ASSERT_EQ(st->tasks[id_of(st, "l")].processing_on, gpu2);
  ASSERT_EQ(st->tasks[id_of(st, "a")].processing_on, gpu2);
  sched_state_destroy(&st);
}

static bool has_bytes(const char *buf, size_t len, const char *s)
{
  size_t n = strlen(s);
  for (size_t i = 0; i + n <= len; i++)
    if (memcmp(buf + i, s, n) == 0) return true;
  return false;
}

TEST(gpu_heartbeat_and_status_fields)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  (void)c;
  uint16_t gpu = add_gpu_worker(st, "gpu", 1, "gen", "gen", GPU_MEMORY);
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "heartbeat", 3);
  tsr_pack_kv_uint(&wb.pk, "device_memory_used", 600);
  tsr_pack_kv_uint(&wb.pk, "gpu_util", 87);
  feed(st, "gpu", &wb);
  ASSERT_EQ(st->workers[gpu].device_memory_used, 600);
  ASSERT_EQ(st->workers[gpu].gpu_util, 87);
  /* a heartbeat without gpu_util: NVML went away */
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "heartbeat", 2);
  tsr_pack_kv_uint(&wb.pk, "device_memory_used", 700);
  feed(st, "gpu", &wb);
  ASSERT_EQ(st->workers[gpu].gpu_util, -1);
  /* status_reply carries them */
  drop_outboxes(st);
  uint32_t p = sched_peer_find(st, "c", 1);
  sched_emit_status(st, p, 7);
  tsr_wbuf *out = &st->peers[p].out;
  ASSERT_TRUE(has_bytes(out->sbuf.data, out->sbuf.size, "NVIDIA H200"));
  ASSERT_TRUE(has_bytes(out->sbuf.data, out->sbuf.size, "device_memory_used"));
  ASSERT_TRUE(has_bytes(out->sbuf.data, out->sbuf.size, "device_memory_limit"));
  ASSERT_TRUE(!has_bytes(out->sbuf.data, out->sbuf.size, "gpu_util"));
  /* a malformed native_ops is refused like any bad hello */
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "hello", 8);
  tsr_pack_kv_uint(&wb.pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_str(&wb.pk, "role", "worker");
  tsr_pack_kv_str(&wb.pk, "name", "bad");
  tsr_pack_kv_uint(&wb.pk, "threads", 1);
  tsr_pack_kv_str(&wb.pk, "data_address", "tcp://bad:1");
  tsr_pack_str(&wb.pk, "ops");
  msgpack_pack_array(&wb.pk, 0);
  tsr_pack_kv_uint(&wb.pk, "native_ops", 3);
  feed(st, "bad", &wb);
  uint32_t bad = sched_peer_find(st, "bad", 3);
  ASSERT_TRUE(bad == SCHED_NONE || st->peers[bad].role != PEER_WORKER);
  sched_state_destroy(&st);
}

TEST(queue_holds_the_rest_in_priority_order)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t w = add_worker(st, "w", 1, "x");
  const char *const g[] = {"t0:x", "t1:x", "t2:x", "t3:x", "t4:x", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 5);
  ASSERT_EQ(sched_place_pass(st), 2);  /* 1 thread x 2 slots */
  ASSERT_EQ(state_of(st, "t0"), TS_PROCESSING);
  ASSERT_EQ(state_of(st, "t1"), TS_PROCESSING);
  ASSERT_EQ(state_of(st, "t2"), TS_QUEUED);
  ASSERT_EQ(st->workers[w].nprocessing, 2);
  done(st, "t1", 8);
  ASSERT_EQ(sched_place_pass(st), 1);
  ASSERT_EQ(state_of(st, "t2"), TS_PROCESSING);
  ASSERT_EQ(state_of(st, "t3"), TS_QUEUED);
  sched_state_destroy(&st);
}

/* ---------- release and forgetting ---------- */

TEST(results_freed_when_unneeded_and_graph_forgotten)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 4, "x");
  const char *const g[] = {"a:x", "b:x:a", "c:x:b", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 3);
  sched_place_pass(st);
  done(st, "a", 8);
  ASSERT_EQ(state_of(st, "a"), TS_MEMORY);
  sched_place_pass(st);
  done(st, "b", 8);
  ASSERT_EQ(state_of(st, "a"), TS_RELEASED);  /* b no longer needs it */
  sched_place_pass(st);
  done(st, "c", 8);
  ASSERT_EQ(state_of(st, "b"), TS_RELEASED);
  ASSERT_EQ(state_of(st, "c"), TS_MEMORY);
  ASSERT_EQ(st->graphs[st->tasks[id_of(st, "c")].graph]->ndone, 3);
  sched_tr_unwant(st, c, id_of(st, "c"));
  sched_settle(st);
  ASSERT_EQ(st->nlive, 0);
  ASSERT_EQ(st->keyidx.count, 0);
  ASSERT_EQ(st->ngraphs, 0);
  /* the slots are reused */
  const char *const g2[] = {"z:x", NULL};
  ASSERT_EQ(add_graph(st, c, 2, g2, NULL, &err), 1);
  ASSERT_EQ(st->ntasks, 3);
  sched_state_destroy(&st);
}

TEST(client_loss_drops_pending_tasks)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 1, "x");
  const char *const g[] = {"a0:x", "a1:x", "a2:x", "a3:x", "s:x:a0,a1,a2,a3", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 5);
  sched_place_pass(st);
  ASSERT_EQ(st->count_by_state[TS_PROCESSING], 2);
  sched_peer_drop(st, sched_peer_find(st, "c", 1), "test");
  /* queued and waiting tasks are gone; running ones wait for their report */
  ASSERT_EQ(st->nlive, 2);
  done(st, "a0", 8);
  done(st, "a1", 8);
  ASSERT_EQ(st->nlive, 0);
  sched_state_destroy(&st);
}

/* ---------- failures ---------- */

TEST(worker_loss_recomputes_released_inputs)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  uint16_t w0 = add_worker(st, "w0", 1, "x");
  const char *const g[] = {"a:x", "b:x:a", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 2);
  sched_place_pass(st);
  done(st, "a", 8);
  sched_place_pass(st);
  done(st, "b", 8);
  ASSERT_EQ(state_of(st, "a"), TS_RELEASED);
  uint16_t w1 = add_worker(st, "w1", 1, "x");
  const char *const g2[] = {"c:x:b", NULL};
  ASSERT_EQ(add_graph(st, c, 2, g2, NULL, &err), 1);
  ASSERT_EQ(sched_place_pass(st), 1);
  ASSERT_EQ(st->tasks[id_of(st, "c")].processing_on, w0);  /* where b is */
  sched_peer_drop(st, sched_peer_find(st, "w0", 2), "test");
  /* c goes back, b is lost and needed again, so its released input a too */
  ASSERT_EQ(state_of(st, "b"), TS_WAITING);
  ASSERT_EQ(state_of(st, "a"), TS_READY);
  ASSERT_EQ(state_of(st, "c"), TS_WAITING);
  ASSERT_EQ(st->tasks[id_of(st, "c")].suspicion, 1);
  ASSERT_EQ(sched_place_pass(st), 1);
  ASSERT_EQ(st->tasks[id_of(st, "a")].processing_on, w1);
  done(st, "a", 8);
  sched_place_pass(st);
  done(st, "b", 8);
  sched_place_pass(st);
  done(st, "c", 8);
  ASSERT_EQ(state_of(st, "c"), TS_MEMORY);
  ASSERT_EQ(state_of(st, "b"), TS_MEMORY);  /* still wanted by graph 1 */
  sched_state_destroy(&st);
}

TEST(three_dead_workers_err_the_task)
{
  sched_state *st = new_state();
  uint32_t c = add_client(st, "c");
  const char *const g[] = {"k:x", "d:x:k", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 2);
  char name[8];
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "w%d", i);
    add_worker(st, name, 1, "x");
    ASSERT_EQ(sched_place_pass(st), 1);
    sched_peer_drop(st, sched_peer_find(st, name, strlen(name)), "test");
  }
  ASSERT_EQ(state_of(st, "k"), TS_ERRED);
  ASSERT_EQ(state_of(st, "d"), TS_ERRED);
  char text[512];
  sched_error_text(st, id_of(st, "d"), text, sizeof text);
  ASSERT_CONTAINS(text, "dependency 'k' failed: task 'k' was running on 3 workers that died (last: w2)");
  sched_state_destroy(&st);
}

/* ---------- containers ---------- */

TEST(idset_and_heap)
{
  sched_idset set = {0};
  for (uint32_t i = 0; i < 10000; i++) ASSERT_EQ(sched_idset_add(&set, i * 7), 1);
  ASSERT_EQ(sched_idset_add(&set, 14), 0);
  for (uint32_t i = 0; i < 10000; i += 2) ASSERT_TRUE(sched_idset_del(&set, i * 7));
  for (uint32_t i = 0; i < 10000; i++) ASSERT_EQ(sched_idset_has(&set, i * 7), i % 2 == 1);
  sched_idset_free(&set);
  /* heap: random priorities come out sorted, removals keep it valid */
  sched_state *st = new_state();
  ASSERT_TRUE(sched_op_intern(st, "x", 1) == 0);
  srand(7);
  for (int i = 0; i < 2000; i++) {
    uint32_t id = sched_task_alloc(st);
    st->tasks[id].priority = rand() % 500;
    st->tasks[id].op = 0;
    ASSERT_OK(sched_queue_push(st, id));
  }
  for (uint32_t id = 0; id < 2000; id += 3) sched_queue_remove(st, id);
  int64_t last = -1;
  uint32_t n = 0;
  for (uint32_t id; (id = sched_queue_peek(st, 0)) != SCHED_NONE; n++) {
    ASSERT_TRUE(st->tasks[id].priority >= last);
    ASSERT_TRUE(id % 3 != 0);
    last = st->tasks[id].priority;
    sched_queue_remove(st, id);
  }
  ASSERT_EQ(n, 2000 - 667);
  sched_state_destroy(&st);
}

TEST(key_index_survives_churn)
{
  /* inserts, deletes in a scattered order (backward-shift deletion), and
   * lookups of every survivor, through the real task slots */
  sched_state *st = new_state();
  static char keys[20000][12];
  uint32_t ids[20000];
  for (uint32_t i = 0; i < 20000; i++) {
    snprintf(keys[i], sizeof keys[i], "k%u", i);
    ids[i] = sched_task_alloc(st);
    st->tasks[ids[i]].key = keys[i];
    st->tasks[ids[i]].key_len = (uint16_t)strlen(keys[i]);
    ASSERT_OK(sched_task_index(st, ids[i]));
  }
  static bool kept[20000];
  for (uint32_t j = 0; j < 20000; j++) {
    uint32_t i = (j * 7919) % 20000;  /* 7919 is prime: a permutation */
    kept[i] = j % 3 == 1;
    if (!kept[i]) sched_task_unindex(st, ids[i]);
  }
  for (uint32_t i = 0; i < 20000; i++)
    ASSERT_EQ(sched_task_find(st, keys[i], strlen(keys[i])), kept[i] ? ids[i] : SCHED_NONE);
  ASSERT_EQ(sched_task_find(st, "nope", 4), SCHED_NONE);
  for (uint32_t i = 0; i < 20000; i++) st->tasks[ids[i]].key = NULL;
  sched_state_destroy(&st);
}

/* ---------- scale ---------- */

static int add_big_graph(sched_state *st, uint32_t c, uint64_t gid, uint32_t n, bool chain, double *secs_p)
{
  sched_task_spec *specs = calloc(n, sizeof *specs);
  sched_strref *refs = calloc(n, sizeof *refs);
  char *keys = malloc((size_t)n * 16);
  for (uint32_t i = 0; i < n; i++) {
    char *k = keys + (size_t)i * 16;
    int len = snprintf(k, 16, "t-%u", i);
    specs[i].key = (sched_strref){k, (uint32_t)len};
    specs[i].op = (sched_strref){"x", 1};
    if (chain && i > 0) {
      refs[i] = specs[i - 1].key;
      specs[i].inputs = &refs[i];
      specs[i].ninputs = 1;
    }
  }
  tsr_errbuf err;
  uint64_t t0 = tsr_now_ns();
  int rc = sched_graph_add(st, c, gid, specs, n, NULL, 0, &err);
  *secs_p = (double)(tsr_now_ns() - t0) / 1e9;
  free(specs);
  free(refs);
  free(keys);
  return rc;
}

/* Heap bytes in use (malloc'd, including mmap'd blocks). */
static size_t heap_bytes(void)
{
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

TEST(million_task_graphs_memory_and_admission)
{
  const uint32_t n = 1000000;
  for (int chain = 0; chain < 2; chain++) {
    size_t heap0 = heap_bytes();
    sched_state *st = new_state();
    uint32_t c = add_client(st, "c");
    double secs;
    ASSERT_EQ(add_big_graph(st, c, 1, n, chain, &secs), (int)n);
    size_t per_task = (heap_bytes() - heap0) / n;
    fprintf(stderr, "  %s of %u tasks: admitted in %.3f s, %zu bytes of scheduler heap per task\n",
            chain ? "chain" : "independent graph", n, secs, per_task);
    ASSERT_EQ(st->nlive, n);
    ASSERT_TRUE(per_task < 1024);
    /* release everything: the scheduler forgets it all (iteratively) */
    sched_peer_drop(st, sched_peer_find(st, "c", 1), "test");
    ASSERT_EQ(st->nlive, 0);
    ASSERT_EQ(st->keyidx.count, 0);
    sched_state_destroy(&st);
  }
}

int main(void)
{
  tsr_log_set_level(TSR_LOG_WARN);
  RUN(order_chain_runs_inputs_first);
  RUN(order_fan_in_tree_finishes_one_branch_first);
  RUN(order_diamond_and_two_sinks_in_submission_order);
  RUN(order_earlier_graphs_first);
  RUN(rejections_keep_nothing);
  RUN(place_fits_ops_then_locality_then_occupancy);
  RUN(place_prefers_native_then_locality);
  RUN(place_falls_back_to_non_native_workers);
  RUN(gpu_heartbeat_and_status_fields);
  RUN(queue_holds_the_rest_in_priority_order);
  RUN(results_freed_when_unneeded_and_graph_forgotten);
  RUN(client_loss_drops_pending_tasks);
  RUN(worker_loss_recomputes_released_inputs);
  RUN(three_dead_workers_err_the_task);
  RUN(idset_and_heap);
  RUN(key_index_survives_churn);
  RUN(million_task_graphs_memory_and_admission);
  return kit_summary();
}
