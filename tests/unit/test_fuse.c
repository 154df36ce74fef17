/* Unit tests of task fusion (scheduler/fuse.c) on synthetic graph states,
 * without sockets: graphs admitted through sched_graph_add with a fuse
 * width, workers and clients registered through hello frames, then the
 * surviving tasks, their parts (decoded from the fused params), their
 * dependencies and dependents, placement and the status counts asserted.
 * The states, hellos and graphs come from sched_fixtures.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "sched.h"
#include "sched_fixtures.h"

static sched_state *fusing_state(uint32_t fuse_width)
{
  return new_state_with((sched_config){.fuse_width = fuse_width});
}

/* A fused task's parts as "key:op:ref,ref key:op ..." (refs as sent). */
static const char *parts_of(sched_state *st, const char *key, char *buf, size_t cap)
{
  const sched_task *t = task_of(st, key);
  buf[0] = '\0';
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  if (sched_task_fused_parts(t) == 0 || msgpack_unpack_next(&u, (const char *)t->params, t->params_len, &off) != MSGPACK_UNPACK_SUCCESS)
    return buf;
  const msgpack_object *parts = tsr_wire_field(&u.data, "parts");
  for (uint32_t k = 0; parts && k < parts->via.array.size; k++) {
    const msgpack_object *p = &parts->via.array.ptr[k];
    const msgpack_object *pk = tsr_wire_field(p, "key"), *po = tsr_wire_field(p, "op"), *pi = tsr_wire_field(p, "inputs");
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "%s%.*s:%.*s", k ? " " : "", (int)pk->via.str.size, pk->via.str.ptr,
             (int)po->via.str.size, po->via.str.ptr);
    for (uint32_t j = 0; j < pi->via.array.size; j++) {
      len = strlen(buf);
      snprintf(buf + len, cap - len, "%s%llu", j ? "," : ":", (unsigned long long)pi->via.array.ptr[j].via.u64);
    }
  }
  msgpack_unpacked_destroy(&u);
  return buf;
}

/* The keys of a task's dependencies, space separated. */
static const char *deps_of(sched_state *st, const char *key, char *buf, size_t cap)
{
  const sched_task *t = task_of(st, key);
  buf[0] = '\0';
  for (uint32_t j = 0; j < t->ndeps; j++)
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", j ? " " : "", st->tasks[t->deps[j]].key);
  return buf;
}

static bool is_fused(sched_state *st, const char *key)
{
  const sched_task *t = task_of(st, key);
  return sched_task_fused_parts(t) > 0 && st->ops[t->op].fused_ops != NULL && strcmp(st->ops[t->op].name, "fused") == 0;
}

/* ---------- chains ---------- */

TEST(chain_becomes_one_task)
{
  sched_state *st = fusing_state(1);
  uint32_t c = add_client(st, "c");
  const char *const g[] = {"d:x:c", "c:y:b", "b:x:a", "a:x", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 4);  /* counts what was submitted */
  ASSERT_EQ(st->nlive, 1);
  ASSERT_EQ(id_of(st, "a"), SCHED_NONE);
  ASSERT_EQ(id_of(st, "b"), SCHED_NONE);
  ASSERT_EQ(id_of(st, "c"), SCHED_NONE);
  ASSERT_TRUE(is_fused(st, "d"));
  ASSERT_EQ(sched_task_fused_parts(task_of(st, "d")), 4);
  ASSERT_EQ(task_of(st, "d")->ndeps, 0);
  ASSERT_EQ(state_of(st, "d"), TS_READY);
  char buf[256];
  ASSERT_STREQ(parts_of(st, "d", buf, sizeof buf), "a:x b:x:0 c:y:1 d:x:2");
  ASSERT_EQ(st->ops[task_of(st, "d")->op].nfused_ops, 2);
  sched_graph *gr = st->graphs[task_of(st, "d")->graph];
  ASSERT_EQ(gr->ntasks, 4);
  ASSERT_EQ(gr->nfused, 1);
  ASSERT_EQ(gr->nfused_parts, 4);
  ASSERT_EQ(st->nlive + st->nfused_extra, 4);
  sched_state_destroy(&st);
}

