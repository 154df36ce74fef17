/* tessera/plugin.h — the C ABI of op plugins: shared libraries a worker
 * loads with `tessera-worker --op-plugin PATH.so` (repeatable) whose ops
 * then run like built-in ones (docs/plugins.md).
 *
 * A plugin exports two functions (extern "C", default visibility):
 *
 *   int tsr_plugin_abi_version(void);                  // return TSR_PLUGIN_ABI_VERSION
 *   const tsr_plugin_op *tsr_plugin_ops(size_t *n_p);  // its ops, static storage
 *
 * A worker refuses to start when either symbol is missing, the version is
 * not the one it was built with, an op has no name, infer or cpu, or a
 * name is already taken (a built-in op or another plugin's): the message
 * names the file and the problem. The worker advertises the ops in its
 * `hello` (docs/protocol.md) and the scheduler places their tasks only on
 * workers that offer them.
 *
 * The rules of built-in ops hold (kernels/kernels.h):
 * - Deterministic: the same params and input bytes give the same output
 *   bytes on every worker and run — the scheduler recomputes a lost or
 *   evicted chunk instead of keeping it. Seed randomness from params.
 * - infer() says the output's dtype and shape from params and the inputs'
 *   metadata alone, and refuses what it can see is wrong.
 * - cpu() gets the inputs and an output buffer of exactly that size
 *   (64-byte aligned), owns nothing, allocates nothing that outlives the
 *   call, never prints; it may run on many threads at once.
 * - A failure returns nonzero with a message in err (err_len bytes); the
 *   task fails with "OPNAME: message" and the worker keeps serving. A
 *   plugin that crashes its worker gets its task retried on another
 *   worker, and erred after it killed three (as any op).
 * - cuda (optional, NULL without): like cpu, but data pointers are device
 *   pointers and the work is only enqueued on `stream` (a cudaStream_t);
 *   never synchronize. Used by GPU workers; CPU workers call cpu. */
#ifndef TESSERA_PLUGIN_H
#define TESSERA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_PLUGIN_ABI_VERSION 1

/* An array's metadata and, in cpu/cuda, its bytes (C order). */
typedef struct tsr_plugin_array {
  tsr_dtype dtype;
  int ndim;
  int64_t shape[TSR_MAX_NDIM];
  void *data;     /* NULL in infer */
  size_t nbytes;
} tsr_plugin_array;

typedef struct tsr_plugin_params tsr_plugin_params; /* opaque: the task's params */

/* What the worker lends a plugin op: reading params. Each returns 0, or -1
 * when the param is absent or of another type (a list of ints also reads
 * as floats). Pointers live until the op returns. */
typedef struct tsr_plugin_host {
  int abi_version;
  int (*get_int)(const tsr_plugin_params *p, const char *name, int64_t *value_p);
  int (*get_float)(const tsr_plugin_params *p, const char *name, double *value_p);
  int (*get_str)(const tsr_plugin_params *p, const char *name, const char **value_p);
  int (*get_ints)(const tsr_plugin_params *p, const char *name, const int64_t **values_p, size_t *n_p);
} tsr_plugin_host;

typedef int (*tsr_plugin_infer_fn)(const tsr_plugin_host *host, const tsr_plugin_params *params,
                                   const tsr_plugin_array *in, int n_in, tsr_plugin_array *out, char *err,
                                   size_t err_len);
typedef int (*tsr_plugin_cpu_fn)(const tsr_plugin_host *host, const tsr_plugin_params *params,
                                 const tsr_plugin_array *in, int n_in, tsr_plugin_array *out, char *err,
                                 size_t err_len);
typedef int (*tsr_plugin_cuda_fn)(const tsr_plugin_host *host, const tsr_plugin_params *params,
                                  const tsr_plugin_array *in, int n_in, tsr_plugin_array *out, void *stream,
                                  char *err, size_t err_len);

typedef struct tsr_plugin_op {
  const char *name;
  int min_inputs;
  int max_inputs;            /* -1: unbounded */
  tsr_plugin_infer_fn infer; /* required */
  tsr_plugin_cpu_fn cpu;     /* required */
  tsr_plugin_cuda_fn cuda;   /* optional */
} tsr_plugin_op;

#ifdef __cplusplus
}
#endif

#endif
