/* graphs/graphs.h — internals of the array builders (tessera/array.h,
 * tessera/linalg.h). Builders record tasks in the context's task table;
 * running an array collects the tasks its chunks need (its lineage, up to
 * chunks already persisted) into one tsr_graph.
 *
 * Invariants: a task key is recorded once; an array's chunk keys all name
 * tasks in the table (or persisted chunks); arrays never change after they
 * are built. */
#ifndef TSR_GRAPHS_H
#define TSR_GRAPHS_H

#include <stdbool.h>

#include "tessera/array.h"
#include "tessera/linalg.h"
#include "util/util.h"

typedef struct graph_task {
  char *key;
  char *op;
  void *params;        /* msgpack map bytes, or NULL */
  size_t params_len;
  char **inputs;
  size_t n_inputs;
} graph_task;

struct tsr_array {
  tsr_dtype dtype;
  int ndim;
  int64_t shape[TSR_MAX_NDIM];
  int64_t chunk[TSR_MAX_NDIM];    /* regular chunk size per axis (>= 1) */
  int64_t nchunks[TSR_MAX_NDIM];
  size_t nblocks;                 /* product of nchunks */
  char **keys;                    /* nblocks keys, row-major over the grid */
  tsr_encoding encoding;          /* what the keys hold (array.h) */
  int missing;                    /* integer sentinel of missing elements, or -1 */
  struct tsr_array *next_in_ctx;
};

struct tsr_array_ctx {
  tsr_client *client;
  graph_task *tasks;
  size_t n_tasks, cap_tasks;
  tsr_strmap *task_index;         /* key -> index into tasks */
  tsr_strmap *held;               /* keys persisted on the cluster */
  tsr_future **persisted;         /* futures keeping persisted chunks */
  size_t n_persisted, cap_persisted;
  uint64_t next_name;             /* makes array names unique within the context */
  uint32_t token;                 /* random: makes them unique across contexts and clients */
  tsr_array *arrays;
};

/* Sets tsr_errmsg() for this thread and returns rc (client/errmsg.c: the
 * graphs are part of libtessera and share its thread-local message). */
int client_fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------- arrays ---------- */
/* Allocates an array with a fresh name "<label>-<n>" and its chunk keys.
 * chunks entries <= 0 or >= shape mean one chunk along that axis. */
int garray_new(tsr_array_ctx *ctx, const char *label, tsr_dtype dtype, int ndim, const int64_t *shape,
               const int64_t *chunks, tsr_array **out_p);
/* Grid index -> linear block number, and back. */
size_t garray_block(const tsr_array *a, const int64_t *idx);
void garray_index(const tsr_array *a, size_t block, int64_t *idx);
/* Shape of block idx (smaller at the end of an axis), and its offset. */
void garray_block_shape(const tsr_array *a, const int64_t *idx, int64_t *shape);
void garray_block_offset(const tsr_array *a, const int64_t *idx, int64_t *offset);
/* Size of chunk c along axis. */
int64_t garray_chunk_len(const tsr_array *a, int axis, int64_t c);
int garray_check_2d(const tsr_array *a, const char *what);
/* a itself when its chunks are dense, else a new array (same dtype,
 * shape, chunks and missing value) whose chunks decode a's. Builders that
 * read elements call it first. */
int garray_dense(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array **out_p);
/* Copies encoding and missing value from a to out (a view over a's keys). */
void garray_copy_repr(tsr_array *out, const tsr_array *a);
/* A new array over a's keys (same everything, a fresh handle). */
int garray_view(tsr_array_ctx *ctx, const char *label, const tsr_array *a, tsr_array **out_p);

/* ---------- tasks ---------- */
/* Records key = op(params; inputs). Copies everything. */
int gtask_add(tsr_array_ctx *ctx, const char *key, const char *op, const tsr_args *params,
              const char *const *inputs, size_t n_inputs);
/* The same with an unnamed intermediate task: writes a fresh key to key_out. */
int gtask_add_tmp(tsr_array_ctx *ctx, const char *label, const char *op, const tsr_args *params,
                  const char *const *inputs, size_t n_inputs, char *key_out, size_t cap);
/* Adds a tree of n-ary `add` over keys (fan-in split_every), or a plain
 * copy when n == 1... writes the root key to root (cap bytes). */
int gtask_sum_tree(tsr_array_ctx *ctx, const char *label, char **keys, size_t n, int split_every, char *root,
                   size_t cap);

/* ---------- args helpers (return 0 or an error; a NULL args is ENOMEM) ---------- */
int gargs_shape(tsr_args *args, const char *name, int ndim, const int64_t *values);
const char *gdtype_name(tsr_dtype dtype);
/* Decodes t's params into params (appended; clear it after). 0 or an error. */
int gtask_params(const graph_task *t, tsr_params *params);
/* The task behind key, or NULL when the key is persisted or unknown. */
const graph_task *gtask_of(const tsr_array_ctx *ctx, const char *key);
/* Adds every entry of an encoded params map to args. */
int gargs_merge(tsr_args *args, const void *map, size_t len);

/* ---------- chains folded into products (chain.c) ---------- */
#define GCHAIN_MAX_STEPS 16
/* The per-column elementwise steps behind a block key, down to the block
 * as stored (see chain.c). n_steps 0 and packed_cols -1 when there is
 * nothing to fold. Pointers borrow the context's task table. */
typedef struct gchain {
  const char *base;                         /* the stored block's key */
  int64_t packed_cols;                      /* >= 0: base is 2-bit packed, this many columns */
  int64_t missing;                          /* the base's missing-value sentinel, or -1 */
  bool csr;                                 /* base is a CSR chunk (a csr_densify below): csr_matmul */
  int64_t csr_shape[2];                     /* its logical rows, cols */
  int n_steps;                              /* in the order they apply */
  int codes[GCHAIN_MAX_STEPS];              /* kernels/cpu/matmul_chain.c's step codes */
  const char *vectors[GCHAIN_MAX_STEPS];    /* a step's row-vector block key, or NULL */
  double values[2 * GCHAIN_MAX_STEPS];      /* a step's scalars */
} gchain;
void gchain_find(const tsr_array_ctx *ctx, const char *key, gchain *chain);
/* True when every step is affine in x (a CSR base is folded only then). */
bool gchain_affine(const gchain *chain);
/* Records key_out = the product of chain's block and `other` on side
 * ("xb", "xtb", "bx", "btx": matmul_chain's). */
int gchain_product(tsr_array_ctx *ctx, const gchain *chain, const char *side, const char *other, char *key_out,
                   size_t cap);
bool gdtype_is_float(tsr_dtype dtype);

/* ---------- running ---------- */
/* Submits every task that keys[0..n) need and waits; the future wants the
 * keys. */
int grun_submit(tsr_array_ctx *ctx, char **keys, size_t n, int timeout_ms, tsr_future **future_p);
/* The same without waiting: the future of the submitted graph. */
int grun_submit_nowait(tsr_array_ctx *ctx, char **keys, size_t n, tsr_future **future_p);
/* Copies gathered block `block` of a into its place in a's C-order buffer. */
void grun_place_block(const tsr_array *a, size_t block, const void *src, char *dst);

#endif
