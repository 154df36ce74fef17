/* tsr_graph: the task-graph builder and its encoding as submit messages.
 *
 * Invariants: every task's key is unique within the graph (index maps key
 * → task position); params are stored already encoded (one msgpack map,
 * checked at add time); wanted keys are unique (want_index). Nothing is
 * checked against the scheduler here: cycles, unknown ops and missing
 * inputs are its job at submit time (docs/protocol.md).
 *
 * A task's strings (key, op, params, inputs) are copied into the graph's
 * own arena of large blocks and the two key indexes borrow them, so adding
 * a task costs no malloc of its own and destroying a million-task graph
 * frees a few hundred blocks, not millions of strings (tsr_submit destroys
 * the graph inside the submit's time). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Arena blocks: strings are never freed one by one, only with the graph. */
#define GRAPH_BLOCK_BYTES (256u << 10)

typedef struct gblock {
  struct gblock *next;
  size_t used, cap;
  char data[];
} gblock;

typedef struct gtask {
  char *key;
  char *op;
  char *params;         /* one msgpack map, or NULL */
  size_t params_len;
  char **inputs;
  size_t n_inputs;
} gtask;

struct tsr_graph {
  gtask *tasks;
  size_t n, cap;
  tsr_strmap *index;
  char **wants;
  size_t n_wants, cap_wants;
  tsr_strmap *want_index;
  gblock *blocks;       /* the arena; the head is the one being filled */
};

/* size bytes aligned for a pointer, from the arena; NULL on ENOMEM. */
static void *graph_alloc(tsr_graph *g, size_t size)
{
  size = (size + 7u) & ~(size_t)7u;
  gblock *b = g->blocks;
  if (b == NULL || b->cap - b->used < size) {
    size_t cap = size > GRAPH_BLOCK_BYTES / 4 ? size : GRAPH_BLOCK_BYTES;
    b = malloc(sizeof *b + cap);
    if (b == NULL) return NULL;
    b->used = 0;
    b->cap = cap;
    /* an oversized block goes behind the head, which keeps filling */
    if (g->blocks != NULL && cap != GRAPH_BLOCK_BYTES) {
      b->next = g->blocks->next;
      g->blocks->next = b;
    } else {
      b->next = g->blocks;
      g->blocks = b;
    }
  }
  void *p = b->data + b->used;
  b->used += size;
  return p;
}

static char *graph_strdup(tsr_graph *g, const char *s)
{
  size_t len = strlen(s);
  char *copy = graph_alloc(g, len + 1);
  if (copy != NULL) memcpy(copy, s, len + 1);
  return copy;
}

TSR_API int tsr_graph_new(tsr_graph **graph_p)
{
  if (graph_p == NULL) return client_fail(TSR_EINVAL, "tsr_graph_new: graph_p is NULL");
  tsr_graph *g = calloc(1, sizeof *g);
  if (g != NULL) g->index = tsr_strmap_new_borrowed(64);
  if (g != NULL) g->want_index = tsr_strmap_new_borrowed(16);
  if (g == NULL || g->index == NULL || g->want_index == NULL) {
    tsr_graph_destroy(&g);
    return client_fail(TSR_ENOMEM, "tsr_graph_new: out of memory");
  }
  *graph_p = g;
  return 0;
}

TSR_API void tsr_graph_destroy(tsr_graph **graph_p)
{
  if (graph_p == NULL || *graph_p == NULL) return;
  tsr_graph *g = *graph_p;
  free(g->tasks);
  free(g->wants);
  while (g->blocks != NULL) {
    gblock *next = g->blocks->next;
    free(g->blocks);
    g->blocks = next;
  }
  tsr_strmap_destroy(&g->index);
  tsr_strmap_destroy(&g->want_index);
  free(g);
  *graph_p = NULL;
}

static int check_key(const char *what, const char *key)
{
  if (key == NULL || key[0] == '\0') return client_fail(TSR_EINVAL, "%s: empty key", what);
  size_t len = strlen(key);
  if (len > TSR_MAX_KEY_LEN)
    return client_fail(TSR_EINVAL, "%s: key of %zu bytes exceeds the limit of %d", what, len, TSR_MAX_KEY_LEN);
  return 0;
}

