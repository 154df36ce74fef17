/* Unit tests of the worker's memory tiers: spill files (round trips with
 * every codec, several segments, corrupted and truncated files), the LRU
 * eviction of the chunk store (recomputable chunks dropped, others spilled,
 * pinned chunks kept, reload bit-identical), deletes and clears removing
 * files, the moves recorded for the scheduler (spilled, loaded, dropped;
 * replicas not; the last move per key; a task's own key held back), the
 * measured spill throughput, the executor's chunk-larger-than-the-limit
 * error and its recompute marking (the scheduler's flag, or the fallback).
 * No daemon, no sockets. */
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "executor.h"
#include "kernels.h"
#include "kit.h"
#include "net/net.h"
#include "net/ucx.h"
#include "spill.h"
#include "store.h"
#include "task.h"
#include "tiers.h"

static char tmp_dir[256];

static void make_tmp_dir(void)
{
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/tsr-spill-test-XXXXXX", base && base[0] ? base : "/tmp");
  if (mkdtemp(tmp_dir) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
}

static size_t count_files(const char *dir)
{
  DIR *d = opendir(dir);
  if (d == NULL) return (size_t)-1;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Flips one byte at offset of path (from the end when offset < 0). */
static int flip_byte(const char *path, long offset)
{
  FILE *f = fopen(path, "r+b");
  if (f == NULL) return -1;
  fseek(f, offset, offset < 0 ? SEEK_END : SEEK_SET);
  long at = ftell(f);
  int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(c ^ 0x5a, f);
  return fclose(f);
}

static tsr_chunk *make_chunk(tsr_wstore *store, const char *key, size_t nbytes, unsigned seed, bool recompute)
{
  tsr_meta meta = {TSR_U8, 1, {(int64_t)nbytes}};
  unsigned char *data = malloc(nbytes);
  for (size_t i = 0; i < nbytes; i++) data[i] = (unsigned char)((i * 31 + seed) % 251);
  tsr_chunk *chunk = NULL;
  if (tsr_chunk_new_malloc(store, key, &meta, data, nbytes, &chunk) != 0) free(data);
  chunk->recompute = recompute;
  return chunk;
}

static void put(tsr_wstore *store, const char *key, size_t nbytes, unsigned seed, bool recompute)
{
  tsr_chunk *c = make_chunk(store, key, nbytes, seed, recompute);
  tsr_wstore_put(store, c, tsr_wstore_epoch(store), NULL);
  tsr_chunk_unref(&c);
}

static bool same_as_made(const tsr_chunk *c, size_t nbytes, unsigned seed)
{
  if (c->nbytes != nbytes) return false;
  for (size_t i = 0; i < nbytes; i++)
    if (((unsigned char *)c->data)[i] != (unsigned char)((i * 31 + seed) % 251)) return false;
  return true;
}

/* A store of limit bytes with tiers (target 0.5, RSS not watched). */
static tsr_wstore *tiered_store(uint64_t limit, uint64_t disk_limit, tsr_tiers **tiers_p)
{
  tsr_tiers_opts o = TSR_TIERS_OPTS_DEFAULT;
  o.memory_limit = limit;
  o.target = 0.5;
  o.spill = 0;
  o.disk_limit = disk_limit;
  snprintf(o.dir, sizeof o.dir, "%s", tmp_dir);
  tsr_errbuf err = {{0}};
  if (tsr_tiers_new(&o, tiers_p, &err) != 0) {
    fprintf(stderr, "tiers: %s\n", err.text);
    exit(1);
  }
  tsr_wstore *store = tsr_wstore_new(limit);
  tsr_wstore_set_tiers(store, *tiers_p);
  return store;
}

static void close_store(tsr_wstore **store, tsr_tiers **tiers)
{
  tsr_wstore_destroy(store);
  tsr_tiers_destroy(tiers);
}

/* ---------- spill files ---------- */

TEST(crc32_known_values)
{
  ASSERT_EQ(tsr_crc32(0, "123456789", 9), 0xCBF43926u);
  ASSERT_EQ(tsr_crc32(0, "", 0), 0u);
  uint32_t part = tsr_crc32(0, "1234", 4);
  ASSERT_EQ(tsr_crc32(part, "56789", 5), 0xCBF43926u);
}

TEST(spill_round_trip_every_codec)
{
  const char *codecs[] = {"blosclz", "lz4", "zstd", "zlib"};
  size_t n = 100003;
  double *data = malloc(n * sizeof *data);
  for (size_t i = 0; i < n; i++) data[i] = (double)(i % 1000) * 0.5;
  char path[512];
  snprintf(path, sizeof path, "%s/rt.blosc", tmp_dir);
  for (size_t c = 0; c < 4; c++) {
    uint64_t file_bytes = 0;
    tsr_errbuf err = {{0}};
    ASSERT_OK(tsr_spill_write(path, codecs[c], 5, 8, data, n * sizeof *data, &file_bytes, &err));
    ASSERT_TRUE(file_bytes > 0 && file_bytes < n * sizeof *data);
    void *back = NULL;
    ASSERT_OK(tsr_spill_read(path, n * sizeof *data, &back, &err));
    ASSERT_TRUE(memcmp(back, data, n * sizeof *data) == 0);
    free(back);
  }
  tsr_errbuf err = {{0}};
  uint64_t fb;
  ASSERT_EQ(tsr_spill_write(path, "snappy", 5, 8, data, 8, &fb, &err), TSR_EINVAL);
  free(data);
  remove(path);
}

TEST(spill_empty_and_multi_segment)
{
  char path[512];
  snprintf(path, sizeof path, "%s/seg.blosc", tmp_dir);
  tsr_errbuf err = {{0}};
  uint64_t fb;
  void *back = NULL;
  ASSERT_OK(tsr_spill_write(path, "lz4", 1, 1, "", 0, &fb, &err));
  ASSERT_OK(tsr_spill_read(path, 0, &back, &err));
  free(back);
  size_t n = TSR_SPILL_SEGMENT + 12345;
  unsigned char *data = malloc(n);
  for (size_t i = 0; i < n; i++) data[i] = (unsigned char)(i * 7 + (i >> 13));
  ASSERT_OK(tsr_spill_write(path, "lz4", 1, 1, data, n, &fb, &err));
  ASSERT_OK(tsr_spill_read(path, n, &back, &err));
  ASSERT_TRUE(memcmp(back, data, n) == 0);
  free(back);
  /* A byte flipped in the second segment. */
  ASSERT_OK(flip_byte(path, -100));
  ASSERT_EQ(tsr_spill_read(path, n, &back, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "corrupted or truncated");
  free(data);
  remove(path);
}

TEST(spill_detects_corruption_and_truncation)
{
  char path[512];
  snprintf(path, sizeof path, "%s/bad.blosc", tmp_dir);
  size_t n = 50000;
  unsigned char *data = malloc(n);
  for (size_t i = 0; i < n; i++) data[i] = (unsigned char)(i % 97);
  tsr_errbuf err = {{0}};
  uint64_t fb;
  void *back = NULL;
  /* Every single-byte flip, at a spread of offsets, is detected. */
  ASSERT_OK(tsr_spill_write(path, "zstd", 3, 1, data, n, &fb, &err));
  for (long off = 0; off < (long)fb; off += (long)fb / 37 + 1) {
    ASSERT_OK(tsr_spill_write(path, "zstd", 3, 1, data, n, &fb, &err));
    ASSERT_OK(flip_byte(path, off));
    int rc = tsr_spill_read(path, n, &back, &err);
    if (rc != TSR_EIO) fprintf(stderr, "  offset %ld of %llu: rc %d\n", off, (unsigned long long)fb, rc);
    ASSERT_EQ(rc, TSR_EIO);
  }
  ASSERT_OK(tsr_spill_write(path, "zstd", 3, 1, data, n, &fb, &err));
  ASSERT_EQ(truncate(path, (off_t)fb - 10), 0);
  ASSERT_EQ(tsr_spill_read(path, n, &back, &err), TSR_EIO);
  ASSERT_EQ(truncate(path, 0), 0);
  ASSERT_EQ(tsr_spill_read(path, n, &back, &err), TSR_EIO);
  /* The right file for the wrong chunk size. */
  ASSERT_OK(tsr_spill_write(path, "zstd", 3, 1, data, n, &fb, &err));
  ASSERT_EQ(tsr_spill_read(path, n - 1, &back, &err), TSR_EIO);
  remove(path);
  ASSERT_EQ(tsr_spill_read(path, n, &back, &err), TSR_EIO);
  free(data);
}

/* ---------- tiers ---------- */

TEST(tiers_evict_lru_spill_and_drop)
{
  tsr_tiers *tiers;
  tsr_wstore *store = tiered_store(10000, 0, &tiers);
  put(store, "a", 2000, 1, false);
  put(store, "b", 2000, 2, true);   /* recomputable: dropped, never written */
  put(store, "c", 2000, 3, false);
  tsr_chunk *pin = NULL;
  /* A recomputable chunk nobody has read yet would be evicted last: b's
   * consumer reads it first. */
  ASSERT_OK(tsr_wstore_get(store, "b", &pin));
  tsr_chunk_unref(&pin);
  ASSERT_OK(tsr_wstore_get(store, "a", &pin));  /* "a" in use, and most recent */
  put(store, "d", 2000, 4, false);
  ASSERT_EQ(tsr_wstore_bytes(store), 8000);
  tsr_wstore_balance(store);
  /* Target 5000: LRU order is c, b, d, a; a is pinned; c spilled, b dropped. */
  ASSERT_EQ(tsr_wstore_bytes(store), 4000);
  tsr_tiers_stats st;
  tsr_tiers_stats_get(tiers, &st);
  ASSERT_EQ(st.chunks_dropped, 1);
  ASSERT_EQ(st.bytes_dropped, 2000);
  ASSERT_EQ(st.chunks_spilled, 1);
  ASSERT_EQ(st.disk_chunks, 1);
  ASSERT_EQ(st.disk_bytes, 2000);
  ASSERT_TRUE(tsr_tiers_has(tiers, "c"));
  ASSERT_TRUE(!tsr_tiers_has(tiers, "b"));
  ASSERT_EQ(count_files(tsr_tiers_dir(tiers)), 1);

  tsr_chunk *got = NULL;
  ASSERT_EQ(tsr_wstore_get(store, "b", &got), TSR_ENOTFOUND);
  ASSERT_OK(tsr_wstore_get(store, "c", &got));  /* loaded back */
  ASSERT_TRUE(same_as_made(got, 2000, 3));
  /* The load took the store to 6000 and evicted d (LRU; c is in use). */
  ASSERT_EQ(tsr_wstore_bytes(store), 4000);
  tsr_chunk_unref(&got);
  tsr_chunk_unref(&pin);
  tsr_wstore_balance(store);
  tsr_tiers_stats_get(tiers, &st);
  ASSERT_EQ(st.chunks_spilled, 2);
  ASSERT_TRUE(tsr_wstore_bytes(store) <= 5000);
  ASSERT_EQ(st.bytes_loaded, 2000);
  close_store(&store, &tiers);
}

TEST(tiers_unread_recomputable_chunk_goes_last)
{
  tsr_tiers *tiers;
  tsr_wstore *store = tiered_store(10000, 0, &tiers);
  put(store, "root", 3000, 1, true);   /* oldest, but nobody has read it */
  put(store, "m1", 3000, 2, false);
  put(store, "m2", 3000, 3, false);
  tsr_wstore_balance(store);
  tsr_tiers_stats st;
  tsr_tiers_stats_get(tiers, &st);
  ASSERT_EQ(st.chunks_dropped, 0);
  ASSERT_EQ(st.chunks_spilled, 2);
  tsr_chunk *got = NULL;
  ASSERT_OK(tsr_wstore_get_mem(store, "root", &got));
  tsr_chunk_unref(&got);
  close_store(&store, &tiers);
}

TEST(tiers_del_and_clear_remove_files)
{
  tsr_tiers *tiers;
  tsr_wstore *store = tiered_store(1000, 0, &tiers);
  put(store, "x", 800, 5, false);
  put(store, "y", 800, 6, false);
  tsr_wstore_balance(store);
  ASSERT_EQ(tsr_wstore_bytes(store), 0);
  ASSERT_EQ(count_files(tsr_tiers_dir(tiers)), 2);
  ASSERT_TRUE(tsr_wstore_del(store, "x"));  /* only on disk: still found */
  ASSERT_EQ(count_files(tsr_tiers_dir(tiers)), 1);
  ASSERT_TRUE(!tsr_wstore_del(store, "x"));
  tsr_wstore_clear(store);
  ASSERT_EQ(count_files(tsr_tiers_dir(tiers)), 0);
  tsr_chunk *got = NULL;
  ASSERT_EQ(tsr_wstore_get(store, "y", &got), TSR_ENOTFOUND);
  char dir[600];
  snprintf(dir, sizeof dir, "%s", tsr_tiers_dir(tiers));
  close_store(&store, &tiers);
  struct stat sb;
  ASSERT_TRUE(stat(dir, &sb) != 0);  /* its own directory is gone */
}

TEST(tiers_corrupted_file_is_a_miss)
{
  tsr_tiers *tiers;
  tsr_wstore *store = tiered_store(1000, 0, &tiers);
  put(store, "k", 900, 7, false);
  tsr_wstore_balance(store);
  ASSERT_TRUE(tsr_tiers_has(tiers, "k"));
  char path[700];
  snprintf(path, sizeof path, "%s/1.blosc", tsr_tiers_dir(tiers));
  ASSERT_OK(flip_byte(path, 60));
  tsr_log_level saved = tsr_log_get_level();
  tsr_log_set_level(TSR_LOG_OFF);
  tsr_chunk *got = NULL;
  ASSERT_EQ(tsr_wstore_get(store, "k", &got), TSR_ENOTFOUND);
  tsr_log_set_level(saved);
  tsr_tiers_stats st;
  tsr_tiers_stats_get(tiers, &st);
  ASSERT_EQ(st.chunks_corrupt, 1);
  ASSERT_EQ(st.disk_chunks, 0);
  ASSERT_TRUE(!tsr_tiers_has(tiers, "k"));
  ASSERT_EQ(count_files(tsr_tiers_dir(tiers)), 0);
  close_store(&store, &tiers);
}

/* The move (if any) recorded for key in moved[0..n). */
static int move_of(const tsr_tier_moved *moved, size_t n, const char *key)
{
  for (size_t i = 0; i < n; i++)
    if (strcmp(moved[i].key, key) == 0) return (int)moved[i].move;
  return -1;
}

TEST(tiers_record_moves_for_the_scheduler)
{
  tsr_tiers *tiers;
  tsr_wstore *store = tiered_store(10000, 0, &tiers);
  tsr_tiers_stats st;
  tsr_tiers_stats_get(tiers, &st);
  /* timed once at start-up, before any real spill */
  ASSERT_TRUE(st.probe_write_bps > 0 && st.probe_read_bps > 0);
  ASSERT_EQ(tsr_tiers_stats_write_bps(&st), st.probe_write_bps);
  ASSERT_EQ(count_files(tsr_tiers_dir(tiers)), 0);  /* the probe's file is gone */
  put(store, "a", 3000, 1, false);
  put(store, "b", 3000, 2, true);
  tsr_chunk *rep = make_chunk(store, "rep", 3000, 3, false);
  rep->replica = true;
  tsr_wstore_put(store, rep, tsr_wstore_epoch(store), NULL);
  tsr_chunk_unref(&rep);
  tsr_chunk *pin = NULL;
  ASSERT_OK(tsr_wstore_get(store, "b", &pin));  /* read: b may be dropped now */
  tsr_chunk_unref(&pin);
  put(store, "c", 3000, 4, false);
  tsr_wstore_balance(store);  /* 12000 > 5000: a spilled, b dropped, rep dropped */
  ASSERT_TRUE(!tsr_wstore_has(store, "rep"));
  tsr_tier_moved *moved = NULL;
  /* "a" is the key of a task being reported: its move waits for the next take */
  size_t n = tsr_tiers_take_moves(tiers, "a", &moved);
  ASSERT_EQ(move_of(moved, n, "b"), TSR_TIER_DROPPED);
  ASSERT_EQ(move_of(moved, n, "a"), -1);
  ASSERT_EQ(move_of(moved, n, "rep"), -1);  /* replicas are the worker's own business */
  tsr_tiers_moved_free(&moved, n);
  n = tsr_tiers_take_moves(tiers, NULL, &moved);
  ASSERT_EQ(move_of(moved, n, "a"), TSR_TIER_SPILLED);
  tsr_tiers_moved_free(&moved, n);
  ASSERT_EQ(tsr_tiers_take_moves(tiers, NULL, &moved), 0);
  ASSERT_TRUE(moved == NULL);
  /* a load, and the last move of a key wins */
  tsr_chunk *got = NULL;
  ASSERT_OK(tsr_wstore_get(store, "a", &got));
  tsr_chunk_unref(&got);
  n = tsr_tiers_take_moves(tiers, NULL, &moved);
  ASSERT_EQ(move_of(moved, n, "a"), TSR_TIER_LOADED);
  tsr_tiers_moved_free(&moved, n);
  /* forgotten (freed by the scheduler, or made again) */
  ASSERT_OK(tsr_wstore_get(store, "c", &got));
  tsr_chunk_unref(&got);
  put(store, "d", 4000, 5, false);
  tsr_wstore_balance(store);
  tsr_tiers_forget_moves(tiers, "a");
  tsr_tiers_forget_moves(tiers, "c");
  tsr_tiers_forget_moves(tiers, "d");
  ASSERT_EQ(tsr_tiers_take_moves(tiers, NULL, &moved), 0);
  /* the throughput of writes and loads is measured */
  tsr_tiers_stats_get(tiers, &st);
  ASSERT_TRUE(st.bytes_spilled > 0 && st.bytes_loaded > 0);
  ASSERT_TRUE(tsr_tiers_stats_write_bps(&st) > 0);
  ASSERT_TRUE(tsr_tiers_stats_read_bps(&st) > 0);
  close_store(&store, &tiers);
}

TEST(tiers_corrupted_file_is_reported_dropped)
{
  tsr_tiers *tiers;
  tsr_wstore *store = tiered_store(1000, 0, &tiers);
  put(store, "k", 900, 7, false);
  tsr_wstore_balance(store);
  tsr_tier_moved *moved = NULL;
  size_t n = tsr_tiers_take_moves(tiers, NULL, &moved);
  ASSERT_EQ(move_of(moved, n, "k"), TSR_TIER_SPILLED);
  tsr_tiers_moved_free(&moved, n);
  char path[700];
  snprintf(path, sizeof path, "%s/1.blosc", tsr_tiers_dir(tiers));
  ASSERT_OK(flip_byte(path, 60));
  tsr_log_level saved = tsr_log_get_level();
  tsr_log_set_level(TSR_LOG_OFF);
  tsr_chunk *got = NULL;
  ASSERT_EQ(tsr_wstore_get(store, "k", &got), TSR_ENOTFOUND);
  tsr_log_set_level(saved);
  n = tsr_tiers_take_moves(tiers, NULL, &moved);
  ASSERT_EQ(move_of(moved, n, "k"), TSR_TIER_DROPPED);
  tsr_tiers_moved_free(&moved, n);
  close_store(&store, &tiers);
}

TEST(tiers_disk_limit_keeps_chunks_in_memory)
{
  tsr_tiers *tiers;
  tsr_wstore *store = tiered_store(1000, 1200, &tiers);
  tsr_log_level saved = tsr_log_get_level();
  tsr_log_set_level(TSR_LOG_OFF);
  put(store, "p", 900, 8, false);
  put(store, "q", 900, 9, false);
  tsr_wstore_balance(store);
  tsr_log_set_level(saved);
  tsr_tiers_stats st;
  tsr_tiers_stats_get(tiers, &st);
  ASSERT_EQ(st.disk_chunks, 1);
  ASSERT_EQ(tsr_wstore_bytes(store), 900);
  close_store(&store, &tiers);
}

TEST(tiers_options)
{
  tsr_tiers_opts o = TSR_TIERS_OPTS_DEFAULT;
  tsr_errbuf err = {{0}};
  ASSERT_OK(tsr_tiers_opt(&o, "--memory-target", "0.5", &err));
  ASSERT_OK(tsr_tiers_opt(&o, "--memory-spill", "0.9", &err));
  ASSERT_NEAR(o.target, 0.5, 0);
  ASSERT_NEAR(o.spill, 0.9, 0);
  ASSERT_EQ(tsr_tiers_opt(&o, "--memory-target", "1.5", &err), TSR_EINVAL);
  ASSERT_EQ(tsr_tiers_opt(&o, "--memory-spill", "x", &err), TSR_EINVAL);
  ASSERT_OK(tsr_tiers_opt(&o, "--spill-codec", "zstd", &err));
  ASSERT_STREQ(o.codec, "zstd");
  ASSERT_EQ(tsr_tiers_opt(&o, "--spill-codec", "gzip", &err), TSR_EINVAL);
  ASSERT_OK(tsr_tiers_opt(&o, "--spill-level", "9", &err));
  ASSERT_EQ(tsr_tiers_opt(&o, "--spill-level", "10", &err), TSR_EINVAL);
  ASSERT_OK(tsr_tiers_opt(&o, "--disk-limit", "2GiB", &err));
  ASSERT_EQ(o.disk_limit, 2ull << 30);
  ASSERT_OK(tsr_tiers_opt(&o, "--spill-dir", "/var/tmp", &err));
  ASSERT_EQ(tsr_tiers_opt(&o, "--threads", "2", &err), TSR_ENOTFOUND);
  ASSERT_OK(tsr_tiers_opt(&o, "--memory-pause", "0.95", &err));
  ASSERT_NEAR(o.pause, 0.95, 0);
  ASSERT_EQ(tsr_tiers_opt(&o, "--memory-pause", "0", &err), TSR_EINVAL);
}

/* A worker whose memory is all unread recomputable chunks (a persisted
 * random array larger than its limit) must not stay paused: above the
 * pause threshold they are dropped, oldest first, down to the target. */
TEST(tiers_unread_recomputable_chunks_never_stall_a_pause)
{
  tsr_tiers *tiers;
  tsr_wstore *store = tiered_store(10000, 0, &tiers);
  for (int i = 0; i < 4; i++) {  /* 8800 bytes: over pause (8000), under the limit */
    char key[8];
    snprintf(key, sizeof key, "r%d", i);
    put(store, key, 2200, (unsigned)i, true);
  }
  tsr_wstore_balance(store);
  ASSERT_TRUE(!tsr_tiers_paused(tiers, store));
  tsr_tiers_stats st;
  tsr_tiers_stats_get(tiers, &st);
  ASSERT_EQ(st.chunks_spilled, 0);   /* dropped, never written */
  ASSERT_TRUE(st.chunks_dropped >= 1);
  tsr_chunk *got = NULL;
  ASSERT_TRUE(tsr_wstore_get_mem(store, "r0", &got) != 0);  /* the oldest went first */
  ASSERT_OK(tsr_wstore_get_mem(store, "r3", &got));
  tsr_chunk_unref(&got);
  close_store(&store, &tiers);
}

TEST(tiers_pause_over_the_pause_fraction)
{
  tsr_tiers *tiers;
  tsr_wstore *store = tiered_store(1000, 0, &tiers);
  tsr_chunk *a = make_chunk(store, "a", 500, 1, false);
  ASSERT_TRUE(!tsr_tiers_paused(tiers, store));
  tsr_chunk *b = make_chunk(store, "b", 400, 2, false);  /* 900 > 0.8 x 1000, pinned by us */
  ASSERT_TRUE(tsr_tiers_paused(tiers, store));
  tsr_chunk_unref(&b);
  ASSERT_TRUE(!tsr_tiers_paused(tiers, store));
  tsr_chunk_unref(&a);
  close_store(&store, &tiers);
}

/* Idle receive buffers (net's UCX pool) are unmapped before any chunk is
 * spilled or dropped for RSS: here they are all the RSS over the spill
 * threshold, so the chunk stays. */
TEST(tiers_trim_idle_receive_buffers_before_evicting_for_rss)
{
  if (!tsr_xfer_ucx_built()) {   /* TSR_UCX off: no pool to trim */
    fprintf(stderr, "  not run: this build has no UCX, so no receive pool\n");
    return;
  }
  tsr_xfer_pool_trim();
  tsr_tiers_opts o = TSR_TIERS_OPTS_DEFAULT;
  o.memory_limit = 64u << 20;
  o.target = 0.5;
  o.spill = 0.5;   /* RSS over 32 MiB above the base evicts */
  snprintf(o.dir, sizeof o.dir, "%s", tmp_dir);
  tsr_tiers *tiers = NULL;
  tsr_errbuf err = {{0}};
  ASSERT_OK(tsr_tiers_new(&o, &tiers, &err));   /* measures the base RSS */
  tsr_wstore *store = tsr_wstore_new(o.memory_limit);
  tsr_wstore_set_tiers(store, tiers);
  put(store, "a", 2000, 1, false);
  /* a 64 MiB receive buffer, faulted in, then idle in the pool */
  tsr_ucx_buf *buf = tsr_ucx_buf_take(64u << 20);
  ASSERT_TRUE(buf != NULL);
  tsr_ucx_buf_put(buf);
  tsr_xfer_pool_stats before, after;
  tsr_xfer_pool_get_stats(&before);
  tsr_wstore_balance(store);
  tsr_xfer_pool_get_stats(&after);
  tsr_tiers_stats st;
  tsr_tiers_stats_get(tiers, &st);
  close_store(&store, &tiers);
  ASSERT_EQ(before.idle_buffers, 1u);
  ASSERT_EQ(after.idle_buffers, 0u);
  ASSERT_EQ(st.chunks_spilled, 0);
  ASSERT_EQ(st.chunks_dropped, 0);
}

/* ---------- the executor ---------- */

static tsr_wtask *uniform_task(const char *key, int64_t n, tsr_wstore *store)
{
  tsr_wtask *t = calloc(1, sizeof *t);
  t->key = strdup(key);
  t->op_name = strdup("random_uniform");
  t->op = tsr_op_find("random_uniform");
  t->epoch = tsr_wstore_epoch(store);
  atomic_init(&t->cancelled, false);
  tsr_params_add_int(&t->params, "seed", 3);
  tsr_params_add_ints(&t->params, "shape", &n, 1);
  return t;
}

TEST(executor_chunk_larger_than_limit_fails)
{
  tsr_wstore *store = tsr_wstore_new(4000);
  tsr_wtask *t = uniform_task("big-chunk", 1000, store);  /* 8000 bytes */
  tsr_wtask_run(t, store, NULL, "w0");
  ASSERT_EQ(t->status, TSR_WTASK_ERRED);
  ASSERT_CONTAINS(t->message, "'big-chunk'");
  ASSERT_CONTAINS(t->message, "7.81 KiB");
  ASSERT_CONTAINS(t->message, "memory limit of 3.91 KiB");
  ASSERT_EQ(tsr_wstore_count(store), 0);
  tsr_wtask_free(&t);
  tsr_wstore_destroy(&store);
}

TEST(executor_marks_root_outputs_recomputable)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_wtask *x = uniform_task("x", 100, store);
  tsr_wtask_run(x, store, NULL, "w0");
  ASSERT_EQ(x->status, TSR_WTASK_DONE);
  tsr_wtask_free(&x);
  tsr_wtask *s = calloc(1, sizeof *s);
  s->key = strdup("s");
  s->op_name = strdup("scale");
  s->op = tsr_op_find("scale");
  s->epoch = tsr_wstore_epoch(store);
  atomic_init(&s->cancelled, false);
  tsr_params_add_float(&s->params, "factor", 2.0);
  s->inputs = calloc(1, sizeof *s->inputs);
  s->inputs[0] = (tsr_winput){strdup("x"), strdup(""), 0, false};
  s->n_inputs = 1;
  tsr_wtask_run(s, store, NULL, "w0");
  ASSERT_EQ(s->status, TSR_WTASK_DONE);
  tsr_wtask_free(&s);
  tsr_chunk *xc, *sc;
  ASSERT_OK(tsr_wstore_get(store, "x", &xc));
  ASSERT_OK(tsr_wstore_get(store, "s", &sc));
  ASSERT_TRUE(xc->recompute);
  ASSERT_TRUE(!sc->recompute);
  tsr_chunk_unref(&xc);
  tsr_chunk_unref(&sc);
  tsr_wstore_destroy(&store);
}

/* A compute map for key with op (scale on input, or a root), with or
 * without the recompute and awaited fields (-1: absent). */
static tsr_wtask *decoded_task(const char *key, const char *op, const char *input, int recompute, int awaited)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "compute", 6 + (recompute >= 0) + (awaited >= 0));
  tsr_pack_kv_uint(&wb.pk, "id", 1);
  tsr_pack_kv_str(&wb.pk, "key", key);
  tsr_pack_kv_str(&wb.pk, "task_op", op);
  tsr_pack_str(&wb.pk, "params");
  msgpack_pack_map(&wb.pk, input ? 1 : 3);
  if (input) {
    tsr_pack_kv_float(&wb.pk, "factor", 2.0);
  } else {
    tsr_pack_str(&wb.pk, "shape");
    msgpack_pack_array(&wb.pk, 1);
    msgpack_pack_int64(&wb.pk, 100);
    tsr_pack_kv_int(&wb.pk, "seed", 1);
    tsr_pack_kv_str(&wb.pk, "dtype", "f64");
  }
  tsr_pack_str(&wb.pk, "inputs");
  msgpack_pack_array(&wb.pk, input ? 1 : 0);
  if (input) {
    msgpack_pack_array(&wb.pk, 3);
    tsr_pack_str(&wb.pk, input);
    tsr_pack_str(&wb.pk, "");
    msgpack_pack_uint64(&wb.pk, 800);
  }
  if (recompute >= 0) tsr_pack_kv_bool(&wb.pk, "recompute", recompute == 1);
  if (awaited >= 0) tsr_pack_kv_bool(&wb.pk, "awaited", awaited == 1);
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  tsr_wtask *task = NULL;
  tsr_errbuf err = {{0}};
  if (msgpack_unpack_next(&u, wb.sbuf.data, wb.sbuf.size, &off) == MSGPACK_UNPACK_SUCCESS &&
      tsr_wtask_decode(&u.data, &task, &err) != 0)
    fprintf(stderr, "  decode: %s\n", err.text);
  msgpack_unpacked_destroy(&u);
  tsr_wbuf_free(&wb);
  return task;
}

