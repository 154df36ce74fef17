/* Unit tests of the Zarr chunk ops and their codecs (kernels/cpu/codecs.c,
 * zarr_chunk.c, zarr_read.c, zarr_write.c): CRC32C's known answer, every
 * codec's round trip and its refusal of corrupt or lying streams, edge
 * chunks padded on write and cut on read, missing chunks as the fill
 * value, big-endian and transposed stores, shards (index at either end,
 * crc32c, empty inner chunks) and the limits checked before allocating. */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu/codecs.h"
#include "cpu/ops.h"
#include "kernels.h"
#include "kit.h"

static char tmpdir[64];

/* ---------- helpers ---------- */

static int run_op(const char *name, const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  memset(out, 0, sizeof *out);
  err->text[0] = '\0';
  return tsr_op_run_cpu(tsr_op_find(name), p, in, n_in, out, err);
}

static void put_file(const char *path, const void *data, size_t len)
{
  FILE *f = fopen(path, "wb");
  if (f == NULL) return;
  if (len > 0 && fwrite(data, 1, len, f) != len) fprintf(stderr, "short write to %s\n", path);
  fclose(f);
}

static void add_dims(tsr_params *p, const char *name, int n, const int64_t *v)
{
  tsr_params_add_ints(p, name, v, (size_t)n);
}

/* Params of a zarr_read of path: dtype, chunk, region. */
static void read_params(tsr_params *p, const char *path, const char *dtype, int nd, const int64_t *chunk,
                        const int64_t *region)
{
  tsr_params_clear(p);
  tsr_params_add_str(p, "path", path, strlen(path));
  tsr_params_add_str(p, "dtype", dtype, strlen(dtype));
  add_dims(p, "chunk_shape", nd, chunk);
  add_dims(p, "shape", nd, region);
}

static void fill_pattern(unsigned char *b, size_t n)
{
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((i * 7) % 13 + (i / 64) % 5);
}

/* ---------- crc32c and codecs ---------- */

TEST(crc32c_known_answer)
{
  ASSERT_EQ(tsr_crc32c("123456789", 9), 0xE3069283u);
  ASSERT_EQ(tsr_crc32c("", 0), 0u);
}

static int round_trip(tsr_codec_enc e, const unsigned char *src, size_t n)
{
  size_t cap = tsr_codec_bound(&e, n), len = 0;
  unsigned char *enc = malloc(cap), *dec = malloc(n);
  tsr_errbuf err;
  int ok = tsr_codec_enc_check("t", &e, &err) == 0 && tsr_codec_encode(&e, src, n, enc, cap, &len, "t", &err) == 0;
  if (ok && e.id != TSR_CODEC_NONE)
    ok = tsr_codec_decompress(e.id, enc, len, dec, n, "t", &err) == 0 && memcmp(dec, src, n) == 0;
  /* Asking for one byte more or fewer than the stream holds must fail. */
  if (ok && e.id != TSR_CODEC_NONE) ok = tsr_codec_decompress(e.id, enc, len, dec, n - 1, "t", &err) == TSR_EIO;
  if (!ok) fprintf(stderr, "  %s: %s\n", tsr_codec_name(e.id), err.text);
  free(enc), free(dec);
  return ok;
}

