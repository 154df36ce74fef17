/* Unit tests of fused tasks on the worker (worker/fused.c), without
 * sockets: `compute` messages with task_op "fused" decoded as the session
 * decodes them and run with tsr_wtask_run; the output, the intermediates
 * (never in the store, all freed), a part's failure naming its key and op,
 * and malformed parts rejected naming the field. */
#include <stdatomic.h>

#include "executor.h"
#include "kit.h"
#include "store.h"
#include "task.h"

typedef struct part {
  const char *key, *op;
  const char *param;       /* one float param (NULL: none), or "shape" for [8] + seed */
  double value;
  int nrefs;
  uint32_t refs[4];
} part;

/* A compute of a fused task with the given inputs (keys) and parts. */
static char *pack_fused(size_t *len_p, const char *key, const char **inputs, size_t n_in, const part *parts, size_t np)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "compute", 6);
  tsr_pack_kv_uint(&wb.pk, "id", 9);
  tsr_pack_kv_str(&wb.pk, "key", key);
  tsr_pack_kv_str(&wb.pk, "task_op", "fused");
  tsr_pack_str(&wb.pk, "params");
  msgpack_pack_map(&wb.pk, 1);
  tsr_pack_str(&wb.pk, "parts");
  msgpack_pack_array(&wb.pk, np);
  for (size_t j = 0; j < np; j++) {
    msgpack_pack_map(&wb.pk, 4);
    tsr_pack_kv_str(&wb.pk, "key", parts[j].key);
    tsr_pack_kv_str(&wb.pk, "op", parts[j].op);
    tsr_pack_str(&wb.pk, "params");
    if (parts[j].param == NULL) {
      msgpack_pack_map(&wb.pk, 0);
    } else if (strcmp(parts[j].param, "shape") == 0) {
      msgpack_pack_map(&wb.pk, 2);
      tsr_pack_kv_int(&wb.pk, "seed", (int64_t)parts[j].value);
      tsr_pack_str(&wb.pk, "shape");
      msgpack_pack_array(&wb.pk, 1);
      msgpack_pack_int64(&wb.pk, 8);
    } else {
      msgpack_pack_map(&wb.pk, 1);
      tsr_pack_str(&wb.pk, parts[j].param);
      msgpack_pack_double(&wb.pk, parts[j].value);
    }
    tsr_pack_str(&wb.pk, "inputs");
    msgpack_pack_array(&wb.pk, (size_t)parts[j].nrefs);
    for (int i = 0; i < parts[j].nrefs; i++) msgpack_pack_uint32(&wb.pk, parts[j].refs[i]);
  }
  tsr_pack_str(&wb.pk, "inputs");
  msgpack_pack_array(&wb.pk, n_in);
  for (size_t i = 0; i < n_in; i++) {
    msgpack_pack_array(&wb.pk, 3);
    tsr_pack_str(&wb.pk, inputs[i]);
    tsr_pack_str(&wb.pk, "");
    msgpack_pack_uint64(&wb.pk, 800);
  }
  tsr_pack_kv_int(&wb.pk, "priority", 0);
  return tsr_wbuf_release(&wb, len_p);
}

static int decode(const char *key, const char **inputs, size_t n_in, const part *parts, size_t np, tsr_wstore *store,
                  tsr_wtask **task_p, tsr_errbuf *err)
{
  size_t len;
  char *bytes = pack_fused(&len, key, inputs, n_in, parts, np);
  tsr_reader rd;
  const msgpack_object *map;
  char op[TSR_MAX_NAME_LEN + 1];
  int rc = tsr_reader_init(&rd, bytes, len, err);
  if (rc == 0 && tsr_reader_next(&rd, &map, op, err) == 1) rc = tsr_wtask_decode(map, task_p, err);
  tsr_reader_done(&rd);
  free(bytes);
  if (rc == 0) (*task_p)->epoch = tsr_wstore_epoch(store);
  return rc;
}