TEST(executor_follows_the_schedulers_recompute_flag)
{
  tsr_wstore *store = tsr_wstore_new(0);
  /* a root the scheduler says to spill, a step it says to drop, and one
   * without a word (an older scheduler: the step is spilled) */
  const char *keys[] = {"x", "s", "s2"};
  tsr_wtask *tasks[] = {decoded_task("x", "random_uniform", NULL, 0, -1), decoded_task("s", "scale", "x", 1, -1),
                        decoded_task("s2", "scale", "x", -1, -1)};
  ASSERT_EQ(tasks[0]->recompute, TSR_WTASK_RECOMPUTE_SPILL);
  ASSERT_EQ(tasks[1]->recompute, TSR_WTASK_RECOMPUTE_DROP);
  ASSERT_EQ(tasks[2]->recompute, TSR_WTASK_RECOMPUTE_UNSET);
  bool expect[] = {false, true, false};
  for (int i = 0; i < 3; i++) {
    tasks[i]->epoch = tsr_wstore_epoch(store);
    tsr_wtask_run(tasks[i], store, NULL, "w0");
    ASSERT_EQ(tasks[i]->status, TSR_WTASK_DONE);
    tsr_wtask_free(&tasks[i]);
    tsr_chunk *c = NULL;
    ASSERT_OK(tsr_wstore_get(store, keys[i], &c));
    ASSERT_EQ(c->recompute, expect[i]);
    tsr_chunk_unref(&c);
  }
  tsr_wstore_destroy(&store);
}

