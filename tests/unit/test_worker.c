/* Unit tests of the worker library: the chunk store (refcounts, frees while
 * referenced, accounting, epochs), the compute decoder, the priority queue,
 * and the executor running real registry ops, both synchronously
 * (tsr_wtask_run, no sockets) and as a pool (inproc completions, an input
 * fetched from a data-plane server in this thread). */
#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>
#include <zmq.h>

#include "executor.h"
#include "kit.h"
#include "store.h"
#include "task.h"

/* ---------- helpers ---------- */

static tsr_chunk *make_chunk(tsr_wstore *store, const char *key, int64_t n)
{
  tsr_meta meta = {TSR_F64, 1, {n}};
  double *data = malloc((size_t)n * sizeof *data + 1);
  for (int64_t i = 0; i < n; i++) data[i] = (double)i;
  tsr_chunk *chunk = NULL;
  if (tsr_chunk_new_malloc(store, key, &meta, data, (size_t)n * sizeof *data, &chunk) != 0) free(data);
  return chunk;
}

/* Builds a compute message; inputs as [key, from, nbytes] triples. */
static char *pack_compute(size_t *len_p, const char *id_str, uint64_t id, const char *key, const char *op,
                          const char *params_json_like, const char **in_keys, size_t n_in, int64_t priority)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "compute", 7);
  if (id_str)
    tsr_pack_kv_str(&wb.pk, "id", id_str);
  else
    tsr_pack_kv_uint(&wb.pk, "id", id);
  tsr_pack_kv_str(&wb.pk, "key", key);
  tsr_pack_kv_str(&wb.pk, "task_op", op);
  tsr_pack_str(&wb.pk, "params");
  /* params_json_like: "seed=7;n=100" style, ints only, plus shape from n */
  if (params_json_like == NULL) {
    msgpack_pack_map(&wb.pk, 0);
  } else {
    int64_t seed = 0, n = 0;
    sscanf(params_json_like, "seed=%lld;n=%lld", (long long *)&seed, (long long *)&n);
    msgpack_pack_map(&wb.pk, 2);
    tsr_pack_kv_int(&wb.pk, "seed", seed);
    tsr_pack_str(&wb.pk, "shape");
    msgpack_pack_array(&wb.pk, 1);
    msgpack_pack_int64(&wb.pk, n);
  }
  tsr_pack_str(&wb.pk, "inputs");
  msgpack_pack_array(&wb.pk, n_in);
  for (size_t i = 0; i < n_in; i++) {
    msgpack_pack_array(&wb.pk, 3);
    tsr_pack_str(&wb.pk, in_keys[i]);
    tsr_pack_str(&wb.pk, "tcp://127.0.0.1:1");
    msgpack_pack_uint64(&wb.pk, 8);
  }
  tsr_pack_kv_int(&wb.pk, "priority", priority);
  return tsr_wbuf_release(&wb, len_p);
}

static int decode_one(const char *bytes, size_t len, tsr_wtask **task_p, tsr_errbuf *err, uint64_t *id_p, char *key)
{
  tsr_reader rd;
  const msgpack_object *map;
  char op[TSR_MAX_NAME_LEN + 1];
  int rc = tsr_reader_init(&rd, bytes, len, err);
  if (rc == 0 && tsr_reader_next(&rd, &map, op, err) == 1) {
    rc = tsr_wtask_decode(map, task_p, err);
    if (id_p) *id_p = tsr_wtask_ident(map, id_p, key) == 0 ? *id_p : UINT64_MAX;
  }
  tsr_reader_done(&rd);
  return rc;
}

static tsr_wtask *new_task(const char *key, const char *op, tsr_wstore *store)
{
  tsr_wtask *t = calloc(1, sizeof *t);
  t->key = strdup(key);
  t->op_name = strdup(op);
  t->op = tsr_op_find(op);
  t->epoch = tsr_wstore_epoch(store);
  atomic_init(&t->cancelled, false);
  return t;
}

static void add_input(tsr_wtask *t, const char *key, const char *from)
{
  t->inputs = realloc(t->inputs, (t->n_inputs + 1) * sizeof *t->inputs);
  t->inputs[t->n_inputs] = (tsr_winput){strdup(key), strdup(from), 0, false};
  t->n_inputs++;
}

static tsr_wtask *uniform_task(const char *key, int64_t n, int64_t seed, tsr_wstore *store)
{
  tsr_wtask *t = new_task(key, "random_uniform", store);
  tsr_params_add_int(&t->params, "seed", seed);
  tsr_params_add_ints(&t->params, "shape", &n, 1);
  return t;
}

/* ---------- store ---------- */

TEST(store_put_get_and_refcounts)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_chunk *c = make_chunk(store, "a", 10);
  ASSERT_TRUE(c != NULL);
  ASSERT_EQ(tsr_wstore_bytes(store), 80);
  ASSERT_OK(tsr_wstore_put(store, c, tsr_wstore_epoch(store), NULL));
  ASSERT_EQ(atomic_load(&c->refs), 2);
  tsr_chunk_unref(&c);
  ASSERT_TRUE(c == NULL);
  ASSERT_EQ(tsr_wstore_count(store), 1);

  tsr_chunk *got = NULL;
  ASSERT_OK(tsr_wstore_get(store, "a", &got));
  ASSERT_EQ(atomic_load(&got->refs), 2);
  ASSERT_EQ(tsr_wstore_get(store, "b", &c), TSR_ENOTFOUND);
  ASSERT_TRUE(tsr_wstore_has(store, "a"));

  /* Free while referenced: the key goes, the bytes stay until the reader is done. */
  ASSERT_TRUE(tsr_wstore_del(store, "a"));
  ASSERT_TRUE(!tsr_wstore_del(store, "a"));
  ASSERT_EQ(tsr_wstore_count(store), 0);
  ASSERT_EQ(tsr_wstore_live_chunks(store), 1);
  ASSERT_EQ(tsr_wstore_bytes(store), 80);
  ASSERT_NEAR(((double *)got->data)[9], 9.0, 0);
  tsr_chunk_unref(&got);
  ASSERT_EQ(tsr_wstore_live_chunks(store), 0);
  ASSERT_EQ(tsr_wstore_bytes(store), 0);
  tsr_wstore_destroy(&store);
  ASSERT_TRUE(store == NULL);
  tsr_wstore_destroy(&store);
}

