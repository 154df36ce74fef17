/* Submitting graphs and the futures over their wanted keys.
 *
 * tsr_submit registers the wanted keys *before* the submit leaves, so a
 * key_done that races the `submitted` reply is never missed; on rejection
 * it unregisters them again (the scheduler kept nothing, so no release).
 *
 * tsr_future_wait must stay cheap for a million keys woken once per
 * incoming frame: it scans forward from a cursor (entries before it were
 * DONE) and restarts from 0 only when some key went back to PENDING
 * (client->resets moved); it looks for failures only when a key_erred
 * arrived since its last look (client->errors moved). */
#include <stdlib.h>
#include <string.h>

#include "util/rttrace.h"
#include "internal.h"

static void future_free(tsr_future *f)
{
  free(f->entries);
  free(f->returned);
  free(f->error);
  free(f->poll_groups);
  free(f);
}

/* Drops the future's keys; sends `release` for those nobody else wants
 * when the session is up. Caller holds mu. */
static void future_drop_keys_locked(tsr_client *c, tsr_future *f, bool tell_scheduler)
{
  key_entry **wire = NULL;
  size_t n_wire = 0, cap_wire = 0;
  bool tell = tell_scheduler && c->state == CONN_UP && f->epoch == c->epoch;
  for (size_t i = 0; i < f->n; i++)
    keys_release_locked(c, f->entries[i], tell ? &wire : NULL, &n_wire, &cap_wire);
  f->n = 0;
  if (n_wire > 0) keys_send_release_locked(c, wire, n_wire);
  else free(wire);
}

static int new_future(const tsr_graph *graph, tsr_future **f_p, const char ***wants_p)
{
  size_t n;
  const char **wants;
  if (graph_wanted(graph, &wants, &n) != 0) return client_fail(TSR_ENOMEM, "tsr_submit: out of memory");
  tsr_future *f = calloc(1, sizeof *f);
  if (f != NULL) f->entries = calloc(n ? n : 1, sizeof *f->entries);
  if (f == NULL || f->entries == NULL) {
    free(f);
    free(wants);
    return client_fail(TSR_ENOMEM, "tsr_submit: out of memory");
  }
  f->n = n;
  *f_p = f;
  *wants_p = wants;
  return 0;
}

/* Wanted keys registered per hold of mu: the I/O thread, which needs mu
 * to take the outbox, keeps sending the parts meanwhile. */
#define SUBMIT_ACQUIRE_SLICE 8192

/* Encodes part k outside the lock and queues it, unless the verdict came
 * already (a rejected part, a lost session): then its error. While the
 * session is suspended the part is dropped and the submit marked
 * interrupted: a resumed session gets the whole graph again, and until
 * that resend starts no part of the first pass goes (the scheduler would
 * take a last part after lost ones for a whole graph). */
static int send_part(tsr_client *c, pending_submit *p, const tsr_graph *g, uint64_t graph_id, size_t first,
                     size_t count, const char **wants, size_t n_wants, bool resend)
{
  out_frame *part = graph_encode_part(g, graph_id, first, count, wants, n_wants, resend);
  if (part == NULL) return client_fail(TSR_ENOMEM, "tsr_submit: out of memory encoding the graph");
  pthread_mutex_lock(&c->mu);
  bool done = p->done, up = c->state == CONN_UP;
  bool send = !done && up && (resend || (!p->interrupted && !p->resend));
  if (send) client_enqueue_locked(c, part);
  if (!done && !up) p->interrupted = true;
  pthread_mutex_unlock(&c->mu);
  if (send) return 0;
  client_free_chain(part);
  if (!done) return 0;
  return client_fail(p->rc ? p->rc : TSR_EPROTO, "%s", p->message[0] ? p->message : "submit rejected");
}

