/* common/util — the bottom layer: status text, logging, clocks, parsing of
 * sizes and durations, chunk metadata, a string-keyed hash map and the
 * kernel-neutral parameter list. Depends on libc only.
 *
 * Threading: everything here is safe to call from any thread, except that a
 * tsr_strmap or tsr_params belongs to one thread at a time, and
 * tsr_log_set_* must be called before other threads start logging. */
#ifndef TSR_COMMON_UTIL_H
#define TSR_COMMON_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/base.h"

/* ---------- logging ----------
 * Daemons log to stderr; the client library installs its caller's callback
 * (or none) instead, because a library never prints. */
typedef enum { TSR_LOG_DEBUG = 0, TSR_LOG_INFO, TSR_LOG_WARN, TSR_LOG_ERROR, TSR_LOG_OFF } tsr_log_level;
typedef void (*tsr_log_sink)(void *arg, int level, const char *line);

void tsr_log_set_level(tsr_log_level level);
tsr_log_level tsr_log_get_level(void);
/* Sets the process-wide component name printed in each line ("scheduler"). */
void tsr_log_set_component(const char *name);
/* Replaces the sink; NULL restores the stderr sink. */
void tsr_log_set_sink(tsr_log_sink sink, void *arg);
/* Parses "debug", "info", "warn"/"warning", "error", "off"; -1 otherwise. */
int tsr_log_level_parse(const char *text);
void tsr_log(tsr_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define TSR_DEBUG(...) tsr_log(TSR_LOG_DEBUG, __VA_ARGS__)
#define TSR_INFO(...) tsr_log(TSR_LOG_INFO, __VA_ARGS__)
#define TSR_WARN(...) tsr_log(TSR_LOG_WARN, __VA_ARGS__)
#define TSR_ERROR(...) tsr_log(TSR_LOG_ERROR, __VA_ARGS__)

/* ---------- clocks ---------- */
/* Monotonic time in nanoseconds / microseconds / milliseconds. */
uint64_t tsr_now_ns(void);
static inline uint64_t tsr_now_us(void) { return tsr_now_ns() / 1000u; }
static inline uint64_t tsr_now_ms(void) { return tsr_now_ns() / 1000000u; }

/* ---------- parsing ---------- */
/* Parses a byte size: "4GiB", "512MB", "1.5GiB", "100000" (bytes), "0".
 * Decimal units are powers of 1000, binary ones of 1024. Returns 0 and sets
 * *bytes_p, or TSR_EINVAL. */
int tsr_parse_bytes(const char *text, uint64_t *bytes_p);
/* Parses a duration: "500ms", "2s", "1.5s", "3m", "250us"; a bare number is
 * seconds. Returns 0 and sets *ms_p (milliseconds), or TSR_EINVAL. */
int tsr_parse_duration_ms(const char *text, uint64_t *ms_p);
/* Formats bytes as "1.50 GiB" into buf (always NUL-terminated). Returns buf. */
char *tsr_format_bytes(uint64_t bytes, char *buf, size_t len);
/* Parses a whole decimal int64 (no trailing junk). 0 or TSR_EINVAL. */
int tsr_parse_i64(const char *text, int64_t *value_p);

/* ---------- error text ----------
 * A fixed buffer that carries a human message beside a status code. Writers
 * never overflow; each tsr_fail overwrites the previous message, so the
 * message always describes the latest failure. */
#define TSR_ERRMSG_LEN 512
typedef struct tsr_errbuf {
  char text[TSR_ERRMSG_LEN];
} tsr_errbuf;
/* Formats into err (when err is non-NULL) and returns rc, so a failure path
 * reads `return tsr_fail(err, TSR_ESHAPE, "add: shapes %s and %s", ...)`. */
int tsr_fail(tsr_errbuf *err, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---------- chunk metadata ---------- */
typedef struct tsr_meta {
  tsr_dtype dtype;
  int ndim;                      /* 0..TSR_MAX_NDIM; 0 is a scalar */
  int64_t shape[TSR_MAX_NDIM];   /* entries past ndim are 0 */
} tsr_meta;

/* Element count; 0 and TSR_ELIMIT-safe: returns -1 when a dimension is
 * negative or the product overflows int64. */
int64_t tsr_meta_count(const tsr_meta *meta);
/* Byte size, or -1 as above (also for an unknown dtype). */
int64_t tsr_meta_nbytes(const tsr_meta *meta);
/* Validates dtype, ndim and dims; 0 or TSR_ESHAPE with a message. */
int tsr_meta_check(const tsr_meta *meta, tsr_errbuf *err);
bool tsr_meta_equal(const tsr_meta *a, const tsr_meta *b);
/* Writes "f64[1000,20]" into buf; returns buf. */
char *tsr_meta_format(const tsr_meta *meta, char *buf, size_t len);

/* ---------- string-keyed hash map ----------
 * Open addressing, linear probing, keys copied into the map. Values are
 * uint64 (the scheduler stores task ids, the worker pointers). Sized for a
 * million keys: about 24 bytes a slot plus the key bytes. */
typedef struct tsr_strmap tsr_strmap;

tsr_strmap *tsr_strmap_new(size_t expected);          /* NULL on ENOMEM */
/* A map that keeps the caller's key pointers instead of copies (no malloc
 * per key); each key must stay valid and unchanged while it is mapped. */
tsr_strmap *tsr_strmap_new_borrowed(size_t expected);
void tsr_strmap_destroy(tsr_strmap **map_p);          /* NULL is a no-op */
/* Inserts or replaces. Returns 0, or TSR_ENOMEM. */
int tsr_strmap_put(tsr_strmap *map, const char *key, size_t key_len, uint64_t value);
/* Makes room for `more` keys beyond the present ones in one growth (a
 * million-key insert then rehashes nothing). 0 or TSR_ENOMEM. */
int tsr_strmap_reserve(tsr_strmap *map, size_t more);
/* Returns true and sets *value_p when present. */
bool tsr_strmap_get(const tsr_strmap *map, const char *key, size_t key_len, uint64_t *value_p);
/* Returns true when the key was present and is now removed. */
bool tsr_strmap_del(tsr_strmap *map, const char *key, size_t key_len);
size_t tsr_strmap_count(const tsr_strmap *map);
/* Calls fn for each entry, in no particular order; fn must not modify map. */
void tsr_strmap_each(const tsr_strmap *map, void (*fn)(void *arg, const char *key, size_t key_len, uint64_t value), void *arg);
uint64_t tsr_hash_bytes(const void *data, size_t len);  /* FNV-1a 64 */

/* ---------- op parameters ----------
 * What a kernel sees of its task's parameters: a flat list of named scalars,
 * strings and numeric arrays, decoded from the task's msgpack map by
 * common/wire. Kernels read it through the getters and never see msgpack. */
typedef enum {
  TSR_PARAM_INT = 1,    /* i */
  TSR_PARAM_FLOAT,      /* f */
  TSR_PARAM_BOOL,       /* i: 0 or 1 */
  TSR_PARAM_STR,        /* s, NUL-terminated, len bytes */
  TSR_PARAM_INTS,       /* ints[n] */
  TSR_PARAM_FLOATS,     /* floats[n] */
} tsr_param_type;

typedef struct tsr_param {
  char *name;
  tsr_param_type type;
  int64_t i;
  double f;
  char *s;
  size_t len;
  int64_t *ints;
  double *floats;
  size_t n;
} tsr_param;

typedef struct tsr_params {
  tsr_param *items;
  size_t n;
  size_t cap;
} tsr_params;

#define TSR_PARAMS_INIT {NULL, 0, 0}
void tsr_params_clear(tsr_params *params);            /* frees contents, keeps it usable */
/* Appenders (copy their arguments). 0 or TSR_ENOMEM. */
int tsr_params_add_int(tsr_params *params, const char *name, int64_t value);
int tsr_params_add_float(tsr_params *params, const char *name, double value);
int tsr_params_add_bool(tsr_params *params, const char *name, bool value);
int tsr_params_add_str(tsr_params *params, const char *name, const char *value, size_t len);
int tsr_params_add_ints(tsr_params *params, const char *name, const int64_t *values, size_t n);
int tsr_params_add_floats(tsr_params *params, const char *name, const double *values, size_t n);
/* Lookup; NULL when absent. */
const tsr_param *tsr_params_find(const tsr_params *params, const char *name);
/* Typed getters: 0, TSR_ENOTFOUND when absent, TSR_EINVAL when of another
 * type (get_float accepts an int; get_ints accepts a single int as n=1).
 * With err set, the message names the parameter and what was expected.
 * Borrowed pointers live as long as params is unchanged. */
int tsr_params_get_int(const tsr_params *params, const char *name, int64_t *value_p, tsr_errbuf *err);
int tsr_params_get_float(const tsr_params *params, const char *name, double *value_p, tsr_errbuf *err);
int tsr_params_get_bool(const tsr_params *params, const char *name, bool *value_p, tsr_errbuf *err);
int tsr_params_get_str(const tsr_params *params, const char *name, const char **value_p, tsr_errbuf *err);
int tsr_params_get_ints(const tsr_params *params, const char *name, const int64_t **values_p, size_t *n_p, tsr_errbuf *err);
/* Same, but a missing parameter yields fallback instead of TSR_ENOTFOUND. */
int tsr_params_opt_int(const tsr_params *params, const char *name, int64_t fallback, int64_t *value_p, tsr_errbuf *err);
int tsr_params_opt_float(const tsr_params *params, const char *name, double fallback, double *value_p, tsr_errbuf *err);

#endif
