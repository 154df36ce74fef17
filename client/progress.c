/* Progress of submitted graphs: the scheduler's `progress` messages merged
 * into monotone counts, polled (tsr_future_progress_get) or delivered to
 * callbacks (tsr_future_on_progress, tsr_client_on_progress).
 *
 * Invariants:
 * - Records (client_pgraph) live in c->pgraphs while their future lives;
 *   everything in them is written under mu.
 * - Callbacks run on the I/O thread only (progress_run_callbacks, after
 *   each turn's frames), never with mu held: the record is copied into
 *   the I/O thread's own buffer first, c->cb_future / c->cb_client say a
 *   call is in flight, and releasing or unregistering waits for it on cv.
 * - Monotone: done, erred, bytes and total only grow (the scheduler's own
 *   values go back when a lost result is recomputed or after a restart
 *   from its journal); done + erred never passes total; after the final
 *   call no other call is made for that graph. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Groups per graph: the scheduler has at most 32767 (scheduler/progress.h). */
#define CLIENT_PROGRESS_MAX_GROUPS 32767

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* The subscription travels in every hello after this (client_hello_frame)
 * and, for the session now, as a `progress` message. Caller holds mu. */
static void subscribe_locked(tsr_client *c)
{
  if (c->progress_on) return;
  c->progress_on = true;
  if (c->state != CONN_UP) return;
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "progress", 2);
  tsr_pack_kv_bool(&wb.pk, "on", true);
  out_frame *f = client_frame_from(&wb);
  tsr_wbuf_free(&wb);
  if (f != NULL) client_enqueue_locked(c, f);
}

void progress_graph_new_locked(tsr_client *c, tsr_future *f, uint64_t graph, uint64_t tasks)
{
  client_pgraph *pg = calloc(1, sizeof *pg);
  if (pg == NULL) return;   /* the future reports zeros; nothing else depends on it */
  pg->p.graph = graph;
  pg->p.tasks_total = tasks;
  pg->p.tasks_waiting = tasks;
  pg->future = f;
  pg->next = c->pgraphs;
  c->pgraphs = pg;
  f->pg = pg;
}

static void pgraph_free(client_pgraph *pg)
{
  for (size_t i = 0; i < pg->p.ngroups; i++) free((char *)pg->groups[i].op);
  free(pg->groups);
  free(pg);
}

void progress_graph_drop_locked(tsr_client *c, tsr_future *f)
{
  for (client_pgraph **pp = &c->pgraphs; *pp != NULL; pp = &(*pp)->next)
    if (*pp == f->pg) {
      *pp = f->pg->next;
      pgraph_free(f->pg);
      break;
    }
  f->pg = NULL;
  bool on_io = c->io_started && pthread_equal(pthread_self(), c->io);
  while (c->cb_future == f && !on_io) client_wait_until(c, 0);
}

/* ---------- merging a message ---------- */

typedef struct counts {
  uint64_t total, waiting, processing, done, erred, bytes;
} counts;

/* have := the monotone merge of msg; true when anything changed. */
static bool merge(tsr_progress_group *have, const counts *msg)
{
  tsr_progress_group old = *have;
  have->tasks_total = max_u64(have->tasks_total, msg->total);
  have->tasks_erred = max_u64(have->tasks_erred, msg->erred);
  if (have->tasks_erred > have->tasks_total) have->tasks_erred = have->tasks_total;
  uint64_t room = have->tasks_total - have->tasks_erred;
  have->tasks_done = max_u64(have->tasks_done, msg->done < room ? msg->done : room);
  have->bytes_done = max_u64(have->bytes_done, msg->bytes);
  room -= have->tasks_done;
  have->tasks_processing = msg->processing < room ? msg->processing : room;
  room -= have->tasks_processing;
  have->tasks_waiting = msg->waiting < room ? msg->waiting : room;
  return memcmp(&old.tasks_total, &have->tasks_total, 6 * sizeof(uint64_t)) != 0;
}