/* A long chain: fused tasks of at most SCHED_FUSE_MAX_PARTS (100,000) parts. */
TEST(long_chain_is_cut_at_the_part_limit)
{
  sched_state *st = fusing_state(1);
  uint32_t c = add_client(st, "c");
  enum { N = 250000 };
  sched_task_spec *specs = calloc(N, sizeof *specs);
  sched_strref *refs = calloc(N, sizeof *refs);
  char (*keys)[16] = calloc(N, sizeof *keys);
  for (uint32_t i = 0; i < N; i++) {
    snprintf(keys[i], sizeof keys[i], "k%u", i);
    specs[i].key = (sched_strref){keys[i], (uint32_t)strlen(keys[i])};
    specs[i].op = (sched_strref){"noop", 4};
    if (i > 0) {
      refs[i] = specs[i - 1].key;
      specs[i].inputs = &refs[i];
      specs[i].ninputs = 1;
    }
  }
  tsr_errbuf err;
  ASSERT_EQ(sched_graph_add(st, c, 1, specs, N, NULL, 0, &err), N);
  ASSERT_EQ(st->nlive, 3);
  ASSERT_EQ(st->nlive + st->nfused_extra, N);
  /* cut from the chain's start: 100,000 + 100,000 + the last 50,000 */
  ASSERT_EQ(state_of(st, "k99999"), TS_READY);
  ASSERT_EQ(sched_task_fused_parts(task_of(st, "k99999")), 100000);
  ASSERT_EQ(sched_task_fused_parts(task_of(st, "k199999")), 100000);
  ASSERT_EQ(sched_task_fused_parts(task_of(st, "k249999")), 50000);
  ASSERT_STREQ(st->tasks[task_of(st, "k199999")->deps[0]].key, "k99999");
  ASSERT_STREQ(st->tasks[task_of(st, "k249999")->deps[0]].key, "k199999");
  free(specs);
  free(refs);
  free(keys);
  sched_state_destroy(&st);
}

TEST(a_wanted_middle_key_stops_fusion)
{
  sched_state *st = fusing_state(1);
  uint32_t c = add_client(st, "c");
  const char *const g[] = {"a:x", "b:x:a", "c:x:b", "d:x:c", NULL};
  const char *const wants[] = {"b", "d", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, wants, &err), 4);
  ASSERT_EQ(st->nlive, 2);
  char buf[256];
  ASSERT_STREQ(parts_of(st, "b", buf, sizeof buf), "a:x b:x:0");
  ASSERT_STREQ(parts_of(st, "d", buf, sizeof buf), "c:x:0 d:x:1");  /* ref 0: its one input, b */
  ASSERT_STREQ(deps_of(st, "d", buf, sizeof buf), "b");
  ASSERT_EQ(task_of(st, "b")->ndependents, 1);
  ASSERT_EQ(task_of(st, "b")->dependents[0].id, id_of(st, "d"));
  /* a key with two dependents is not a part either */
  const char *const g2[] = {"p:x", "q:x:p", "r:x:p", NULL};
  ASSERT_EQ(add_graph(st, c, 2, g2, NULL, &err), 3);
  ASSERT_EQ(sched_task_fused_parts(task_of(st, "q")), 0);
  ASSERT_EQ(task_of(st, "p")->ndependents, 2);
  sched_state_destroy(&st);
}

TEST(no_fuse_keeps_every_task)
{
  sched_state *st = fusing_state(0);
  uint32_t c = add_client(st, "c");
  const char *const g[] = {"a:x", "b:x:a", "c:x:b", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 3);
  ASSERT_EQ(st->nlive, 3);
  ASSERT_EQ(sched_task_fused_parts(task_of(st, "c")), 0);
  sched_state_destroy(&st);
}