TEST(every_codec_round_trips)
{
  static const char *const cnames[] = {"lz4", "lz4hc", "zstd", "zlib", "blosclz"};
  size_t n = 100003;
  unsigned char *src = malloc(n);
  fill_pattern(src, n);
  for (int c = 0; c < 5; c++)
    for (int s = 0; s < 3; s++) ASSERT_TRUE(round_trip((tsr_codec_enc){TSR_CODEC_BLOSC, 5, cnames[c], s, 4}, src, n));
  ASSERT_TRUE(round_trip((tsr_codec_enc){TSR_CODEC_ZSTD, 0, NULL, 0, 8}, src, n));
  ASSERT_TRUE(round_trip((tsr_codec_enc){TSR_CODEC_ZSTD, 19, NULL, 0, 8}, src, n));
  ASSERT_TRUE(round_trip((tsr_codec_enc){TSR_CODEC_GZIP, 5, NULL, 0, 8}, src, n));
  ASSERT_TRUE(round_trip((tsr_codec_enc){TSR_CODEC_ZLIB, 1, NULL, 0, 8}, src, n));
  ASSERT_TRUE(round_trip((tsr_codec_enc){TSR_CODEC_NONE, 0, NULL, 0, 8}, src, n));
  tsr_errbuf err;
  ASSERT_EQ(tsr_codec_enc_check("t", &(tsr_codec_enc){TSR_CODEC_BLOSC, 5, "snappy2", 1, 4}, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "snappy2");
  free(src);
}

/* A compressed stream, then damaged copies of it: each must be refused
 * with a message, never overrun dst (ASan watches) nor crash. */
TEST(corrupt_streams_are_refused)
{
  size_t n = 50000, want = n;
  unsigned char *src = malloc(n), *dst = malloc(n);
  fill_pattern(src, n);
  tsr_codec_id ids[] = {TSR_CODEC_BLOSC, TSR_CODEC_ZSTD, TSR_CODEC_GZIP, TSR_CODEC_ZLIB};
  for (int i = 0; i < 4; i++) {
    tsr_codec_enc e = {ids[i], 5, "lz4", 1, 4};
    size_t cap = tsr_codec_bound(&e, n), len = 0;
    unsigned char *enc = malloc(cap);
    tsr_errbuf err;
    ASSERT_OK(tsr_codec_encode(&e, src, n, enc, cap, &len, "t", &err));
    ASSERT_EQ(tsr_codec_decompress(ids[i], enc, len / 2, dst, want, "chunk/0.0", &err), TSR_EIO);
    ASSERT_CONTAINS(err.text, "chunk/0.0");
    for (size_t k = len / 3; k < len / 3 + 8; k++) enc[k] ^= 0x5a;
    ASSERT_NE(tsr_codec_decompress(ids[i], enc, len, dst, want, "chunk/0.0", &err), 0);
    memset(enc, 0xff, 16);
    ASSERT_EQ(tsr_codec_decompress(ids[i], enc, len, dst, want, "chunk/0.0", &err), TSR_EIO);
    free(enc);
  }
  free(src), free(dst);
}

/* A blosc header that claims 2 GiB must be refused from the header alone. */
TEST(blosc_header_claiming_too_much_is_refused_before_decoding)
{
  unsigned char src[4096], dst[4096], enc[4096 + 16];
  fill_pattern(src, sizeof src);
  tsr_codec_enc e = {TSR_CODEC_BLOSC, 5, "lz4", 1, 4};
  size_t len = 0;
  tsr_errbuf err;
  ASSERT_OK(tsr_codec_encode(&e, src, sizeof src, enc, sizeof enc, &len, "t", &err));
  uint32_t huge = 0x7fffffef;
  memcpy(enc + 4, &huge, 4);  /* nbytes */
  ASSERT_EQ(tsr_codec_decompress(TSR_CODEC_BLOSC, enc, len, dst, sizeof dst, "c/1", &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "c/1");
}

/* ---------- zarr_write and zarr_read ---------- */

TEST(edge_chunk_written_padded_and_read_back_with_each_codec)
{
  static const char *const codecs[] = {"none", "blosc", "zstd", "gzip", "zlib"};
  int32_t region[3 * 2] = {1, -2, 3, -4, 5, 2147483647};
  int64_t rshape[2] = {3, 2}, chunk[2] = {4, 4};
  for (int c = 0; c < 5; c++) {
    tsr_params p = TSR_PARAMS_INIT;
    char key[64], path[256];
    snprintf(key, sizeof key, "%s/c/1/2", codecs[c]);
    tsr_params_add_str(&p, "root", tmpdir, strlen(tmpdir));
    tsr_params_add_str(&p, "key", key, strlen(key));
    add_dims(&p, "chunk_shape", 2, chunk);
    tsr_params_add_int(&p, "fill_bits", 0xfffffff9);  /* -7 as i32 */
    tsr_params_add_str(&p, "codec", codecs[c], strlen(codecs[c]));
    tsr_buf in = {{TSR_I32, 2, {3, 2}}, region, sizeof region}, out, back;
    tsr_errbuf err;
    ASSERT_OK(run_op("zarr_write", &p, &in, 1, &out, &err));
    ASSERT_TRUE(*(int64_t *)out.data > 0);
    free(out.data);
    snprintf(path, sizeof path, "%s/%s", tmpdir, key);
    struct stat st;
    ASSERT_OK(stat(path, &st));
    if (c == 0) ASSERT_EQ(st.st_size, 4 * 4 * 4);  /* stored at full chunk size */
    read_params(&p, path, "i32", 2, chunk, chunk);
    if (c > 0) tsr_params_add_str(&p, "codecs", codecs[c], strlen(codecs[c]));
    ASSERT_OK(run_op("zarr_read", &p, NULL, 0, &back, &err));
    const int32_t *full = back.data;
    ASSERT_EQ(full[0], 1);
    ASSERT_EQ(full[1], -2);
    ASSERT_EQ(full[2], -7);   /* padding */
    ASSERT_EQ(full[9], 2147483647);
    ASSERT_EQ(full[15], -7);
    free(back.data);
    read_params(&p, path, "i32", 2, chunk, rshape);
    if (c > 0) tsr_params_add_str(&p, "codecs", codecs[c], strlen(codecs[c]));
    ASSERT_OK(run_op("zarr_read", &p, NULL, 0, &back, &err));
    ASSERT_EQ(back.meta.shape[0], 3);
    ASSERT_EQ(memcmp(back.data, region, sizeof region), 0);
    free(back.data);
    tsr_params_clear(&p);
  }
}

TEST(missing_chunk_reads_as_fill_value)
{
  tsr_params p = TSR_PARAMS_INIT;
  char path[256];
  int64_t chunk[1] = {5};
  double nan_value = NAN;
  int64_t bits;
  memcpy(&bits, &nan_value, sizeof bits);
  snprintf(path, sizeof path, "%s/no/such/chunk", tmpdir);
  read_params(&p, path, "f64", 1, chunk, chunk);
  tsr_params_add_int(&p, "fill_bits", bits);
  tsr_params_add_str(&p, "codecs", "zstd", 4);
  tsr_buf out;
  tsr_errbuf err;
  ASSERT_OK(run_op("zarr_read", &p, NULL, 0, &out, &err));
  ASSERT_EQ(memcmp(out.data, &nan_value, 8), 0);
  ASSERT_EQ(memcmp((char *)out.data + 32, &nan_value, 8), 0);
  free(out.data);
  tsr_params_clear(&p);
}

/* A 2x3 i32 chunk stored big-endian in F order: stored bytes are the
 * transpose (3x2) in C order, each element big-endian. */
TEST(big_endian_transposed_chunk_reads_in_c_order)
{
  int32_t want[6] = {10, 11, 12, 20, 21, -22};
  unsigned char raw[24];
  int64_t chunk[2] = {2, 3}, perm[2] = {1, 0}, k = 0;
  for (int j = 0; j < 3; j++)
    for (int i = 0; i < 2; i++, k++) {
      uint32_t v = (uint32_t)want[i * 3 + j];
      raw[4 * k] = (unsigned char)(v >> 24), raw[4 * k + 1] = (unsigned char)(v >> 16);
      raw[4 * k + 2] = (unsigned char)(v >> 8), raw[4 * k + 3] = (unsigned char)v;
    }
  char path[256];
  snprintf(path, sizeof path, "%s/be_f", tmpdir);
  put_file(path, raw, sizeof raw);
  tsr_params p = TSR_PARAMS_INIT;
  read_params(&p, path, "i32", 2, chunk, chunk);
  tsr_params_add_bool(&p, "big_endian", true);
  tsr_params_add_ints(&p, "perm", perm, 2);
  tsr_buf out;
  tsr_errbuf err;
  ASSERT_OK(run_op("zarr_read", &p, NULL, 0, &out, &err));
  ASSERT_EQ(memcmp(out.data, want, sizeof want), 0);
  free(out.data);
  /* The region of an edge chunk: the first row, first two columns. */
  int64_t region[2] = {1, 2};
  read_params(&p, path, "i32", 2, chunk, region);
  tsr_params_add_bool(&p, "big_endian", true);
  tsr_params_add_ints(&p, "perm", perm, 2);
  ASSERT_OK(run_op("zarr_read", &p, NULL, 0, &out, &err));
  ASSERT_EQ(((int32_t *)out.data)[1], 11);
  free(out.data);
  tsr_params_clear(&p);
}

/* Encodes one inner chunk (u8 2x2 with value v, gzip then crc32c). */
static size_t inner_chunk(unsigned char v, unsigned char *out)
{
  unsigned char raw[4] = {v, (unsigned char)(v + 1), (unsigned char)(v + 2), (unsigned char)(v + 3)};
  tsr_codec_enc e = {TSR_CODEC_GZIP, 5, NULL, 0, 1};
  size_t len = 0;
  tsr_errbuf err;
  tsr_codec_encode(&e, raw, 4, out, 256, &len, "t", &err);
  uint32_t crc = tsr_crc32c(out, len);
  for (int i = 0; i < 4; i++) out[len + (size_t)i] = (unsigned char)(crc >> (8 * i));
  return len + 4;
}

static void put_u64(unsigned char *p, uint64_t v)
{
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A shard of 2x2 inner chunks (0, 2 and 3 present, 1 empty). */
static size_t build_shard(bool index_at_start, unsigned char *file)
{
  unsigned char index[4 * 16 + 4], chunks[4][300];
  size_t lens[4] = {0}, at = index_at_start ? sizeof index : 0;
  for (int k = 0; k < 4; k++) lens[k] = k == 1 ? 0 : inner_chunk((unsigned char)(10 * k), chunks[k]);
  for (int k = 3; k >= 0; k--) {  /* stored out of order, as the spec allows */
    put_u64(index + 16 * k, k == 1 ? UINT64_MAX : at);
    put_u64(index + 16 * k + 8, k == 1 ? UINT64_MAX : lens[k]);
    memcpy(file + at, chunks[k], lens[k]);
    at += lens[k];
  }
  uint32_t crc = tsr_crc32c(index, 64);
  for (int i = 0; i < 4; i++) index[64 + i] = (unsigned char)(crc >> (8 * i));
  memcpy(file + (index_at_start ? 0 : at), index, sizeof index);
  return at + (index_at_start ? 0 : sizeof index);
}

static int read_inner(const char *path, bool start, int k, unsigned char *got, tsr_errbuf *err)
{
  tsr_params p = TSR_PARAMS_INIT;
  int64_t chunk[2] = {2, 2};
  read_params(&p, path, "u8", 2, chunk, chunk);
  tsr_params_add_str(&p, "codecs", "gzip,crc32c", 11);
  tsr_params_add_int(&p, "fill_bits", 99);
  tsr_params_add_int(&p, "shard_chunks", 4);
  tsr_params_add_int(&p, "shard_chunk", k);
  tsr_params_add_str(&p, "index_location", start ? "start" : "end", start ? 5 : 3);
  tsr_params_add_str(&p, "index_codecs", "crc32c", 6);
  tsr_buf out;
  int rc = run_op("zarr_read", &p, NULL, 0, &out, err);
  if (rc == 0) memcpy(got, out.data, 4), free(out.data);
  tsr_params_clear(&p);
  return rc;
}

TEST(shard_inner_chunks_with_index_at_either_end)
{
  unsigned char file[2048], got[4];
  char path[256];
  tsr_errbuf err;
  for (int start = 0; start < 2; start++) {
    snprintf(path, sizeof path, "%s/shard%d", tmpdir, start);
    put_file(path, file, build_shard(start, file));
    ASSERT_OK(read_inner(path, start, 0, got, &err));
    ASSERT_TRUE(got[0] == 0 && got[3] == 3);
    ASSERT_OK(read_inner(path, start, 3, got, &err));
    ASSERT_TRUE(got[0] == 30 && got[3] == 33);
    ASSERT_OK(read_inner(path, start, 1, got, &err));   /* empty: fill */
    ASSERT_TRUE(got[0] == 99 && got[3] == 99);
  }
  /* A flipped index byte fails its crc32c; the message names the shard. */
  size_t len = build_shard(false, file);
  file[len - 30] ^= 1;
  snprintf(path, sizeof path, "%s/shard_bad", tmpdir);
  put_file(path, file, len);
  ASSERT_EQ(read_inner(path, false, 0, got, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "shard_bad (inner chunk 0): shard index: crc32c mismatch");
  /* An index entry pointing past the end of the file. */
  len = build_shard(true, file);
  put_u64(file + 16 * 2 + 8, 1u << 30);
  uint32_t crc = tsr_crc32c(file, 64);
  for (int i = 0; i < 4; i++) file[64 + i] = (unsigned char)(crc >> (8 * i));
  put_file(path, file, len);
  ASSERT_EQ(read_inner(path, true, 2, got, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "of a");
  /* Too short to hold its index. */
  put_file(path, file, 10);
  ASSERT_EQ(read_inner(path, true, 0, got, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "too few for its index");
}

TEST(corrupt_and_oversized_chunk_files_are_refused)
{
  tsr_params p = TSR_PARAMS_INIT;
  char path[256];
  int64_t chunk[2] = {100, 100};
  tsr_buf out;
  tsr_errbuf err;
  unsigned char junk[500];
  fill_pattern(junk, sizeof junk);
  snprintf(path, sizeof path, "%s/0.0", tmpdir);
  put_file(path, junk, sizeof junk);
  read_params(&p, path, "f64", 2, chunk, chunk);
  tsr_params_add_str(&p, "codecs", "blosc", 5);
  ASSERT_EQ(run_op("zarr_read", &p, NULL, 0, &out, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "zarr_read: ");
  ASSERT_CONTAINS(err.text, "/0.0: ");
  /* "none": the file must hold exactly the chunk. */
  read_params(&p, path, "f64", 2, chunk, chunk);
  ASSERT_EQ(run_op("zarr_read", &p, NULL, 0, &out, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "corrupt or truncated chunk");
  /* A sparse 3 GB file is refused from its size, before any allocation. */
  int fd = open(path, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fd >= 0 && ftruncate(fd, 3000000000LL) == 0);
  close(fd);
  read_params(&p, path, "f64", 2, chunk, chunk);
  tsr_params_add_str(&p, "codecs", "zstd", 4);
  ASSERT_EQ(run_op("zarr_read", &p, NULL, 0, &out, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "more than any encoding");
  unlink(path);
  tsr_params_clear(&p);
}

TEST(infer_refuses_bad_params)
{
  tsr_params p = TSR_PARAMS_INIT;
  int64_t big[2] = {100000, 100000}, chunk[2] = {4, 4}, over[2] = {5, 4}, perm[2] = {0, 0};
  tsr_buf out;
  tsr_errbuf err;
  read_params(&p, "/x", "f64", 2, big, big);
  ASSERT_EQ(run_op("zarr_read", &p, NULL, 0, &out, &err), TSR_ELIMIT);
  read_params(&p, "/x", "f64", 2, chunk, over);
  ASSERT_EQ(run_op("zarr_read", &p, NULL, 0, &out, &err), TSR_ESHAPE);
  read_params(&p, "/x", "f16", 2, chunk, chunk);
  ASSERT_EQ(run_op("zarr_read", &p, NULL, 0, &out, &err), TSR_EINVAL);
  read_params(&p, "/x", "f64", 2, chunk, chunk);
  tsr_params_add_ints(&p, "perm", perm, 2);
  ASSERT_EQ(run_op("zarr_read", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "permutation");
  read_params(&p, "/x", "f64", 2, chunk, chunk);
  tsr_params_add_str(&p, "codecs", "lzma", 4);
  ASSERT_EQ(run_op("zarr_read", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "unknown codec 'lzma'");
  read_params(&p, "/x", "f64", 2, chunk, chunk);
  tsr_params_add_str(&p, "codecs", "zstd,gzip", 9);
  ASSERT_EQ(run_op("zarr_read", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "more than one compressor");
  tsr_params_clear(&p);
  double one[1] = {1};
  tsr_buf in = {{TSR_F64, 1, {1}}, one, sizeof one};
  int64_t c1[1] = {1};
  tsr_params_add_str(&p, "root", tmpdir, strlen(tmpdir));
  tsr_params_add_str(&p, "key", "../escape", 9);
  add_dims(&p, "chunk_shape", 1, c1);
  ASSERT_EQ(run_op("zarr_write", &p, &in, 1, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "'..'");
  tsr_params_clear(&p);
}

/* crc32c around a compressor in both orders. */
TEST(crc32c_codec_before_and_after_a_compressor)
{
  unsigned char raw[64], enc[512];
  fill_pattern(raw, sizeof raw);
  tsr_codec_enc e = {TSR_CODEC_ZSTD, 3, NULL, 0, 8};
  tsr_errbuf err;
  size_t len = 0;
  /* "zstd,crc32c": the checksum covers the compressed bytes. */
  ASSERT_OK(tsr_codec_encode(&e, raw, sizeof raw, enc, sizeof enc, &len, "t", &err));
  uint32_t crc = tsr_crc32c(enc, len);
  memcpy(enc + len, &crc, 4);
  char path[256];
  snprintf(path, sizeof path, "%s/crc_after", tmpdir);
  put_file(path, enc, len + 4);
  tsr_params p = TSR_PARAMS_INIT;
  int64_t chunk[1] = {8};
  read_params(&p, path, "f64", 1, chunk, chunk);
  tsr_params_add_str(&p, "codecs", "zstd,crc32c", 11);
  tsr_buf out;
  ASSERT_OK(run_op("zarr_read", &p, NULL, 0, &out, &err));
  ASSERT_EQ(memcmp(out.data, raw, 64), 0);
  free(out.data);
  /* "crc32c,zstd": the compressor holds the chunk and its checksum. */
  unsigned char with_crc[68];
  memcpy(with_crc, raw, 64);
  crc = tsr_crc32c(raw, 64);
  memcpy(with_crc + 64, &crc, 4);
  ASSERT_OK(tsr_codec_encode(&e, with_crc, 68, enc, sizeof enc, &len, "t", &err));
  snprintf(path, sizeof path, "%s/crc_before", tmpdir);
  put_file(path, enc, len);
  read_params(&p, path, "f64", 1, chunk, chunk);
  tsr_params_add_str(&p, "codecs", "crc32c,zstd", 11);
  ASSERT_OK(run_op("zarr_read", &p, NULL, 0, &out, &err));
  ASSERT_EQ(memcmp(out.data, raw, 64), 0);
  free(out.data);
  tsr_params_clear(&p);
}

int main(void)
{
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-kzarr-XXXXXX");
  if (mkdtemp(tmpdir) == NULL) return 1;
  tsr_ops_init(false);
  RUN(crc32c_known_answer);
  RUN(every_codec_round_trips);
  RUN(corrupt_streams_are_refused);
  RUN(blosc_header_claiming_too_much_is_refused_before_decoding);
  RUN(edge_chunk_written_padded_and_read_back_with_each_codec);
  RUN(missing_chunk_reads_as_fill_value);
  RUN(big_endian_transposed_chunk_reads_in_c_order);
  RUN(shard_inner_chunks_with_index_at_either_end);
  RUN(corrupt_and_oversized_chunk_files_are_refused);
  RUN(infer_refuses_bad_params);
  RUN(crc32c_codec_before_and_after_a_compressor);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
