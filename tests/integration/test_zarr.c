/* Zarr arrays in and out, on real daemons, against zarr-python (the
 * reference implementation, from the venv scripts/test-venv.sh makes:
 * $TSR_ZARR_PYTHON running $TSR_ZARR_SCRIPT, tests/zarr/zarr_fixtures.py).
 *
 * 1. The script writes Zarr v2 and v3 arrays (every codec, cname and
 *    shuffle, every dtype in both byte orders, both key separators, F order
 *    and transpose, missing chunks, edge chunks, shards, 0-D to 4-D) with
 *    the bytes zarr-python reads from each; tsr_from_zarr must read each
 *    bit for bit the same.
 * 2. tsr_to_zarr writes arrays (v2 and v3, several codecs, fill values,
 *    edge chunks); the script reads them with zarr-python and compares bit
 *    for bit with the source; Tessera reads them back too.
 * 3. Bad input gives clear errors naming the file and the problem, and the
 *    daemons keep serving afterwards.
 * Without the venv the test fails (it is never skipped). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster.h"
#include "kit.h"
#include "tessera/zarr.h"

static cluster c;
static tsr_client *client;
static char tmpdir[128], fixtures[256];
static const char *python, *script;

/* ---------- helpers ---------- */

static char *slurp(const char *path, size_t *len_p)
{
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc(n > 0 ? (size_t)n : 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  *len_p = got;
  return buf;
}

static void put_text(const char *dir, const char *name, const char *text)
{
  char path[512];
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (f != NULL) fputs(text, f), fclose(f);
}

/* "a,b,c" or "-" (0-D) into dims; returns the count. */
static int parse_dims(char *text, int64_t *dims)
{
  int n = 0;
  if (strcmp(text, "-") == 0) return 0;
  for (char *tok = strtok(text, ","); tok != NULL && n < TSR_MAX_NDIM; tok = strtok(NULL, ",")) dims[n++] = atoll(tok);
  return n;
}

/* Runs the fixture script with mode and arg; its stdout into out. */
static int run_script(const char *mode, const char *arg, char *out, size_t cap)
{
  const char *argv[] = {python, script, mode, arg, NULL};
  int rc = run_capture(argv, NULL, out, cap, 180);
  fprintf(stderr, "  %s %s: exit %d\n%s", script, mode, rc, out);
  return rc;
}

/* Reads path with tsr_from_zarr and compares with raw; 0 when equal. */
static int read_and_compare(tsr_array_ctx *ctx, const char *path, const char *raw, tsr_dtype dt, int nd,
                            const int64_t *shape, const int64_t *chunks)
{
  tsr_array *a = NULL;
  int rc = tsr_from_zarr(ctx, path, &a);
  if (rc != 0) return fprintf(stderr, "    from_zarr: %s: %s\n", tsr_err_name(rc), tsr_errmsg()), 1;
  if (tsr_array_dtype(a) != dt || tsr_array_ndim(a) != nd) return fprintf(stderr, "    wrong dtype or ndim\n"), 1;
  for (int d = 0; d < nd; d++) {
    int64_t want_chunk = chunks == NULL ? -1 : chunks[d] < shape[d] ? chunks[d] : shape[d];
    if (tsr_array_dim(a, d) != shape[d] || (chunks != NULL && tsr_array_chunk(a, d) != want_chunk))
      return fprintf(stderr, "    axis %d: %lld, chunk %lld\n", d, (long long)tsr_array_dim(a, d),
                     (long long)tsr_array_chunk(a, d)), 1;
  }
  size_t want_len = 0, n = (size_t)tsr_array_size(a) * tsr_dtype_size(dt);
  char *want = slurp(raw, &want_len), *got = malloc(n ? n : 1);
  rc = tsr_compute(ctx, a, got, n, 60000);
  if (rc != 0) fprintf(stderr, "    compute: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  int differ = rc != 0 || want == NULL || want_len != n || memcmp(got, want, n) != 0;
  if (rc == 0 && differ) fprintf(stderr, "    %zu bytes differ from the %zu of %s\n", n, want_len, raw);
  free(want), free(got);
  tsr_array_free(ctx, &a);
  return differ;
}

/* ---------- 1. reading what zarr-python wrote ---------- */

TEST(reads_every_zarr_python_fixture_bit_for_bit)
{
  char manifest[300], line[2048];
  snprintf(manifest, sizeof manifest, "%s/manifest.tsv", fixtures);
  FILE *f = fopen(manifest, "r");
  ASSERT_TRUE(f != NULL);
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  int n = 0, failed = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    char *name = strtok(line, "\t"), *path = strtok(NULL, "\t"), *raw = strtok(NULL, "\t");
    char *dtype = strtok(NULL, "\t"), *shape_s = strtok(NULL, "\t"), *chunk_s = strtok(NULL, "\t\n");
    if (chunk_s == NULL) continue;
    int64_t shape[TSR_MAX_NDIM], chunks[TSR_MAX_NDIM];
    int nd = parse_dims(shape_s, shape);
    parse_dims(chunk_s, chunks);
    int bad = read_and_compare(ctx, path, raw, tsr_dtype_parse(dtype), nd, shape, chunks);
    if (bad) fprintf(stderr, "  FAIL %s\n", name);
    failed += bad, n++;
  }
  fclose(f);
  tsr_array_ctx_destroy(&ctx);
  fprintf(stderr, "  read %d zarr-python arrays, %d failed\n", n, failed);
  ASSERT_TRUE(n >= 70);
  ASSERT_EQ(failed, 0);
}

/* ---------- 2. writing what zarr-python reads ---------- */

typedef struct write_case {
  const char *name;
  tsr_zarr_write_opts opts;
  tsr_dtype dtype;
  int ndim;
  int64_t shape[3], chunks[3];
} write_case;

static const char *numpy_dtype(tsr_dtype dt)
{
  static const char *const names[] = {"", "|u1", "<i4", "<i8", "<f4", "<f8"};
  return names[dt];
}

/* The source array of a case: random values over the dtype. */
static int make_source(tsr_array_ctx *ctx, const write_case *w, uint64_t seed, tsr_array **out_p)
{
  if (w->dtype == TSR_F32 || w->dtype == TSR_F64)
    return tsr_random_normal(ctx, seed, w->dtype, w->ndim, w->shape, w->chunks, out_p);
  int64_t high = w->dtype == TSR_U8 ? 256 : (int64_t)1 << 31;
  return tsr_randint(ctx, seed, w->dtype == TSR_U8 ? 0 : -((int64_t)1 << 31), high, w->dtype, w->ndim, w->shape,
                     w->chunks, out_p);
}

/* Writes case w with tsr_to_zarr and its source bytes beside it; appends
 * its line to the listing; reads it back with tsr_from_zarr. */
static int write_one(tsr_array_ctx *ctx, const write_case *w, uint64_t seed, FILE *listing)
{
  char path[300], raw[300], dims[64] = "-";
  tsr_array *src = NULL;
  snprintf(path, sizeof path, "%s/out/%s.zarr", tmpdir, w->name);
  snprintf(raw, sizeof raw, "%s/out/%s.raw", tmpdir, w->name);
  size_t n = tsr_dtype_size(w->dtype);
  for (int d = 0; d < w->ndim; d++) n *= (size_t)w->shape[d];
  char *bytes = malloc(n ? n : 1);
  int rc = make_source(ctx, w, seed, &src);
  if (rc == 0) rc = tsr_compute(ctx, src, bytes, n, 60000);
  if (rc == 0) rc = tsr_to_zarr(ctx, src, path, &w->opts, 60000);
  if (rc != 0) fprintf(stderr, "    %s: %s: %s\n", w->name, tsr_err_name(rc), tsr_errmsg());
  FILE *f = fopen(raw, "wb");
  if (f != NULL) fwrite(bytes, 1, n, f), fclose(f);
  free(bytes);
  for (int d = 0, used = 0; d < w->ndim; d++)
    used += snprintf(dims + used, sizeof dims - (size_t)used, d ? ",%lld" : "%lld", (long long)w->shape[d]);
  fprintf(listing, "%s\t%s\t%s\t%s\t%s\t%d\n", w->name, path, raw, numpy_dtype(w->dtype), dims, w->opts.zarr_format);
  if (rc == 0 && read_and_compare(ctx, path, raw, w->dtype, w->ndim, w->shape, w->chunks) != 0) rc = -1;
  return rc;
}

static tsr_zarr_write_opts opts_of(int format, tsr_zarr_codec codec, const char *cname, tsr_zarr_shuffle shuffle,
                                   char sep, double fill)
{
  tsr_zarr_write_opts o = TSR_ZARR_WRITE_OPTS_DEFAULT;
  o.zarr_format = format, o.codec = codec, o.blosc_cname = cname, o.blosc_shuffle = shuffle;
  o.dimension_separator = sep, o.fill_value = fill;
  return o;
}

TEST(writes_arrays_zarr_python_reads_bit_for_bit)
{
  const write_case cases[] = {
    {"w2_blosc_lz4", opts_of(2, TSR_ZARR_BLOSC, "lz4", TSR_ZARR_SHUFFLE, 0, 0), TSR_F64, 2, {37, 23}, {10, 8}},
    {"w2_blosc_zstd_bit", opts_of(2, TSR_ZARR_BLOSC, "zstd", TSR_ZARR_BITSHUFFLE, 0, 0), TSR_I32, 2, {37, 23}, {10, 8}},
    {"w2_blosc_blosclz", opts_of(2, TSR_ZARR_BLOSC, "blosclz", TSR_ZARR_NOSHUFFLE, 0, 7), TSR_U8, 1, {1001}, {100}},
    {"w2_blosc_lz4hc", opts_of(2, TSR_ZARR_BLOSC, "lz4hc", TSR_ZARR_SHUFFLE, '/', 0), TSR_F32, 3, {9, 10, 11},
     {4, 5, 6}},
    {"w2_blosc_zlib", opts_of(2, TSR_ZARR_BLOSC, "zlib", TSR_ZARR_SHUFFLE, 0, -1), TSR_I64, 2, {20, 20}, {7, 7}},
    {"w2_zstd", opts_of(2, TSR_ZARR_ZSTD, NULL, 0, 0, 0), TSR_F64, 3, {9, 10, 11}, {4, 5, 6}},
    {"w2_gzip", opts_of(2, TSR_ZARR_GZIP, NULL, 0, 0, 0), TSR_I64, 1, {1000}, {333}},
    {"w2_zlib", opts_of(2, TSR_ZARR_ZLIB, NULL, 0, '/', 0), TSR_F32, 2, {31, 17}, {8, 8}},
    {"w2_none", opts_of(2, TSR_ZARR_NONE, NULL, 0, 0, 0), TSR_U8, 2, {31, 17}, {31, 5}},
    {"w3_default", opts_of(3, TSR_ZARR_ZSTD, NULL, 0, 0, 0), TSR_F64, 2, {37, 23}, {10, 8}},
    {"w3_blosc_lz4", opts_of(3, TSR_ZARR_BLOSC, "lz4", TSR_ZARR_SHUFFLE, 0, 0), TSR_I32, 3, {9, 10, 11}, {4, 5, 6}},
    {"w3_blosc_zstd_bit", opts_of(3, TSR_ZARR_BLOSC, "zstd", TSR_ZARR_BITSHUFFLE, '.', 0), TSR_U8, 2, {37, 23},
     {10, 8}},
    {"w3_gzip_nan", opts_of(3, TSR_ZARR_GZIP, NULL, 0, 0, NAN), TSR_F32, 2, {37, 23}, {10, 8}},
    {"w3_none", opts_of(3, TSR_ZARR_NONE, NULL, 0, 0, 3), TSR_I64, 1, {1000}, {300}},
    {"w3_scalar", opts_of(3, TSR_ZARR_ZSTD, NULL, 0, 0, 0), TSR_F64, 0, {0}, {0}},
  };
  char dir[300], listing_path[300], out[65536];
  snprintf(dir, sizeof dir, "%s/out", tmpdir);
  snprintf(listing_path, sizeof listing_path, "%s/written.tsv", tmpdir);
  mkdir(dir, 0755);
  FILE *listing = fopen(listing_path, "w");
  ASSERT_TRUE(listing != NULL);
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  int failed = 0;
  size_t n = sizeof cases / sizeof cases[0];
  for (size_t i = 0; i < n; i++) failed += write_one(ctx, &cases[i], 100 + i, listing) != 0;
  fclose(listing);
  tsr_array_ctx_destroy(&ctx);
  ASSERT_EQ(failed, 0);
  ASSERT_EQ(run_script("check", listing_path, out, sizeof out), 0);
  char want[64];
  snprintf(want, sizeof want, "checked %zu arrays, 0 failed", n);
  ASSERT_CONTAINS(out, want);
  /* The chunk files are where zarr-python's keys say: v2 "0.0", v2 with
   * '/' "0/0", v3 "c/0/0", v3 with '.' "c.0.0"; edge chunks at full size. */
  struct stat st;
  snprintf(dir, sizeof dir, "%s/out/w2_none.zarr/0.3", tmpdir);
  ASSERT_OK(stat(dir, &st));
  ASSERT_EQ(st.st_size, 31 * 5);
  snprintf(dir, sizeof dir, "%s/out/w2_zlib.zarr/3/2", tmpdir);
  ASSERT_OK(stat(dir, &st));
  snprintf(dir, sizeof dir, "%s/out/w3_none.zarr/c/3", tmpdir);
  ASSERT_OK(stat(dir, &st));
  ASSERT_EQ(st.st_size, 300 * 8);
  snprintf(dir, sizeof dir, "%s/out/w3_blosc_zstd_bit.zarr/c.3.2", tmpdir);
  ASSERT_OK(stat(dir, &st));
}

TEST(write_options_are_checked)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *a = NULL;
  int64_t shape[1] = {10};
  char path[300];
  snprintf(path, sizeof path, "%s/out/never.zarr", tmpdir);
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_full(ctx, 0.5, TSR_F64, 1, shape, NULL, &a));
  tsr_zarr_write_opts o = opts_of(3, TSR_ZARR_ZLIB, NULL, 0, 0, 0);
  ASSERT_EQ(tsr_to_zarr(ctx, a, path, &o, 10000), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "no zlib codec");
  o = opts_of(2, TSR_ZARR_BLOSC, "snappy", 0, 0, 0);
  ASSERT_EQ(tsr_to_zarr(ctx, a, path, &o, 10000), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "snappy");
  tsr_array *u = NULL;
  ASSERT_OK(tsr_full(ctx, 1, TSR_U8, 1, shape, NULL, &u));
  o = opts_of(2, TSR_ZARR_NONE, NULL, 0, 0, 300);
  ASSERT_EQ(tsr_to_zarr(ctx, u, path, &o, 10000), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "fill_value 300 is not a u8");
  struct stat st;
  ASSERT_NE(stat(path, &st), 0);
  tsr_array_ctx_destroy(&ctx);
}