/* Workers that cannot run fused tasks (no `fused` op): nothing is fused. */
TEST(no_fusion_without_a_worker_that_runs_fused_tasks)
{
  sched_state *st = fusing_state(4);
  uint32_t c = add_client(st, "c");
  add_worker(st, "old", 1, "x");
  const char *const g[] = {"a:x", "b:x:a", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 2);
  ASSERT_EQ(st->nlive, 2);
  add_worker(st, "new", 1, "x fused");
  const char *const g2[] = {"p:x", "q:x:p", NULL};
  ASSERT_EQ(add_graph(st, c, 2, g2, NULL, &err), 2);
  ASSERT_EQ(st->nlive, 3);
  /* and only the worker that has `fused` gets it */
  sched_place_pass(st);
  ASSERT_EQ(task_of(st, "q")->processing_on, peer_index(st, "new"));
  sched_state_destroy(&st);
}

/* ---------- fan-ins ---------- */

TEST(diamond_not_fused_across_the_join)
{
  sched_state *st = fusing_state(1);
  uint32_t c = add_client(st, "c");
  const char *const g[] = {"a:x", "b:x:a", "c:x:a", "d:add:b,c", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 4);
  ASSERT_EQ(st->nlive, 4);  /* width 1: the join of two branches is not a chain */
  sched_state_destroy(&st);

  /* width 2 fuses the branches into the join, never the shared input */
  st = fusing_state(2);
  c = add_client(st, "c");
  add_worker(st, "w", 2, "x add fused");
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 4);
  ASSERT_EQ(st->nlive, 2);
  char buf[256];
  ASSERT_STREQ(parts_of(st, "d", buf, sizeof buf), "b:x:0 c:x:0 d:add:1,2");
  ASSERT_STREQ(deps_of(st, "d", buf, sizeof buf), "a");  /* listed once */
  ASSERT_EQ(task_of(st, "a")->ndependents, 1);
  ASSERT_EQ(task_of(st, "a")->nlive_dependents, 1);
  /* and it runs: a, then d; a is freed once d is done */
  ASSERT_EQ(sched_place_pass(st), 1);
  done(st, "a", 8);
  ASSERT_EQ(state_of(st, "d"), TS_READY);
  ASSERT_EQ(sched_place_pass(st), 1);
  done(st, "d", 8);
  ASSERT_EQ(state_of(st, "a"), TS_RELEASED);
  ASSERT_EQ(st->graphs[task_of(st, "d")->graph]->ndone, 4);
  sched_state_destroy(&st);
}

TEST(fan_in_fused_only_within_the_width)
{
  const char *const g[] = {"l0:x", "l1:x", "l2:x", "l3:x", "r:add:l0,l1,l2,l3", NULL};
  tsr_errbuf err;
  sched_state *st = fusing_state(3);
  uint32_t c = add_client(st, "c");
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 5);
  ASSERT_EQ(st->nlive, 5);
  sched_state_destroy(&st);
  st = fusing_state(4);
  c = add_client(st, "c");
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 5);
  ASSERT_EQ(st->nlive, 1);
  char buf[256];
  ASSERT_STREQ(parts_of(st, "r", buf, sizeof buf), "l0:x l1:x l2:x l3:x r:add:0,1,2,3");
  sched_state_destroy(&st);
  /* a two-level tree at width 2: each pair joins its parent; the root,
   * whose inputs now hold 2 + 2 branches, stays apart */
  const char *const t[] = {"l0:x", "l1:x", "l2:x", "l3:x", "m0:add:l0,l1", "m1:add:l2,l3", "r:add:m0,m1", NULL};
  st = fusing_state(2);
  c = add_client(st, "c");
  ASSERT_EQ(add_graph(st, c, 1, t, NULL, &err), 7);
  ASSERT_EQ(st->nlive, 3);
  ASSERT_STREQ(parts_of(st, "m1", buf, sizeof buf), "l2:x l3:x m1:add:0,1");
  ASSERT_STREQ(deps_of(st, "r", buf, sizeof buf), "m0 m1");
  ASSERT_EQ(sched_task_fused_parts(task_of(st, "r")), 0);
  sched_state_destroy(&st);
}

