/* worker/tiers — the host and disk tiers of a worker's chunk store.
 *
 * The store (store.h) holds chunks in host memory; this module keeps the
 * worker under its memory limit by moving chunks down to disk, least
 * recently used first, and brings them back when a task or a peer asks.
 *
 * Thresholds, fractions of the memory limit, like Dask's:
 *   target  (default 0.6): when the bytes of the store's chunks exceed it,
 *           evict chunks until they are below it again;
 *   spill   (default 0.7): when the process's RSS, less the RSS it had when
 *           the tiers were made (libraries, the kernels' tables: the fixed
 *           overhead), exceeds it, evict as well (memory the store does not
 *           manage: kernel scratch, fragmentation, malloc's caches).
 * Only chunks that nothing but the store references are evicted: never one
 * a running task reads, nor one the data socket is sending. A recomputable
 * chunk (below) that nobody has read yet is evicted last, and only when the
 * chunks exceed the pause threshold (so a worker never stays paused on
 * chunks whose consumers it is not sent).
 *
 * Eviction: a chunk marked `recompute` (the output of a task without
 * inputs: random data, file reads, constants — cheaper to make again than
 * to write and read back) or a replica (a copy of a peer's chunk) is
 * dropped, never written. Any other chunk is written once to a spill file
 * (spill.h, compressed with blosc); the file stays until the key is freed,
 * so evicting the same chunk again after a reload costs no write. When the
 * disk limit would be exceeded, or a write fails with ENOSPC, the chunk
 * stays in memory (logged once; after ENOSPC no write is tried until a
 * spill file is removed) and the worker does not pause while the disk is
 * full: kept results then exceed the memory limit rather than stall.
 *
 * Which chunks are `recompute` is the scheduler's decision (the `compute`
 * message's `recompute` flag, policy_evict.h); without one (an older
 * scheduler) the executor falls back to "output of a task without inputs".
 *
 * Moves are recorded for the scheduler: every chunk that is not a replica
 * and goes to disk (spilled), comes back (loaded) or leaves this worker
 * (dropped, or its spill file failed its checks), the last move of each
 * key since the previous tsr_tiers_take_moves(); the main thread sends them
 * as `chunks_moved`. A dropped chunk is also simply not found any more: a
 * task that needs it reports `missing_input` (the fallback when the report
 * has not reached the scheduler first) and the scheduler recomputes it.
 *
 * Locks: the tiers' own mutex is taken before the store's, never after
 * (the store calls in here only without holding its lock).
 * Threading: all functions may be called from any thread. */
#ifndef TSR_WORKER_TIERS_H
#define TSR_WORKER_TIERS_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"
#include "util/util.h"

#define TSR_TIERS_DIR_MAX 512

typedef struct tsr_tiers_opts {
  uint64_t memory_limit;         /* bytes; 0 = no limit, nothing is evicted */
  double target;                 /* fraction of memory_limit, (0, 1] */
  double spill;                  /* fraction of memory_limit for the RSS, (0, 1]; 0 = RSS not watched */
  char dir[TSR_TIERS_DIR_MAX];   /* "" = a new directory under $TMPDIR (or /tmp) */
  uint64_t disk_limit;           /* bytes of spill files; 0 = none */
  char codec[16];                /* blosclz, lz4, zstd, zlib */
  int level;                     /* 0-9 */
  double pause;                  /* fraction of memory_limit, (0, 1]: see tsr_tiers_paused */
  uint64_t spill_bps;            /* disk throughput (bytes/s) reported to the scheduler for its
                                    recompute-or-spill costs; 0 = measured */
} tsr_tiers_opts;

#define TSR_TIERS_OPTS_DEFAULT {0, 0.6, 0.7, "", 0, "lz4", 5, 0.8, 0}

/* Counters since the worker started (not reset by a reconnect). */
typedef struct tsr_tiers_stats {
  uint64_t disk_bytes;      /* bytes of the chunks held in spill files now (uncompressed) */
  uint64_t disk_file_bytes; /* the files' size on disk now */
  uint64_t disk_chunks;
  uint64_t bytes_spilled;   /* written to spill files, uncompressed */
  uint64_t chunks_spilled;
  uint64_t bytes_dropped;   /* evicted by dropping (recomputable chunks, replicas) */
  uint64_t chunks_dropped;
  uint64_t bytes_loaded;    /* read back from spill files */
  uint64_t chunks_corrupt;  /* spill files that failed their checks */
  uint64_t write_us;        /* time spent writing spill files (bytes_spilled of them) */
  uint64_t read_us;         /* time spent loading them (bytes_loaded) */
  uint64_t probe_write_bps, probe_read_bps;  /* one 2 MiB write and load timed at start-up */
  uint64_t assumed_bps;     /* opts.spill_bps: given, not measured (0: measured) */
} tsr_tiers_stats;

