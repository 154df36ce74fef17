/* Cluster status: `status` / `status_reply`, and waiting for workers.
 *
 * Each request carries a fresh `req` number and a pending_status record
 * on the caller's stack, linked into the client while it waits; the I/O
 * thread fills the record whose req matches. A reply after the caller
 * gave up finds no record and is dropped. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CLUSTER_MAX_WORKERS 100000
#define CLUSTER_MAX_GRAPHS 1000000
#define CLUSTER_MAX_GROUPS 32767   /* per graph, as the scheduler keeps them (scheduler/progress.h) */

/* Copies an optional string field, truncating to the destination. */
static void opt_str(const msgpack_object *map, const char *key, char *buf, size_t cap)
{
  const char *s;
  size_t len;
  buf[0] = '\0';
  if (tsr_wire_field(map, key) == NULL || tsr_wire_str(map, key, TSR_MAX_TEXT_LEN, &s, &len, NULL) != 0) return;
  if (len >= cap) len = cap - 1;
  memcpy(buf, s, len);
  buf[len] = '\0';
}

/* The optional usage fields (scheduler/usage.h relays them). */
static int decode_usage(const msgpack_object *map, tsr_worker_info *w, tsr_errbuf *err)
{
  uint64_t gpu_mem = UINT64_MAX, power = UINT64_MAX;
  w->has_usage = tsr_wire_field(map, "cpu_us") != NULL;
  int rc = tsr_wire_opt_uint(map, "cpu_us", 0, &w->cpu_us, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "memory_peak", 0, &w->memory_peak, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "disk_peak", 0, &w->disk_peak, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "device_memory_peak", 0, &w->device_memory_peak, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "fetch_bytes", 0, &w->fetch_bytes, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "fetch_us", 0, &w->fetch_us, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "gpu_memory_used", UINT64_MAX, &gpu_mem, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "gpu_power_mw", UINT64_MAX, &power, err);
  w->gpu_memory_used = gpu_mem > INT64_MAX ? -1 : (int64_t)gpu_mem;
  w->gpu_power_mw = power > INT64_MAX ? -1 : (int64_t)power;
  return rc;
}

static int decode_worker(const msgpack_object *map, tsr_worker_info *w, tsr_errbuf *err)
{
  uint64_t threads = 0;
  if (map->type != MSGPACK_OBJECT_MAP) return tsr_fail(err, TSR_EPROTO, "status_reply: a worker is not a map");
  opt_str(map, "name", w->name, sizeof w->name);
  opt_str(map, "address", w->address, sizeof w->address);
  opt_str(map, "device", w->device, sizeof w->device);
  int rc = tsr_wire_opt_uint(map, "threads", 0, &threads, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "memory_used", 0, &w->memory_used, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "memory_limit", 0, &w->memory_limit, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "tasks_running", 0, &w->tasks_running, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "tasks_done", 0, &w->tasks_done, err);
  opt_str(map, "gpu_name", w->gpu_name, sizeof w->gpu_name);
  uint64_t util = UINT64_MAX;
  if (rc == 0) rc = tsr_wire_opt_uint(map, "device_memory_used", 0, &w->device_memory_used, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "device_memory_limit", 0, &w->device_memory_limit, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "device_bytes_moved", 0, &w->device_bytes_moved, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "device_bytes_dropped", 0, &w->device_bytes_dropped, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "gpu_util", UINT64_MAX, &util, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "disk_bytes", 0, &w->disk_bytes, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "bytes_spilled", 0, &w->bytes_spilled, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "bytes_dropped", 0, &w->bytes_dropped, err);
  bool paused = false;
  if (rc == 0) rc = tsr_wire_opt_bool(map, "paused", false, &paused, err);
  w->paused = paused;
  if (rc == 0) rc = tsr_wire_opt_uint(map, "memory_held", 0, &w->memory_held, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "disk_held", 0, &w->disk_held, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "tasks_recomputed", 0, &w->tasks_recomputed, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "bytes_recomputed", 0, &w->bytes_recomputed, err);
  if (rc == 0) rc = decode_usage(map, w, err);
  w->gpu_util = util == UINT64_MAX ? -1 : util > 100 ? 100 : (int)util;
  w->threads = threads > 1000000 ? 1000000 : (int)threads;
  return rc;
}

