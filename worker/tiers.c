/* The host and disk tiers: LRU eviction of idle chunks to blosc spill
 * files (or dropping, for recomputable chunks and replicas), and loading
 * them back on a store miss. See tiers.h for the rules.
 *
 * Invariants: an entry exists for a key exactly while its spill file does;
 * `lock` guards the entries, the counters and every file operation, so a
 * load, a delete and an eviction of one key never interleave. `balancing`
 * admits one evicting thread at a time. */
#include "tiers.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/net.h"
#include "spill.h"

typedef struct spill_entry {
  tsr_meta meta;
  size_t nbytes;
  uint64_t file_bytes;
  uint64_t serial;       /* the file's name: DIR/SERIAL.blosc */
} spill_entry;

struct tsr_tiers {
  tsr_tiers_opts opts;
  char dir[TSR_TIERS_DIR_MAX + 32];
  pthread_mutex_t lock;
  pthread_mutex_t balancing;
  tsr_strmap *entries;     /* key -> spill_entry *; under lock */
  uint64_t next_serial;    /* under lock */
  tsr_tiers_stats stats;   /* under lock */
  bool warned_disk;
  /* The spill directory had no room for the last write (the disk limit,
   * or ENOSPC from the file system): the pause is off until a spill file
   * is removed or a write succeeds; after ENOSPC (enospc) no write is
   * tried until a file is removed. Under lock. */
  bool disk_full, enospc;
  bool warned_enospc;
  uint64_t rss_base;       /* the process's RSS when the tiers were made: its fixed overhead */
  bool paused;             /* last answer of tsr_tiers_paused (main thread) */
  tsr_strmap *moves;       /* key -> tsr_tier_move since the last take; under lock */
  uint64_t probe_write_bps, probe_read_bps;  /* measured at start-up (probe_speed) */
};

#define PROBE_BYTES (2u << 20)

/* Times one write and one load of a 2 MiB chunk of pseudo-random doubles
 * (about as compressible as random data) in the spill directory, so the
 * scheduler's spill cost has a figure from this machine, under its present
 * load, before the first real spill. A failure leaves 0: the scheduler's
 * defaults. */
static void probe_speed(tsr_tiers *t)
{
  double *data = malloc(PROBE_BYTES);
  if (data == NULL) return;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < PROBE_BYTES / sizeof *data; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    data[i] = (double)(x >> 11) / 9007199254740992.0;
  }
  char path[sizeof t->dir + 32];
  snprintf(path, sizeof path, "%s/probe.blosc", t->dir);
  tsr_errbuf err = {{0}};
  uint64_t file_bytes, t0 = tsr_now_us();
  int rc = tsr_spill_write(path, t->opts.codec, t->opts.level, sizeof *data, data, PROBE_BYTES, &file_bytes, &err);
  uint64_t t1 = tsr_now_us();
  void *back = NULL;
  if (rc == 0) rc = tsr_spill_read(path, PROBE_BYTES, &back, &err);
  uint64_t t2 = tsr_now_us();
  remove(path);
  free(back);
  free(data);
  if (rc != 0) return;
  t->probe_write_bps = (uint64_t)((double)PROBE_BYTES * 1e6 / (double)(t1 - t0 ? t1 - t0 : 1));
  t->probe_read_bps = (uint64_t)((double)PROBE_BYTES * 1e6 / (double)(t2 - t1 ? t2 - t1 : 1));
  TSR_INFO("spill throughput at start-up: write %.0f MB/s, read %.0f MB/s", (double)t->probe_write_bps / 1e6,
           (double)t->probe_read_bps / 1e6);
}

static int check_opts(const tsr_tiers_opts *o, tsr_errbuf *err)
{
  if (!(o->target > 0 && o->target <= 1) || !(o->spill >= 0 && o->spill <= 1) || !(o->pause > 0 && o->pause <= 1))
    return tsr_fail(err, TSR_EINVAL, "memory target and spill fractions must be in (0, 1]");
  if (!tsr_spill_codec_ok(o->codec))
    return tsr_fail(err, TSR_EINVAL, "unknown spill codec '%s' (blosclz, lz4, zstd or zlib)", o->codec);
  if (o->level < 0 || o->level > 9) return tsr_fail(err, TSR_EINVAL, "spill level must be 0-9");
  return 0;
}

/* Makes a fresh directory of our own under opts->dir (created if absent)
 * or $TMPDIR, so workers sharing a spill directory never share files. */