TEST(store_replace_drops_the_old_chunk)
{
  tsr_wstore *store = tsr_wstore_new(0);
  uint64_t epoch = tsr_wstore_epoch(store);
  tsr_chunk *c1 = make_chunk(store, "k", 4), *c2 = make_chunk(store, "k", 8);
  ASSERT_OK(tsr_wstore_put(store, c1, epoch, NULL));
  ASSERT_OK(tsr_wstore_put(store, c2, epoch, NULL));
  tsr_chunk_unref(&c1);
  tsr_chunk_unref(&c2);
  ASSERT_EQ(tsr_wstore_count(store), 1);
  ASSERT_EQ(tsr_wstore_live_chunks(store), 1);
  ASSERT_EQ(tsr_wstore_bytes(store), 64);
  tsr_chunk *got;
  ASSERT_OK(tsr_wstore_get(store, "k", &got));
  ASSERT_EQ(got->meta.shape[0], 8);
  tsr_chunk_unref(&got);
  tsr_wstore_destroy(&store);
}

TEST(store_epochs_and_cancelled_puts)
{
  tsr_wstore *store = tsr_wstore_new(0);
  uint64_t old = tsr_wstore_epoch(store);
  tsr_chunk *a = make_chunk(store, "a", 2), *b = make_chunk(store, "b", 2);
  ASSERT_OK(tsr_wstore_put(store, a, old, NULL));
  uint64_t now = tsr_wstore_clear(store);
  ASSERT_TRUE(now != old);
  ASSERT_EQ(tsr_wstore_count(store), 0);
  ASSERT_EQ(tsr_wstore_put(store, b, old, NULL), TSR_ECANCELED);
  atomic_bool cancelled;
  atomic_init(&cancelled, true);
  ASSERT_EQ(tsr_wstore_put(store, b, now, &cancelled), TSR_ECANCELED);
  ASSERT_EQ(atomic_load(&b->refs), 1);
  atomic_store(&cancelled, false);
  ASSERT_OK(tsr_wstore_put(store, b, now, &cancelled));
  tsr_chunk_unref(&a);
  tsr_chunk_unref(&b);
  ASSERT_EQ(tsr_wstore_live_chunks(store), 1);
  tsr_wstore_destroy(&store);
}

TEST(store_replicas_and_server_lookup)
{
  tsr_wstore *store = tsr_wstore_new(0);
  uint64_t epoch = tsr_wstore_epoch(store);
  tsr_chunk *own = make_chunk(store, "own", 3), *rep = make_chunk(store, "rep", 3);
  rep->replica = true;
  ASSERT_OK(tsr_wstore_put(store, own, epoch, NULL));
  ASSERT_OK(tsr_wstore_put(store, rep, epoch, NULL));
  tsr_chunk_unref(&own);
  tsr_chunk_unref(&rep);
  ASSERT_TRUE(!tsr_wstore_del_replica(store, "own"));
  ASSERT_TRUE(tsr_wstore_del_replica(store, "rep"));
  ASSERT_EQ(tsr_wstore_count(store), 1);

  /* The server's reference outlives a free; its release drops it. */
  tsr_xfer_chunk xc;
  ASSERT_EQ(tsr_wstore_xfer_lookup(store, "nope", &xc), TSR_ENOTFOUND);
  ASSERT_OK(tsr_wstore_xfer_lookup(store, "own", &xc));
  ASSERT_EQ(xc.nbytes, 24);
  ASSERT_EQ(xc.meta.dtype, TSR_F64);
  ASSERT_TRUE(tsr_wstore_del(store, "own"));
  ASSERT_EQ(tsr_wstore_live_chunks(store), 1);
  ASSERT_NEAR(((const double *)xc.data)[2], 2.0, 0);
  xc.release((void *)xc.data, xc.hint);
  ASSERT_EQ(tsr_wstore_live_chunks(store), 0);
  tsr_wstore_destroy(&store);
}

static atomic_int warn_lines;
static void count_warns(void *arg, int level, const char *line)
{
  (void)arg;
  if (level == TSR_LOG_WARN && strstr(line, "memory limit") != NULL) atomic_fetch_add(&warn_lines, 1);
}

TEST(store_memory_limit_warns_once)
{
  tsr_log_level saved = tsr_log_get_level();
  tsr_log_set_level(TSR_LOG_WARN);
  tsr_log_set_sink(count_warns, NULL);
  tsr_wstore *store = tsr_wstore_new(100);
  ASSERT_EQ(tsr_wstore_memory_limit(store), 100);
  tsr_chunk *a = make_chunk(store, "a", 10);  /* 80 bytes: under */
  ASSERT_EQ(atomic_load(&warn_lines), 0);
  tsr_chunk *b = make_chunk(store, "b", 10);  /* 160: over */
  tsr_chunk *c = make_chunk(store, "c", 10);  /* still over: no second line */
  tsr_log_set_sink(NULL, NULL);
  tsr_log_set_level(saved);
  ASSERT_EQ(atomic_load(&warn_lines), 1);
  ASSERT_EQ(tsr_wstore_bytes(store), 240);
  tsr_chunk_unref(&a);
  tsr_chunk_unref(&b);
  tsr_chunk_unref(&c);
  ASSERT_EQ(tsr_wstore_bytes(store), 0);
  tsr_wstore_destroy(&store);
}