/* A chunk no task waits to read (compute.awaited false: only a client
 * wants it, as after a persist) counts as read: recomputable, it is
 * evicted in LRU order, not kept for last like a fresh chunk whose
 * reader is waiting (absent: an older scheduler, taken as awaited). */
TEST(executor_chunk_no_task_awaits_counts_as_read)
{
  tsr_wstore *store = tsr_wstore_new(0);
  const char *keys[] = {"awaited", "persisted", "older"};
  int awaited[] = {1, 0, -1};
  for (int i = 0; i < 3; i++) {
    tsr_wtask *t = decoded_task(keys[i], "random_uniform", NULL, 1, awaited[i]);
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ(t->unawaited, awaited[i] == 0);
    t->epoch = tsr_wstore_epoch(store);
    tsr_wtask_run(t, store, NULL, "w0");
    ASSERT_EQ(t->status, TSR_WTASK_DONE);
    tsr_wtask_free(&t);
  }
  tsr_chunk **idle = NULL;
  ASSERT_EQ(tsr_wstore_idle(store, &idle), 3);
  const char *order[] = {"persisted", "awaited", "older"};
  for (int i = 0; i < 3; i++) {
    ASSERT_STREQ(idle[i]->key, order[i]);
    tsr_chunk_unref(&idle[i]);
  }
  free(idle);
  tsr_wstore_destroy(&store);
}