/* ---------- inputs from outside the group ---------- */

TEST(existing_keys_are_external_inputs)
{
  sched_state *st = fusing_state(4);
  uint32_t c = add_client(st, "c");
  const char *const g1[] = {"z:x", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g1, NULL, &err), 1);
  /* z already exists: shared, never a part; used twice by the chain */
  const char *const g2[] = {"z:x", "a:x", "b:add:a,z", "c:add:b,z", "d:x:c", NULL};
  ASSERT_EQ(add_graph(st, c, 2, g2, NULL, &err), 4);
  char buf[256];
  ASSERT_STREQ(parts_of(st, "d", buf, sizeof buf), "a:x b:add:1,0 c:add:2,0 d:x:3");
  ASSERT_STREQ(deps_of(st, "d", buf, sizeof buf), "z");
  const sched_task *z = task_of(st, "z");
  ASSERT_TRUE(z->ext != NULL);
  ASSERT_EQ(z->ext->nx, 1);
  ASSERT_EQ(z->nlive_dependents, 1);
  ASSERT_EQ(sched_task_fused_parts(z), 0);
  /* a new key used by two tasks of one group is an input of it, once */
  const char *const g3[] = {"s:x", "p:x", "q:add:p,s", "r:add:q,s", NULL};
  ASSERT_EQ(add_graph(st, c, 3, g3, NULL, &err), 4);
  ASSERT_STREQ(deps_of(st, "r", buf, sizeof buf), "s");
  ASSERT_EQ(task_of(st, "s")->ndependents, 1);
  ASSERT_EQ(task_of(st, "s")->dependents[0].id, id_of(st, "r"));
  sched_state_destroy(&st);
}

TEST(resubmitting_a_fused_key_shares_it)
{
  sched_state *st = fusing_state(1);
  uint32_t c = add_client(st, "c");
  const char *const g[] = {"a:x", "b:x:a", "c:y:b", NULL};
  const char *const wants[] = {"c", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, wants, &err), 3);
  uint32_t cid = id_of(st, "c");
  /* the same definition again: c is shared (its parts come back as new
   * tasks nobody needs, and go) */
  ASSERT_TRUE(add_graph(st, c, 2, g, wants, &err) >= 0);
  ASSERT_EQ(id_of(st, "c"), cid);
  ASSERT_EQ(st->nlive, 1);
  /* a different definition of c is refused, naming what differs */
  const char *const g3[] = {"c:x:b", "b:x:a", "a:x", NULL};
  ASSERT_EQ(add_graph(st, c, 3, g3, wants, &err), TSR_EEXIST);
  ASSERT_TRUE(strstr(err.text, "op differs") != NULL);
  const char *const g4[] = {"c:y:a", "a:x", NULL};
  ASSERT_EQ(add_graph(st, c, 4, g4, wants, &err), TSR_EEXIST);
  ASSERT_TRUE(strstr(err.text, "inputs differ") != NULL);
  sched_state_destroy(&st);
}

TEST(validation_errors_are_reported_as_before)
{
  sched_state *st = fusing_state(4);
  uint32_t c = add_client(st, "c");
  tsr_errbuf err;
  const char *const cyc[] = {"a:x:c", "b:x:a", "c:x:b", "d:x", NULL};
  ASSERT_EQ(add_graph(st, c, 1, cyc, NULL, &err), TSR_ECYCLE);
  ASSERT_TRUE(strstr(err.text, "cycle of 3 tasks") != NULL);
  const char *const miss[] = {"a:x", "b:x:a", "c:x:nope", NULL};
  ASSERT_EQ(add_graph(st, c, 2, miss, NULL, &err), TSR_EMISSING);
  ASSERT_TRUE(strstr(err.text, "'nope'") != NULL);
  const char *const want[] = {"a:x", "b:x:a", NULL};
  const char *const wants[] = {"zz", NULL};
  ASSERT_EQ(add_graph(st, c, 3, want, wants, &err), TSR_ENOTFOUND);
  ASSERT_EQ(st->nlive, 0);
  ASSERT_EQ(st->nfused_extra, 0);
  ASSERT_EQ(st->keyidx.count, 0);
  sched_state_destroy(&st);
}