/* Registers wants[first, end) as the future's keys f->entries[first..]. */
static int acquire_slice(tsr_client *c, tsr_future *f, const char **wants, size_t first, size_t end)
{
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  for (size_t i = first; i < end && rc == 0; i++) {
    f->entries[i] = keys_acquire_locked(c, wants[i]);
    if (f->entries[i] == NULL) rc = client_fail(TSR_ENOMEM, "tsr_submit: out of memory");
    else f->n = i + 1;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* The submission itself, pipelined: parts leave as they are encoded (the
 * scheduler receives part k while part k+1 is encoded), then the wanted
 * keys are registered and only then the last part goes, so no key_done
 * can arrive before its key is known; then waits for the verdict. On
 * failure the future holds no key. */
static int submit_parts(tsr_client *c, tsr_future *f, const tsr_graph *g, const char **wants, uint64_t graph_id)
{
  size_t n = f->n, total = tsr_graph_size(g), first = 0, count = graph_part_tasks(g, 0);
  pending_submit p = {.graph = graph_id};
  f->n = 0;
  pthread_mutex_lock(&c->mu);
  int rc = client_check_up_locked(c);
  if (rc == 0) {
    f->epoch = c->epoch;
    p.next = c->submits;
    c->submits = &p;
  }
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) return rc;
  pthread_mutex_lock(&c->mu);
  tsr_strmap_reserve(c->keys, n);   /* best effort: puts grow the map anyway */
  pthread_mutex_unlock(&c->mu);
  while (rc == 0 && first + count < total) {
    rc = send_part(c, &p, g, graph_id, first, count, wants, n, false);
    first += count;
    count = graph_part_tasks(g, first);
  }
  for (size_t i = 0; rc == 0 && i < n; i += SUBMIT_ACQUIRE_SLICE)
    rc = acquire_slice(c, f, wants, i, n - i < SUBMIT_ACQUIRE_SLICE ? n : i + SUBMIT_ACQUIRE_SLICE);
  if (rc == 0) rc = send_part(c, &p, g, graph_id, first, count, wants, n, false);
  pthread_mutex_lock(&c->mu);
  uint64_t spin = client_spin_until(c);
  while (rc == 0 && !p.done) {
    if (p.resend) {   /* a resumed session: the graph again, every part */
      p.resend = false;
      client_log(c, TSR_LOG_INFO, "graph %llu: sending it again, its parts may be lost with the old connection",
                 (unsigned long long)graph_id);
      pthread_mutex_unlock(&c->mu);
      for (size_t s = 0, k = graph_part_tasks(g, 0); rc == 0; s += k, k = graph_part_tasks(g, s)) {
        rc = send_part(c, &p, g, graph_id, s, k, wants, n, true);
        if (s + k >= total) break;
      }
      pthread_mutex_lock(&c->mu);
      continue;
    }
    client_wait_spin(c, 0, spin);
  }
  pending_submit **pp = &c->submits;
  while (*pp != &p) pp = &(*pp)->next;
  *pp = p.next;
  if (rc == 0 && p.rc != 0) rc = client_fail(p.rc, "%s", p.message[0] ? p.message : tsr_strerror(p.rc));
  if (rc != 0) future_drop_keys_locked(c, f, false);
  else
    client_log(c, TSR_LOG_DEBUG, "graph %llu accepted: %llu new tasks, %zu wanted keys", (unsigned long long)graph_id,
               (unsigned long long)p.tasks, f->n);
  if (rc == 0) {
    c->handles++;
    progress_graph_new_locked(c, f, graph_id, p.tasks);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

TSR_API int tsr_submit(tsr_client *client, tsr_graph **graph_p, tsr_future **future_p)
{
  if (client == NULL || graph_p == NULL || *graph_p == NULL || future_p == NULL)
    return client_fail(TSR_EINVAL, "tsr_submit: client, graph and future_p are required");
  tsr_rt_stamp("c.submit");
  const char **wants = NULL;
  tsr_future *f = NULL;
  int rc = new_future(*graph_p, &f, &wants);
  if (rc != 0) return rc;
  /* No wanted key in a non-empty graph means every task has a dependent:
   * a cycle, which the scheduler names (TSR_ECYCLE) better than we could. */
  if (f->n == 0 && tsr_graph_size(*graph_p) == 0) {
    free(wants);
    future_free(f);
    return client_fail(TSR_EINVAL, "tsr_submit: the graph is empty and wants no key");
  }
  pthread_mutex_lock(&client->mu);
  uint64_t graph_id = client->next_graph++;
  pthread_mutex_unlock(&client->mu);
  rc = submit_parts(client, f, *graph_p, wants, graph_id);
  free(wants);
  if (rc != 0) {
    future_free(f);
    return rc;
  }
  f->client = client;
  tsr_graph_destroy(graph_p);
  *future_p = f;
  tsr_rt_stamp("c.submit_ret");
  return 0;
}

/* Formats the first failure once; later calls return the same text. The
 * future is logically const: this only memoizes. Caller holds mu. */
static const char *future_error_locked(tsr_future *f)
{
  if (f->error != NULL) return f->error;
  for (size_t i = 0; i < f->n; i++) {
    key_entry *e = f->entries[i];
    if (e->state != KEY_ERRED) continue;
    const char *msg = e->error ? e->error : "failed";
    /* Scheduler messages may already name the key. */
    size_t len = strlen(e->key) + strlen(msg) + 16;
    f->error = malloc(len);
    if (f->error == NULL) return NULL;
    if (strncmp(msg, "key '", 5) == 0) snprintf(f->error, len, "%s", msg);
    else snprintf(f->error, len, "key '%s': %s", e->key, msg);
    return f->error;
  }
  return NULL;
}

/* The failures any look at the future reports first: a closed client, a
 * lost session, an erred key. 0 when none. Caller holds mu. */
static int future_failed_locked(tsr_client *c, tsr_future *f)
{
  if (c->state == CONN_CLOSED) return client_fail(TSR_ECLOSED, "the client is closed");
  if (f->epoch != c->epoch)
    return client_fail(TSR_ECONN, "lost the scheduler at %s: %s", c->address, c->lost_msg);
  if (f->seen_errors != c->errors || f->error != NULL) {
    f->seen_errors = c->errors;
    for (size_t i = 0; i < f->n; i++)
      if (f->entries[i]->state == KEY_ERRED) {
        future_error_locked(f);
        return client_fail(TSR_ETASK, "%s", f->error ? f->error : "a task failed");
      }
  }
  return 0;
}

/* One look at the future. Returns 0 (all done), 1 (keep waiting), or an
 * error with this thread's message set. Caller holds mu. */
static int future_check_locked(tsr_client *c, tsr_future *f)
{
  int rc = future_failed_locked(c, f);
  if (rc != 0) return rc;
  if (f->seen_resets != c->resets) {
    f->seen_resets = c->resets;
    f->cursor = 0;
  }
  while (f->cursor < f->n && f->entries[f->cursor]->state == KEY_DONE) f->cursor++;
  return f->cursor == f->n ? 0 : 1;
}

TSR_API int tsr_future_wait(tsr_future *future, int timeout_ms)
{
  if (future == NULL) return client_fail(TSR_EINVAL, "tsr_future_wait: future is NULL");
  tsr_client *c = future->client;
  uint64_t deadline = client_deadline(timeout_ms);
  pthread_mutex_lock(&c->mu);
  int rc;
  uint64_t spin = client_spin_until(c);
  while ((rc = future_check_locked(c, future)) == 1)
    if (!client_wait_spin(c, deadline, spin)) break;
  if (rc == 1) {
    size_t done = 0;
    for (size_t i = 0; i < future->n; i++) done += future->entries[i]->state == KEY_DONE;
    rc = client_fail(TSR_ETIMEDOUT, "%zu of %zu keys done after %d ms", done, future->n, timeout_ms);
  }
  pthread_mutex_unlock(&c->mu);
  tsr_rt_stamp("c.wait_ret");
  return rc;
}

/* One look for a done key not yet returned: 0 with *index_p, 1 (keep
 * waiting), or an error. The scan starts at the first unreturned entry, so
 * keys that finish roughly in order cost O(1) each. Caller holds mu. */
static int next_done_locked(tsr_client *c, tsr_future *f, size_t *index_p)
{
  int rc = future_failed_locked(c, f);
  if (rc != 0) return rc;
  while (f->next_unreturned < f->n && f->returned[f->next_unreturned]) f->next_unreturned++;
  if (f->next_unreturned == f->n)
    return client_fail(TSR_ENOTFOUND, "tsr_future_next_done: all %zu keys were returned already", f->n);
  for (size_t i = f->next_unreturned; i < f->n; i++)
    if (!f->returned[i] && f->entries[i]->state == KEY_DONE) {
      f->returned[i] = 1;
      *index_p = i;
      return 0;
    }
  return 1;
}

TSR_API int tsr_future_next_done(tsr_future *future, int timeout_ms, size_t *index_p)
{
  if (future == NULL || index_p == NULL) return client_fail(TSR_EINVAL, "tsr_future_next_done: NULL argument");
  tsr_client *c = future->client;
  uint64_t deadline = client_deadline(timeout_ms);
  pthread_mutex_lock(&c->mu);
  if (future->returned == NULL && (future->returned = calloc(future->n ? future->n : 1, 1)) == NULL) {
    pthread_mutex_unlock(&c->mu);
    return client_fail(TSR_ENOMEM, "tsr_future_next_done: out of memory");
  }
  int rc;
  uint64_t spin = client_spin_until(c);
  while ((rc = next_done_locked(c, future, index_p)) == 1)
    if (!client_wait_spin(c, deadline, spin)) break;
  if (rc == 1) rc = client_fail(TSR_ETIMEDOUT, "no further key of the future was done after %d ms", timeout_ms);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

TSR_API void tsr_future_progress(const tsr_future *future, size_t *done_p, size_t *total_p)
{
  size_t done = 0, total = 0;
  if (future != NULL) {
    pthread_mutex_lock(&future->client->mu);
    for (size_t i = 0; i < future->n; i++) done += future->entries[i]->state == KEY_DONE;
    total = future->n;
    pthread_mutex_unlock(&future->client->mu);
  }
  if (done_p != NULL) *done_p = done;
  if (total_p != NULL) *total_p = total;
}

TSR_API const char *tsr_future_error(const tsr_future *future)
{
  if (future == NULL) return NULL;
  tsr_future *f = (tsr_future *)future;
  if (f->error != NULL) return f->error;
  pthread_mutex_lock(&f->client->mu);
  const char *text = future_error_locked(f);
  pthread_mutex_unlock(&f->client->mu);
  return text;
}

TSR_API size_t tsr_future_count(const tsr_future *future) { return future ? future->n : 0; }

TSR_API const char *tsr_future_key(const tsr_future *future, size_t i)
{
  if (future == NULL || i >= future->n) return NULL;
  return future->entries[i]->key;
}

TSR_API void tsr_future_release(tsr_future **future_p)
{
  if (future_p == NULL || *future_p == NULL) return;
  tsr_future *f = *future_p;
  tsr_client *c = f->client;
  pthread_mutex_lock(&c->mu);
  future_drop_keys_locked(c, f, true);
  progress_graph_drop_locked(c, f);
  bool last = client_unref_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (last) client_free(c);
  future_free(f);
  *future_p = NULL;
}