/* Many threads taking and dropping references while keys are freed. */
static void *hammer(void *arg)
{
  tsr_wstore *store = arg;
  for (int i = 0; i < 20000; i++) {
    tsr_chunk *c;
    if (tsr_wstore_get(store, (i & 1) ? "x" : "y", &c) == 0) {
      volatile double v = ((double *)c->data)[1];
      (void)v;
      tsr_chunk_unref(&c);
    }
  }
  return NULL;
}

TEST(store_concurrent_refs)
{
  tsr_wstore *store = tsr_wstore_new(0);
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, hammer, store);
  for (int i = 0; i < 2000; i++) {
    tsr_chunk *c = make_chunk(store, (i & 1) ? "x" : "y", 4);
    tsr_wstore_put(store, c, tsr_wstore_epoch(store), NULL);
    tsr_chunk_unref(&c);
    if (i % 3 == 0) tsr_wstore_del(store, "x");
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  tsr_wstore_clear(store);
  ASSERT_EQ(tsr_wstore_live_chunks(store), 0);
  ASSERT_EQ(tsr_wstore_bytes(store), 0);
  tsr_wstore_destroy(&store);
}

/* ---------- compute decoding and the queue ---------- */

/* A stand-in for device memory: host bytes behind the release callback. */
static int releases;
static void fake_release(void *arg, void *data, size_t nbytes)
{
  (void)arg, (void)nbytes;
  releases++;
  free(data);
}

static int fake_copy(void *arg, void *dst, const void *src, size_t nbytes, tsr_errbuf *err)
{
  (void)err;
  (*(int *)arg)++;
  memcpy(dst, src, nbytes);
  return 0;
}

static void drop_served(tsr_xfer_chunk *x) { x->release((void *)x->data, x->hint); }

TEST(store_device_chunks_counted_apart_and_served_from_a_copy)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_meta meta = {TSR_F64, 1, {8}};
  double *dev = malloc(64);
  for (int i = 0; i < 8; i++) dev[i] = i * 1.5;
  tsr_chunk *chunk = NULL;
  releases = 0;
  ASSERT_OK(tsr_chunk_new_device(store, "d", &meta, dev, 64, 0, fake_release, NULL, &chunk));
  ASSERT_TRUE(tsr_chunk_on_device(chunk));
  ASSERT_EQ(chunk->device, 0);
  ASSERT_OK(tsr_wstore_put(store, chunk, tsr_wstore_epoch(store), NULL));
  tsr_chunk_unref(&chunk);
  ASSERT_EQ(tsr_wstore_device_bytes(store), 64);
  ASSERT_EQ(tsr_wstore_bytes(store), 0);
  tsr_xfer_chunk x;
  /* no copy installed: not served (the asker reports it missing) */
  ASSERT_EQ(tsr_wstore_xfer_lookup(store, "d", &x), TSR_ENOTFOUND);
  int copies = 0;
  tsr_wstore_set_device_copy(store, fake_copy, &copies);
  ASSERT_OK(tsr_wstore_xfer_lookup(store, "d", &x));
  ASSERT_EQ(copies, 1);
  ASSERT_TRUE(x.data != (const void *)dev);
  ASSERT_EQ(x.nbytes, 64);
  ASSERT_EQ(memcmp(x.data, dev, 64), 0);
  /* the served copy holds no reference: dropping the key frees the device bytes */
  ASSERT_TRUE(tsr_wstore_del(store, "d"));
  ASSERT_EQ(releases, 1);
  ASSERT_EQ(tsr_wstore_device_bytes(store), 0);
  ASSERT_EQ(tsr_wstore_live_chunks(store), 0);
  drop_served(&x);
  tsr_wstore_destroy(&store);
}

/* promote swaps in a device copy while another task still reads the host
 * chunk (replace refuses then); the reader keeps the host bytes; a chunk
 * that is no longer the key's is left alone. */
TEST(store_promote_swaps_in_a_device_copy_under_readers)
{
  tsr_wstore *store = tsr_wstore_new(0);
  uint64_t epoch = tsr_wstore_epoch(store);
  tsr_chunk *host = make_chunk(store, "x", 8);
  ASSERT_OK(tsr_wstore_put(store, host, epoch, NULL));
  tsr_chunk *reader = NULL;
  ASSERT_OK(tsr_wstore_get(store, "x", &reader));  /* another task's reference */
  double *dev = malloc(64);
  memcpy(dev, host->data, 64);
  tsr_chunk *fresh = NULL;
  releases = 0;
  ASSERT_OK(tsr_chunk_new_device(store, "x", &host->meta, dev, 64, 0, fake_release, NULL, &fresh));
  ASSERT_TRUE(!tsr_wstore_replace(store, host, fresh));  /* three readers: replace refuses */
  ASSERT_TRUE(tsr_wstore_promote(store, host, fresh));
  tsr_chunk_unref(&fresh);
  tsr_chunk *got = NULL;
  ASSERT_OK(tsr_wstore_get(store, "x", &got));
  ASSERT_TRUE(tsr_chunk_on_device(got));
  ASSERT_EQ(tsr_wstore_device_bytes(store), 64);
  ASSERT_EQ(tsr_wstore_bytes(store), 64);  /* the host bytes live while read */
  ASSERT_NEAR(((double *)reader->data)[7], 7.0, 0);
  tsr_chunk_unref(&reader);
  tsr_chunk_unref(&host);
  ASSERT_EQ(tsr_wstore_bytes(store), 0);
  /* host is gone from the map: a second promotion of it changes nothing */
  tsr_chunk *stale = make_chunk(store, "x", 8), *again = NULL;
  ASSERT_OK(tsr_chunk_new_device(store, "x", &stale->meta, malloc(64), 64, 0, fake_release, NULL, &again));
  ASSERT_TRUE(!tsr_wstore_promote(store, stale, again));
  tsr_chunk_unref(&again);
  ASSERT_EQ(releases, 1);  /* the refused copy was freed */
  tsr_chunk_unref(&stale);
  tsr_chunk *still = NULL;
  ASSERT_OK(tsr_wstore_get(store, "x", &still));
  ASSERT_TRUE(still == got);
  tsr_chunk_unref(&still);
  tsr_chunk_unref(&got);
  tsr_wstore_destroy(&store);
  ASSERT_EQ(releases, 2);
}