static int make_dir(tsr_tiers *t, tsr_errbuf *err)
{
  const char *base = t->opts.dir[0] ? t->opts.dir : getenv("TMPDIR");
  if (base == NULL || base[0] == '\0') base = "/tmp";
  if (mkdir(base, 0700) != 0 && errno != EEXIST)
    return tsr_fail(err, TSR_EIO, "cannot create spill directory %s: %s", base, strerror(errno));
  snprintf(t->dir, sizeof t->dir, "%s/tessera-spill-XXXXXX", base);
  if (mkdtemp(t->dir) == NULL)
    return tsr_fail(err, TSR_EIO, "cannot create a spill directory under %s: %s", base, strerror(errno));
  return 0;
}

int tsr_tiers_new(const tsr_tiers_opts *opts, tsr_tiers **tiers_p, tsr_errbuf *err)
{
  int rc = check_opts(opts, err);
  if (rc != 0) return rc;
  tsr_tiers *t = calloc(1, sizeof *t);
  if (t == NULL || (t->entries = tsr_strmap_new(1024)) == NULL || (t->moves = tsr_strmap_new(256)) == NULL) {
    if (t != NULL) tsr_strmap_destroy(&t->entries);
    free(t);
    return tsr_fail(err, TSR_ENOMEM, "out of memory");
  }
  t->opts = *opts;
  rc = make_dir(t, err);
  if (rc != 0) {
    tsr_strmap_destroy(&t->entries);
    tsr_strmap_destroy(&t->moves);
    free(t);
    return rc;
  }
  pthread_mutex_init(&t->lock, NULL);
  pthread_mutex_init(&t->balancing, NULL);
  t->next_serial = 1;
  /* glibc raises its mmap threshold to the size of the first large block
   * freed, after which chunk-sized blocks come from the heap and their
   * memory is not given back: the RSS would stay high after evictions and
   * the spill rule would evict forever. A fixed threshold keeps every
   * chunk-sized block mmapped, so freeing it lowers the RSS. */
  if (opts->memory_limit != 0) mallopt(M_MMAP_THRESHOLD, 256 << 10);
  t->rss_base = tsr_process_rss();
  if (opts->spill_bps == 0) probe_speed(t);
  *tiers_p = t;
  return 0;
}

static void entry_path(const tsr_tiers *t, const spill_entry *e, char *path, size_t len)
{
  snprintf(path, len, "%s/%llu.blosc", t->dir, (unsigned long long)e->serial);
}

/* Deletes one entry's file and counts it out; under lock. */
static void entry_remove(tsr_tiers *t, spill_entry *e)
{
  char path[sizeof t->dir + 32];
  entry_path(t, e, path, sizeof path);
  if (unlink(path) != 0 && errno != ENOENT) TSR_WARN("cannot remove spill file %s: %s", path, strerror(errno));
  t->stats.disk_bytes -= e->nbytes;
  t->stats.disk_file_bytes -= e->file_bytes;
  t->stats.disk_chunks--;
  t->disk_full = t->enospc = false;   /* room again: the next eviction may write */
  free(e);
}

static void remove_each(void *arg, const char *key, size_t key_len, uint64_t value)
{
  (void)key, (void)key_len;
  entry_remove(arg, (spill_entry *)(uintptr_t)value);
}

void tsr_tiers_clear(tsr_tiers *t)
{
  tsr_strmap *fresh = tsr_strmap_new(1024);
  pthread_mutex_lock(&t->lock);
  tsr_strmap_each(t->entries, remove_each, t);
  if (fresh == NULL) {
    /* As the store's clear: without memory for an empty map the worker
     * cannot go on coherently. */
    TSR_ERROR("out of memory clearing the spill tier");
    abort();
  }
  tsr_strmap_destroy(&t->entries);
  t->entries = fresh;
  /* moves of the previous session's chunks mean nothing to the next one */
  tsr_strmap *no_moves = tsr_strmap_new(256);
  if (no_moves != NULL) {
    tsr_strmap_destroy(&t->moves);
    t->moves = no_moves;
  }
  pthread_mutex_unlock(&t->lock);
}

void tsr_tiers_destroy(tsr_tiers **tiers_p)
{
  if (tiers_p == NULL || *tiers_p == NULL) return;
  tsr_tiers *t = *tiers_p;
  tsr_strmap_each(t->entries, remove_each, t);
  tsr_strmap_destroy(&t->entries);
  tsr_strmap_destroy(&t->moves);
  if (rmdir(t->dir) != 0) TSR_WARN("cannot remove spill directory %s: %s", t->dir, strerror(errno));
  pthread_mutex_destroy(&t->balancing);
  pthread_mutex_destroy(&t->lock);
  free(t);
  *tiers_p = NULL;
}

