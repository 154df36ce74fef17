/* tsr-sum-random — the sum of a chunked 1-D uniform random array.
 *
 *   TESSERA_SCHEDULER=tcp://HOST:8786 tsr-sum-random --n 100000000 --chunk 1000000 --seed 42 --verify
 *   tessera local --cpu-workers 2 -- tsr-sum-random --n 100000000 --chunk 1000000 --verify
 *
 * The graph: one `random_uniform` task per chunk (its place in the whole
 * array given by global_shape and offset, so the values do not depend on
 * the chunking), one `sum` per chunk, then a tree of n-ary `add` tasks
 * (fan-in 8) down to one 0-d result, which is gathered from the worker
 * that holds it.
 *
 * --verify recomputes the sum here, straight from docs/random.md (the
 * Philox4x32-10 generator is implemented below: this is a user program and
 * uses only the public API), in long double, and fails when the relative
 * difference exceeds 1e-12 (1e-5 for f32).
 *
 * Only <tessera/tessera.h> is used: copy this file to start a program. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tessera/tessera.h>

#define FAN_IN 8

typedef struct options {
  int64_t n;
  int64_t chunk;
  int64_t seed;
  bool verify;
  tsr_dtype dtype;
  int timeout_ms;
} options;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(const char *what, int rc)
{
  fprintf(stderr, "tsr-sum-random: %s: %s (%s)\n", what, tsr_errmsg(), tsr_err_name(rc));
  return 1;
}

/* ---------- Philox4x32-10 (docs/random.md) ---------- */