/* groups: [[op, total, done, erred, busy_us, bytes_done]] (opt). */
static int decode_groups(const msgpack_object *map, tsr_graph_info *g, tsr_errbuf *err)
{
  const msgpack_object *groups;
  size_t n;
  int rc = tsr_wire_opt_array(map, "groups", CLUSTER_MAX_GROUPS, &groups, &n, err);
  if (rc != 0 || n == 0) return rc;
  g->groups = calloc(n, sizeof *g->groups);
  if (g->groups == NULL) return TSR_ENOMEM;
  g->n_groups = n;
  for (size_t i = 0; i < n; i++) {
    const msgpack_object *v = groups[i].via.array.ptr;
    tsr_graph_group *o = &g->groups[i];
    if (groups[i].type != MSGPACK_OBJECT_ARRAY || groups[i].via.array.size != 6)
      return tsr_fail(err, TSR_EPROTO, "status_reply: field 'groups[%zu]' must be an array of 6 entries", i);
    const char *op;
    size_t len;
    rc = tsr_obj_str(&v[0], TSR_MAX_NAME_LEN, &op, &len, err);
    uint64_t *dst[5] = {&o->tasks_total, &o->tasks_done, &o->tasks_erred, &o->busy_us, &o->bytes_done};
    for (int k = 0; rc == 0 && k < 5; k++) rc = tsr_obj_uint(&v[k + 1], dst[k], err);
    if (rc != 0) return tsr_fail(err, TSR_EPROTO, "status_reply: field 'groups[%zu]': %s", i, err->text);
    snprintf(o->op, sizeof o->op, "%.*s", (int)(len < sizeof o->op ? len : sizeof o->op - 1), op);
  }
  return 0;
}

static int decode_graph(const msgpack_object *map, tsr_graph_info *g, tsr_errbuf *err)
{
  if (map->type != MSGPACK_OBJECT_MAP) return tsr_fail(err, TSR_EPROTO, "status_reply: a graph is not a map");
  opt_str(map, "client", g->client, sizeof g->client);
  int rc = tsr_wire_opt_uint(map, "graph", 0, &g->graph, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "tasks_total", 0, &g->tasks_total, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "tasks_done", 0, &g->tasks_done, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "tasks_erred", 0, &g->tasks_erred, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "fused_tasks", 0, &g->fused_tasks, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "fused_parts", 0, &g->fused_parts, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "busy_us", 0, &g->busy_us, err);
  if (rc == 0) rc = decode_groups(map, g, err);
  return rc;
}

static int decode_info(const msgpack_object *map, tsr_cluster_info **info_p, tsr_errbuf *err)
{
  const msgpack_object *workers, *graphs;
  size_t n_workers, n_graphs;
  int rc = tsr_wire_opt_array(map, "workers", CLUSTER_MAX_WORKERS, &workers, &n_workers, err);
  if (rc == 0) rc = tsr_wire_opt_array(map, "graphs", CLUSTER_MAX_GRAPHS, &graphs, &n_graphs, err);
  if (rc != 0) return rc;
  tsr_cluster_info *info = calloc(1, sizeof *info);
  if (info == NULL) return TSR_ENOMEM;
  info->workers = calloc(n_workers ? n_workers : 1, sizeof *info->workers);
  info->graphs = calloc(n_graphs ? n_graphs : 1, sizeof *info->graphs);
  if (info->workers == NULL || info->graphs == NULL) rc = TSR_ENOMEM;
  for (size_t i = 0; rc == 0 && i < n_workers; i++) rc = decode_worker(&workers[i], &info->workers[i], err);
  for (size_t i = 0; rc == 0 && i < n_graphs; i++) rc = decode_graph(&graphs[i], &info->graphs[i], err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "tasks_total", 0, &info->tasks_total, err);
  info->n_workers = n_workers;
  info->n_graphs = n_graphs;
  if (rc != 0) {
    tsr_cluster_info_destroy(&info);
    return rc;
  }
  *info_p = info;
  return 0;
}

