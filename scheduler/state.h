/* scheduler/state.h — the scheduler's whole state, in flat arrays indexed by
 * small integers, and the functions every part of the daemon shares.
 *
 * Ownership and lifetimes (the invariants the rest of the daemon relies on):
 * - A task id (uint32) names a slot of st->tasks. A forgotten task's slot
 *   goes to a free list and is reused; its `gen` is bumped so that stale
 *   references held in dependents lists can be recognised (sched_edge).
 * - A task's key, params bytes, dependency list and the dependents found in
 *   its own graph live in the arena of the graph that first defined it
 *   (sched_graph). That graph record lives as long as any of its tasks, so
 *   those pointers never dangle. Dependents added by later graphs and the
 *   error of an erred task live out of line in sched_task_ext.
 * - A task record is kept while a client wants it or while any dependent
 *   record is alive (so a lost result can be recomputed from the graph).
 *   Hence a live task's dependency ids are always valid.
 * - Workers, clients and peers are slots in arrays too; ids of departed ones
 *   are reused, and every reference to a departed worker is cleared when it
 *   leaves (sched_tr_worker_lost visits the tasks of its `placed` list).
 * - The state is owned by one thread: the event loop. No locks.
 *
 * Nothing here touches sockets: outbound messages are appended to per-peer
 * tsr_wbuf outboxes which loop.c flushes once per loop iteration. That is
 * what lets tests drive the state, the policies and the handlers without
 * ZeroMQ sockets. */
#ifndef TSR_SCHED_STATE_H
#define TSR_SCHED_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/limits.h"
#include "util/util.h"
#include "wire/wire.h"
#include "usage.h"

#define SCHED_NONE UINT32_MAX        /* "no task / no graph" */
#define SCHED_NO_WORKER UINT16_MAX   /* "no worker" */
#define SCHED_MAX_WORKERS 65000      /* worker ids are uint16 */
#define SCHED_MAX_OPS 65000          /* op ids are uint16 */
#define SCHED_MAX_SUSPICION 3        /* a task that killed this many workers errs */
#define SCHED_SLOTS_PER_THREAD 2     /* tasks in flight per worker thread, minimum */
/* Short tasks get a deeper window: enough tasks in flight per thread to
 * cover about SCHED_INFLIGHT_US of work, so a worker never idles for the
 * scheduler round trip (~100-200 us) between tasks, up to this many. */
#define SCHED_INFLIGHT_US 2000
#define SCHED_MAX_SLOTS_PER_THREAD 256
/* On a worker with a memory limit, the outputs of its tasks in flight
 * (estimated by its average output size) stay within this fraction of the
 * limit: short tasks widen the window, big outputs narrow it again, never
 * below one task per thread. */
#define SCHED_INFLIGHT_MEMORY_FRACTION 4   /* 1/4 of the limit */

/* Task states. See transitions.c for the machine. NEW is the short-lived
 * state of a task created by a submit that is still being validated. */
typedef enum sched_tstate {
  TS_FREE = 0,
  TS_NEW,
  TS_WAITING,
  TS_READY,
  TS_QUEUED,
  TS_PROCESSING,
  TS_MEMORY,
  TS_RELEASED,
  TS_ERRED,
  TS_LOST,
  TS_COUNT
} sched_tstate;

const char *sched_tstate_name(int state);

/* A reference to a dependent: the id plus the generation of its slot, so a
 * dependent that was forgotten (and whose id may have been reused) is
 * skipped instead of followed. */
typedef struct sched_edge {
  uint32_t id;
  uint32_t gen;
} sched_edge;

/* A failure shared by the task that failed and every dependent it took
 * down: one copy of the message however deep the graph (a 10^6 chain must
 * not hold 10^6 nested "dependency failed" strings). */
typedef struct sched_error {
  uint32_t refs;
  uint32_t key_len;
  char *key;       /* the task that failed first */
  char *message;   /* its message */
} sched_error;

/* Out-of-line, rarely needed parts of a task. */
typedef struct sched_task_ext {
  sched_edge *xdeps;   /* dependents added by later graphs (malloc'd) */
  uint32_t nx, capx;
  sched_error *error;  /* only for erred tasks */
  uint32_t fused_parts; /* tasks fused into this one (fuse.c); 0 for a plain task */
} sched_task_ext;