const char *tsr_tiers_dir(const tsr_tiers *t) { return t->dir; }
uint64_t tsr_tiers_memory_limit(const tsr_tiers *t) { return t->opts.memory_limit; }

static spill_entry *find(tsr_tiers *t, const char *key)
{
  uint64_t v;
  return tsr_strmap_get(t->entries, key, strlen(key), &v) ? (spill_entry *)(uintptr_t)v : NULL;
}

bool tsr_tiers_has(tsr_tiers *t, const char *key)
{
  pthread_mutex_lock(&t->lock);
  bool found = find(t, key) != NULL;
  pthread_mutex_unlock(&t->lock);
  return found;
}

bool tsr_tiers_del(tsr_tiers *t, const char *key)
{
  pthread_mutex_lock(&t->lock);
  spill_entry *e = find(t, key);
  if (e != NULL) {
    tsr_strmap_del(t->entries, key, strlen(key));
    entry_remove(t, e);
  }
  pthread_mutex_unlock(&t->lock);
  return e != NULL;
}

/* Records key's latest move for the scheduler; under lock. Without memory
 * for it the scheduler learns of a drop through missing_input instead. */
static void record_move(tsr_tiers *t, const char *key, tsr_tier_move move)
{
  if (tsr_strmap_put(t->moves, key, strlen(key), (uint64_t)move) != 0)
    TSR_WARN("out of memory recording that '%s' moved; the scheduler will learn it later", key);
}

/* A failed spill write; under lock. A full file system (a small tmpfs,
 * a shared disk) is not the chunk's fault and will not pass by retrying:
 * without the disk_full mark every balance after every task compressed
 * and wrote each idle chunk again, warning each time, and a worker over
 * its pause threshold stayed paused for good (nothing could leave its
 * memory), so a graph whose results must be kept hung (issue 13). */
static int spill_failed(tsr_tiers *t, const tsr_chunk *chunk, int rc, const tsr_errbuf *err)
{
  if (rc != TSR_ENOSPC) {
    TSR_WARN("cannot spill '%s' (%zu bytes): %s", chunk->key, chunk->nbytes, err->text[0] ? err->text : tsr_strerror(rc));
    return rc;
  }
  t->disk_full = t->enospc = true;
  char held[32];
  tsr_format_bytes(t->stats.disk_file_bytes, held, sizeof held);
  if (!t->warned_enospc)
    TSR_WARN("spill directory %s is full with %s of spill files (%s): chunks that cannot be dropped stay in memory, "
             "over the memory limit if need be, until a spill file is removed (logged once)",
             t->dir, held, err->text);
  else
    TSR_DEBUG("spill directory %s is full again with %s of spill files", t->dir, held);
  t->warned_enospc = true;
  return rc;
}

/* Writes chunk to a new spill file and records it; under lock. 0 or the
 * write's error (the chunk then stays in memory). */
static int spill_one(tsr_tiers *t, tsr_chunk *chunk)
{
  if (t->enospc) return TSR_ENOSPC;
  if (t->opts.disk_limit != 0 && t->stats.disk_file_bytes + chunk->nbytes > t->opts.disk_limit) {
    if (!t->warned_disk) {
      char lim[32];
      TSR_WARN("spill directory full (disk limit %s): chunks stay in memory, over the memory limit if need be "
               "(logged once)",
               tsr_format_bytes(t->opts.disk_limit, lim, sizeof lim));
      t->warned_disk = true;
    }
    t->disk_full = true;
    return TSR_ENOSPC;
  }
  spill_entry *e = calloc(1, sizeof *e);
  if (e == NULL) return TSR_ENOMEM;
  *e = (spill_entry){chunk->meta, chunk->nbytes, 0, t->next_serial++};
  char path[sizeof t->dir + 32];
  entry_path(t, e, path, sizeof path);
  tsr_errbuf err = {{0}};
  uint64_t t0 = tsr_now_us();
  int rc = tsr_spill_write(path, t->opts.codec, t->opts.level, tsr_dtype_size(chunk->meta.dtype), chunk->data,
                           chunk->nbytes, &e->file_bytes, &err);
  uint64_t took = tsr_now_us() - t0;
  if (rc == 0) rc = tsr_strmap_put(t->entries, chunk->key, strlen(chunk->key), (uint64_t)(uintptr_t)e);
  if (rc != 0) {
    remove(path);
    free(e);
    return spill_failed(t, chunk, rc, &err);
  }
  t->disk_full = false;
  t->stats.disk_bytes += e->nbytes;
  t->stats.disk_file_bytes += e->file_bytes;
  t->stats.disk_chunks++;
  t->stats.bytes_spilled += e->nbytes;
  t->stats.chunks_spilled++;
  t->stats.write_us += took;
  TSR_DEBUG("spilled '%s': %zu bytes -> %llu on disk", chunk->key, chunk->nbytes, (unsigned long long)e->file_bytes);
  return 0;
}

