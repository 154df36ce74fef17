/* worker/worker — the worker daemon's main thread: the scheduler link
 * (hello, heartbeats, reconnects), the data-plane server, and the hand-off
 * of compute messages to the executor pool. main.c parses the command line
 * into tsr_worker_opts and calls tsr_worker_run(). */
#ifndef TSR_WORKER_WORKER_H
#define TSR_WORKER_WORKER_H

#include <stdint.h>

#include "devtier.h"
#include "net/curve.h"
#include "net/net.h"
#include "tiers.h"
#include "wire/wire.h"

#define TSR_PINNED_DEFAULT UINT64_MAX

typedef struct tsr_worker_opts {
  char scheduler[TSR_MAX_ADDR_LEN];     /* tcp://HOST:PORT of the scheduler's ROUTER */
  char name[TSR_MAX_NAME_LEN + 1];      /* unique per worker */
  char listen_data[TSR_MAX_ADDR_LEN];   /* "" = tcp://IP:0, IP the route to the scheduler */
  char contact_address[TSR_MAX_ADDR_LEN];  /* the data address advertised when it is not the bound one
                                              (NAT, containers): tcp://HOST:PORT, or tcp://HOST for the
                                              bound port; "" = the bound address */
  int threads;                          /* executor threads, >= 1 */
  uint64_t memory_limit;                /* bytes, 0 = none */
  uint64_t max_chunk_bytes;             /* --max-chunk-bytes; 0 = the default (util/limits.h) */
  uint64_t heartbeat_interval_ms;
  uint64_t heartbeat_timeout_ms;
  int fetch_timeout_ms;
  int gpu;                              /* --gpu N: the device this worker owns; -1 = a CPU worker */
  uint64_t device_memory_limit;         /* bytes; 0 = 90% of the device's memory */
  tsr_devtier_opts devtier;             /* device thresholds (--device-memory-target, -spill) */
  uint64_t pinned_memory_limit;         /* the pinned host tier; TSR_PINNED_DEFAULT: the device limit, <= RAM/8, <= memory_limit/4 */
  tsr_tiers_opts tiers;                 /* memory thresholds and spilling (memory_limit copied in) */
  tsr_curve curve;                      /* --curve-secret / --scheduler-key; .on false: plaintext */
  char metrics[TSR_MAX_ADDR_LEN];       /* --metrics HOST:PORT (wmetrics.h); "" = off */
  tsr_transport transport;              /* --transport (default zmq): what the data plane serves, and
                                           prefers when fetching (net.h; docs/transport.md) */
  unsigned recv_pool_warm_count;        /* --recv-pool-warm: UCX receive buffers made at start (0 none) */
  uint64_t recv_pool_warm_bytes;        /* ... of this size each */
  bool fetch_ahead;                     /* --fetch-ahead: buffers and connections for queued tasks' inputs */
} tsr_worker_opts;

/* Runs the daemon until a byte arrives on stop_fd (a signal handler's
 * self-pipe) or a fatal error. Without --listen-data the data socket binds
 * to the address that routes to the scheduler: while the scheduler's host
 * does not resolve yet (a container started before its scheduler's), it
 * waits, one log line every 10 s, rather than exit. Returns the process exit status: 0 after a
 * clean stop (goodbye sent), 1 on a fatal error (protocol version refused,
 * data socket cannot be bound, the GPU cannot be opened). Never returns when executor threads are
 * stuck at shutdown: it then exits the process itself with that status. */
int tsr_worker_run(const tsr_worker_opts *opts, int stop_fd);

/* The process settings that only the environment at process start can
 * give, applied by re-executing /proc/self/exe with argv once (same pid,
 * nothing else changed); returns only when it did not re-execute. Call
 * early in main, before any thread starts or file opens that should not
 * survive exec. A value the user set is kept.
 * - Large chunk buffers on transparent huge pages. Every chunk a worker
 *   receives lands in a buffer that ZeroMQ mallocs for it, and glibc maps
 *   buffers past 32 MiB afresh each time: faulted in 4 KiB pages, a 64 MiB
 *   chunk costs ~27 ms of faults on a VM (as long as its transfer on a
 *   20 Gbit/s link), ~6 ms in 2 MiB pages. Only glibc's tunable
 *   glibc.malloc.hugetlb=1, read at process start, puts them there (when
 *   the kernel's THP mode is "madvise"; "always" needs nothing, "never"
 *   allows nothing): added to GLIBC_TUNABLES unless it names the tunable.
 * - OPENBLAS_NUM_THREADS=1 unless set: the executor threads are the
 *   worker's parallelism and call BLAS one thread each
 *   (openblas_set_num_threads(1)), but OpenBLAS starts its own pool when
 *   the library loads, and each pool thread spins (sched_yield) for ~0.1 s
 *   before it sleeps: 90 ms of a core at every worker start, taken from
 *   the first tasks on a small machine (measured on this 2-core VM). */
void tsr_worker_start_env(char **argv);

#endif