/* ---------- 3. bad input ---------- */

/* tsr_from_zarr(dir) fails with rc and a message holding both needles. */
static int refused(tsr_array_ctx *ctx, const char *dir, int rc, const char *needle1, const char *needle2)
{
  tsr_array *a = NULL;
  int got = tsr_from_zarr(ctx, dir, &a);
  const char *msg = tsr_errmsg();
  fprintf(stderr, "    %s -> %s: %s\n", dir, tsr_err_name(got), msg);
  return got == rc && strstr(msg, needle1) != NULL && strstr(msg, needle2) != NULL;
}

static void bad_path(char *buf, size_t cap, const char *name)
{
  snprintf(buf, cap, "%s/bad/%s", fixtures, name);
}

TEST(bad_metadata_is_refused_with_clear_errors)
{
  tsr_array_ctx *ctx = NULL;
  char d[400];
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  snprintf(d, sizeof d, "%s/empty", tmpdir);
  mkdir(d, 0755);
  ASSERT_TRUE(refused(ctx, d, TSR_EIO, "/empty", "no zarr.json or .zarray"));
  snprintf(d, sizeof d, "%s/malformed", tmpdir);
  put_text(d, ".zarray", "{\"zarr_format\": 2, \"shape\": [4,}");
  ASSERT_TRUE(refused(ctx, d, TSR_EINVAL, "malformed/.zarray", "malformed JSON at line 1"));
  bad_path(d, sizeof d, "codec_lzma");
  ASSERT_TRUE(refused(ctx, d, TSR_EINVAL, "codec_lzma/.zarray", "unknown codec 'lzma'"));
  snprintf(d, sizeof d, "%s/unknown_v3_codec", tmpdir);
  put_text(d, "zarr.json",
           "{\"zarr_format\": 3, \"node_type\": \"array\", \"shape\": [4], \"data_type\": \"float64\","
           " \"chunk_grid\": {\"name\": \"regular\", \"configuration\": {\"chunk_shape\": [2]}},"
           " \"chunk_key_encoding\": {\"name\": \"default\"}, \"fill_value\": 0,"
           " \"codecs\": [{\"name\": \"bytes\"}, {\"name\": \"lz5\"}]}");
  ASSERT_TRUE(refused(ctx, d, TSR_EINVAL, "unknown_v3_codec/zarr.json", "unknown codec 'lz5'"));
  bad_path(d, sizeof d, "dtype_f2");
  ASSERT_TRUE(refused(ctx, d, TSR_ESHAPE, "dtype_f2/.zarray", "dtype '<f2' is not supported"));
  bad_path(d, sizeof d, "dtype_b1");
  ASSERT_TRUE(refused(ctx, d, TSR_ESHAPE, "dtype_b1/.zarray", "dtype '|b1' is not supported"));
  bad_path(d, sizeof d, "dtype_u2");
  ASSERT_TRUE(refused(ctx, d, TSR_ESHAPE, "dtype_u2/.zarray", "dtype '<u2' is not supported"));
  bad_path(d, sizeof d, "dtype_v3_u16");
  ASSERT_TRUE(refused(ctx, d, TSR_ESHAPE, "dtype_v3_u16/zarr.json", "data_type \"uint16\" is not supported"));
  snprintf(d, sizeof d, "%s/group", tmpdir);
  put_text(d, "zarr.json", "{\"zarr_format\": 3, \"node_type\": \"group\"}");
  ASSERT_TRUE(refused(ctx, d, TSR_EINVAL, "group/zarr.json", "this is a Zarr group"));
  snprintf(d, sizeof d, "%s/five_d", tmpdir);
  put_text(d, ".zarray", "{\"zarr_format\": 2, \"shape\": [2,2,2,2,2], \"chunks\": [1,1,1,1,1], \"dtype\": \"<f8\"}");
  ASSERT_TRUE(refused(ctx, d, TSR_ESHAPE, "five_d/.zarray", "at most 4"));
  snprintf(d, sizeof d, "%s/huge_chunk", tmpdir);
  put_text(d, ".zarray", "{\"zarr_format\": 2, \"shape\": [1000000, 1000000], \"chunks\": [100000, 100000],"
                         " \"dtype\": \"<f8\", \"compressor\": null, \"fill_value\": 0}");
  ASSERT_TRUE(refused(ctx, d, TSR_ELIMIT, "huge_chunk/.zarray", "a chunk is over"));
  tsr_array_ctx_destroy(&ctx);
}