typedef struct sched_task {
  const char *key;            /* in the owner graph's arena, NUL-terminated */
  const uint8_t *params;      /* msgpack map bytes in the arena, or NULL */
  const uint32_t *deps;       /* dependency ids, in listed order (duplicates kept) */
  const sched_edge *dependents; /* dependents from the owner graph (arena) */
  sched_task_ext *ext;        /* NULL unless needed */
  int64_t priority;           /* lower runs first */
  uint64_t nbytes;            /* result size, once computed */
  int64_t shape[TSR_MAX_NDIM];
  uint32_t params_len;
  uint32_t ndeps;
  uint32_t ndependents;       /* entries in `dependents` */
  uint32_t nlive_dependents;  /* dependent records alive (arena + ext) */
  uint32_t nwaiting_deps;     /* deps not in memory (meaningful while WAITING) */
  uint32_t nneeded;           /* dependents (with multiplicity) that are active */
  uint32_t nwanted;           /* clients that want this key */
  uint32_t gen;               /* slot generation */
  uint32_t heap_pos;          /* position in its op's queue, SCHED_NONE if not queued */
  uint32_t graph;             /* owner graph (status counts, arena) */
  uint16_t key_len;
  uint16_t op;
  uint16_t who_has;           /* worker holding the result, or SCHED_NO_WORKER */
  uint16_t processing_on;     /* worker computing it, or SCHED_NO_WORKER */
  uint8_t state;
  uint8_t suspicion;          /* workers that died while it ran */
  uint8_t dtype;
  uint8_t ndim;
  /* memory-aware eviction (policy_evict.h) */
  uint8_t evict;              /* SCHED_EV_* bits */
  uint16_t pgroup;            /* its progress group in its graph (progress.h), set at admission */
  uint32_t cost_us;           /* recompute cost of the result, memoized when it was made (saturating) */
  uint32_t ndeferred_deps;    /* deps (with multiplicity) that are deferred drops (meaningful while WAITING) */
} sched_task;

/* The bytes a task holds while it runs: its inputs and its output (its
 * estimate before it ran). */
static inline uint64_t sched_task_working_bytes(const sched_task *tasks, const sched_task *t, uint64_t output)
{
  uint64_t bytes = output;
  for (uint32_t i = 0; i < t->ndeps; i++) bytes += tasks[t->deps[i]].nbytes;
  return bytes;
}

/* Parts of a fused task (fuse.c), 0 for a plain task; what a task counts
 * for in status: its parts when fused, else 1. */
static inline uint32_t sched_task_fused_parts(const sched_task *t) { return t->ext ? t->ext->fused_parts : 0; }
static inline uint32_t sched_task_weight(const sched_task *t)
{
  uint32_t parts = sched_task_fused_parts(t);
  return parts ? parts : 1;
}

/* sched_task.evict bits (policy_evict.h, transitions.c) */
#define SCHED_EV_ON_DISK 0x01   /* MEMORY: its holder moved it to its disk tier */
#define SCHED_EV_RAN 0x02       /* computed at least once: a later run is a recomputation */
#define SCHED_EV_DEFERRED 0x04  /* RELEASED: dropped by its holder while dependents need it; recomputed
                                   when one of them has every other input in memory */
#define SCHED_EV_REDONE 0x08    /* its result in memory is a recomputation */
#define SCHED_EV_CONSUMED 0x10  /* a dependent finished since its result was made */
#define SCHED_EV_NODROP 0x20    /* recomputed and dropped again before any dependent read it (memory
                                   too tight for drop-and-recompute): spilled from now on */
#define SCHED_EV_UNREAD 0x40    /* MEMORY: made while dependents waited, none dispatched since:
                                   counted in its holder's unread_bytes (policy_place.c) */
#define SCHED_EV_GONE 0x80      /* MEMORY: a root its holder dropped, still placed there until a
                                   reader is about to be sent (sched_tr_inputs_gone) */

/* key -> task id: open addressing over {hash, id} slots; the keys are the
 * tasks' own (keyidx.c). */
typedef struct sched_keyidx {
  uint64_t *slots;
  uint32_t cap, count;
} sched_keyidx;

