/* Tasks: decoding a `compute` message, and the executor's priority queue. */
#include "task.h"

#include "fused.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_n(const char *s, size_t len)
{
  char *out = malloc(len + 1);
  if (out == NULL) return NULL;
  memcpy(out, s, len);
  out[len] = '\0';
  return out;
}

int tsr_wtask_ident(const msgpack_object *map, uint64_t *id_p, char key_buf[TSR_MAX_KEY_LEN + 1])
{
  uint64_t id;
  int rc = tsr_wire_uint(map, "id", &id, NULL);
  if (rc == 0) rc = tsr_wire_strcpy(map, "key", key_buf, TSR_MAX_KEY_LEN + 1, NULL);
  if (rc == 0 && key_buf[0] == '\0') rc = TSR_EPROTO;
  if (rc == 0) *id_p = id;
  return rc;
}

/* One input: [key, from, nbytes] as protocol.md says. A map {key, from,
 * nbytes} is accepted too (a scheduler that encodes records as maps). */
static int decode_input(const msgpack_object *obj, size_t i, tsr_winput *in, tsr_errbuf *err)
{
  const char *key, *from;
  size_t key_len, from_len;
  uint64_t nbytes = 0;
  tsr_errbuf why = {{0}};
  int rc;
  if (obj->type == MSGPACK_OBJECT_ARRAY && obj->via.array.size >= 2) {
    const msgpack_object *item = obj->via.array.ptr;
    rc = tsr_obj_str(&item[0], TSR_MAX_KEY_LEN, &key, &key_len, &why);
    if (rc == 0) rc = tsr_obj_str(&item[1], TSR_MAX_NAME_LEN, &from, &from_len, &why);
    if (rc == 0 && obj->via.array.size >= 3) rc = tsr_obj_uint(&item[2], &nbytes, &why);
  } else if (obj->type == MSGPACK_OBJECT_MAP) {
    rc = tsr_wire_str(obj, "key", TSR_MAX_KEY_LEN, &key, &key_len, &why);
    if (rc == 0) rc = tsr_wire_str(obj, "from", TSR_MAX_NAME_LEN, &from, &from_len, &why);
    if (rc == 0) rc = tsr_wire_opt_uint(obj, "nbytes", 0, &nbytes, &why);
  } else {
    return tsr_fail(err, TSR_EPROTO, "input %zu must be [key, from, nbytes]", i);
  }
  if (rc != 0) return tsr_fail(err, TSR_EPROTO, "input %zu: %s", i, why.text);
  if (key_len == 0) return tsr_fail(err, TSR_EPROTO, "input %zu: empty key", i);
  in->key = dup_n(key, key_len);
  in->from = dup_n(from, from_len);
  in->nbytes = nbytes;
  return in->key && in->from ? 0 : TSR_ENOMEM;
}

static int decode_inputs(const msgpack_object *map, tsr_wtask *task, tsr_errbuf *err)
{
  const msgpack_object *items;
  size_t n;
  int rc = tsr_wire_opt_array(map, "inputs", TSR_MAX_INPUTS, &items, &n, err);
  if (rc != 0 || n == 0) return rc;
  task->inputs = calloc(n, sizeof *task->inputs);
  if (task->inputs == NULL) return TSR_ENOMEM;
  task->n_inputs = n;
  for (size_t i = 0; i < n && rc == 0; i++) rc = decode_input(&items[i], i, &task->inputs[i], err);
  return rc;
}

static int decode_body(const msgpack_object *map, tsr_wtask *task, tsr_errbuf *err)
{
  const char *key;
  size_t key_len;
  int rc = tsr_wire_uint(map, "id", &task->id, err);
  if (rc == 0) rc = tsr_wire_str(map, "key", TSR_MAX_KEY_LEN, &key, &key_len, err);
  if (rc == 0 && key_len == 0) rc = tsr_fail(err, TSR_EPROTO, "field 'key' must not be empty");
  if (rc == 0 && (task->key = dup_n(key, key_len)) == NULL) rc = TSR_ENOMEM;
  const char *op;
  size_t op_len;
  if (rc == 0) rc = tsr_wire_str(map, "task_op", TSR_MAX_NAME_LEN, &op, &op_len, err);
  if (rc == 0 && (task->op_name = dup_n(op, op_len)) == NULL) rc = TSR_ENOMEM;
  if (rc == 0) rc = tsr_wire_opt_int(map, "priority", 0, &task->priority, err);
  bool recompute = false;
  if (rc == 0 && tsr_wire_field(map, "recompute") != NULL) {
    rc = tsr_wire_opt_bool(map, "recompute", false, &recompute, err);
    task->recompute = recompute ? TSR_WTASK_RECOMPUTE_DROP : TSR_WTASK_RECOMPUTE_SPILL;
  }
  bool awaited = true;
  if (rc == 0) rc = tsr_wire_opt_bool(map, "awaited", true, &awaited, err);
  task->unawaited = !awaited;
  /* A fused task's params hold its parts, whose refs need the inputs. */
  bool fused = rc == 0 && strcmp(task->op_name, "fused") == 0;
  if (rc == 0 && !fused) rc = tsr_wire_params(tsr_wire_field(map, "params"), &task->params, err);
  if (rc == 0) rc = decode_inputs(map, task, err);
  if (rc == 0 && fused) rc = tsr_wfused_decode(tsr_wire_field(map, "params"), task, err);
  return rc;
}