/* x = 0, 1, ..., 99 (f64) in the store. */
static tsr_wstore *store_with_x(void)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_meta meta = {TSR_F64, 1, {100}};
  double *data = malloc(100 * sizeof *data);
  for (int i = 0; i < 100; i++) data[i] = i;
  tsr_chunk *chunk = NULL;
  tsr_chunk_new_malloc(store, "x", &meta, data, 100 * sizeof *data, &chunk);
  tsr_wstore_put(store, chunk, tsr_wstore_epoch(store), NULL);
  tsr_chunk_unref(&chunk);
  return store;
}

static double stored_f64(tsr_wstore *store, const char *key)
{
  tsr_chunk *chunk = NULL;
  if (tsr_wstore_get(store, key, &chunk) != 0) return -1;
  double v = *(double *)chunk->data;
  tsr_chunk_unref(&chunk);
  return v;
}

TEST(chain_runs_without_storing_intermediates)
{
  tsr_wstore *store = store_with_x();
  const char *in[] = {"x"};
  /* values: 0 = x, 1 = a, 2 = b, 3 = c */
  const part parts[] = {{"a", "scale", "factor", 2, 1, {0}}, {"b", "scale", "factor", 3, 1, {1}}, {"c", "sum", NULL, 0, 1, {2}}};
  tsr_wtask *t = NULL;
  tsr_errbuf err;
  ASSERT_OK(decode("c", in, 1, parts, 3, store, &t, &err));
  ASSERT_EQ(t->n_parts, 3);
  tsr_wtask_run(t, store, NULL, "w0");
  if (t->status != TSR_WTASK_DONE) fprintf(stderr, "  %s\n", t->message);
  ASSERT_EQ(t->status, TSR_WTASK_DONE);
  ASSERT_EQ(t->out_meta.ndim, 0);
  tsr_wtask_free(&t);
  ASSERT_TRUE(stored_f64(store, "c") == 6 * 4950.0);  /* sum of 6i */
  ASSERT_TRUE(!tsr_wstore_has(store, "a"));
  ASSERT_TRUE(!tsr_wstore_has(store, "b"));
  ASSERT_EQ(tsr_wstore_count(store), 2);
  ASSERT_EQ(tsr_wstore_live_chunks(store), 2);  /* the intermediates are gone */
  tsr_wstore_destroy(&store);
}

/* A fan-in of creation ops gives the bytes the unfused tasks give. */
TEST(fan_in_matches_the_unfused_tasks)
{
  tsr_wstore *store = tsr_wstore_new(0);
  const part fused[] = {{"l0", "random_uniform", "shape", 1, 0, {0}}, {"l1", "random_uniform", "shape", 2, 0, {0}},
                        {"r", "add", NULL, 0, 2, {0, 1}}};
  tsr_wtask *t = NULL;
  tsr_errbuf err;
  ASSERT_OK(decode("r", NULL, 0, fused, 3, store, &t, &err));
  tsr_wtask_run(t, store, NULL, "w0");
  ASSERT_EQ(t->status, TSR_WTASK_DONE);
  tsr_wtask_free(&t);
  const part l0[] = {{"u0", "random_uniform", "shape", 1, 0, {0}}}, l1[] = {{"u1", "random_uniform", "shape", 2, 0, {0}}};
  const part sum[] = {{"s", "add", NULL, 0, 2, {0, 1}}};
  const char *in[] = {"u0", "u1"};
  ASSERT_OK(decode("u0", NULL, 0, l0, 1, store, &t, &err));
  tsr_wtask_run(t, store, NULL, "w0");
  tsr_wtask_free(&t);
  ASSERT_OK(decode("u1", NULL, 0, l1, 1, store, &t, &err));
  tsr_wtask_run(t, store, NULL, "w0");
  tsr_wtask_free(&t);
  ASSERT_OK(decode("s", in, 2, sum, 1, store, &t, &err));
  tsr_wtask_run(t, store, NULL, "w0");
  ASSERT_EQ(t->status, TSR_WTASK_DONE);
  tsr_wtask_free(&t);
  tsr_chunk *a = NULL, *b = NULL;
  ASSERT_OK(tsr_wstore_get(store, "r", &a));
  ASSERT_OK(tsr_wstore_get(store, "s", &b));
  ASSERT_EQ(a->nbytes, 64);
  ASSERT_TRUE(a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0);
  ASSERT_TRUE(!a->recompute);  /* a fused output is spilled, not dropped */
  tsr_chunk_unref(&a);
  tsr_chunk_unref(&b);
  tsr_wstore_destroy(&store);
}

