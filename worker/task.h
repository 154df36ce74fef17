/* worker/task — one `compute` of the scheduler as the worker holds it, its
 * decoding from the wire, and the priority queue the executor threads take
 * tasks from.
 *
 * Life of a task: the main thread decodes it (params included, so executor
 * threads never see msgpack), pushes it into the queue and remembers it in
 * its pending map; an executor thread pops it, runs it, fills the result
 * fields and hands the pointer back to the main thread over its inproc
 * PUSH socket; the main thread reports the result and frees the task. So a
 * task is touched by one thread at a time, except `cancelled`, which the
 * main thread may set while an executor thread runs it. */
#ifndef TSR_WORKER_TASK_H
#define TSR_WORKER_TASK_H

#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "util/util.h"
#include "wire/wire.h"

typedef struct tsr_winput {
  char *key;              /* owned, NUL-terminated */
  char *from;             /* data address of a holder; owned */
  uint64_t nbytes;        /* as the scheduler announced it */
  bool fetched;           /* set by the executor: fetched from `from`, not local */
} tsr_winput;

typedef enum {
  TSR_WTASK_PENDING = 0,
  TSR_WTASK_DONE,         /* out_meta, out_nbytes, duration_us valid */
  TSR_WTASK_ERRED,        /* message valid */
  TSR_WTASK_MISSING,      /* missing_input is the index of the input that could not be fetched */
  TSR_WTASK_CANCELLED,    /* freed or dropped before it could report: say nothing */
} tsr_wtask_status;

/* What the scheduler said of the output under memory pressure. */
enum { TSR_WTASK_RECOMPUTE_UNSET = 0, TSR_WTASK_RECOMPUTE_DROP, TSR_WTASK_RECOMPUTE_SPILL };

typedef struct tsr_wtask {
  uint64_t id;
  char *key;                            /* owned */
  char *op_name;                        /* owned */
  const tsr_op_def *op;                 /* NULL when the registry has no such op */
  tsr_params params;
  tsr_winput *inputs;
  size_t n_inputs;
  int64_t priority;                     /* lower runs first */
  uint8_t recompute;                    /* compute.recompute: TSR_WTASK_RECOMPUTE_* */
  bool unawaited;                       /* compute.awaited false: no task waits to read the output */
  uint64_t seq;                         /* arrival order: ties on priority */
  uint64_t epoch;                       /* store epoch when it arrived */
  atomic_bool cancelled;                /* set by the main thread */
  /* Result, written by the executor thread that ran it. */
  tsr_wtask_status status;
  tsr_meta out_meta;
  uint64_t out_nbytes;
  uint64_t duration_us;
  uint32_t lane;                        /* the executor thread (CUDA stream) that ran it */
  size_t missing_input;
  char *message;                        /* ERRED: owned, NULL when out of memory */
  /* A fused task (op_name "fused", op NULL): its parts (worker/fused.h). */
  struct tsr_wpart *parts;
  size_t n_parts;
  /* Set only on a fused task's part while it runs: the output chunk is
   * handed here (a new reference) instead of being put in the store. */
  struct tsr_chunk **keep_p;
} tsr_wtask;

/* Decodes a `compute` map into a new task (params decoded, op looked up
 * but not required to exist). 0, TSR_EPROTO or TSR_ENOMEM with a message
 * naming the field. When it fails, tsr_wtask_ident() tells whether the
 * message at least named a task that can be answered with task_erred. */
int tsr_wtask_decode(const msgpack_object *map, tsr_wtask **task_p, tsr_errbuf *err);
/* Reads `id` and `key` only (key copied into key_buf). 0 or TSR_EPROTO. */
int tsr_wtask_ident(const msgpack_object *map, uint64_t *id_p, char key_buf[TSR_MAX_KEY_LEN + 1]);
/* Marks the task erred with a formatted message (replacing any before). */
void tsr_wtask_erred(tsr_wtask *task, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* --max-chunk-bytes (chunk_limit.c): 0, or TSR_ELIMIT naming the limit when
 * an input's announced size or an input-less op's inferred output exceeds
 * max_chunk_bytes. */
int tsr_wtask_check_chunk_limit(const tsr_wtask *task, uint64_t max_chunk_bytes, tsr_errbuf *err);
/* Frees a task; NULL and *NULL are no-ops. */
void tsr_wtask_free(tsr_wtask **task_p);

/* ---------- the priority queue ----------
 * A binary heap on (priority, seq) behind a mutex and a condition variable.
 * Any thread may push; executor threads block in pop. */
typedef struct tsr_wqueue tsr_wqueue;

tsr_wqueue *tsr_wqueue_new(void);                       /* NULL on ENOMEM */
/* Frees the queue and any task still in it. NULL is a no-op. */
void tsr_wqueue_destroy(tsr_wqueue **queue_p);
/* Takes the task (assigning its seq). 0 or TSR_ENOMEM (caller keeps it). */
int tsr_wqueue_push(tsr_wqueue *queue, tsr_wtask *task);
/* Blocks until a task is available and returns it (caller owns it), or
 * returns NULL once tsr_wqueue_close() was called. */
tsr_wtask *tsr_wqueue_pop(tsr_wqueue *queue);
/* Non-blocking pop; NULL when empty. */
tsr_wtask *tsr_wqueue_trypop(tsr_wqueue *queue);
/* Wakes every waiter; pops return NULL from now on. */
void tsr_wqueue_close(tsr_wqueue *queue);
size_t tsr_wqueue_length(tsr_wqueue *queue);

#endif