int tsr_wtask_decode(const msgpack_object *map, tsr_wtask **task_p, tsr_errbuf *err)
{
  tsr_wtask *task = calloc(1, sizeof *task);
  if (task == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory decoding a compute");
  atomic_init(&task->cancelled, false);
  int rc = decode_body(map, task, err);
  if (rc == TSR_ENOMEM) tsr_fail(err, rc, "out of memory decoding a compute");
  if (rc != 0) {
    tsr_wtask_free(&task);
    return rc;
  }
  task->op = tsr_op_find(task->op_name);
  *task_p = task;
  return 0;
}

void tsr_wtask_erred(tsr_wtask *task, const char *fmt, ...)
{
  char text[TSR_ERRMSG_LEN + TSR_MAX_NAME_LEN + 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  free(task->message);
  task->message = strdup(text);
  task->status = TSR_WTASK_ERRED;
}

void tsr_wtask_free(tsr_wtask **task_p)
{
  if (task_p == NULL || *task_p == NULL) return;
  tsr_wtask *task = *task_p;
  for (size_t i = 0; i < task->n_inputs; i++) {
    free(task->inputs[i].key);
    free(task->inputs[i].from);
  }
  free(task->inputs);
  tsr_wfused_free(task);
  tsr_params_clear(&task->params);
  free(task->message);
  free(task->op_name);
  free(task->key);
  free(task);
  *task_p = NULL;
}

/* ---------- the priority queue ---------- */

struct tsr_wqueue {
  pthread_mutex_t lock;
  pthread_cond_t ready;
  tsr_wtask **heap;
  size_t n, cap;
  uint64_t next_seq;
  bool closed;
};

tsr_wqueue *tsr_wqueue_new(void)
{
  tsr_wqueue *q = calloc(1, sizeof *q);
  if (q == NULL) return NULL;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->ready, NULL);
  return q;
}

void tsr_wqueue_destroy(tsr_wqueue **queue_p)
{
  if (queue_p == NULL || *queue_p == NULL) return;
  tsr_wqueue *q = *queue_p;
  for (size_t i = 0; i < q->n; i++) tsr_wtask_free(&q->heap[i]);
  free(q->heap);
  pthread_cond_destroy(&q->ready);
  pthread_mutex_destroy(&q->lock);
  free(q);
  *queue_p = NULL;
}

static bool before(const tsr_wtask *a, const tsr_wtask *b)
{
  return a->priority != b->priority ? a->priority < b->priority : a->seq < b->seq;
}

static void sift_up(tsr_wtask **h, size_t i)
{
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!before(h[i], h[parent])) break;
    tsr_wtask *t = h[i];
    h[i] = h[parent];
    h[parent] = t;
    i = parent;
  }
}

static void sift_down(tsr_wtask **h, size_t n, size_t i)
{
  for (;;) {
    size_t best = i, l = 2 * i + 1, r = l + 1;
    if (l < n && before(h[l], h[best])) best = l;
    if (r < n && before(h[r], h[best])) best = r;
    if (best == i) return;
    tsr_wtask *t = h[i];
    h[i] = h[best];
    h[best] = t;
    i = best;
  }
}

int tsr_wqueue_push(tsr_wqueue *q, tsr_wtask *task)
{
  pthread_mutex_lock(&q->lock);
  if (q->n == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 64;
    tsr_wtask **heap = realloc(q->heap, cap * sizeof *heap);
    if (heap == NULL) {
      pthread_mutex_unlock(&q->lock);
      return TSR_ENOMEM;
    }
    q->heap = heap;
    q->cap = cap;
  }
  task->seq = q->next_seq++;
  q->heap[q->n] = task;
  sift_up(q->heap, q->n++);
  pthread_cond_signal(&q->ready);
  pthread_mutex_unlock(&q->lock);
  return 0;
}

static tsr_wtask *take_top(tsr_wqueue *q)
{
  tsr_wtask *top = q->heap[0];
  q->heap[0] = q->heap[--q->n];
  sift_down(q->heap, q->n, 0);
  return top;
}

tsr_wtask *tsr_wqueue_pop(tsr_wqueue *q)
{
  pthread_mutex_lock(&q->lock);
  while (q->n == 0 && !q->closed) pthread_cond_wait(&q->ready, &q->lock);
  tsr_wtask *task = q->closed ? NULL : take_top(q);
  pthread_mutex_unlock(&q->lock);
  return task;
}

tsr_wtask *tsr_wqueue_trypop(tsr_wqueue *q)
{
  pthread_mutex_lock(&q->lock);
  tsr_wtask *task = q->n > 0 ? take_top(q) : NULL;
  pthread_mutex_unlock(&q->lock);
  return task;
}

void tsr_wqueue_close(tsr_wqueue *q)
{
  pthread_mutex_lock(&q->lock);
  q->closed = true;
  pthread_cond_broadcast(&q->ready);
  pthread_mutex_unlock(&q->lock);
}

size_t tsr_wqueue_length(tsr_wqueue *q)
{
  pthread_mutex_lock(&q->lock);
  size_t n = q->n;
  pthread_mutex_unlock(&q->lock);
  return n;
}