/* Moves one idle chunk out of memory: drops it, or makes sure it has a
 * spill file first. Returns true when the store let it go. */
static bool evict_one(tsr_tiers *t, tsr_wstore *store, tsr_chunk *chunk)
{
  bool drop = chunk->recompute || chunk->replica;
  pthread_mutex_lock(&t->lock);
  bool ok = drop || find(t, chunk->key) != NULL || spill_one(t, chunk) == 0;
  ok = ok && tsr_wstore_evict(store, chunk);
  if (ok && !chunk->replica) record_move(t, chunk->key, drop ? TSR_TIER_DROPPED : TSR_TIER_SPILLED);
  if (ok && drop) {
    t->stats.bytes_dropped += chunk->nbytes;
    t->stats.chunks_dropped++;
    TSR_DEBUG("dropped '%s' (%zu bytes, %s)", chunk->key, chunk->nbytes, chunk->replica ? "replica" : "recomputable");
  }
  pthread_mutex_unlock(&t->lock);
  return ok;
}

/* Idle receive buffers (the UCX fetcher's pool, net.h) are only a cache of
 * mapped pages: under RSS pressure they go before any chunk is spilled or
 * dropped. True when some were unmapped; *rss_p is then measured again. */
static bool trim_receive_pool(tsr_tiers *t, uint64_t *rss_p)
{
  tsr_xfer_pool_stats ps;
  tsr_xfer_pool_get_stats(&ps);
  if (ps.idle_bytes == 0) return false;
  tsr_xfer_pool_trim();
  uint64_t rss = tsr_process_rss();
  *rss_p = rss > t->rss_base ? rss - t->rss_base : 0;
  return true;
}

void tsr_tiers_balance(tsr_tiers *t, tsr_wstore *store)
{
  uint64_t limit = t->opts.memory_limit;
  if (limit == 0) return;
  uint64_t target = (uint64_t)((double)limit * t->opts.target);
  uint64_t spill = (uint64_t)((double)limit * t->opts.spill);
  uint64_t pause = (uint64_t)((double)limit * t->opts.pause);
  uint64_t rss = 0;
  if (t->opts.spill > 0) {
    rss = tsr_process_rss();
    rss = rss > t->rss_base ? rss - t->rss_base : 0;
  }
  if (tsr_wstore_bytes(store) <= target && (spill == 0 || rss <= spill)) return;
  if (spill > 0 && rss > spill && trim_receive_pool(t, &rss) && rss <= spill && tsr_wstore_bytes(store) <= target)
    return;
  if (pthread_mutex_trylock(&t->balancing) != 0) return;
  tsr_chunk **idle = NULL;
  size_t n = tsr_wstore_idle(store, &idle);
  uint64_t freed = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t bytes = tsr_wstore_bytes(store);
    bool over = bytes > target || (spill > 0 && rss > freed && rss - freed > spill);
    /* A recomputable chunk nobody has read yet goes only when the chunks
     * alone exceed the pause threshold: dropping it earlier, when the
     * pressure comes from pinned chunks or from RSS that evictions do not
     * lower, would loop (drop, missing input, recompute, drop); keeping it
     * past the pause threshold would stall a worker whose memory is all
     * such chunks (a persisted random array larger than the limit): paused,
     * nothing running, nothing evictable. */
    if (idle[i]->recompute && !atomic_load(&idle[i]->read)) over = bytes > pause;
    size_t nbytes = idle[i]->nbytes;
    if (over && evict_one(t, store, idle[i])) freed += nbytes;
    tsr_chunk_unref(&idle[i]);  /* the bytes go here when the store let go */
  }
  free(idle);
  pthread_mutex_unlock(&t->balancing);
}