/* params must be exactly one complete msgpack map (or absent). */
static int check_params(const char *key, const void *params, size_t len)
{
  if (params == NULL && len > 0) return client_fail(TSR_EINVAL, "task '%s': params is NULL but params_len is %zu", key, len);
  if (params == NULL || len == 0) return 0;
  tsr_errbuf err = {{0}};
  int n = tsr_wire_validate(params, len, &err);
  if (n < 0) return client_fail(TSR_EINVAL, "task '%s': params are not valid msgpack: %s", key, err.text);
  uint8_t b = *(const uint8_t *)params;
  bool is_map = (b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf;
  if (n != 1 || !is_map) return client_fail(TSR_EINVAL, "task '%s': params must be one msgpack map", key);
  return 0;
}

static int check_task(const char *key, const char *op, const void *params, size_t params_len,
                      const char *const *inputs, size_t n_inputs)
{
  int rc = check_key("tsr_graph_add", key);
  if (rc != 0) return rc;
  if (op == NULL || op[0] == '\0') return client_fail(TSR_EINVAL, "task '%s': empty op", key);
  if (strlen(op) > TSR_MAX_NAME_LEN)
    return client_fail(TSR_EINVAL, "task '%s': op name exceeds %d bytes", key, TSR_MAX_NAME_LEN);
  if (n_inputs > TSR_MAX_INPUTS)
    return client_fail(TSR_ELIMIT, "task '%s': %zu inputs exceed the limit of %d", key, n_inputs, TSR_MAX_INPUTS);
  if (n_inputs > 0 && inputs == NULL) return client_fail(TSR_EINVAL, "task '%s': inputs is NULL", key);
  for (size_t i = 0; i < n_inputs; i++) {
    if (inputs[i] == NULL || inputs[i][0] == '\0') return client_fail(TSR_EINVAL, "task '%s': input %zu is empty", key, i);
    if (strlen(inputs[i]) > TSR_MAX_KEY_LEN)
      return client_fail(TSR_EINVAL, "task '%s': input %zu exceeds %d bytes", key, i, TSR_MAX_KEY_LEN);
  }
  return check_params(key, params, params_len);
}

/* Copies the task's strings into the arena; 0 or TSR_ENOMEM (what was
 * copied stays in the arena until the graph goes). */
static int gtask_fill(tsr_graph *g, gtask *t, const char *key, const char *op, const void *params, size_t params_len,
                      const char *const *inputs, size_t n_inputs)
{
  memset(t, 0, sizeof *t);
  t->key = graph_strdup(g, key);
  t->op = graph_strdup(g, op);
  if (params != NULL && params_len > 0) t->params = graph_alloc(g, params_len);
  t->inputs = n_inputs ? graph_alloc(g, n_inputs * sizeof *t->inputs) : NULL;
  bool ok = t->key && t->op && (t->params || !params_len || !params) && (t->inputs || !n_inputs);
  if (ok && t->params) {
    memcpy(t->params, params, params_len);
    t->params_len = params_len;
  }
  for (size_t i = 0; ok && i < n_inputs; i++) {
    t->inputs[i] = graph_strdup(g, inputs[i]);
    t->n_inputs = i + 1;
    ok = t->inputs[i] != NULL;
  }
  return ok ? 0 : TSR_ENOMEM;
}

TSR_API int tsr_graph_add(tsr_graph *graph, const char *key, const char *op, const void *params, size_t params_len,
                          const char *const *inputs, size_t n_inputs)
{
  if (graph == NULL) return client_fail(TSR_EINVAL, "tsr_graph_add: graph is NULL");
  int rc = check_task(key, op, params, params_len, inputs, n_inputs);
  if (rc != 0) return rc;
  if (tsr_strmap_get(graph->index, key, strlen(key), NULL))
    return client_fail(TSR_EEXIST, "task '%s' is already in this graph", key);
  if (graph->n == graph->cap) {
    size_t cap = graph->cap ? graph->cap * 2 : 64;
    gtask *tasks = realloc(graph->tasks, cap * sizeof *tasks);
    if (tasks == NULL) return client_fail(TSR_ENOMEM, "tsr_graph_add: out of memory");
    graph->tasks = tasks;
    graph->cap = cap;
  }
  gtask *t = &graph->tasks[graph->n];
  if (gtask_fill(graph, t, key, op, params, params_len, inputs, n_inputs) != 0 ||
      tsr_strmap_put(graph->index, t->key, strlen(t->key), graph->n) != 0)
    return client_fail(TSR_ENOMEM, "tsr_graph_add: out of memory");
  graph->n++;
  return 0;
}

TSR_API int tsr_graph_add_args(tsr_graph *graph, const char *key, const char *op, const tsr_args *args,
                               const char *const *inputs, size_t n_inputs)
{
  size_t len = 0;
  const void *params = args ? tsr_args_data(args, &len) : NULL;
  if (args != NULL && params == NULL) return client_fail(TSR_ENOMEM, "tsr_graph_add_args: out of memory");
  return tsr_graph_add(graph, key, op, params, len, inputs, n_inputs);
}

TSR_API int tsr_graph_want(tsr_graph *graph, const char *key)
{
  if (graph == NULL) return client_fail(TSR_EINVAL, "tsr_graph_want: graph is NULL");
  int rc = check_key("tsr_graph_want", key);
  if (rc != 0) return rc;
  size_t len = strlen(key);
  if (tsr_strmap_get(graph->want_index, key, len, NULL)) return 0;   /* wanting twice is harmless */
  if (graph->n_wants == graph->cap_wants) {
    size_t cap = graph->cap_wants ? graph->cap_wants * 2 : 16;
    char **wants = realloc(graph->wants, cap * sizeof *wants);
    if (wants == NULL) return client_fail(TSR_ENOMEM, "tsr_graph_want: out of memory");
    graph->wants = wants;
    graph->cap_wants = cap;
  }
  char *copy = graph_strdup(graph, key);
  if (copy == NULL || tsr_strmap_put(graph->want_index, copy, len, graph->n_wants) != 0)
    return client_fail(TSR_ENOMEM, "tsr_graph_want: out of memory");
  graph->wants[graph->n_wants++] = copy;
  return 0;
}

TSR_API size_t tsr_graph_size(const tsr_graph *graph) { return graph ? graph->n : 0; }

int graph_wanted(const tsr_graph *graph, const char ***keys_p, size_t *n_p)
{
  if (graph->n_wants > 0) {
    const char **keys = malloc(graph->n_wants * sizeof *keys);
    if (keys == NULL) return TSR_ENOMEM;
    for (size_t i = 0; i < graph->n_wants; i++) keys[i] = graph->wants[i];
    *keys_p = keys;
    *n_p = graph->n_wants;
    return 0;
  }
  /* No explicit wants: every task that no other task of this graph reads. */
  bool *has_dependent = calloc(graph->n ? graph->n : 1, sizeof *has_dependent);
  const char **keys = malloc((graph->n ? graph->n : 1) * sizeof *keys);
  if (has_dependent == NULL || keys == NULL) {
    free(has_dependent);
    free(keys);
    return TSR_ENOMEM;
  }
  for (size_t i = 0; i < graph->n; i++)
    for (size_t j = 0; j < graph->tasks[i].n_inputs; j++) {
      uint64_t pos;
      const char *in = graph->tasks[i].inputs[j];
      if (tsr_strmap_get(graph->index, in, strlen(in), &pos)) has_dependent[pos] = true;
    }
  size_t n = 0;
  for (size_t i = 0; i < graph->n; i++)
    if (!has_dependent[i]) keys[n++] = graph->tasks[i].key;
  free(has_dependent);
  *keys_p = keys;
  *n_p = n;
  return 0;
}

static void pack_task(msgpack_packer *pk, const gtask *t)
{
  msgpack_pack_map(pk, 2 + (t->params ? 1 : 0) + (t->n_inputs ? 1 : 0));
  tsr_pack_kv_str(pk, "key", t->key);
  tsr_pack_kv_str(pk, "op", t->op);
  if (t->params) {
    tsr_pack_str(pk, "params");
    tsr_pack_raw(pk, t->params, t->params_len);
  }
  if (t->n_inputs) {
    tsr_pack_str(pk, "inputs");
    msgpack_pack_array(pk, t->n_inputs);
    for (size_t i = 0; i < t->n_inputs; i++) tsr_pack_str(pk, t->inputs[i]);
  }
}

/* One submit message with tasks [first, first+count); the last part carries
 * `wants` (explicit, so the client and the scheduler agree on it; left out
 * only when empty, i.e. for a cyclic graph the scheduler will refuse). */
static out_frame *encode_part(const tsr_graph *g, uint64_t graph_id, size_t first, size_t count, bool last,
                              const char **wants, size_t n_wants, bool resend)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "submit", (last && n_wants == 0 ? 3 : 4) + (resend ? 1 : 0));
  tsr_pack_kv_uint(&wb.pk, "graph", graph_id);
  tsr_pack_str(&wb.pk, "tasks");
  msgpack_pack_array(&wb.pk, count);
  for (size_t i = first; i < first + count; i++) pack_task(&wb.pk, &g->tasks[i]);
  if (last && n_wants > 0) {
    tsr_pack_str(&wb.pk, "wants");
    msgpack_pack_array(&wb.pk, n_wants);
    for (size_t i = 0; i < n_wants; i++) tsr_pack_str(&wb.pk, wants[i]);
  } else if (!last) {
    tsr_pack_kv_bool(&wb.pk, "more", true);
  }
  if (resend) tsr_pack_kv_bool(&wb.pk, "resend", true);
  out_frame *f = client_frame_from(&wb);
  tsr_wbuf_free(&wb);
  return f;
}


size_t graph_part_tasks(const tsr_graph *graph, size_t first)
{
  size_t count = 0, weight = 0;
  while (first + count < graph->n && count < CLIENT_SUBMIT_PART_TASKS) {
    weight += 1 + graph->tasks[first + count].n_inputs;
    if (count > 0 && weight > CLIENT_SUBMIT_PART_WEIGHT) break;
    count++;
  }
  return count;
}

out_frame *graph_encode_part(const tsr_graph *graph, uint64_t graph_id, size_t first, size_t count, const char **wants,
                             size_t n_wants, bool resend)
{
  return encode_part(graph, graph_id, first, count, first + count >= graph->n, wants, n_wants, resend);
}
