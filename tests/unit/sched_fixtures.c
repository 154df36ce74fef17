/* tests/unit/sched_fixtures.c — the scheduler unit tests' shared fixtures;
 * the contract is in sched_fixtures.h. */
#include "sched_fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The clock every frame arrives at: no test here checks timeouts, and one
 * fixed time keeps the heartbeat bookkeeping deterministic. */
#define NOW_MS 1000

/* add_graph's room for inputs, per task of the graph: all the refs go in
 * one block, so a graph may not average more. */
#define MAX_INPUTS 8

sched_state *new_state_with(sched_config cfg)
{
  cfg.heartbeat_ms = 1000;
  cfg.timeout_ms = 10000;
  return sched_state_new(&cfg);
}

sched_state *new_state(void) { return new_state_with((sched_config){.recompute = SCHED_RECOMPUTE_AUTO}); }

uint32_t peer_index(sched_state *st, const char *name)
{
  uint32_t p = sched_peer_find(st, name, strlen(name));
  return p == SCHED_NONE ? SCHED_NONE : st->peers[p].index;
}

void feed(sched_state *st, const char *identity, tsr_wbuf *wb)
{
  sched_handle_frame(st, identity, strlen(identity), wb->sbuf.data, wb->sbuf.size, NOW_MS);
  tsr_wbuf_free(wb);
}

/* ---------- hellos ---------- */

/* Starts a worker's hello with the fields every worker sends; nfields
 * counts the op and every field, the caller's included. */
static void begin_worker_hello(tsr_wbuf *wb, const char *name, int threads, uint32_t nfields)
{
  tsr_wbuf_init(wb);
  tsr_wbuf_begin(wb, "hello", nfields);
  tsr_pack_kv_uint(&wb->pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_str(&wb->pk, "role", "worker");
  tsr_pack_kv_str(&wb->pk, "name", name);
  tsr_pack_kv_uint(&wb->pk, "threads", (uint64_t)threads);
}

/* Packs key: [names] from a space-separated list (32 names at most). */
static void pack_names(msgpack_packer *pk, const char *key, const char *list)
{
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  const char *names[32];
  int n = 0;
  for (char *s = strtok(buf, " "); s && n < 32; s = strtok(NULL, " ")) names[n++] = s;
  tsr_pack_str(pk, key);
  msgpack_pack_array(pk, (size_t)n);
  for (int i = 0; i < n; i++) tsr_pack_str(pk, names[i]);
}

/* Sends the hello and finds the worker it registered. */
static uint16_t finish_worker_hello(sched_state *st, const char *name, tsr_wbuf *wb)
{
  feed(st, name, wb);
  return (uint16_t)peer_index(st, name);  /* SCHED_NONE narrows to SCHED_NO_WORKER */
}

uint16_t add_worker_limited(sched_state *st, const char *name, int threads, const char *ops, uint64_t memory_limit)
{
  tsr_wbuf wb;
  /* a limit of 0 is what a worker without one sends: nothing */
  begin_worker_hello(&wb, name, threads, memory_limit ? 8 : 7);
  if (memory_limit) tsr_pack_kv_uint(&wb.pk, "memory_limit", memory_limit);
  char addr[64];
  snprintf(addr, sizeof addr, "tcp://%s:1", name);
  tsr_pack_kv_str(&wb.pk, "data_address", addr);
  pack_names(&wb.pk, "ops", ops);
  return finish_worker_hello(st, name, &wb);
}

uint16_t add_worker(sched_state *st, const char *name, int threads, const char *ops)
{
  return add_worker_limited(st, name, threads, ops, 0);
}

uint16_t add_gpu_worker(sched_state *st, const char *name, int threads, const char *ops, const char *native,
                        uint64_t device_memory_limit)
{
  tsr_wbuf wb;
  begin_worker_hello(&wb, name, threads, 11);
  tsr_pack_kv_str(&wb.pk, "data_address", "tcp://gpu:1");
  tsr_pack_kv_str(&wb.pk, "device", "gpu:0");
  tsr_pack_kv_str(&wb.pk, "gpu_name", "NVIDIA H200");
  tsr_pack_kv_uint(&wb.pk, "device_memory_limit", device_memory_limit);
  pack_names(&wb.pk, "ops", ops);
  pack_names(&wb.pk, "native_ops", native);
  return finish_worker_hello(st, name, &wb);
}

uint32_t add_client(sched_state *st, const char *name)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "hello", 4);
  tsr_pack_kv_uint(&wb.pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_str(&wb.pk, "role", "client");
  tsr_pack_kv_str(&wb.pk, "name", name);
  feed(st, name, &wb);
  return peer_index(st, name);
}