static int decode_counts(const msgpack_object *map, counts *n, tsr_errbuf *err)
{
  int rc = tsr_wire_uint(map, "tasks_total", &n->total, err);
  if (rc == 0) rc = tsr_wire_uint(map, "tasks_waiting", &n->waiting, err);
  if (rc == 0) rc = tsr_wire_uint(map, "tasks_processing", &n->processing, err);
  if (rc == 0) rc = tsr_wire_uint(map, "tasks_done", &n->done, err);
  if (rc == 0) rc = tsr_wire_uint(map, "tasks_erred", &n->erred, err);
  if (rc == 0) rc = tsr_wire_uint(map, "bytes_done", &n->bytes, err);
  return rc;
}

/* groups[i] = [op, total, waiting, processing, done, erred, bytes_done] */
static int decode_group(const msgpack_object *g, size_t i, const char **op_p, size_t *len_p, counts *n, tsr_errbuf *err)
{
  if (g->type != MSGPACK_OBJECT_ARRAY || g->via.array.size != 7)
    return tsr_fail(err, TSR_EPROTO, "field 'groups[%zu]' must be an array of 7 entries", i);
  const msgpack_object *v = g->via.array.ptr;
  uint64_t *dst[6] = {&n->total, &n->waiting, &n->processing, &n->done, &n->erred, &n->bytes};
  int rc = tsr_obj_str(&v[0], TSR_MAX_NAME_LEN, op_p, len_p, err);
  for (int k = 0; rc == 0 && k < 6; k++) rc = tsr_obj_uint(&v[k + 1], dst[k], err);
  if (rc != 0) return tsr_fail(err, TSR_EPROTO, "field 'groups[%zu]': %s", i, err->text);
  return 0;
}

static tsr_progress_group *group_named(client_pgraph *pg, const char *op, size_t len);

/* Busy time (opt `busy_us`, `groups_busy_us` parallel to `groups`; absent
 * from older schedulers), kept monotone. Runs after the groups were merged,
 * so every group named in the message exists. True when any grew. */
static bool merge_busy(client_pgraph *pg, const msgpack_object *map, const msgpack_object *groups, size_t ngroups,
                       tsr_errbuf *err)
{
  uint64_t busy = 0;
  const msgpack_object *gb;
  size_t ngb = 0;
  if (tsr_wire_opt_uint(map, "busy_us", 0, &busy, err) != 0) busy = 0;
  if (tsr_wire_opt_array(map, "groups_busy_us", CLIENT_PROGRESS_MAX_GROUPS, &gb, &ngb, err) != 0) ngb = 0;
  bool changed = busy > pg->p.busy_us;
  pg->p.busy_us = max_u64(pg->p.busy_us, busy);
  for (size_t i = 0; i < ngb && i < ngroups; i++) {
    const char *op;
    size_t len;
    uint64_t us;
    if (tsr_obj_uint(&gb[i], &us, NULL) != 0 || tsr_obj_str(&groups[i].via.array.ptr[0], TSR_MAX_NAME_LEN, &op, &len, NULL) != 0)
      continue;
    tsr_progress_group *g = group_named(pg, op, len);
    if (g == NULL || us <= g->busy_us) continue;
    g->busy_us = us;
    changed = true;
  }
  return changed;
}

/* The record's group named op, added when new; NULL on ENOMEM. */
static tsr_progress_group *group_named(client_pgraph *pg, const char *op, size_t len)
{
  for (size_t i = 0; i < pg->p.ngroups; i++)
    if (strlen(pg->groups[i].op) == len && memcmp(pg->groups[i].op, op, len) == 0) return &pg->groups[i];
  if (pg->p.ngroups == pg->cap_groups) {
    size_t cap = pg->cap_groups ? 2 * pg->cap_groups : 8;
    tsr_progress_group *grown = realloc(pg->groups, cap * sizeof *grown);
    if (grown == NULL) return NULL;
    pg->groups = grown;
    pg->cap_groups = cap;
  }
  char *name = strndup(op, len);
  if (name == NULL) return NULL;
  pg->groups[pg->p.ngroups] = (tsr_progress_group){.op = name};
  pg->p.groups = pg->groups;
  return &pg->groups[pg->p.ngroups++];
}