int tsr_tiers_load(tsr_tiers *t, tsr_wstore *store, const char *key, tsr_chunk **chunk_p)
{
  pthread_mutex_lock(&t->lock);
  /* Another thread may have loaded it while we waited for the lock. */
  if (tsr_wstore_get_mem(store, key, chunk_p) == 0) {
    pthread_mutex_unlock(&t->lock);
    return 0;
  }
  spill_entry *e = find(t, key);
  if (e == NULL) {
    pthread_mutex_unlock(&t->lock);
    return TSR_ENOTFOUND;
  }
  char path[sizeof t->dir + 32];
  entry_path(t, e, path, sizeof path);
  tsr_errbuf err = {{0}};
  void *data = NULL;
  tsr_chunk *chunk = NULL;
  uint64_t t0 = tsr_now_us();
  int rc = tsr_spill_read(path, e->nbytes, &data, &err);
  uint64_t took = tsr_now_us() - t0;
  if (rc == TSR_EIO) {
    TSR_WARN("chunk '%s' is lost: %s; it will be recomputed", key, err.text);
    record_move(t, key, TSR_TIER_DROPPED);
    t->stats.chunks_corrupt++;
    tsr_strmap_del(t->entries, key, strlen(key));
    entry_remove(t, e);
  } else if (rc == 0 && (rc = tsr_chunk_new_malloc(store, key, &e->meta, data, e->nbytes, &chunk)) != 0) {
    free(data);
  } else if (rc == 0) {
    tsr_wstore_put(store, chunk, tsr_wstore_epoch(store), NULL);
    record_move(t, key, TSR_TIER_LOADED);
    t->stats.bytes_loaded += e->nbytes;
    t->stats.read_us += took;
  } else {
    TSR_WARN("cannot load spilled chunk '%s': %s", key, err.text);
  }
  pthread_mutex_unlock(&t->lock);
  if (rc != 0) return TSR_ENOTFOUND;
  /* The load may have taken the store over its thresholds (the caller's
   * reference keeps this chunk in). */
  tsr_tiers_balance(t, store);
  *chunk_p = chunk;
  return 0;
}

bool tsr_tiers_paused(tsr_tiers *t, tsr_wstore *store)
{
  /* Chunks unpinned since the last task (sends completed) may be evictable
   * now; without this a worker idle and paused would wait for nothing. */
  if (t->opts.memory_limit != 0) tsr_tiers_balance(t, store);
  uint64_t limit = t->opts.memory_limit, bytes = tsr_wstore_bytes(store);
  pthread_mutex_lock(&t->lock);
  bool disk_full = t->disk_full;
  pthread_mutex_unlock(&t->lock);
  /* With the spill directory full a pause would last for good when the
   * chunks are results that must be kept: the worker goes on over its
   * limit instead (warned when the disk filled). */
  bool paused = limit != 0 && !disk_full && (double)bytes > (double)limit * t->opts.pause;
  if (paused != t->paused) {
    char held[32], lim[32];
    TSR_INFO("%s: chunks in memory %s, limit %s", paused ? "paused (no new tasks)" : "resumed",
             tsr_format_bytes(bytes, held, sizeof held), tsr_format_bytes(limit, lim, sizeof lim));
    t->paused = paused;
  }
  return paused;
}

void tsr_tiers_stats_get(tsr_tiers *t, tsr_tiers_stats *stats)
{
  pthread_mutex_lock(&t->lock);
  *stats = t->stats;
  stats->probe_write_bps = t->probe_write_bps;
  stats->probe_read_bps = t->probe_read_bps;
  stats->assumed_bps = t->opts.spill_bps;
  pthread_mutex_unlock(&t->lock);
}

static uint64_t per_second(uint64_t bytes, uint64_t us) { return us == 0 ? 0 : (uint64_t)((double)bytes * 1e6 / (double)us); }
uint64_t tsr_tiers_stats_write_bps(const tsr_tiers_stats *s)
{
  if (s->assumed_bps) return s->assumed_bps;
  return s->write_us ? per_second(s->bytes_spilled, s->write_us) : s->probe_write_bps;
}
uint64_t tsr_tiers_stats_read_bps(const tsr_tiers_stats *s)
{
  if (s->assumed_bps) return s->assumed_bps;
  return s->read_us ? per_second(s->bytes_loaded, s->read_us) : s->probe_read_bps;
}

typedef struct take_ctx {
  tsr_tier_moved *moved;
  size_t n;
  const char *skip;
  uint64_t skip_move;
  bool skipped, failed;
} take_ctx;