/* A bump allocator made of chained blocks: pointers into it are stable. */
typedef struct sched_arena_block sched_arena_block;
typedef struct sched_arena {
  sched_arena_block *head;
  size_t used_total;
} sched_arena;

void *sched_arena_alloc(sched_arena *arena, size_t size, size_t align);  /* NULL on ENOMEM */
void sched_arena_free(sched_arena *arena);

/* A graph as submitted by one client. */
typedef struct sched_graph {
  uint64_t graph_id;          /* the client's number */
  uint32_t client;            /* client slot, or SCHED_NONE once it left */
  uint32_t ntasks;            /* live tasks owned */
  uint32_t ndone;             /* owned tasks in memory or released */
  uint32_t nerred;
  uint32_t nfused;            /* live fused tasks owned, and their parts */
  uint32_t nfused_parts;
  char client_name[TSR_MAX_NAME_LEN + 1];
  sched_arena arena;
  bool pinned;                /* being admitted: not freed at ntasks == 0 */
  struct sched_progress *progress;  /* per-group counts (progress.h); NULL before admission */
} sched_graph;

/* A uint32 hash set (open addressing), used for a client's wanted ids. */
typedef struct sched_idset {
  uint32_t *slots;            /* SCHED_NONE = empty, SCHED_NONE-1 = tombstone */
  uint32_t cap, count, tombs;
} sched_idset;

bool sched_idset_has(const sched_idset *set, uint32_t id);
int sched_idset_add(sched_idset *set, uint32_t id);      /* 1 added, 0 present, TSR_ENOMEM */
bool sched_idset_del(sched_idset *set, uint32_t id);
void sched_idset_free(sched_idset *set);

typedef struct sched_worker {
  bool alive;
  uint32_t peer;
  uint64_t peer_id;           /* the number sent in welcome */
  char name[TSR_MAX_NAME_LEN + 1];
  char address[TSR_MAX_NAME_LEN + 1];
  char device[TSR_MAX_NAME_LEN + 1];
  uint32_t threads;
  uint64_t pid;
  uint64_t memory_limit;
  uint64_t memory_used, tasks_running, tasks_done, chunks;  /* from heartbeats */
  uint32_t nprocessing;       /* tasks sent and not reported back */
  uint64_t avg_task_us;       /* moving average of reported task durations; 0: none yet */
  uint64_t avg_out_bytes;     /* moving average of reported output sizes; 0: none yet */
  uint64_t inflight_bytes;    /* estimated output bytes of its tasks in flight (policy_place.c) */
  uint64_t working_bytes;     /* inputs plus estimated outputs of its tasks in flight: what they hold
                                 while they run, which a GPU's device tier cannot move (policy_place.c) */
  uint64_t unread_bytes;      /* results it holds that no dependent has been sent to read yet */
  uint64_t bytes_held;        /* sum of nbytes of results it holds */
  uint64_t *opbits;           /* bitset over op ids advertised */
  uint64_t *nativebits;       /* ops native to its device (same allocation as opbits) */
  bool gpu;                   /* its hello listed native_ops: a GPU worker */
  uint32_t nopbits;
  /* GPU workers (hello / heartbeat); empty and 0 for CPU workers */
  char gpu_name[TSR_MAX_NAME_LEN + 1];
  uint64_t device_memory_limit, device_memory_used;
  uint64_t device_bytes_moved, device_bytes_dropped;  /* device tier, from heartbeats */
  int32_t gpu_util;           /* percent, -1 when not reported */
  uint64_t disk_bytes, bytes_spilled, bytes_dropped;  /* memory tiers, from heartbeats */
  bool paused;                /* heartbeat: over its pause threshold, send it no new tasks */
  /* memory-aware eviction (policy_evict.h) */
  uint64_t held_disk;         /* of bytes_held, results its chunks_moved reports put on its disk tier */
  uint64_t spill_write_bps, spill_read_bps;  /* measured spill throughput (heartbeat); 0: not yet */
  uint64_t tasks_recomputed, bytes_recomputed;  /* results it made that had been made before */
  sched_usage usage;          /* heartbeat: its CPU time, peaks, fetches (relayed in status_reply) */
  /* keys to `free`, packed as msgpack strings, sent once per iteration */
  msgpack_sbuffer freebuf;
  uint32_t nfree;
  /* indexes that keep placement and departure independent of the number
   * of workers and tasks */
  uint32_t load_pos;          /* its index in st->by_load[gpu] (policy_place.c); SCHED_NONE: not in it */
  bool load_full;             /* no free slot, as of its last re-sift in by_load (its order's first key) */
  uint32_t *placed;           /* ids of tasks sent to it or whose result it holds, and stale ids
                                 (compacted as it grows; sched_worker_note_placed) */
  uint32_t nplaced, cap_placed;
  bool placed_lossy;          /* an id could not be noted (ENOMEM): its departure scans every task */
} sched_worker;