TEST(decode_compute)
{
  const char *ins[] = {"in0", "in1"};
  size_t len;
  char *bytes = pack_compute(&len, NULL, 42, "sum-1", "sum", "seed=7;n=100", ins, 2, -3);
  tsr_wtask *t = NULL;
  tsr_errbuf err = {{0}};
  ASSERT_OK(decode_one(bytes, len, &t, &err, NULL, NULL));
  free(bytes);
  ASSERT_EQ(t->id, 42);
  ASSERT_STREQ(t->key, "sum-1");
  ASSERT_STREQ(t->op_name, "sum");
  ASSERT_TRUE(t->op != NULL);
  ASSERT_EQ(t->priority, -3);
  ASSERT_EQ(t->n_inputs, 2);
  ASSERT_STREQ(t->inputs[1].key, "in1");
  ASSERT_STREQ(t->inputs[1].from, "tcp://127.0.0.1:1");
  ASSERT_EQ(t->inputs[1].nbytes, 8);
  int64_t seed = 0;
  ASSERT_OK(tsr_params_get_int(&t->params, "seed", &seed, NULL));
  ASSERT_EQ(seed, 7);
  tsr_wtask_free(&t);
  ASSERT_TRUE(t == NULL);
  tsr_wtask_free(&t);
}

TEST(decode_compute_rejects)
{
  size_t len;
  tsr_wtask *t = NULL;
  tsr_errbuf err = {{0}};
  uint64_t id = 0;
  char key[TSR_MAX_KEY_LEN + 1] = "";
  char *bytes = pack_compute(&len, "abc", 0, "k", "sum", NULL, NULL, 0, 0);
  ASSERT_EQ(decode_one(bytes, len, &t, &err, &id, key), TSR_EPROTO);
  free(bytes);
  ASSERT_TRUE(t == NULL);
  ASSERT_CONTAINS(err.text, "id");
  ASSERT_EQ(id, UINT64_MAX);  /* not identifiable: answered with `error` */

  /* An input that is not [key, from, nbytes]: identifiable, so task_erred. */
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "compute", 5);
  tsr_pack_kv_uint(&wb.pk, "id", 9);
  tsr_pack_kv_str(&wb.pk, "key", "k9");
  tsr_pack_kv_str(&wb.pk, "task_op", "sum");
  tsr_pack_str(&wb.pk, "inputs");
  msgpack_pack_array(&wb.pk, 1);
  msgpack_pack_int64(&wb.pk, 5);
  bytes = tsr_wbuf_release(&wb, &len);
  ASSERT_EQ(decode_one(bytes, len, &t, &err, &id, key), TSR_EPROTO);
  free(bytes);
  ASSERT_CONTAINS(err.text, "input 0");
  ASSERT_EQ(id, 9);
  ASSERT_STREQ(key, "k9");
}

TEST(queue_priority_then_arrival)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_wqueue *q = tsr_wqueue_new();
  int64_t prio[] = {5, 1, 3, 1, -2};
  const char *keys[] = {"p5", "p1a", "p3", "p1b", "pm2"};
  for (int i = 0; i < 5; i++) {
    tsr_wtask *t = new_task(keys[i], "noop", store);
    t->priority = prio[i];
    ASSERT_OK(tsr_wqueue_push(q, t));
  }
  ASSERT_EQ(tsr_wqueue_length(q), 5);
  const char *want[] = {"pm2", "p1a", "p1b", "p3", "p5"};
  for (int i = 0; i < 5; i++) {
    tsr_wtask *t = tsr_wqueue_pop(q);
    ASSERT_STREQ(t->key, want[i]);
    tsr_wtask_free(&t);
  }
  ASSERT_TRUE(tsr_wqueue_trypop(q) == NULL);
  tsr_wqueue_push(q, new_task("left", "noop", store));
  tsr_wqueue_close(q);
  ASSERT_TRUE(tsr_wqueue_pop(q) == NULL);
  tsr_wqueue_destroy(&q);  /* frees "left" */
  tsr_wstore_destroy(&store);
}

/* ---------- running tasks without threads or sockets ---------- */

