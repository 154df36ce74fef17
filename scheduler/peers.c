/* Peers: hello (registration as a worker or a client), departures
 * (goodbye, heartbeat timeout, a second hello on the same identity) and
 * what follows from them. A worker's departure reschedules what it was
 * running and recomputes what only it held; a client's departure releases
 * everything it wanted. Connects and departures are logged at info. */
#include "journal.h"
#include "progress.h"
#include "sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This run of the scheduler, in every welcome: a client that lost its
 * session learns from a new value that the scheduler restarted. */
static uint64_t incarnation(void)
{
  static uint64_t value;
  if (value == 0) value = (tsr_now_us() * 6364136223846793005ull) ^ ((uint64_t)getpid() << 32) ^ tsr_hash_bytes(&value, sizeof value);
  return value ? value : 1;
}

typedef struct worker_hello {
  char name[TSR_MAX_NAME_LEN + 1];
  char address[TSR_MAX_NAME_LEN + 1];
  char device[TSR_MAX_NAME_LEN + 1];
  char gpu_name[TSR_MAX_NAME_LEN + 1];
  uint64_t pid, threads, memory_limit, device_memory_limit;
  uint64_t spill_write_bps, spill_read_bps;   /* 0: not given */
  const msgpack_object *ops;
  size_t nops;
  const msgpack_object *native;   /* NULL: every op is native */
  size_t nnative;
  const msgpack_object *chunks;   /* results it still holds (after a restart) */
  size_t nchunks;
} worker_hello;

static int opt_strcpy(const msgpack_object *map, const char *key, const char *fallback, char *buf, size_t cap,
                      tsr_errbuf *err)
{
  if (tsr_wire_field(map, key) != NULL) return tsr_wire_strcpy(map, key, buf, cap, err);
  snprintf(buf, cap, "%s", fallback);
  return 0;
}

static int check_names(const msgpack_object *names, size_t n, const char *field, tsr_errbuf *err)
{
  for (size_t i = 0; i < n; i++) {
    const char *s;
    size_t len;
    if (tsr_obj_str(&names[i], TSR_MAX_NAME_LEN, &s, &len, NULL) != 0 || len == 0)
      return tsr_fail(err, TSR_EPROTO, "field '%s' must hold op names (entry %zu is not one)", field, i);
  }
  return 0;
}

static int parse_worker_hello(const msgpack_object *map, worker_hello *h, tsr_errbuf *err)
{
  int rc = tsr_wire_strcpy(map, "name", h->name, sizeof h->name, err);
  if (rc == 0) rc = tsr_wire_uint(map, "threads", &h->threads, err);
  if (rc == 0) rc = tsr_wire_strcpy(map, "data_address", h->address, sizeof h->address, err);
  if (rc == 0) rc = tsr_wire_array(map, "ops", SCHED_MAX_OPS, &h->ops, &h->nops, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "pid", 0, &h->pid, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "memory_limit", 0, &h->memory_limit, err);
  if (rc == 0) rc = opt_strcpy(map, "device", "cpu", h->device, sizeof h->device, err);
  if (rc == 0) rc = opt_strcpy(map, "gpu_name", "", h->gpu_name, sizeof h->gpu_name, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "device_memory_limit", 0, &h->device_memory_limit, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "spill_write_bps", 0, &h->spill_write_bps, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "spill_read_bps", 0, &h->spill_read_bps, err);
  h->native = NULL;
  if (rc == 0) rc = tsr_wire_opt_array(map, "chunks", TSR_MAX_BATCH_TASKS, &h->chunks, &h->nchunks, err);
  if (rc == 0 && tsr_wire_field(map, "native_ops") != NULL)
    rc = tsr_wire_array(map, "native_ops", SCHED_MAX_OPS, &h->native, &h->nnative, err);
  rc = rc != 0 ? rc : check_names(h->ops, h->nops, "ops", err);
  rc = rc != 0 || h->native == NULL ? rc : check_names(h->native, h->nnative, "native_ops", err);
  if (rc == 0 && h->threads > 1u << 20) rc = tsr_fail(err, TSR_EPROTO, "field 'threads' is implausible (%llu)", (unsigned long long)h->threads);
  return rc;
}