/* Live workers of one kind by load (policy_place.c): a binary min-heap of
 * worker ids on (no free slot, tasks in flight / threads, id). */
typedef struct sched_worker_heap {
  uint16_t *ids;
  uint32_t n, cap;
} sched_worker_heap;

typedef struct sched_pending_part {
  char *bytes;                /* one `submit` message, re-read at the last part */
  size_t len;
} sched_pending_part;

/* The tasks of a graph's parts, decoded as each part arrives
 * (submit_decode.c). Strings borrow the kept part bytes; while parts are
 * still arriving, `inputs` and `params` of a spec are offsets into refs
 * and params (which move as they grow), turned into pointers by
 * sched_decoded_resolve() at the last part. */
typedef struct sched_decoded {
  struct sched_task_spec *specs;
  uint32_t nspecs, cap_specs;
  struct sched_strref *refs;  /* every task's inputs */
  uint32_t nrefs, cap_refs;
  struct sched_strref *wants; /* the `wants` of every part */
  uint32_t nwants, cap_wants;
  bool wants_given;           /* some part had a `wants` array (else: the sinks) */
  bool resolved;              /* offsets turned into pointers: no more parts */
  msgpack_sbuffer params;     /* params maps, re-encoded */
} sched_decoded;

typedef struct sched_pending {
  uint64_t graph_id;
  sched_pending_part *parts;
  uint32_t nparts, cap;
  size_t bytes;
  bool resending;             /* parts marked `resend`: older parts were dropped */
  int failed;                 /* a part was rejected: this code and `error` answer the last part */
  char *error;
  sched_decoded dec;          /* the tasks of parts [0, ndecoded) */
  uint32_t ndecoded;
  /* the part being decoded, a slice per loop iteration (submit_decode.c) */
  msgpack_unpacked unp;
  bool unp_live;
  const msgpack_object *cur_tasks;
  uint32_t cur_n, cur_next;
} sched_pending;

typedef struct sched_client {
  bool alive;
  uint32_t peer;
  uint64_t peer_id;
  char name[TSR_MAX_NAME_LEN + 1];
  sched_idset wants;
  sched_pending *pending;     /* multi-part submits in progress */
  uint32_t npending, cap_pending;
  uint64_t token;             /* hello's client_id (0: none); journal.h */
  bool progress;              /* subscribed to `progress` messages (progress.h) */
} sched_client;

enum { PEER_NONE = 0, PEER_WORKER, PEER_CLIENT };

#define SCHED_MAX_IDENTITY 255

typedef struct sched_peer {
  bool in_use;
  uint8_t role;               /* PEER_* */
  uint8_t id_len;
  bool dirty;                 /* has output queued this iteration */
  bool was_gone;              /* its identity belonged to a peer we dropped */
  uint32_t index;             /* worker or client slot */
  uint64_t last_seen_ms;
  unsigned char identity[SCHED_MAX_IDENTITY];
  tsr_wbuf out;
  char curve_key[41];         /* its CURVE public key (Z85), "" without CURVE (security.c) */
} sched_peer;

/* The queued tasks of one op, a binary min-heap on (priority, id). */
typedef struct sched_heap {
  uint32_t *ids;
  uint32_t n, cap;
} sched_heap;