TEST(run_uniform_then_sum)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_wtask *x = uniform_task("x", 1000, 42, store);
  tsr_wtask_run(x, store, NULL, "w0");
  ASSERT_EQ(x->status, TSR_WTASK_DONE);
  ASSERT_EQ(x->out_nbytes, 8000);
  ASSERT_EQ(x->out_meta.dtype, TSR_F64);
  ASSERT_EQ(x->out_meta.ndim, 1);
  tsr_wtask_free(&x);

  tsr_wtask *s = new_task("s", "sum", store);
  add_input(s, "x", "");
  tsr_wtask_run(s, store, NULL, "w0");
  ASSERT_EQ(s->status, TSR_WTASK_DONE);
  ASSERT_EQ(s->out_meta.ndim, 0);
  ASSERT_TRUE(!s->inputs[0].fetched);
  tsr_wtask_free(&s);

  tsr_chunk *xc, *sc;
  ASSERT_OK(tsr_wstore_get(store, "x", &xc));
  ASSERT_OK(tsr_wstore_get(store, "s", &sc));
  double want = 0;
  for (int i = 0; i < 1000; i++) want += ((double *)xc->data)[i];
  double got = *(double *)sc->data;
  ASSERT_TRUE(got > 0 && got < 1000);
  ASSERT_NEAR(got, want, 1e-12);
  tsr_chunk_unref(&xc);
  tsr_chunk_unref(&sc);
  tsr_wstore_destroy(&store);
}

TEST(run_failures)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_wtask *t = new_task("u", "frobnicate", store);
  tsr_wtask_run(t, store, NULL, "w7");
  ASSERT_EQ(t->status, TSR_WTASK_ERRED);
  ASSERT_CONTAINS(t->message, "unknown op 'frobnicate' on worker w7");
  tsr_wtask_free(&t);

  /* Shape mismatch: the message names the op and both shapes. */
  int64_t n3 = 3, n4 = 4;
  tsr_wtask *a = new_task("a", "full", store), *b = new_task("b", "full", store);
  tsr_params_add_ints(&a->params, "shape", &n3, 1);
  tsr_params_add_float(&a->params, "value", 1.0);
  tsr_params_add_ints(&b->params, "shape", &n4, 1);
  tsr_params_add_float(&b->params, "value", 2.0);
  tsr_wtask_run(a, store, NULL, "w7");
  tsr_wtask_run(b, store, NULL, "w7");
  ASSERT_EQ(a->status, TSR_WTASK_DONE);
  ASSERT_EQ(b->status, TSR_WTASK_DONE);
  tsr_wtask_free(&a);
  tsr_wtask_free(&b);
  t = new_task("ab", "add", store);
  add_input(t, "a", "");
  add_input(t, "b", "");
  tsr_wtask_run(t, store, NULL, "w7");
  ASSERT_EQ(t->status, TSR_WTASK_ERRED);
  ASSERT_TRUE(strncmp(t->message, "add: ", 5) == 0);
  ASSERT_TRUE(strstr(t->message, "add: add:") == NULL);
  ASSERT_CONTAINS(t->message, "[3]");
  ASSERT_CONTAINS(t->message, "[4]");
  ASSERT_TRUE(!tsr_wstore_has(store, "ab"));
  tsr_wtask_free(&t);

  /* Wrong input count: validated by the registry, reported as erred. */
  t = new_task("s0", "sum", store);
  tsr_wtask_run(t, store, NULL, "w7");
  ASSERT_EQ(t->status, TSR_WTASK_ERRED);
  ASSERT_CONTAINS(t->message, "sum");
  tsr_wtask_free(&t);

  /* An input nobody can fetch: missing, and the op does not run. */
  t = new_task("m", "add", store);
  add_input(t, "a", "");
  add_input(t, "ghost", "");
  tsr_wtask_run(t, store, NULL, "w7");
  ASSERT_EQ(t->status, TSR_WTASK_MISSING);
  ASSERT_EQ(t->missing_input, 1);
  tsr_wtask_free(&t);

  /* A failing kernel keeps its own message, prefixed once. */
  t = new_task("f", "fail", store);
  tsr_params_add_str(&t->params, "message", "boom", 4);
  tsr_wtask_run(t, store, NULL, "w7");
  ASSERT_EQ(t->status, TSR_WTASK_ERRED);
  ASSERT_STREQ(t->message, "fail: boom");
  tsr_wtask_free(&t);
  tsr_wstore_destroy(&store);
}

TEST(run_cancelled_and_stale)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_wtask *t = uniform_task("c", 10, 1, store);
  atomic_store(&t->cancelled, true);
  tsr_wtask_run(t, store, NULL, "w");
  ASSERT_EQ(t->status, TSR_WTASK_CANCELLED);
  tsr_wtask_free(&t);
  t = uniform_task("c", 10, 1, store);
  tsr_wstore_clear(store);  /* a reconnect while the task was queued */
  tsr_wtask_run(t, store, NULL, "w");
  ASSERT_EQ(t->status, TSR_WTASK_CANCELLED);
  tsr_wtask_free(&t);
  ASSERT_EQ(tsr_wstore_count(store), 0);
  ASSERT_EQ(tsr_wstore_live_chunks(store), 0);
  tsr_wstore_destroy(&store);
}

/* ---------- the pool ---------- */

typedef struct pool_fixture {
  void *zctx;
  void *pull;
  tsr_wstore *store;
  tsr_wexec *exec;
} pool_fixture;

static int pool_open(pool_fixture *f, int threads)
{
  f->zctx = zmq_ctx_new();
  f->pull = zmq_socket(f->zctx, ZMQ_PULL);
  if (zmq_bind(f->pull, "inproc://test-done") != 0) return -1;
  f->store = tsr_wstore_new(0);
  tsr_wexec_opts o = {.threads = threads, .zctx = f->zctx, .done_endpoint = "inproc://test-done", .worker_name = "wt",
                     .fetch_timeout_ms = 5000};
  tsr_errbuf err = {{0}};
  return tsr_wexec_start(&o, f->store, &f->exec, &err);
}