/* A corrupt chunk fails its task with a message naming the chunk file;
 * the workers live on and the next graph runs. */
TEST(corrupt_chunk_names_the_file_and_daemons_keep_serving)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *a = NULL, *good = NULL, *sum = NULL;
  char d[400];
  double buf[100];
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  bad_path(d, sizeof d, "corrupt");
  ASSERT_OK(tsr_from_zarr(ctx, d, &a));
  ASSERT_EQ(tsr_compute(ctx, a, buf, sizeof buf, 30000), TSR_ETASK);
  fprintf(stderr, "    corrupt chunk: %s\n", tsr_errmsg());
  ASSERT_CONTAINS(tsr_errmsg(), "corrupt/c/1/0");
  ASSERT_CONTAINS(tsr_errmsg(), "blosc");
  for (int i = 0; i < c.n_workers; i++) ASSERT_TRUE(cluster_alive(c.workers[i]));
  snprintf(d, sizeof d, "%s/v2_none.zarr", fixtures);
  ASSERT_OK(tsr_from_zarr(ctx, d, &good));
  ASSERT_OK(tsr_sum(ctx, good, -1, 0, &sum));
  double total = 0;
  ASSERT_OK(tsr_compute(ctx, sum, &total, sizeof total, 30000));
  ASSERT_TRUE(total == total && total != 0);
  tsr_array_ctx_destroy(&ctx);
}