TEST(a_failing_part_fails_the_task_naming_it)
{
  tsr_ops_init(true);
  tsr_wstore *store = store_with_x();
  const char *in[] = {"x"};
  const part parts[] = {{"a", "scale", "factor", 2, 1, {0}}, {"b", "fail", NULL, 0, 1, {1}}, {"c", "sum", NULL, 0, 1, {2}}};
  tsr_wtask *t = NULL;
  tsr_errbuf err;
  ASSERT_OK(decode("c", in, 1, parts, 3, store, &t, &err));
  tsr_wtask_run(t, store, NULL, "w0");
  ASSERT_EQ(t->status, TSR_WTASK_ERRED);
  ASSERT_TRUE(strstr(t->message, "part 'b' (op fail)") != NULL);
  tsr_wtask_free(&t);
  ASSERT_TRUE(!tsr_wstore_has(store, "c"));
  ASSERT_EQ(tsr_wstore_live_chunks(store), 1);
  /* an op this worker does not have, named with its part */
  const part unknown[] = {{"a", "no_such_op", NULL, 0, 1, {0}}, {"c", "sum", NULL, 0, 1, {1}}};
  ASSERT_OK(decode("c", in, 1, unknown, 2, store, &t, &err));
  tsr_wtask_run(t, store, NULL, "w0");
  ASSERT_EQ(t->status, TSR_WTASK_ERRED);
  ASSERT_TRUE(strstr(t->message, "part 'a'") != NULL && strstr(t->message, "unknown op 'no_such_op'") != NULL);
  tsr_wtask_free(&t);
  tsr_ops_init(false);
  tsr_wstore_destroy(&store);
}

TEST(malformed_parts_are_rejected_naming_the_field)
{
  tsr_wstore *store = tsr_wstore_new(0);
  const char *in[] = {"x"};
  tsr_wtask *t = NULL;
  tsr_errbuf err;
  const part forward[] = {{"a", "sum", NULL, 0, 1, {2}}, {"c", "sum", NULL, 0, 1, {1}}};
  ASSERT_EQ(decode("c", in, 1, forward, 2, store, &t, &err), TSR_EPROTO);
  ASSERT_TRUE(strstr(err.text, "'params.parts[0].inputs[0]'") != NULL);
  const part last[] = {{"a", "sum", NULL, 0, 1, {0}}, {"b", "sum", NULL, 0, 1, {1}}};
  ASSERT_EQ(decode("c", in, 1, last, 2, store, &t, &err), TSR_EPROTO);
  ASSERT_TRUE(strstr(err.text, "'params.parts[1].key'") != NULL);
  const part nested[] = {{"c", "fused", NULL, 0, 1, {0}}};
  ASSERT_EQ(decode("c", in, 1, nested, 1, store, &t, &err), TSR_EPROTO);
  ASSERT_TRUE(strstr(err.text, "'params.parts[0].op'") != NULL);
  const part noop_name[] = {{"c", "", NULL, 0, 1, {0}}};
  ASSERT_EQ(decode("c", in, 1, noop_name, 1, store, &t, &err), TSR_EPROTO);
  ASSERT_TRUE(strstr(err.text, "'params.parts[0].op'") != NULL);
  ASSERT_EQ(decode("c", in, 1, NULL, 0, store, &t, &err), TSR_EPROTO);
  ASSERT_TRUE(strstr(err.text, "'params.parts'") != NULL);
  ASSERT_TRUE(t == NULL);
  tsr_wstore_destroy(&store);
}

int main(void)
{
  tsr_log_set_level(TSR_LOG_ERROR);
  tsr_ops_init(false);
  RUN(chain_runs_without_storing_intermediates);
  RUN(fan_in_matches_the_unfused_tasks);
  RUN(a_failing_part_fails_the_task_naming_it);
  RUN(malformed_parts_are_rejected_naming_the_field);
  return kit_summary();
}