/* Waits for one completion, serving src over srv meanwhile (may be NULL). */
static tsr_wtask *pool_next(pool_fixture *f, tsr_xfer_server *srv, tsr_wstore *src, int timeout_ms)
{
  uint64_t end = tsr_now_ms() + (uint64_t)timeout_ms;
  while (tsr_now_ms() < end) {
    zmq_pollitem_t items[2] = {{f->pull, 0, ZMQ_POLLIN, 0}, {srv ? tsr_xfer_server_socket(srv) : NULL, 0, ZMQ_POLLIN, 0}};
    zmq_poll(items, srv ? 2 : 1, 50);
    if (srv && (items[1].revents & ZMQ_POLLIN)) tsr_xfer_server_serve(srv, tsr_wstore_xfer_lookup, src);
    tsr_wtask *t;
    if (zmq_recv(f->pull, &t, sizeof t, ZMQ_DONTWAIT) == (int)sizeof t) return t;
  }
  return NULL;
}

static void pool_close(pool_fixture *f)
{
  tsr_wexec_stop(&f->exec, 10000);
  zmq_close(f->pull);
  zmq_ctx_term(f->zctx);
  tsr_wstore_destroy(&f->store);
}

TEST(pool_runs_in_priority_order)
{
  pool_fixture f;
  ASSERT_OK(pool_open(&f, 1));
  /* Hold the only thread, then queue three tasks out of order. */
  tsr_wtask *hold = new_task("hold", "sleep", f.store);
  tsr_params_add_int(&hold->params, "ms", 200);
  hold->priority = 100;
  ASSERT_OK(tsr_wexec_submit(f.exec, hold));
  while (tsr_wexec_running(f.exec) == 0) usleep(1000);
  int64_t prio[] = {5, 1, 3};
  const char *keys[] = {"p5", "p1", "p3"};
  for (int i = 0; i < 3; i++) {
    tsr_wtask *t = uniform_task(keys[i], 16, i, f.store);
    t->priority = prio[i];
    ASSERT_OK(tsr_wexec_submit(f.exec, t));
  }
  ASSERT_EQ(tsr_wexec_queued(f.exec), 3);
  const char *want[] = {"hold", "p1", "p3", "p5"};
  for (int i = 0; i < 4; i++) {
    tsr_wtask *t = pool_next(&f, NULL, NULL, 5000);
    ASSERT_TRUE(t != NULL);
    ASSERT_STREQ(t->key, want[i]);
    ASSERT_EQ(t->status, TSR_WTASK_DONE);
    tsr_wtask_free(&t);
  }
  ASSERT_EQ(tsr_wstore_count(f.store), 4);
  pool_close(&f);
}

TEST(pool_many_threads_many_tasks)
{
  pool_fixture f;
  ASSERT_OK(pool_open(&f, 4));
  for (int i = 0; i < 64; i++) {
    char key[16];
    snprintf(key, sizeof key, "t%d", i);
    ASSERT_OK(tsr_wexec_submit(f.exec, uniform_task(key, 1000, i, f.store)));
  }
  for (int i = 0; i < 64; i++) {
    tsr_wtask *t = pool_next(&f, NULL, NULL, 10000);
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ(t->status, TSR_WTASK_DONE);
    tsr_wtask_free(&t);
  }
  ASSERT_EQ(tsr_wstore_count(f.store), 64);
  ASSERT_EQ(tsr_wstore_bytes(f.store), 64 * 8000);
  pool_close(&f);
}