/* ---------- graphs ---------- */

static sched_strref ref_of(const char *s) { return (sched_strref){s, (uint32_t)strlen(s)}; }

/* Fills spec from "key:op:in1,in2" in b, which it cuts in place (spec
 * points into it); the inputs go to refs from *nr on. */
static void parse_task(char *b, sched_task_spec *spec, sched_strref *refs, int *nr)
{
  char *op = strchr(b, ':');
  *op++ = '\0';
  char *in = strchr(op, ':');
  if (in) *in++ = '\0';
  spec->key = ref_of(b);
  spec->op = ref_of(op);
  spec->inputs = refs + *nr;
  for (char *s = in ? strtok(in, ",") : NULL; s; s = strtok(NULL, ",")) {
    refs[(*nr)++] = ref_of(s);
    spec->ninputs++;
  }
}

/* sched_graph_add with err, or with an error printed when the caller
 * passes none (it expects no rejection, and a test failing on the count
 * then says why). */
static int submit(sched_state *st, uint32_t client, uint64_t gid, const sched_task_spec *specs, uint32_t n,
                  const sched_strref *wants, uint32_t nw, tsr_errbuf *err)
{
  tsr_errbuf own;
  int rc = sched_graph_add(st, client, gid, specs, n, wants, nw, err ? err : &own);
  if (rc < 0 && !err) fprintf(stderr, "  graph rejected: %s\n", own.text);
  return rc;
}

int add_graph(sched_state *st, uint32_t client, uint64_t gid, const char *const *tasks, const char *const *wants,
              tsr_errbuf *err)
{
  int n = 0, nw = 0;
  while (tasks[n]) n++;
  while (wants && wants[nw]) nw++;
  sched_task_spec *specs = calloc((size_t)n + 1, sizeof *specs);
  sched_strref *refs = calloc((size_t)n * MAX_INPUTS + 1, sizeof *refs);
  char **bufs = calloc((size_t)n + 1, sizeof *bufs);
  sched_strref wrefs[64];
  int nr = 0;
  for (int i = 0; i < n; i++) parse_task(bufs[i] = strdup(tasks[i]), &specs[i], refs, &nr);
  for (int i = 0; i < nw; i++) wrefs[i] = ref_of(wants[i]);
  int rc = submit(st, client, gid, specs, (uint32_t)n, wants ? wrefs : NULL, (uint32_t)nw, err);
  for (int i = 0; i < n; i++) free(bufs[i]);
  free(bufs);
  free(refs);
  free(specs);
  return rc;
}

/* ---------- tasks ---------- */

uint32_t id_of(sched_state *st, const char *key) { return sched_task_find(st, key, strlen(key)); }

sched_task *task_of(sched_state *st, const char *key) { return &st->tasks[id_of(st, key)]; }

int state_of(sched_state *st, const char *key)
{
  uint32_t id = id_of(st, key);
  return id == SCHED_NONE ? -1 : (int)st->tasks[id].state;
}

void done_id(sched_state *st, uint32_t id, uint64_t nbytes)
{
  tsr_meta meta = {.dtype = TSR_F64, .ndim = 1, .shape = {(int64_t)nbytes / 8}};
  sched_tr_done(st, id, st->tasks[id].processing_on, nbytes, &meta);
  sched_settle(st);
}

void done(sched_state *st, const char *key, uint64_t nbytes) { done_id(st, id_of(st, key), nbytes); }

void heartbeat(sched_state *st, const char *name, bool paused)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "heartbeat", 3);  /* op + 2 fields */
  tsr_pack_kv_uint(&wb.pk, "memory_used", 1);
  tsr_pack_kv_bool(&wb.pk, "paused", paused);
  feed(st, name, &wb);
}