typedef struct sched_op {
  char *name;
  uint32_t nworkers;          /* live workers advertising it */
  uint32_t ngpu_native;       /* live GPU workers with a CUDA variant of it (see policy_place.c) */
  uint32_t ncpu;              /* live CPU workers advertising it */
  sched_heap queue;           /* READY and QUEUED tasks of this op */
  bool blocked;               /* scratch of the placement pass: no worker takes its tasks this pass */
  /* measured tasks (policy_evict.h): moving averages of durations and
   * output sizes, and of both per byte of the task's largest input */
  uint64_t avg_us, avg_bytes;
  double us_per_in, out_per_in;
  bool measured, measured_in; /* avg_* / *_per_in hold at least one task_done */
  /* A fused op (fuse.c): the distinct ops of its tasks' parts, sorted. Not
   * in op_index and never advertised: a worker has it when it has `fused`
   * and every part op, natively when every part op is native. NULL for an
   * op of the registry. */
  uint16_t *fused_ops;
  uint32_t nfused_ops;
} sched_op;

/* --recompute: how results that workers evict are chosen to be dropped
 * (recomputed when needed again) or spilled (policy_evict.h). */
typedef enum sched_recompute_mode {
  SCHED_RECOMPUTE_AUTO = 0,   /* by cost: recompute when cheaper than a spill write and reload */
  SCHED_RECOMPUTE_NEVER,      /* spill everything the scheduler tracks */
  SCHED_RECOMPUTE_ALWAYS,     /* drop everything not wanted by a client */
} sched_recompute_mode;

typedef struct sched_config {
  uint64_t heartbeat_ms;
  uint64_t timeout_ms;
  sched_recompute_mode recompute;
  uint32_t fuse_width;        /* --fuse-width (fuse.c); 0: no fusion (--no-fuse) */
  bool curve;                 /* CURVE on: workers are told whom to admit (security.c) */
  tsr_limits limits;          /* --max-* (limits.c); a 0 field takes its default */
} sched_config;

/* Gives every 0 field of limits its default (TSR_LIMITS_DEFAULT; limits.c). */
void sched_limits_defaults(tsr_limits *limits);

typedef struct sched_dash sched_dash;

typedef struct sched_state {
  sched_config cfg;

  sched_task *tasks;
  uint32_t ntasks;            /* slots ever used (high-water mark) */
  uint32_t cap_tasks;
  uint32_t free_head;         /* free list threaded through heap_pos */
  uint32_t nlive;             /* task records in the scheduler */
  uint32_t nfused_extra;      /* sum of fused_parts - 1 over live fused tasks: nlive + this = tasks by parts */
  uint32_t count_by_state[TS_COUNT];
  sched_keyidx keyidx;        /* key -> task id (keyidx.c) */
  int64_t next_priority;

  sched_op *ops;
  uint32_t nops, cap_ops;
  tsr_strmap *op_index;       /* op name -> op id */

  sched_graph **graphs;
  uint32_t ngraphs, cap_graphs;

  sched_worker *workers;
  uint32_t nworkers_slots, cap_workers, nworkers_alive;
  sched_client *clients;
  uint32_t nclients_slots, cap_clients, nclients_alive;

  sched_peer *peers;
  uint32_t npeers_slots, cap_peers;
  tsr_strmap *peer_index;     /* identity -> peer slot */
  tsr_strmap *gone;           /* identities of peers we dropped */
  uint32_t *dirty;            /* peers with output this iteration */
  uint32_t ndirty, cap_dirty;
  uint64_t next_peer_id;

  /* work lists of the transition engine */
  uint32_t *work;             /* tasks to re-examine */
  uint32_t nwork, cap_work;
  uint32_t *ready;            /* tasks that became READY since the last pass */
  uint32_t nready, cap_ready;
  uint32_t *stack;            /* the error cascade's explicit stack */
  uint32_t nstack, cap_stack;

  /* the placement policy: live workers by load, CPU [0] and GPU [1] ones,
   * and its scratch */
  sched_worker_heap by_load[2];
  uint32_t *walk;             /* heap indexes of a walk in load order (policy_place.c) */
  uint32_t cap_walk;
  uint64_t *loc_bytes;        /* per worker */
  uint16_t *loc_touched;
  msgpack_sbuffer scratch;

  /* counters for logs and benchmarks */
  uint64_t tasks_computed, tasks_sent;

  /* the write-ahead journal (journal.h), NULL without --journal */
  struct sched_journal *journal;
  /* sched_out(SCHED_NONE): messages for a detached client (replayed from the
   * journal, not reconnected yet) are packed here and dropped */
  tsr_wbuf discard;
  char frame_key[41];         /* CURVE key of the frame being handled, "" none (security.c) */
  struct sched_dash *dash;    /* the dashboard's counters (dashboard.h), NULL when off */
  bool trim_wanted;           /* a graph or a client's parts were freed: trim the heap (loop.c) */

  /* graphs being admitted a slice per loop iteration, first in first out
   * (submit.c); the first one is in progress */
  struct sched_admission *adm_first, *adm_last;
  uint32_t *forget_later;     /* records kept while an admission runs (it may hold their ids) */
  uint32_t nforget_later, cap_forget_later;
  bool decode_wanted;         /* some client's kept parts are not decoded yet */
  bool place_more;            /* the last placement pass stopped at its time budget */
  uint64_t adm_slowest_us;    /* the longest admission step of the last sched_admit_run, and its phase */
  const char *adm_slowest_phase;

  /* the loop's own timing (loop.c, /metrics): iterations by duration */
  uint64_t loop_iterations, loop_busy_us, loop_max_us;
  uint64_t loop_hist[8];      /* <= 1, 5, 10, 50, 100, 500, 1000 ms, more */
  char loop_max_what[96];     /* what the longest iteration spent its time on */
  uint64_t slowest_msg_us;    /* this iteration's slowest message handler, and its op */
  char slowest_msg_op[32];
} sched_state;