TEST(pool_fetches_inputs_from_a_peer)
{
  pool_fixture f;
  ASSERT_OK(pool_open(&f, 2));
  /* The peer: a store of its own served from this thread. */
  tsr_wstore *src = tsr_wstore_new(0);
  tsr_wtask *x = uniform_task("x", 500, 9, src);
  tsr_wtask_run(x, src, NULL, "peer");
  ASSERT_EQ(x->status, TSR_WTASK_DONE);
  tsr_wtask_free(&x);
  tsr_xfer_server *srv = NULL;
  tsr_errbuf err = {{0}};
  ASSERT_OK(tsr_xfer_server_open(f.zctx, "tcp://127.0.0.1:0", NULL, &srv, &err));

  tsr_wtask *s = new_task("s", "sum", f.store);
  add_input(s, "x", tsr_xfer_server_address(srv));
  ASSERT_OK(tsr_wexec_submit(f.exec, s));
  s = pool_next(&f, srv, src, 10000);
  ASSERT_TRUE(s != NULL);
  ASSERT_EQ(s->status, TSR_WTASK_DONE);
  ASSERT_TRUE(s->inputs[0].fetched);
  tsr_wtask_free(&s);
  /* The fetched copy is kept, marked a replica, with the peer's bytes. */
  tsr_chunk *mine, *theirs;
  ASSERT_OK(tsr_wstore_get(f.store, "x", &mine));
  ASSERT_OK(tsr_wstore_get(src, "x", &theirs));
  ASSERT_TRUE(mine->replica);
  ASSERT_EQ(mine->owner, TSR_CHUNK_XFER);
  ASSERT_EQ(mine->nbytes, theirs->nbytes);
  ASSERT_TRUE(memcmp(mine->data, theirs->data, mine->nbytes) == 0);
  tsr_chunk_unref(&mine);
  tsr_chunk_unref(&theirs);

  /* A key the peer does not hold: missing_input, nothing run. */
  tsr_wtask *m = new_task("m", "sum", f.store);
  add_input(m, "ghost", tsr_xfer_server_address(srv));
  ASSERT_OK(tsr_wexec_submit(f.exec, m));
  m = pool_next(&f, srv, src, 10000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(m->status, TSR_WTASK_MISSING);
  ASSERT_EQ(m->missing_input, 0);
  tsr_wtask_free(&m);

  tsr_xfer_server_close(&srv);
  pool_close(&f);
  tsr_wstore_destroy(&src);
}

TEST(pool_fetches_a_shared_input_once)
{
  pool_fixture f;
  ASSERT_OK(pool_open(&f, 4));
  tsr_wstore *src = tsr_wstore_new(0);
  tsr_wtask *x = uniform_task("x", 100000, 3, src);
  tsr_wtask_run(x, src, NULL, "peer");
  tsr_wtask_free(&x);
  tsr_xfer_server *srv = NULL;
  tsr_errbuf err = {{0}};
  ASSERT_OK(tsr_xfer_server_open(f.zctx, "tcp://127.0.0.1:0", NULL, &srv, &err));
  for (int i = 0; i < 4; i++) {
    char key[8];
    snprintf(key, sizeof key, "s%d", i);
    tsr_wtask *s = new_task(key, "sum", f.store);
    add_input(s, "x", tsr_xfer_server_address(srv));
    ASSERT_OK(tsr_wexec_submit(f.exec, s));
  }
  int fetched = 0;
  for (int i = 0; i < 4; i++) {
    tsr_wtask *s = pool_next(&f, srv, src, 10000);
    ASSERT_TRUE(s != NULL);
    ASSERT_EQ(s->status, TSR_WTASK_DONE);
    fetched += s->inputs[0].fetched;
    tsr_wtask_free(&s);
  }
  ASSERT_EQ(fetched, 1);
  ASSERT_EQ(tsr_xfer_server_bytes(srv), 800000);
  tsr_xfer_server_close(&srv);
  pool_close(&f);
  tsr_wstore_destroy(&src);
}

/* Waits for one completion, serving src over a server of any transport
 * meanwhile (its ROUTER and/or UCX wakeup fd). */
static tsr_wtask *pool_next_any(pool_fixture *f, tsr_xfer_server *srv, tsr_wstore *src, int timeout_ms)
{
  uint64_t end = tsr_now_ms() + (uint64_t)timeout_ms;
  while (tsr_now_ms() < end) {
    zmq_pollitem_t items[3] = {{f->pull, 0, ZMQ_POLLIN, 0}};
    int n = 1 + tsr_xfer_server_pollitems(srv, items + 1, 2);
    zmq_poll(items, n, 10);
    tsr_xfer_server_serve(srv, tsr_wstore_xfer_lookup, src);   /* UCX needs progress even when no fd fired */
    tsr_wtask *t;
    if (zmq_recv(f->pull, &t, sizeof t, ZMQ_DONTWAIT) == (int)sizeof t) return t;
  }
  return NULL;
}

/* A task queued behind a busy thread, whose input comes from a UCX peer
 * never connected to: the connection is made and wired up while it
 * waits (tsr_wfetch_warm), and its fetch takes that connection instead
 * of connecting itself. A second task from the same peer connects no
 * more. */
TEST(pool_connects_ahead_to_the_ucx_peer_of_a_queued_task)
{
  if (!tsr_xfer_ucx_built()) {
    fprintf(stderr, "    (no UCX in this build: the warmer only connects to UCX peers; nothing to check)\n");
    return;
  }
  pool_fixture f;
  f.zctx = zmq_ctx_new();
  f.pull = zmq_socket(f.zctx, ZMQ_PULL);
  ASSERT_OK(zmq_bind(f.pull, "inproc://test-done"));
  f.store = tsr_wstore_new(0);
  tsr_wexec_opts o = {.threads = 1, .zctx = f.zctx, .done_endpoint = "inproc://test-done", .worker_name = "wt",
                      .fetch_timeout_ms = 5000, .fetch_ahead = true};
  tsr_errbuf err = {{0}};
  ASSERT_OK(tsr_wexec_start(&o, f.store, &f.exec, &err));
  tsr_xfer_set_fetch_transport(TSR_TRANSPORT_UCX);
  tsr_wstore *src = tsr_wstore_new(0);
  const char *keys[] = {"x", "y"};
  for (int i = 0; i < 2; i++) {
    tsr_wtask *t = uniform_task(keys[i], 1000, i, src);
    tsr_wtask_run(t, src, NULL, "peer");
    tsr_wtask_free(&t);
  }
  tsr_xfer_server *srv = NULL;
  ASSERT_OK(tsr_xfer_server_open_transport(f.zctx, "tcp://127.0.0.1:0", NULL, NULL, TSR_TRANSPORT_UCX, &srv, &err));
  tsr_wtask *hold = new_task("hold", "sleep", f.store);
  tsr_params_add_int(&hold->params, "ms", 300);
  ASSERT_OK(tsr_wexec_submit(f.exec, hold));
  while (tsr_wexec_running(f.exec) == 0) usleep(1000);
  tsr_wexec_conn_stats st0, st1;
  tsr_wexec_conn_stats_get(f.exec, &st0);
  for (int i = 0; i < 2; i++) {
    char key[8];
    snprintf(key, sizeof key, "s%d", i);
    tsr_wtask *s = new_task(key, "sum", f.store);
    add_input(s, keys[i], tsr_xfer_server_address(srv));
    ASSERT_OK(tsr_wexec_submit(f.exec, s));
  }
  int done = 0, fetched = 0;
  for (int i = 0; i < 3; i++) {
    tsr_wtask *t = pool_next_any(&f, srv, src, 10000);
    if (t == NULL) break;
    done += t->status == TSR_WTASK_DONE;
    fetched += t->n_inputs == 1 && t->inputs[0].fetched;
    tsr_wtask_free(&t);
  }
  tsr_wexec_conn_stats_get(f.exec, &st1);
  /* the executor closes its connections before the server goes */
  pool_close(&f);
  tsr_xfer_server_close(&srv);
  tsr_wstore_destroy(&src);
  tsr_xfer_set_fetch_transport(TSR_TRANSPORT_AUTO);
  ASSERT_EQ(st0.made_ahead, 0u);
  ASSERT_EQ(done, 3);
  ASSERT_EQ(fetched, 2);
  ASSERT_EQ(st1.made_ahead, 1u);   /* one peer, one connection made ahead */
  ASSERT_EQ(st1.taken_ahead, 1u);  /* ... taken by the first fetch */
  ASSERT_EQ(st1.connects, 0u);     /* no fetch connected itself */
}

/* A peer that accepts requests and never answers, bound on loopback at
 * addr; NULL when it cannot bind. */
static void *mute_peer(void *zctx, char *addr, size_t cap)
{
  void *mute = zmq_socket(zctx, ZMQ_ROUTER);
  tsr_net_socket_defaults(mute);
  if (tsr_net_bind(mute, "tcp://127.0.0.1:0", NULL, addr, cap, NULL) == 0) return mute;
  zmq_close(mute);
  return NULL;
}

TEST(fetcher_closes_a_timed_out_connection)
{
  void *zctx = zmq_ctx_new();
  char addr[TSR_MAX_ADDR_LEN];
  void *mute = mute_peer(zctx, addr, sizeof addr);
  ASSERT_TRUE(mute != NULL);
  tsr_wfetcher f;
  tsr_wfetcher_init(&f, zctx, 200);
  tsr_chunk_header hdr;
  tsr_xfer_data data = {0};
  tsr_errbuf err = {{0}};
  uint64_t t0 = tsr_now_ms();
  ASSERT_EQ(tsr_wfetcher_get(&f, addr, "k", &hdr, &data, &err), TSR_ETIMEDOUT);
  ASSERT_TRUE(tsr_now_ms() - t0 >= 150);
  int open_conns = 0;
  for (int i = 0; i < TSR_WFETCH_SLOTS; i++) open_conns += f.slot[i].conn != NULL;
  ASSERT_EQ(open_conns, 0);
  /* An empty address fails at once, without a connection. */
  ASSERT_EQ(tsr_wfetcher_get(&f, "", "k", &hdr, &data, &err), TSR_ECONN);
  tsr_wfetcher_close(&f);
  zmq_close(mute);
  zmq_ctx_term(zctx);
}

/* An input made here and no longer in the store (dropped to be made
 * again) is reported missing at once: the worker does not ask its own
 * data socket, which could only say the same after a round trip. */
TEST(an_input_dropped_here_is_missing_without_asking_ourselves)
{
  void *zctx = zmq_ctx_new();
  /* Our "own" data socket: it never answers, and it must get no request. */
  char addr[TSR_MAX_ADDR_LEN];
  void *self = mute_peer(zctx, addr, sizeof addr);
  ASSERT_TRUE(self != NULL);
  tsr_wfetcher f;
  tsr_wfetcher_init(&f, zctx, 5000);
  f.self_address = addr;
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_wtask *x = uniform_task("x", 100, 1, store);
  tsr_wtask_run(x, store, NULL, "w0");
  ASSERT_EQ(x->status, TSR_WTASK_DONE);
  tsr_wtask_free(&x);

  tsr_wtask *t = new_task("t", "add", store);
  add_input(t, "x", addr);
  add_input(t, "dropped", addr);
  tsr_wtask_run(t, store, &f, "w0");
  ASSERT_EQ(t->status, TSR_WTASK_MISSING);
  ASSERT_EQ(t->missing_input, 1);
  tsr_wtask_free(&t);
  zmq_pollitem_t item = {self, 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq_poll(&item, 1, 100), 0);

  /* Held here: used from the store, as before. */
  t = new_task("s", "sum", store);
  add_input(t, "x", addr);
  tsr_wtask_run(t, store, &f, "w0");
  ASSERT_EQ(t->status, TSR_WTASK_DONE);
  ASSERT_TRUE(!t->inputs[0].fetched);
  tsr_wtask_free(&t);
  tsr_wstore_destroy(&store);
  tsr_wfetcher_close(&f);
  zmq_close(self);
  zmq_ctx_term(zctx);
}

int main(void)
{
  tsr_log_set_level(TSR_LOG_ERROR);
  tsr_ops_init(true);
  RUN(store_put_get_and_refcounts);
  RUN(store_replace_drops_the_old_chunk);
  RUN(store_epochs_and_cancelled_puts);
  RUN(store_replicas_and_server_lookup);
  RUN(store_memory_limit_warns_once);
  RUN(store_concurrent_refs);
  RUN(store_device_chunks_counted_apart_and_served_from_a_copy);
  RUN(store_promote_swaps_in_a_device_copy_under_readers);
  RUN(decode_compute);
  RUN(decode_compute_rejects);
  RUN(queue_priority_then_arrival);
  RUN(run_uniform_then_sum);
  RUN(run_failures);
  RUN(run_cancelled_and_stale);
  RUN(pool_runs_in_priority_order);
  RUN(pool_many_threads_many_tasks);
  RUN(pool_fetches_inputs_from_a_peer);
  RUN(pool_fetches_a_shared_input_once);
  RUN(pool_connects_ahead_to_the_ucx_peer_of_a_queued_task);
  RUN(fetcher_closes_a_timed_out_connection);
  RUN(an_input_dropped_here_is_missing_without_asking_ourselves);
  return kit_summary();
}