int cluster_on_status_reply_locked(tsr_client *c, const msgpack_object *map, tsr_errbuf *err)
{
  uint64_t req;
  int rc = tsr_wire_uint(map, "req", &req, err);
  if (rc != 0) return rc;
  pending_status *p = c->statuses;
  while (p != NULL && (p->req != req || p->done)) p = p->next;
  if (p == NULL) return 0;   /* its caller gave up */
  p->done = true;
  p->rc = decode_info(map, &p->info, err);
  if (p->rc != 0) snprintf(p->message, sizeof p->message, "bad status_reply: %.400s", err->text);
  return 0;
}

static out_frame *status_frame(uint64_t req)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "status", 2);
  tsr_pack_kv_uint(&wb.pk, "req", req);
  out_frame *f = client_frame_from(&wb);
  tsr_wbuf_free(&wb);
  return f;
}

static void unlink_status(tsr_client *c, pending_status *p)
{
  pending_status **pp = &c->statuses;
  while (*pp != NULL && *pp != p) pp = &(*pp)->next;
  if (*pp != NULL) *pp = p->next;
}

TSR_API int tsr_cluster_info_get(tsr_client *client, int timeout_ms, tsr_cluster_info **info_p)
{
  if (client == NULL || info_p == NULL) return client_fail(TSR_EINVAL, "tsr_cluster_info_get: client and info_p are required");
  uint64_t deadline = client_deadline(timeout_ms);
  pthread_mutex_lock(&client->mu);
  int rc = client_check_up_locked(client);
  out_frame *f = rc == 0 ? status_frame(client->next_req) : NULL;
  if (rc == 0 && f == NULL) rc = client_fail(TSR_ENOMEM, "tsr_cluster_info_get: out of memory");
  if (rc != 0) {
    pthread_mutex_unlock(&client->mu);
    return rc;
  }
  pending_status p = {.req = client->next_req++};
  p.next = client->statuses;
  client->statuses = &p;
  client_enqueue_locked(client, f);
  while (!p.done && client_wait_until(client, deadline)) {
  }
  unlink_status(client, &p);
  pthread_mutex_unlock(&client->mu);
  if (!p.done) return client_fail(TSR_ETIMEDOUT, "no status reply from %s within %d ms", client->address, timeout_ms);
  if (p.rc != 0) return client_fail(p.rc, "%s", p.message[0] ? p.message : tsr_strerror(p.rc));
  *info_p = p.info;
  return 0;
}

TSR_API void tsr_cluster_info_destroy(tsr_cluster_info **info_p)
{
  if (info_p == NULL || *info_p == NULL) return;
  free((*info_p)->workers);
  for (size_t g = 0; (*info_p)->graphs != NULL && g < (*info_p)->n_graphs; g++) free((*info_p)->graphs[g].groups);
  free((*info_p)->graphs);
  free(*info_p);
  *info_p = NULL;
}

TSR_API int tsr_wait_for_workers(tsr_client *client, size_t n, int timeout_ms)
{
  if (client == NULL) return client_fail(TSR_EINVAL, "tsr_wait_for_workers: client is NULL");
  uint64_t deadline = client_deadline(timeout_ms);
  size_t seen = 0;
  for (;;) {
    int left = timeout_ms < 0 ? -1 : (int)((deadline > tsr_now_ns() ? deadline - tsr_now_ns() : 0) / 1000000u);
    tsr_cluster_info *info = NULL;
    int rc = tsr_cluster_info_get(client, left, &info);
    if (rc == TSR_ETIMEDOUT) break;
    if (rc != 0) return rc;
    seen = info->n_workers;
    tsr_cluster_info_destroy(&info);
    if (seen >= n) return 0;
    /* Poll again in 100 ms (or at the deadline), waking early only on close. */
    uint64_t next = tsr_now_ns() + 100000000u;
    if (deadline != 0 && deadline < next) next = deadline;
    pthread_mutex_lock(&client->mu);
    while (client->state != CONN_CLOSED && client_wait_until(client, next) && tsr_now_ns() < next) {
    }
    pthread_mutex_unlock(&client->mu);
    if (deadline != 0 && tsr_now_ns() >= deadline) break;
  }
  return client_fail(TSR_ETIMEDOUT, "%zu of %zu workers connected after %d ms", seen, n, timeout_ms);
}