/* ---------- lifetime ---------- */
/* Returns a new empty state, or NULL on ENOMEM. */
sched_state *sched_state_new(const sched_config *cfg);
/* Frees everything; NULL is a no-op; sets *st_p to NULL. */
void sched_state_destroy(sched_state **st_p);
/* Approximate heap bytes held by the state (for the memory report). */
size_t sched_state_bytes(const sched_state *st);

/* ---------- growable arrays ---------- */
/* Ensures *arr has room for `need` elements of `elem` bytes; 0 or TSR_ENOMEM. */
int sched_grow(void **arr, uint32_t *cap, uint32_t need, size_t elem);

/* ---------- tasks ---------- */
/* Allocates a task slot in state NEW (all counters zero). Returns the id,
 * or SCHED_NONE on ENOMEM / when the id space is exhausted. */
uint32_t sched_task_alloc(sched_state *st);
/* Returns the slot to the free list; the key must already be unmapped. */
void sched_task_free(sched_state *st, uint32_t id);
/* Returns the ext record, allocating it; NULL on ENOMEM. */
sched_task_ext *sched_task_ext_get(sched_state *st, uint32_t id);
/* Looks up a key; SCHED_NONE when unknown. */
uint32_t sched_task_find(const sched_state *st, const char *key, size_t len);
/* Adds task id (its key must be set and not yet indexed). 0 or TSR_ENOMEM. */
int sched_task_index(sched_state *st, uint32_t id);
/* The same with the key's sched_key_hash() already computed, so a big
 * submit hashes each key once and can prefetch index slots ahead. */
uint32_t sched_key_hash(const char *key, size_t len);
uint32_t sched_task_find_hashed(const sched_state *st, const char *key, size_t len, uint32_t hash);
int sched_task_index_hashed(sched_state *st, uint32_t id, uint32_t hash);
void sched_key_prefetch(const sched_state *st, uint32_t hash);
/* Grows the index for n keys in all, so admission does not rehash midway. */
int sched_keyidx_reserve(sched_state *st, uint64_t n);
/* Removes task id's key from the index (no-op when absent). */
void sched_task_unindex(sched_state *st, uint32_t id);
void sched_keyidx_free(sched_keyidx *ix);
/* With no task left, gives back the task table, the key index, the op
 * queues and the work lists (their capacity is the high-water mark of
 * every graph ever held: 10^7 tasks leave ~1 GiB). false, and nothing
 * done, while any task or work item is live. */
bool sched_state_shrink(sched_state *st);
static inline bool sched_edge_live(const sched_state *st, sched_edge e)
{
  return e.id < st->ntasks && st->tasks[e.id].gen == e.gen && st->tasks[e.id].state != TS_FREE;
}
/* Appends a dependent added by a later graph. 0 or TSR_ENOMEM. */
int sched_task_add_dependent(sched_state *st, uint32_t id, uint32_t dependent);

/* ---------- errors ---------- */
sched_error *sched_error_new(const char *key, size_t key_len, const char *message, size_t msg_len);
void sched_error_unref(sched_error *e);