static void philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4])
{
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  uint32_t k0 = key_in[0], k1 = key_in[1];
  for (int round = 0; round < 10; round++) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The known answer of Random123: counter 0, key 0. */
static bool philox_self_test(void)
{
  const uint32_t zero_ctr[4] = {0, 0, 0, 0}, zero_key[2] = {0, 0};
  const uint32_t want[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  uint32_t got[4];
  philox4x32_10(zero_ctr, zero_key, got);
  return memcmp(got, want, sizeof want) == 0;
}

/* The 4 words of block b (words 4b .. 4b+3 of the stream). */
static void words_block(uint64_t b, const uint32_t key[2], uint32_t out[4])
{
  const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0, 0};
  philox4x32_10(ctr, key, out);
}

/* Sum of elements [0, n) of the uniform array: f64 element L uses words
 * 2L (low) and 2L+1 (high), i.e. two elements per block; f32 element L
 * uses word L, four per block. */
static long double reference_sum(int64_t n, int64_t seed, tsr_dtype dtype)
{
  const uint32_t key[2] = {(uint32_t)(uint64_t)seed, (uint32_t)((uint64_t)seed >> 32)};
  const int per_block = dtype == TSR_F32 ? 4 : 2;
  long double total = 0;
  uint32_t w[4];
  for (int64_t first = 0; first < n; first += per_block) {
    words_block((uint64_t)first / (uint64_t)per_block, key, w);
    for (int j = 0; j < per_block && first + j < n; j++) {
      if (dtype == TSR_F32) {
        total += (long double)(float)((double)(w[j] >> 8) * 0x1p-24);
      } else {
        uint64_t bits = ((uint64_t)w[2 * j + 1] << 32) | w[2 * j];
        total += (long double)((double)(bits >> 11) * 0x1p-53);
      }
    }
  }
  return total;
}

/* ---------- the graph ---------- */

static int add_random_chunk(tsr_graph *g, const options *o, int64_t i, char *key, size_t cap)
{
  int64_t start = i * o->chunk;
  int64_t len = o->n - start < o->chunk ? o->n - start : o->chunk;
  tsr_args *a = NULL;
  int rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_int(a, "seed", o->seed);
  if (rc == 0) rc = tsr_args_str(a, "dtype", tsr_dtype_name(o->dtype));
  if (rc == 0) rc = tsr_args_ints(a, "shape", &len, 1);
  if (rc == 0) rc = tsr_args_ints(a, "global_shape", &o->n, 1);
  if (rc == 0) rc = tsr_args_ints(a, "offset", &start, 1);
  snprintf(key, cap, "sum-random/%s/%" PRId64 "/%" PRId64 "/%" PRId64 "/x%" PRId64, tsr_dtype_name(o->dtype), o->seed,
           o->n, o->chunk, i);
  if (rc == 0) rc = tsr_graph_add_args(g, key, "random_uniform", a, NULL, 0);
  tsr_args_destroy(&a);
  return rc;
}

/* Adds random + sum for every chunk; keys of the partial sums go to sums. */
static int add_chunks(tsr_graph *g, const options *o, int64_t nchunks, char **sums)
{
  char rkey[256];
  for (int64_t i = 0; i < nchunks; i++) {
    int rc = add_random_chunk(g, o, i, rkey, sizeof rkey);
    if (rc != 0) return rc;
    sums[i] = malloc(strlen(rkey) + 8);
    if (sums[i] == NULL) return TSR_ENOMEM;
    sprintf(sums[i], "%s/sum", rkey);
    const char *in[1] = {rkey};
    rc = tsr_graph_add(g, sums[i], "sum", NULL, 0, in, 1);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Reduces keys[0..n) level by level with n-ary add; returns the root's
 * index in keys (always 0) after replacing keys with each level's. */
static int add_tree(tsr_graph *g, const options *o, char **keys, int64_t n)
{
  for (int level = 1; n > 1; level++) {
    int64_t groups = (n + FAN_IN - 1) / FAN_IN;
    for (int64_t k = 0; k < groups; k++) {
      int64_t first = k * FAN_IN, count = n - first < FAN_IN ? n - first : FAN_IN;
      if (count == 1) {            /* a lone key passes to the next level */
        keys[k] = keys[first];
        if (k != first) keys[first] = NULL;
        continue;
      }
      char key[256];
      snprintf(key, sizeof key, "sum-random/%s/%" PRId64 "/%" PRId64 "/%" PRId64 "/add%d-%" PRId64,
               tsr_dtype_name(o->dtype), o->seed, o->n, o->chunk, level, k);
      int rc = tsr_graph_add(g, key, "add", NULL, 0, (const char *const *)&keys[first], (size_t)count);
      if (rc != 0) return rc;
      for (int64_t j = first; j < first + count; j++) {
        free(keys[j]);
        keys[j] = NULL;
      }
      keys[k] = strdup(key);
      if (keys[k] == NULL) return TSR_ENOMEM;
    }
    n = groups;
  }
  return 0;
}

static int build_graph(const options *o, tsr_graph **g_p, char *root, size_t cap)
{
  int64_t nchunks = (o->n + o->chunk - 1) / o->chunk;
  char **keys = calloc((size_t)nchunks, sizeof *keys);
  tsr_graph *g = NULL;
  int rc = keys ? tsr_graph_new(&g) : TSR_ENOMEM;
  if (rc == 0) rc = add_chunks(g, o, nchunks, keys);
  if (rc == 0) rc = add_tree(g, o, keys, nchunks);
  if (rc == 0) snprintf(root, cap, "%s", keys[0]);
  if (rc == 0) rc = tsr_graph_want(g, root);
  for (int64_t i = 0; keys && i < nchunks; i++) free(keys[i]);
  free(keys);
  if (rc != 0) {
    tsr_graph_destroy(&g);
    return rc;
  }
  *g_p = g;
  return 0;
}

/* ---------- the command line ---------- */

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tsr-sum-random --n N --chunk C [--seed S] [--dtype f64|f32] [--verify] [--timeout SECONDS]\n"
          "  Sums a chunked uniform random array of N elements (chunks of C) on the\n"
          "  cluster at $TESSERA_SCHEDULER and prints \"sum = ...\" and timings.\n"
          "  --verify   recompute the sum here and fail when it differs\n"
          "  --version  print the version\n");
}

/* Accepts "100000000" and "1e8" (when integral). */
static bool parse_count(const char *text, int64_t min, int64_t *out)
{
  char *end = NULL;
  double v = strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= (double)min) || v > 9.0e18 || v != floor(v)) return false;
  *out = (int64_t)v;
  return true;
}

