/* tessera/base.h — the vocabulary every layer shares: status codes, element
 * types and the chunk shape limit. No dependencies; safe to include from C
 * and C++, from the daemons and from user programs.
 *
 * Status convention (after libuv): every int-returning function returns 0 on
 * success, a count where it says so, or one of the negative TSR_E* codes
 * below. tsr_strerror() names any of them. */
#ifndef TESSERA_BASE_H
#define TESSERA_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_VERSION_MAJOR 0
#define TSR_VERSION_MINOR 1
#define TSR_VERSION_PATCH 0
#define TSR_VERSION_STRING "0.1.0"

/* The X-macro is the one table of codes: it feeds the enum and
 * tsr_strerror(), so the two can never disagree. */
#define TSR_ERRNO_MAP(X)                                                      \
  X(EINVAL,      -1, "invalid argument")                                      \
  X(ENOMEM,      -2, "out of memory")                                         \
  X(EPROTO,      -3, "malformed or unexpected protocol message")              \
  X(ETIMEDOUT,   -4, "timed out")                                             \
  X(ENODEV,      -5, "no such device")                                        \
  X(ETASK,       -6, "a task failed (see the future's error message)")        \
  X(ECONN,       -7, "connection failed or lost")                             \
  X(ENOTFOUND,   -8, "no such key or name")                                   \
  X(EIO,         -9, "input/output error")                                    \
  X(EVERSION,   -10, "protocol version mismatch")                             \
  X(ESHAPE,     -11, "wrong shape or dtype")                                  \
  X(EUNKNOWNOP, -12, "unknown op")                                            \
  X(ECYCLE,     -13, "the graph has a cycle")                                 \
  X(EEXIST,     -14, "key already defined differently")                       \
  X(ECANCELED,  -15, "canceled or released")                                  \
  X(ELIMIT,     -16, "a size or count exceeds its limit")                     \
  X(ECLOSED,    -17, "closed or shutting down")                               \
  X(ENOSPC,     -18, "no space left on device")                               \
  X(EMISSING,   -19, "a dependency is missing")                               \
  X(EINTERNAL,  -20, "internal error")

enum tsr_errno {
  TSR_OK = 0,
#define TSR_ERRNO_ENUM_(name, code, text) TSR_##name = (code),
  TSR_ERRNO_MAP(TSR_ERRNO_ENUM_)
#undef TSR_ERRNO_ENUM_
};

/* Returns a static, never-NULL description of rc ("success" for 0,
 * "unknown error" for a code not in the table). */
const char *tsr_strerror(int rc);
/* Returns the short symbolic name ("TSR_ETIMEDOUT"), static, never NULL. */
const char *tsr_err_name(int rc);

/* Element types of chunks. The numeric values travel on the wire. */
typedef enum tsr_dtype {
  TSR_DTYPE_NONE = 0,
  TSR_U8 = 1,
  TSR_I32 = 2,
  TSR_I64 = 3,
  TSR_F32 = 4,
  TSR_F64 = 5,
} tsr_dtype;

#define TSR_MAX_NDIM 4

/* Bytes per element of dtype, or 0 for an unknown dtype. */
size_t tsr_dtype_size(tsr_dtype dtype);
/* "u8", "i32", "i64", "f32", "f64"; NULL for an unknown dtype. Static. */
const char *tsr_dtype_name(tsr_dtype dtype);
/* Parses "u8"/"uint8", "i32"/"int32", "i64"/"int64", "f32"/"float32",
 * "f64"/"float64". Returns TSR_DTYPE_NONE for anything else. */
tsr_dtype tsr_dtype_parse(const char *name);

#ifdef __cplusplus
}
#endif
#endif