/* ---------- ops ---------- */
/* Interns an op name; returns the op id or a negative TSR_E*. */
int sched_op_intern(sched_state *st, const char *name, size_t len);
/* Returns the op id or -1 when the name was never seen. */
int sched_op_find(const sched_state *st, const char *name, size_t len);
static inline bool sched_worker_has_op(const sched_worker *w, uint32_t op)
{
  return op < w->nopbits && (w->opbits[op / 64] >> (op % 64)) & 1u;
}
/* The op has a variant native to the worker's device: every op of a CPU
 * worker; a GPU worker's ops with a CUDA variant (its hello's native_ops). */
static inline bool sched_worker_native(const sched_worker *w, uint32_t op)
{
  return op < w->nopbits && (w->nativebits[op / 64] >> (op % 64)) & 1u;
}
/* Worker w may be given a task of op (policy_place.c): it advertised the
 * op, and it is of the kind the op prefers among the live workers: a GPU
 * worker with a CUDA variant of it if there is one, else a CPU worker if
 * there is one, else any. */
static inline bool sched_worker_eligible(const sched_state *st, const sched_worker *w, uint32_t op)
{
  if (!sched_worker_has_op(w, op)) return false;
  if (st->ops[op].ngpu_native > 0) return w->gpu && sched_worker_native(w, op);
  if (st->ops[op].ncpu > 0) return !w->gpu;
  return true;
}

/* ---------- graphs ---------- */
/* Creates a graph record; returns its index or SCHED_NONE on ENOMEM. */
uint32_t sched_graph_new(sched_state *st, uint32_t client, uint64_t graph_id, const char *client_name);
/* Frees a graph record (its arena included). Tasks must no longer use it. */
void sched_graph_free(sched_state *st, uint32_t g);
/* Finds the live graph (client, graph_id); SCHED_NONE when absent. */
uint32_t sched_graph_find(const sched_state *st, uint32_t client, uint64_t graph_id);

/* ---------- peers, workers, clients ---------- */
/* Finds a peer by ROUTER identity; SCHED_NONE when unknown. */
uint32_t sched_peer_find(const sched_state *st, const void *identity, size_t len);
/* Adds a peer (role NONE) for identity; SCHED_NONE on ENOMEM/limit. */
uint32_t sched_peer_add(sched_state *st, const void *identity, size_t len, uint64_t now_ms);
/* Removes a peer record; with remember, its identity is kept (bounded) so
 * that if it speaks again it is told "unknown peer" and says hello again. */
void sched_peer_remove(sched_state *st, uint32_t peer, bool remember);
/* The outbox of a peer, marked dirty so the loop flushes it. */
tsr_wbuf *sched_out(sched_state *st, uint32_t peer);
/* Appends an `error` message to a peer's outbox. */
void sched_send_error(sched_state *st, uint32_t peer, int code, const char *ref, const char *fmt, ...)
  __attribute__((format(printf, 5, 6)));
/* Queues `free` of key on worker w (sent at the next flush). */
void sched_queue_free(sched_state *st, uint16_t w, const char *key, size_t len);
/* Moves every worker's queued frees into its outbox as one `free` message. */
void sched_flush_frees(sched_state *st);

/* Notes that task id was sent to worker w, or that w holds its result:
 * w's departure visits it (sched_tr_worker_lost). Ids that no longer
 * run or live there are dropped when the list grows. On ENOMEM the worker
 * is marked placed_lossy instead. */
void sched_worker_note_placed(sched_state *st, uint16_t w, uint32_t id);
/* True while task id runs on w or its result is held there. */
static inline bool sched_task_placed_on(const sched_state *st, uint32_t id, uint16_t w)
{
  return id < st->ntasks && (st->tasks[id].processing_on == w || st->tasks[id].who_has == w);
}

/* Allocates a worker / client slot bound to peer; SCHED_NONE on ENOMEM. */
uint32_t sched_worker_alloc(sched_state *st, uint32_t peer);
uint32_t sched_client_alloc(sched_state *st, uint32_t peer);
/* Human name of a peer for log lines ("worker 'w1'", "client 'c'", or the
 * identity in hex for an unwelcomed peer). Returns buf. */
const char *sched_peer_label(const sched_state *st, uint32_t peer, char *buf, size_t cap);

#endif