int main(void)
{
  tsr_log_set_level(TSR_LOG_ERROR);
  tsr_ops_init(false);
  make_tmp_dir();
  RUN(crc32_known_values);
  RUN(spill_round_trip_every_codec);
  RUN(spill_empty_and_multi_segment);
  RUN(spill_detects_corruption_and_truncation);
  RUN(tiers_evict_lru_spill_and_drop);
  RUN(tiers_unread_recomputable_chunk_goes_last);
  RUN(tiers_del_and_clear_remove_files);
  RUN(tiers_corrupted_file_is_a_miss);
  RUN(tiers_record_moves_for_the_scheduler);
  RUN(tiers_corrupted_file_is_reported_dropped);
  RUN(tiers_disk_limit_keeps_chunks_in_memory);
  RUN(tiers_options);
  RUN(tiers_unread_recomputable_chunks_never_stall_a_pause);
  RUN(tiers_pause_over_the_pause_fraction);
  RUN(tiers_trim_idle_receive_buffers_before_evicting_for_rss);
  RUN(executor_chunk_larger_than_limit_fails);
  RUN(executor_marks_root_outputs_recomputable);
  RUN(executor_follows_the_schedulers_recompute_flag);
  RUN(executor_chunk_no_task_awaits_counts_as_read);
  rmdir(tmp_dir);
  return kit_summary();
}