/* Throughput of spill writes / loads in bytes per second (compression and
 * checksums included): --spill-bandwidth when given; else measured over
 * the real spills and loads once there were some, else the start-up
 * probe's; 0 if neither. */
uint64_t tsr_tiers_stats_write_bps(const tsr_tiers_stats *stats);
uint64_t tsr_tiers_stats_read_bps(const tsr_tiers_stats *stats);

typedef enum { TSR_TIER_SPILLED = 0, TSR_TIER_LOADED, TSR_TIER_DROPPED } tsr_tier_move;

typedef struct tsr_tier_moved {
  char *key;            /* malloc'd */
  tsr_tier_move move;
} tsr_tier_moved;

typedef struct tsr_tiers tsr_tiers;

/* Creates the spill directory (dir itself when given, created if absent;
 * else a fresh mkdtemp directory, removed again by destroy). 0, TSR_EINVAL
 * for bad options, TSR_EIO naming the directory, TSR_ENOMEM. */
int tsr_tiers_new(const tsr_tiers_opts *opts, tsr_tiers **tiers_p, tsr_errbuf *err);
/* Deletes every spill file (and the directory when it made it). NULL is a
 * no-op. Call after the store is destroyed or detached. */
void tsr_tiers_destroy(tsr_tiers **tiers_p);
const char *tsr_tiers_dir(const tsr_tiers *tiers);
uint64_t tsr_tiers_memory_limit(const tsr_tiers *tiers);

/* Evicts until the store is under the thresholds or nothing more can go.
 * Call after the store grew (a task's output, a fetch, a load). Only one
 * thread evicts at a time; a caller that finds another one busy returns at
 * once. */
void tsr_tiers_balance(tsr_tiers *tiers, tsr_wstore *store);

/* The store's miss path: loads key from its spill file into the store.
 * 0 with a new reference in *chunk_p; TSR_ENOTFOUND when key is not on
 * disk, or its file was corrupted (then logged, deleted and forgotten). */
int tsr_tiers_load(tsr_tiers *tiers, tsr_wstore *store, const char *key, tsr_chunk **chunk_p);
/* True when key has a spill file. */
bool tsr_tiers_has(tsr_tiers *tiers, const char *key);
/* Forgets key and deletes its file; true when there was one. */
bool tsr_tiers_del(tsr_tiers *tiers, const char *key);
/* Forgets every key and deletes every file (a reconnect). */
void tsr_tiers_clear(tsr_tiers *tiers);

/* True while the chunks in memory (pinned ones included) exceed pause x
 * the limit: evictions are not keeping up (running tasks pin more than the
 * target), so the worker asks the scheduler for no new tasks (heartbeat
 * `paused`). Unlike Dask's pause it ignores the RSS: a paused worker always
 * resumes once its running tasks finish and their chunks can be evicted,
 * so a cluster cannot stay paused forever. Balances first (chunks whose
 * sends finished since the last task may be evictable now). Logs each
 * change at info. */
bool tsr_tiers_paused(tsr_tiers *tiers, tsr_wstore *store);

/* Applies one worker command-line flag (--memory-target, --memory-spill,
 * --memory-pause, --spill-dir, --disk-limit, --spill-codec, --spill-level, --spill-bandwidth)
 * with its value.
 * 0, TSR_EINVAL with a message for a bad value, TSR_ENOTFOUND when flag is
 * none of these. */
int tsr_tiers_opt(tsr_tiers_opts *opts, const char *flag, const char *value, tsr_errbuf *err);

void tsr_tiers_stats_get(tsr_tiers *tiers, tsr_tiers_stats *stats);

/* Takes the moves recorded since the last take (the last of each key),
 * except skip_key's (NULL: none), which stay for the next take: a task's
 * report must reach the scheduler before the moves of the chunk it made.
 * Returns the count and a malloc'd array in *moved_p (NULL when 0; on
 * ENOMEM the moves are lost, 0). Free with tsr_tiers_moved_free. */
size_t tsr_tiers_take_moves(tsr_tiers *tiers, const char *skip_key, tsr_tier_moved **moved_p);
void tsr_tiers_moved_free(tsr_tier_moved **moved_p, size_t n);
/* Forgets key's recorded moves: the scheduler freed it, or a task is
 * storing a new chunk under it (moves of an older copy must not be applied
 * to the new one). */
void tsr_tiers_forget_moves(tsr_tiers *tiers, const char *key);
/* Resident set size of this process in bytes (from /proc), 0 if unknown. */
uint64_t tsr_process_rss(void);

#endif