static int parse(int argc, char **argv, options *o)
{
  static const struct option longs[] = {
    {"n", required_argument, NULL, 'n'},        {"chunk", required_argument, NULL, 'c'},
    {"seed", required_argument, NULL, 's'},     {"dtype", required_argument, NULL, 'd'},
    {"verify", no_argument, NULL, 'v'},         {"timeout", required_argument, NULL, 't'},
    {"help", no_argument, NULL, 'h'},           {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
  };
  int opt;
  int64_t t;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    bool ok = true;
    switch (opt) {
    case 'n': ok = parse_count(optarg, 1, &o->n); break;
    case 'c': ok = parse_count(optarg, 1, &o->chunk); break;
    case 's': ok = parse_count(optarg, 0, &o->seed); break;
    case 'd': o->dtype = tsr_dtype_parse(optarg), ok = o->dtype == TSR_F64 || o->dtype == TSR_F32; break;
    case 'v': o->verify = true; break;
    case 't': ok = parse_count(optarg, 1, &t) && t < 1000000, o->timeout_ms = (int)t * 1000; break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("tsr-sum-random %s\n", TSR_VERSION_STRING); return 0;
    default: ok = false;
    }
    if (!ok) {
      fprintf(stderr, "tsr-sum-random: bad flag or value: %s\n", argv[optind - 1]);
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc || o->n == 0 || o->chunk == 0) {
    fprintf(stderr, "tsr-sum-random: --n and --chunk are required\n");
    usage(stderr);
    return 2;
  }
  if ((o->n + o->chunk - 1) / o->chunk > 1000000) {
    fprintf(stderr, "tsr-sum-random: more than 10^6 chunks; use a larger --chunk\n");
    return 2;
  }
  return -1;
}

/* Submits, waits and gathers the root; *sum_p on success. */
static int compute(const options *o, double *sum_p, size_t *tasks_p)
{
  char root[256];
  tsr_client *c = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  tsr_chunk *ch = NULL;
  double t0 = now_s();
  int rc = tsr_client_open(&c, NULL, NULL);
  if (rc != 0) return fail("connecting to the scheduler ($TESSERA_SCHEDULER)", rc);
  if ((rc = build_graph(o, &g, root, sizeof root)) != 0) fail("building the graph", rc);
  *tasks_p = tsr_graph_size(g);
  double t1 = now_s();
  if (rc == 0 && (rc = tsr_submit(c, &g, &f)) != 0) fail("submitting", rc);
  double t2 = now_s();
  if (rc == 0 && (rc = tsr_future_wait(f, o->timeout_ms)) != 0) {
    fail("computing", rc);
    if (rc == TSR_ETASK) fprintf(stderr, "tsr-sum-random: %s\n", tsr_future_error(f));
  }
  double t3 = now_s();
  if (rc == 0 && (rc = tsr_gather(c, root, o->timeout_ms, &ch)) != 0) fail("gathering the result", rc);
  double t4 = now_s();
  if (rc == 0 && (ch->ndim != 0 || ch->dtype != o->dtype)) {
    fprintf(stderr, "tsr-sum-random: the result is not a 0-d %s\n", tsr_dtype_name(o->dtype));
    rc = TSR_ESHAPE;
  }
  if (rc == 0) *sum_p = o->dtype == TSR_F32 ? *(const float *)ch->data : *(const double *)ch->data;
  if (rc == 0)
    printf("time: build %.3f s, submit %.3f s, compute %.3f s, gather %.3f s (%zu tasks)\n", t1 - t0, t2 - t1,
           t3 - t2, t4 - t3, *tasks_p);
  tsr_chunk_destroy(&ch);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(c);
  return rc == 0 ? 0 : 1;
}

static int verify(const options *o, double sum)
{
  if (!philox_self_test()) {
    fprintf(stderr, "tsr-sum-random: Philox4x32-10 known-answer test failed\n");
    return 1;
  }
  double t0 = now_s();
  long double ref = reference_sum(o->n, o->seed, o->dtype);
  double rel = fabsl(ref) > 0 ? (double)(fabsl((long double)sum - ref) / fabsl(ref)) : fabs(sum);
  double tol = o->dtype == TSR_F32 ? 1e-5 : 1e-12;
  printf("reference = %.17Lg (%.3f s in-process), relative difference %.3g\n", ref, now_s() - t0, rel);
  if (!(rel <= tol)) {
    fprintf(stderr, "tsr-sum-random: MISMATCH: cluster %.17g vs reference %.17Lg (relative %.3g > %g)\n", sum, ref,
            rel, tol);
    return 1;
  }
  printf("verified\n");
  return 0;
}

int main(int argc, char **argv)
{
  options o = {.dtype = TSR_F64, .timeout_ms = -1};
  int code = parse(argc, argv, &o);
  if (code >= 0) return code;
  double sum = 0;
  size_t tasks = 0;
  double t0 = now_s();
  if (compute(&o, &sum, &tasks) != 0) return 1;
  printf("sum = %.17g\n", sum);
  printf("total %.3f s for %" PRId64 " elements in chunks of %" PRId64 "\n", now_s() - t0, o.n, o.chunk);
  fflush(stdout);
  return o.verify ? verify(&o, sum) : 0;
}