static client_pgraph *find_graph(tsr_client *c, uint64_t graph)
{
  for (client_pgraph *pg = c->pgraphs; pg != NULL; pg = pg->next)
    if (pg->p.graph == graph) return pg;
  return NULL;
}

/* Marks the calls due after a change. */
static void mark_due(tsr_client *c, client_pgraph *pg)
{
  if (pg->fut_fn != NULL && !pg->fut_final && !pg->fut_pending) pg->fut_pending = true, c->npending++;
  if (c->cli_fn != NULL && !pg->cli_final && !pg->cli_pending) pg->cli_pending = true, c->npending++;
}

int progress_on_message_locked(tsr_client *c, const msgpack_object *map, tsr_errbuf *err)
{
  uint64_t graph;
  counts n;
  const msgpack_object *groups;
  size_t ngroups;
  int rc = tsr_wire_uint(map, "graph", &graph, err);
  if (rc == 0) rc = decode_counts(map, &n, err);
  if (rc == 0) rc = tsr_wire_opt_array(map, "groups", CLIENT_PROGRESS_MAX_GROUPS, &groups, &ngroups, err);
  if (rc != 0) return rc;
  client_pgraph *pg = find_graph(c, graph);
  if (pg == NULL) return 0;   /* a released future's graph, or another session's */
  tsr_progress_group whole = {NULL, pg->p.tasks_total, pg->p.tasks_waiting, pg->p.tasks_processing,
                              pg->p.tasks_done, pg->p.tasks_erred, pg->p.bytes_done, 0};
  bool changed = merge(&whole, &n);
  for (size_t i = 0; i < ngroups; i++) {
    const char *op;
    size_t len;
    counts gn;
    if ((rc = decode_group(&groups[i], i, &op, &len, &gn, err)) != 0) return rc;
    tsr_progress_group *g = group_named(pg, op, len);
    if (g != NULL) changed |= merge(g, &gn);
  }
  pg->p.tasks_total = whole.tasks_total, pg->p.tasks_waiting = whole.tasks_waiting;
  pg->p.tasks_processing = whole.tasks_processing, pg->p.tasks_done = whole.tasks_done;
  pg->p.tasks_erred = whole.tasks_erred, pg->p.bytes_done = whole.bytes_done;
  changed |= merge_busy(pg, map, groups, ngroups, err);
  pg->p.final = pg->p.tasks_done + pg->p.tasks_erred >= pg->p.tasks_total;
  if (changed) mark_due(c, pg);
  return 0;
}

/* ---------- callbacks ---------- */

/* Copies pg's progress into dst with groups in *buf (grown); false on ENOMEM. */
static bool copy_progress(const client_pgraph *pg, tsr_progress *dst, tsr_progress_group **buf, size_t *cap)
{
  if (pg->p.ngroups > *cap) {
    tsr_progress_group *grown = realloc(*buf, pg->p.ngroups * sizeof *grown);
    if (grown == NULL) return false;
    *buf = grown;
    *cap = pg->p.ngroups;
  }
  *dst = pg->p;
  if (pg->p.ngroups > 0) memcpy(*buf, pg->groups, pg->p.ngroups * sizeof **buf);
  dst->groups = *buf;
  return true;
}

/* One due call, taken off its record under mu: false when none is left. */
static bool take_call(tsr_client *c, tsr_progress *snap, tsr_progress_fn *fn_p, void **user_p)
{
  for (client_pgraph *pg = c->pgraphs; pg != NULL; pg = pg->next) {
    bool fut = pg->fut_pending;
    if (!fut && !pg->cli_pending) continue;
    if (fut) pg->fut_pending = false;
    else pg->cli_pending = false;
    c->npending--;
    tsr_progress_fn fn = fut ? pg->fut_fn : c->cli_fn;
    if (fn == NULL || !copy_progress(pg, snap, &c->cb_groups, &c->cap_cb_groups)) return true;
    if (fut) pg->fut_final = snap->final, c->cb_future = pg->future;
    else pg->cli_final = snap->final, c->cb_client = true;
    *fn_p = fn;
    *user_p = fut ? pg->fut_user : c->cli_user;
    return true;
  }
  c->npending = 0;
  return false;
}