static int fail_setup(const char *why)
{
  fprintf(stderr, "integration.zarr: %s\n", why);
  return 1;
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  python = getenv("TSR_ZARR_PYTHON"), script = getenv("TSR_ZARR_SCRIPT");
  if (python == NULL || script == NULL || access(python, X_OK) != 0)
    return fail_setup("no zarr-python venv: $TSR_ZARR_PYTHON must name the python of the venv that "
                      "scripts/test-venv.sh creates (CTest's zarr.venv fixture runs it; see its output)");
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-zarr-XXXXXX");
  if (mkdtemp(tmpdir) == NULL) return fail_setup("cannot create a temp dir");
  snprintf(fixtures, sizeof fixtures, "%s/fixtures", tmpdir);
  static char out[65536];
  if (run_script("write", fixtures, out, sizeof out) != 0 || strstr(out, "wrote ") == NULL)
    return fail_setup("the fixture script failed (its output is above)");
  if (cluster_start(&c, 2, 1, NULL, NULL) != 0 || tsr_client_open(&client, c.address, NULL) != 0) {
    cluster_stop(&c, true);
    return fail_setup("cannot start the cluster");
  }
  RUN(reads_every_zarr_python_fixture_bit_for_bit);
  RUN(writes_arrays_zarr_python_reads_bit_for_bit);
  RUN(write_options_are_checked);
  RUN(bad_metadata_is_refused_with_clear_errors);
  RUN(corrupt_chunk_names_the_file_and_daemons_keep_serving);
  tsr_client_close(client);
  cluster_stop(&c, kit_failed_tests > 0);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (kit_failed_tests == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