/* ---------- worker kinds ---------- */

TEST(cpu_and_gpu_ops_are_not_fused_together)
{
  sched_state *st = fusing_state(4);
  uint32_t c = add_client(st, "c");
  uint16_t gpu = add_gpu_worker(st, "g", 2, "x y fused", "x fused", 1000);
  uint16_t cpu = add_worker(st, "w", 2, "x y fused");
  tsr_errbuf err;
  /* x has a CUDA variant, y does not: the chain splits at each change */
  const char *const mixed[] = {"a:x", "b:y:a", "c:x:b", NULL};
  ASSERT_EQ(add_graph(st, c, 1, mixed, NULL, &err), 3);
  ASSERT_EQ(st->nlive, 3);
  const char *const gx[] = {"p:x", "q:x:p", "r:x:q", NULL};
  ASSERT_EQ(add_graph(st, c, 2, gx, NULL, &err), 3);
  const char *const gy[] = {"s:y", "t:y:s", NULL};
  ASSERT_EQ(add_graph(st, c, 3, gy, NULL, &err), 2);
  ASSERT_EQ(st->nlive, 5);
  const sched_op *fx = &st->ops[task_of(st, "r")->op], *fy = &st->ops[task_of(st, "t")->op];
  ASSERT_EQ(fx->ngpu_native, 1);  /* every part native on the GPU */
  ASSERT_EQ(fy->ngpu_native, 0);
  ASSERT_EQ(fy->ncpu, 1);
  ASSERT_EQ(fy->nworkers, 2);     /* the GPU worker could run it on the host */
  sched_place_pass(st);
  ASSERT_EQ(task_of(st, "r")->processing_on, gpu);
  ASSERT_EQ(task_of(st, "t")->processing_on, cpu);
  sched_state_destroy(&st);
}

/* A worker that joins later gets the fused ops it can run. */
TEST(late_workers_get_fused_ops)
{
  sched_state *st = fusing_state(1);
  uint32_t c = add_client(st, "c");
  const char *const g[] = {"a:x", "b:y:a", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 2);
  ASSERT_EQ(sched_place_pass(st), 0);
  add_worker(st, "partial", 1, "x fused");  /* lacks y */
  ASSERT_EQ(sched_place_pass(st), 0);
  uint16_t w = add_worker(st, "full", 1, "x y fused");
  ASSERT_EQ(sched_place_pass(st), 1);
  ASSERT_EQ(task_of(st, "b")->processing_on, w);
  sched_state_destroy(&st);
}

/* ---------- life of a fused task ---------- */