void progress_run_callbacks(tsr_client *c)
{
  pthread_mutex_lock(&c->mu);
  while (c->npending > 0) {
    tsr_progress snap;
    tsr_progress_fn fn = NULL;
    void *user = NULL;
    if (!take_call(c, &snap, &fn, &user)) break;
    if (fn == NULL) continue;
    pthread_mutex_unlock(&c->mu);
    fn(user, &snap);
    pthread_mutex_lock(&c->mu);
    c->cb_future = NULL;
    c->cb_client = false;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
}

void progress_client_free(tsr_client *c)
{
  while (c->pgraphs != NULL) {
    client_pgraph *next = c->pgraphs->next;
    if (c->pgraphs->future != NULL) c->pgraphs->future->pg = NULL;
    pgraph_free(c->pgraphs);
    c->pgraphs = next;
  }
  free(c->cb_groups);
  c->cb_groups = NULL;
}

static void wake_io(tsr_client *c)
{
  uint64_t one = 1;
  ssize_t ignored = write(c->wake_fd, &one, sizeof one);
  (void)ignored;
}

/* ---------- the API ---------- */

TSR_API int tsr_future_progress_get(tsr_future *future, tsr_progress *progress_p)
{
  if (future == NULL || progress_p == NULL)
    return client_fail(TSR_EINVAL, "tsr_future_progress_get: future and progress_p are required");
  tsr_client *c = future->client;
  pthread_mutex_lock(&c->mu);
  subscribe_locked(c);
  tsr_progress p = {0};
  if (future->pg != NULL && !copy_progress(future->pg, &p, &future->poll_groups, &future->cap_poll_groups)) {
    pthread_mutex_unlock(&c->mu);
    return client_fail(TSR_ENOMEM, "tsr_future_progress_get: out of memory");
  }
  pthread_mutex_unlock(&c->mu);
  *progress_p = p;
  return 0;
}

TSR_API int tsr_future_on_progress(tsr_future *future, tsr_progress_fn fn, void *user)
{
  if (future == NULL) return client_fail(TSR_EINVAL, "tsr_future_on_progress: future is NULL");
  tsr_client *c = future->client;
  pthread_mutex_lock(&c->mu);
  client_pgraph *pg = future->pg;
  if (pg != NULL) {
    pg->fut_fn = fn;
    pg->fut_user = user;
    /* the state now, once: a graph final already still gets its final call */
    if (fn != NULL && !pg->fut_final && !pg->fut_pending) pg->fut_pending = true, c->npending++;
  }
  if (fn != NULL) subscribe_locked(c);
  bool on_io = c->io_started && pthread_equal(pthread_self(), c->io);
  while (fn == NULL && c->cb_future == future && !on_io) client_wait_until(c, 0);
  pthread_mutex_unlock(&c->mu);
  if (fn != NULL) wake_io(c);
  return 0;
}

TSR_API int tsr_client_on_progress(tsr_client *client, tsr_progress_fn fn, void *user)
{
  if (client == NULL) return client_fail(TSR_EINVAL, "tsr_client_on_progress: client is NULL");
  pthread_mutex_lock(&client->mu);
  client->cli_fn = fn;
  client->cli_user = user;
  if (fn != NULL) subscribe_locked(client);
  for (client_pgraph *pg = client->pgraphs; fn != NULL && pg != NULL; pg = pg->next) mark_due(client, pg);
  bool on_io = client->io_started && pthread_equal(pthread_self(), client->io);
  while (fn == NULL && client->cb_client && !on_io) client_wait_until(client, 0);
  pthread_mutex_unlock(&client->mu);
  if (fn != NULL) wake_io(client);
  return 0;
}