static void take_one(void *arg, const char *key, size_t key_len, uint64_t value)
{
  take_ctx *c = arg;
  if (c->skip != NULL && strlen(c->skip) == key_len && memcmp(c->skip, key, key_len) == 0) {
    c->skipped = true;
    c->skip_move = value;
    return;
  }
  char *copy = malloc(key_len + 1);
  if (copy == NULL) {
    c->failed = true;
    return;
  }
  memcpy(copy, key, key_len);
  copy[key_len] = '\0';
  c->moved[c->n++] = (tsr_tier_moved){copy, (tsr_tier_move)value};
}

size_t tsr_tiers_take_moves(tsr_tiers *t, const char *skip_key, tsr_tier_moved **moved_p)
{
  *moved_p = NULL;
  pthread_mutex_lock(&t->lock);
  size_t count = tsr_strmap_count(t->moves);
  tsr_strmap *fresh = count ? tsr_strmap_new(256) : NULL;
  take_ctx c = {.skip = skip_key};
  c.moved = count && fresh ? malloc(count * sizeof *c.moved) : NULL;
  if (c.moved != NULL) {
    tsr_strmap_each(t->moves, take_one, &c);
    if (c.skipped && tsr_strmap_put(fresh, skip_key, strlen(skip_key), c.skip_move) != 0) c.failed = true;
    tsr_strmap_destroy(&t->moves);
    t->moves = fresh;
    fresh = NULL;
  }
  pthread_mutex_unlock(&t->lock);
  tsr_strmap_destroy(&fresh);
  if (count && c.moved == NULL) TSR_WARN("out of memory taking %zu chunk moves; they are reported later", count);
  if (c.failed) TSR_WARN("out of memory reporting chunk moves; the scheduler will learn of them later");
  *moved_p = c.moved;
  return c.n;
}

void tsr_tiers_moved_free(tsr_tier_moved **moved_p, size_t n)
{
  if (moved_p == NULL || *moved_p == NULL) return;
  for (size_t i = 0; i < n; i++) free((*moved_p)[i].key);
  free(*moved_p);
  *moved_p = NULL;
}

void tsr_tiers_forget_moves(tsr_tiers *t, const char *key)
{
  pthread_mutex_lock(&t->lock);
  tsr_strmap_del(t->moves, key, strlen(key));
  pthread_mutex_unlock(&t->lock);
}

uint64_t tsr_process_rss(void)
{
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL) return 0;
  unsigned long long size = 0, resident = 0;
  int n = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  long page = sysconf(_SC_PAGESIZE);
  return n == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

int tsr_tiers_opt(tsr_tiers_opts *o, const char *flag, const char *v, tsr_errbuf *err)
{
  char *end;
  if (strcmp(flag, "--memory-target") == 0 || strcmp(flag, "--memory-spill") == 0 ||
      strcmp(flag, "--memory-pause") == 0) {
    double f = strtod(v, &end);
    if (end == v || *end != '\0' || !(f > 0 && f <= 1)) return tsr_fail(err, TSR_EINVAL, "expected a fraction in (0, 1]");
    *(flag[9] == 't' ? &o->target : flag[9] == 's' ? &o->spill : &o->pause) = f;
    return 0;
  }
  if (strcmp(flag, "--spill-dir") == 0) {
    if (v[0] == '\0' || strlen(v) >= sizeof o->dir) return tsr_fail(err, TSR_EINVAL, "empty or too long");
    snprintf(o->dir, sizeof o->dir, "%s", v);
    return 0;
  }
  if (strcmp(flag, "--disk-limit") == 0)
    return tsr_parse_bytes(v, &o->disk_limit) == 0 ? 0 : tsr_fail(err, TSR_EINVAL, "expected a size like 100GiB");
  if (strcmp(flag, "--spill-bandwidth") == 0) {
    if (tsr_parse_bytes(v, &o->spill_bps) != 0 || o->spill_bps == 0)
      return tsr_fail(err, TSR_EINVAL, "expected bytes per second like 400MB");
    return 0;
  }
  if (strcmp(flag, "--spill-codec") == 0) {
    if (!tsr_spill_codec_ok(v)) return tsr_fail(err, TSR_EINVAL, "expected blosclz, lz4, zstd or zlib");
    snprintf(o->codec, sizeof o->codec, "%s", v);
    return 0;
  }
  if (strcmp(flag, "--spill-level") == 0) {
    int64_t n;
    if (tsr_parse_i64(v, &n) != 0 || n < 0 || n > 9) return tsr_fail(err, TSR_EINVAL, "expected 0 to 9");
    o->level = (int)n;
    return 0;
  }
  return TSR_ENOTFOUND;
}