static void send_welcome(sched_state *st, uint32_t p, uint64_t id, bool resumed)
{
  tsr_wbuf *wb = sched_out(st, p);
  tsr_wbuf_begin(wb, "welcome", 7);
  tsr_pack_kv_uint(&wb->pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_uint(&wb->pk, "id", id);
  tsr_pack_kv_uint(&wb->pk, "heartbeat_ms", st->cfg.heartbeat_ms);
  tsr_pack_kv_uint(&wb->pk, "incarnation", incarnation());
  tsr_pack_kv_bool(&wb->pk, "journal", st->journal != NULL);
  tsr_pack_kv_bool(&wb->pk, "resumed", resumed);
}

/* The advertised ops, and those native to the worker's device, as two
 * bitsets over interned op ids (one allocation). A native op the worker
 * did not also list in `ops` is ignored. */
static int set_ops(sched_state *st, sched_worker *w, const worker_hello *h)
{
  /* intern first: the bitset must cover every id handed out */
  for (size_t i = 0; i < h->nops; i++) {
    int rc = sched_op_intern(st, h->ops[i].via.str.ptr, h->ops[i].via.str.size);
    if (rc < 0) return rc;
  }
  size_t words = (st->nops + 63) / 64 + 1;
  w->opbits = calloc(2 * words, sizeof *w->opbits);
  if (w->opbits == NULL) return TSR_ENOMEM;
  w->nativebits = w->opbits + words;
  w->nopbits = st->nops;
  w->gpu = h->native != NULL;
  for (size_t i = 0; i < h->nops; i++) {
    uint32_t o = (uint32_t)sched_op_find(st, h->ops[i].via.str.ptr, h->ops[i].via.str.size);
    if (sched_worker_has_op(w, o)) continue;
    w->opbits[o / 64] |= 1ull << (o % 64);
    st->ops[o].nworkers++;
    if (w->gpu) continue;
    w->nativebits[o / 64] |= 1ull << (o % 64);
    st->ops[o].ncpu++;
  }
  for (size_t i = 0; w->gpu && i < h->nnative; i++) {
    int o = sched_op_find(st, h->native[i].via.str.ptr, h->native[i].via.str.size);
    if (o < 0 || !sched_worker_has_op(w, (uint32_t)o) || sched_worker_native(w, (uint32_t)o)) continue;
    w->nativebits[o / 64] |= 1ull << (o % 64);
    st->ops[o].ngpu_native++;
  }
  return sched_fuse_worker_ops(st, (uint32_t)(w - st->workers));
}

static void unset_ops(sched_state *st, const sched_worker *w)
{
  for (uint32_t o = 0; o < st->nops; o++) {
    if (sched_worker_has_op(w, o) && st->ops[o].nworkers > 0) st->ops[o].nworkers--;
    if (sched_worker_has_op(w, o) && !w->gpu && st->ops[o].ncpu > 0) st->ops[o].ncpu--;
    if (sched_worker_native(w, o) && w->gpu && st->ops[o].ngpu_native > 0) st->ops[o].ngpu_native--;
  }
}

/* Every live worker hears that the one at address is gone: a fetch from
 * it waiting for a reply gives up now instead of at its fetch timeout (a
 * stopped or cut-off worker keeps its connections open). */
static void tell_peer_gone(sched_state *st, const char *address)
{
  for (uint32_t i = 0; i < st->nworkers_slots; i++) {
    const sched_worker *other = &st->workers[i];
    if (!other->alive) continue;
    tsr_wbuf *wb = sched_out(st, other->peer);
    tsr_wbuf_begin(wb, "peer_gone", 2);
    tsr_pack_kv_str(&wb->pk, "address", address);
  }
}

static void worker_gone(sched_state *st, uint32_t w, const char *why)
{
  sched_worker *wk = &st->workers[w];
  wk->alive = false;
  st->nworkers_alive--;
  unset_ops(st, wk);
  uint32_t rescheduled, lost;
  sched_tr_worker_lost(st, (uint16_t)w, &rescheduled, &lost);
  sched_settle(st);
  wk->freebuf.size = 0;
  wk->nfree = 0;
  sched_journal_worker(st, w, false);
  tell_peer_gone(st, wk->address);
  TSR_INFO("worker '%s' (%s) left: %s; %u tasks rescheduled, %u results lost; %u workers remain", wk->name,
           wk->address, why, rescheduled, lost, st->nworkers_alive);
}

static void client_gone(sched_state *st, uint32_t c, const char *why)
{
  sched_client *cl = &st->clients[c];
  sched_idset wants = cl->wants;
  memset(&cl->wants, 0, sizeof cl->wants);
  for (uint32_t i = 0; i < wants.cap; i++) {
    uint32_t id = wants.slots[i];
    if (id >= SCHED_NONE - 1) continue;
    st->tasks[id].nwanted--;
    sched_recheck(st, id);
  }
  sched_idset_free(&wants);
  for (uint32_t g = 0; g < st->ngraphs; g++)
    if (st->graphs[g] != NULL && st->graphs[g]->client == c) st->graphs[g]->client = SCHED_NONE;
  sched_admit_client_gone(st, c);
  for (uint32_t k = 0; k < cl->npending; k++) sched_pending_free(&cl->pending[k]);
  cl->npending = 0;
  st->trim_wanted = true;
  sched_journal_client_gone(st, c);
  cl->alive = false;
  st->nclients_alive--;
  sched_settle(st);
  TSR_INFO("client '%s' left: %s; released %u keys; %u tasks remain", cl->name, why, wants.count, st->nlive);
}

static void unregister(sched_state *st, uint32_t p, const char *why)
{
  sched_peer *peer = &st->peers[p];
  sched_security_gone(st, p);
  if (peer->role == PEER_WORKER) worker_gone(st, peer->index, why);
  else if (peer->role == PEER_CLIENT) client_gone(st, peer->index, why);
  st->peers[p].role = PEER_NONE;
}

void sched_peer_drop(sched_state *st, uint32_t p, const char *why)
{
  bool welcomed = st->peers[p].role != PEER_NONE;
  unregister(st, p, why);
  sched_peer_remove(st, p, welcomed);
}

static void hello_worker(sched_state *st, uint32_t p, const msgpack_object *map)
{
  worker_hello h;
  tsr_errbuf err;
  char label[TSR_MAX_NAME_LEN + 32];
  if (parse_worker_hello(map, &h, &err) != 0) {
    TSR_WARN("rejected 'hello' from %s: %s", sched_peer_label(st, p, label, sizeof label), err.text);
    sched_send_error(st, p, TSR_EPROTO, "hello", "%s", err.text);
    return;
  }
  unregister(st, p, "said hello again");
  uint32_t w = sched_worker_alloc(st, p);
  if (w == SCHED_NONE) {
    sched_send_error(st, p, TSR_ELIMIT, "hello", "cannot register another worker");
    return;
  }
  sched_worker *wk = &st->workers[w];
  memcpy(wk->name, h.name, sizeof wk->name);
  memcpy(wk->address, h.address, sizeof wk->address);
  memcpy(wk->device, h.device, sizeof wk->device);
  wk->threads = h.threads ? (uint32_t)h.threads : 1;
  wk->pid = h.pid;
  wk->memory_limit = h.memory_limit;
  memcpy(wk->gpu_name, h.gpu_name, sizeof wk->gpu_name);
  wk->device_memory_limit = h.device_memory_limit;
  wk->spill_write_bps = h.spill_write_bps;
  wk->spill_read_bps = h.spill_read_bps;
  wk->gpu_util = -1;
  wk->peer_id = ++st->next_peer_id;
  if (set_ops(st, wk, &h) != 0) {
    TSR_WARN("worker '%s' advertised ops that cannot be registered (limit %d)", h.name, SCHED_MAX_OPS);
  }
  if (sched_place_worker_joined(st, w) != 0) TSR_WARN("worker '%s': out of memory; it gets no tasks", h.name);
  st->peers[p].role = PEER_WORKER;
  st->peers[p].index = w;
  send_welcome(st, p, wk->peer_id, false);
  sched_security_hello(st, p);
  sched_journal_worker(st, w, true);
  char mem[32], gpu[TSR_MAX_NAME_LEN + 96] = "", dev[32];
  if (wk->gpu_name[0] != '\0')
    snprintf(gpu, sizeof gpu, " (%s, %zu native ops, device memory limit %s)", wk->gpu_name, h.nnative,
             tsr_format_bytes(wk->device_memory_limit, dev, sizeof dev));
  TSR_INFO("worker '%s' connected: data %s, %u threads, device %s%s, %zu ops, memory limit %s; %u workers", wk->name,
           wk->address, wk->threads, wk->device, gpu, h.nops,
           wk->memory_limit ? tsr_format_bytes(wk->memory_limit, mem, sizeof mem) : "none", st->nworkers_alive);
  sched_recover_chunks(st, (uint16_t)w, h.chunks, h.nchunks);
}

/* A resumed client learns again the state of every key it wants. */
static void resend_wanted(sched_state *st, uint32_t c)
{
  const sched_idset *wants = &st->clients[c].wants;
  for (uint32_t i = 0; i < wants->cap; i++) {
    uint32_t id = wants->slots[i];
    if (id >= SCHED_NONE - 1) continue;
    if (st->tasks[id].state == TS_MEMORY) sched_notify_done(st, id, c);
    else if (st->tasks[id].state == TS_ERRED) sched_notify_erred(st, id, c);
  }
}

static void hello_client(sched_state *st, uint32_t p, const msgpack_object *map)
{
  char name[TSR_MAX_NAME_LEN + 1], label[TSR_MAX_NAME_LEN + 32];
  tsr_errbuf err;
  uint64_t token = 0;
  bool progress = false;
  int rc = tsr_wire_strcpy(map, "name", name, sizeof name, &err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "client_id", 0, &token, &err);
  if (rc == 0) rc = tsr_wire_opt_bool(map, "progress", false, &progress, &err);
  if (rc != 0) {
    TSR_WARN("rejected 'hello' from %s: %s", sched_peer_label(st, p, label, sizeof label), err.text);
    sched_send_error(st, p, TSR_EPROTO, "hello", "%s", err.text);
    return;
  }
  unregister(st, p, "said hello again");
  /* the same client_id as a client we still hold: the same client, back */
  uint32_t c = sched_client_attach(st, token, p);
  bool resumed = c != SCHED_NONE;
  if (!resumed) c = sched_client_alloc(st, p);
  if (c == SCHED_NONE) {
    sched_send_error(st, p, TSR_ENOMEM, "hello", "cannot register another client");
    return;
  }
  sched_client *cl = &st->clients[c];
  if (!resumed) {
    memcpy(cl->name, name, sizeof cl->name);
    cl->token = token ? token : (incarnation() ^ (st->next_peer_id + 1)) | (1ull << 63);
    sched_journal_client(st, c);
  }
  cl->peer_id = ++st->next_peer_id;
  st->peers[p].role = PEER_CLIENT;
  st->peers[p].index = c;
  send_welcome(st, p, cl->peer_id, resumed);
  /* workers admit the client's key before it is told of results to fetch */
  sched_security_hello(st, p);
  if (resumed) resend_wanted(st, c);
  sched_progress_subscribe(st, c, progress);
  TSR_INFO("client '%s' %s; %u clients", cl->name, resumed ? "reconnected and resumed its graphs" : "connected",
           st->nclients_alive);
}

void sched_peer_hello(sched_state *st, uint32_t p, const msgpack_object *map)
{
  tsr_errbuf err;
  char label[TSR_MAX_NAME_LEN + 32];
  uint64_t proto;
  const char *role;
  size_t rlen;
  int rc = tsr_wire_uint(map, "proto", &proto, &err);
  if (rc == 0 && proto != TSR_PROTOCOL_VERSION) {
    TSR_WARN("rejected 'hello' from %s: protocol version %llu, this scheduler speaks %d",
             sched_peer_label(st, p, label, sizeof label), (unsigned long long)proto, TSR_PROTOCOL_VERSION);
    sched_send_error(st, p, TSR_EVERSION, "hello",
                     "protocol version %llu is not supported: this scheduler speaks protocol version %d",
                     (unsigned long long)proto, TSR_PROTOCOL_VERSION);
    return;
  }
  if (rc == 0) rc = tsr_wire_str(map, "role", 16, &role, &rlen, &err);
  if (rc == 0 && sched_limits_refuse_hello(st, p, role, rlen)) return;
  if (rc == 0 && rlen == 6 && memcmp(role, "worker", 6) == 0) hello_worker(st, p, map);
  else if (rc == 0 && rlen == 6 && memcmp(role, "client", 6) == 0) hello_client(st, p, map);
  else {
    if (rc == 0) tsr_fail(&err, TSR_EPROTO, "field 'role' must be \"worker\" or \"client\"");
    TSR_WARN("rejected 'hello' from %s: %s", sched_peer_label(st, p, label, sizeof label), err.text);
    sched_send_error(st, p, TSR_EPROTO, "hello", "%s", err.text);
  }
}

void sched_check_timeouts(sched_state *st, uint64_t now_ms)
{
  for (uint32_t p = 0; p < st->npeers_slots; p++) {
    sched_peer *peer = &st->peers[p];
    if (!peer->in_use || now_ms < peer->last_seen_ms || now_ms - peer->last_seen_ms <= st->cfg.timeout_ms) continue;
    if (peer->role == PEER_NONE) {
      sched_peer_remove(st, p, false);
      continue;
    }
    char why[96];
    snprintf(why, sizeof why, "silent for %.1f s (heartbeat timeout %.1f s)", (double)(now_ms - peer->last_seen_ms) / 1e3,
             (double)st->cfg.timeout_ms / 1e3);
    sched_peer_drop(st, p, why);
  }
}