TEST(status_counts_parts_and_everything_is_forgotten)
{
  sched_state *st = fusing_state(1);
  uint32_t c = add_client(st, "c");
  add_worker(st, "w", 1, "x fused");
  const char *const g[] = {"a:x", "b:x:a", "c:x:b", "d:x:c", "e:x:d", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, NULL, &err), 5);
  sched_graph *gr = st->graphs[task_of(st, "e")->graph];
  ASSERT_EQ(sched_place_pass(st), 1);
  ASSERT_EQ(gr->ndone, 0);
  done(st, "e", 8);
  ASSERT_EQ(gr->ndone, 5);
  ASSERT_EQ(gr->ntasks, 5);
  tsr_wbuf_reset(&st->peers[sched_peer_find(st, "c", 1)].out);
  sched_emit_status(st, sched_peer_find(st, "c", 1), 7);
  const tsr_wbuf *out = &st->peers[sched_peer_find(st, "c", 1)].out;
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  ASSERT_EQ(msgpack_unpack_next(&u, out->sbuf.data, out->sbuf.size, &off), MSGPACK_UNPACK_SUCCESS);
  uint64_t total = 0, fused = 0, parts = 0;
  const msgpack_object *graphs = tsr_wire_field(&u.data, "graphs");
  ASSERT_OK(tsr_wire_uint(&u.data, "tasks_total", &total, NULL));
  ASSERT_OK(tsr_wire_uint(&graphs->via.array.ptr[0], "fused_tasks", &fused, NULL));
  ASSERT_OK(tsr_wire_uint(&graphs->via.array.ptr[0], "fused_parts", &parts, NULL));
  msgpack_unpacked_destroy(&u);
  ASSERT_EQ(total, 5);
  ASSERT_EQ(fused, 1);
  ASSERT_EQ(parts, 5);
  sched_tr_unwant(st, c, id_of(st, "e"));
  sched_settle(st);
  ASSERT_EQ(st->nlive, 0);
  ASSERT_EQ(st->nfused_extra, 0);
  ASSERT_EQ(st->ngraphs, 0);
  sched_state_destroy(&st);
}

TEST(lost_fused_result_is_recomputed_whole)
{
  sched_state *st = fusing_state(1);
  uint32_t c = add_client(st, "c");
  uint16_t w0 = add_worker(st, "w0", 1, "x fused");
  const char *const g[] = {"z:x", "a:x:z", "b:x:a", "c:x:b", "s:x:z", NULL};
  const char *const wants[] = {"c", "s", NULL};
  tsr_errbuf err;
  ASSERT_EQ(add_graph(st, c, 1, g, wants, &err), 5);
  ASSERT_EQ(sched_task_fused_parts(task_of(st, "c")), 3);
  sched_place_pass(st);
  done(st, "z", 8);
  sched_place_pass(st);
  done(st, "c", 8);
  done(st, "s", 8);
  ASSERT_EQ(state_of(st, "z"), TS_RELEASED);
  uint16_t w1 = add_worker(st, "w1", 1, "x fused");
  sched_peer_drop(st, sched_peer_find(st, "w0", 2), "test");
  /* c is lost and wanted: it waits for its external input z again */
  ASSERT_EQ(state_of(st, "c"), TS_WAITING);
  ASSERT_EQ(state_of(st, "z"), TS_READY);
  ASSERT_EQ(sched_place_pass(st), 1);  /* z; c and s (lost too, also wanted) wait for it */
  (void)w0;
  done(st, "z", 8);
  sched_place_pass(st);
  ASSERT_EQ(state_of(st, "c"), TS_PROCESSING);
  ASSERT_EQ(task_of(st, "c")->processing_on, w1);
  /* a missing input while running: the fused task goes back and z is recomputed */
  const char *from = st->workers[w1].address;
  sched_tr_missing_input(st, id_of(st, "c"), id_of(st, "z"), from, strlen(from));
  sched_settle(st);
  ASSERT_EQ(state_of(st, "c"), TS_WAITING);
  ASSERT_EQ(state_of(st, "z"), TS_READY);
  sched_state_destroy(&st);
}

int main(void)
{
  tsr_log_set_level(TSR_LOG_WARN);
  RUN(chain_becomes_one_task);
  RUN(long_chain_is_cut_at_the_part_limit);
  RUN(a_wanted_middle_key_stops_fusion);
  RUN(no_fuse_keeps_every_task);
  RUN(no_fusion_without_a_worker_that_runs_fused_tasks);
  RUN(diamond_not_fused_across_the_join);
  RUN(fan_in_fused_only_within_the_width);
  RUN(existing_keys_are_external_inputs);
  RUN(resubmitting_a_fused_key_shares_it);
  RUN(validation_errors_are_reported_as_before);
  RUN(cpu_and_gpu_ops_are_not_fused_together);
  RUN(late_workers_get_fused_ops);
  RUN(status_counts_parts_and_everything_is_forgotten);
  RUN(lost_fused_result_is_recomputed_whole);
  return kit_summary();
}
