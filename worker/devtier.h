/* worker/devtier — the device tier of a GPU worker's chunk store.
 *
 * A GPU worker's task outputs stay in device memory (store.h: device
 * chunks). This module keeps them under --device-memory-limit by moving
 * idle device chunks down to host memory, least recently used first, so a
 * graph whose chunks together pass the limit completes instead of failing:
 *
 *   device --(DMA on the tier's own stream)--> pinned host memory while
 *            the pinned tier has room (slabs.h), else ordinary host
 *            memory (through the pinned staging blocks)
 *          --(host tiers, tiers.h)--> disk
 *
 * When, fractions of the device memory limit:
 *   target (default 0.8): after every task, when the device chunks hold
 *          more than target x limit, move idle chunks down until they hold
 *          less;
 *   spill  (default 0.9): likewise while everything allocated on the
 *          device (chunks, staged inputs, kernels' scratch) passes
 *          spill x limit;
 *   and on demand: when an allocation (a task's output, a staged input, a
 *          kernel's scratch) would pass the limit itself, the GPU calls
 *          tsr_devtier_reclaim (installed as its reclaim hook, gpu.h),
 *          which moves chunks down until the allocation fits.
 *
 * Which chunks: only those that nothing but the store references — never
 * an input of a running task, never one being served — least recently used
 * first. A recomputable chunk nobody has read yet comes last and goes only
 * on demand, never to meet a threshold.
 *
 * How: a recomputable chunk (chunk->recompute: the output of a task without
 * inputs, or one the scheduler marked so; docs/memory.md) that has been
 * read is dropped, not copied: making it again is cheaper than moving it
 * down and back up. One nobody has read yet is copied down like any other
 * chunk instead (dropping a fresh random chunk before its consumer runs
 * would loop: drop, missing input, recompute, drop); the host tiers may
 * still drop it there. A chunk no task waits for (compute.awaited false:
 * only a client wants it, as after a persist) counts as read at once
 * (executor.c), so a persisted random array is dropped, not copied down.
 * Any other chunk is copied to a host buffer that replaces the device
 * chunk in the store under the same key, LRU age and marks; the device
 * bytes are freed with the last reference. When a task
 * takes the chunk while it is being copied, the copy is thrown away and the
 * chunk stays. The host tiers then account the host copy and may spill it
 * to disk. A moved chunk is not moved back up to stay: a task on the GPU
 * that reads it copies it up for itself (executor_gpu.c, transient).
 *
 * Threading: any thread. One mover at a time (a mutex that also owns the
 * copy stream): balance returns at once when another thread is moving;
 * reclaim waits for it, since its caller needs the memory. Locks: the
 * mover's mutex is taken before the store's and the host tiers', never
 * after; reclaim is called by the GPU without any lock of its own held. */
#ifndef TSR_WORKER_DEVTIER_H
#define TSR_WORKER_DEVTIER_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "util/util.h"

typedef struct tsr_devtier_opts {
  double target;   /* fraction of the device limit for device chunks, (0, 1] */
  double spill;    /* fraction of the device limit for all device bytes in use, (0, 1] */
} tsr_devtier_opts;

#define TSR_DEVTIER_OPTS_DEFAULT {0.8, 0.9}

/* The device the tier moves chunks off: a GPU worker's (worker.c), or a
 * fake in the unit tests. */
typedef struct tsr_devtier_dev {
  void *arg;
  uint64_t limit;                   /* the device memory limit, bytes (> 0) */
  /* Bytes allocated on the device now (chunks, staged inputs, scratch). */
  uint64_t (*used)(void *arg);
  /* Copies nbytes of device memory at src to host memory at dst; returns
   * once dst holds them. 0 or an error. Called by one thread at a time. */
  int (*copy_down)(void *arg, void *dst, const void *src, size_t nbytes, tsr_errbuf *err);
  /* Optional: wakes allocations waiting for device memory (chunks may have
   * become movable). Called at every balance, i.e. at the end of every task. */
  void (*wake)(void *arg);
  /* Optional: pinned host memory for the copies (the pinned host tier):
   * NULL when there is none or it is full (then malloc'd memory), freed by
   * host_free(host_arg, ptr, nbytes) on any thread. */
  void *(*host_alloc)(void *host_arg, size_t nbytes);
  tsr_chunk_release_fn host_free;
  void *host_arg;
} tsr_devtier_dev;

/* Counters since the worker started (not reset by a reconnect). */
typedef struct tsr_devtier_stats {
  uint64_t bytes_moved;     /* device chunks copied down to host memory */
  uint64_t chunks_moved;
  uint64_t bytes_pinned;    /* the part of bytes_moved that landed in pinned memory */
  uint64_t bytes_dropped;   /* recomputable device chunks dropped */
  uint64_t chunks_dropped;
  uint64_t move_us;         /* time spent copying chunks down */
  uint64_t reclaims;        /* reclaim calls (allocations over the limit) */
  uint64_t reclaim_us;      /* time they took, waiting for another mover included */
} tsr_devtier_stats;

typedef struct tsr_devtier tsr_devtier;

/* A tier over store's device chunks. 0, TSR_EINVAL (bad fractions, no
 * limit, a missing function) or TSR_ENOMEM, with a message. The store must
 * outlive the tier; attach it with tsr_wstore_set_devtier. */
int tsr_devtier_new(const tsr_devtier_opts *opts, const tsr_devtier_dev *dev, tsr_wstore *store,
                    tsr_devtier **dt_p, tsr_errbuf *err);
/* NULL is a no-op. Detach it from the store and the GPU first. */
void tsr_devtier_destroy(tsr_devtier **dt_p);

/* Called after every task (through tsr_wstore_balance): wakes allocations
 * waiting for memory (the task's chunks are idle now), then moves idle
 * device chunks down until the device is under its target and spill
 * thresholds or nothing more can go. Returns at once when under them, or
 * when another thread is moving chunks. */
void tsr_devtier_balance(tsr_devtier *dt);

/* The GPU's reclaim hook (tsr_wgpu_reclaim_fn, arg = the tier): moves idle
 * device chunks down, least recently used first (unread recomputable ones
 * last), until `need` bytes are freed or none is left. Returns the bytes
 * freed; *busy_p gets the bytes of device chunks it could not move because
 * tasks or sends use them now (they may become movable later). Then lets
 * the host tiers balance (the host copies may pass the memory limit). */
uint64_t tsr_devtier_reclaim(void *dt, uint64_t need, uint64_t *busy_p);

void tsr_devtier_stats_get(tsr_devtier *dt, tsr_devtier_stats *stats);

/* Applies --device-memory-target or --device-memory-spill with its value.
 * 0, TSR_EINVAL with a message for a bad value, TSR_ENOTFOUND when flag is
 * neither. */
int tsr_devtier_opt(tsr_devtier_opts *opts, const char *flag, const char *value, tsr_errbuf *err);

#endif
