/* Status text, clocks, parsing and chunk metadata. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

const char *tsr_strerror(int rc)
{
  switch (rc) {
  case TSR_OK: return "success";
#define TSR_STRERROR_CASE_(name, code, text) case (code): return text;
    TSR_ERRNO_MAP(TSR_STRERROR_CASE_)
#undef TSR_STRERROR_CASE_
  default: return "unknown error";
  }
}

const char *tsr_err_name(int rc)
{
  switch (rc) {
  case TSR_OK: return "TSR_OK";
#define TSR_ERRNAME_CASE_(name, code, text) case (code): return "TSR_" #name;
    TSR_ERRNO_MAP(TSR_ERRNAME_CASE_)
#undef TSR_ERRNAME_CASE_
  default: return "TSR_E?";
  }
}

size_t tsr_dtype_size(tsr_dtype dtype)
{
  switch (dtype) {
  case TSR_U8: return 1;
  case TSR_I32: return 4;
  case TSR_I64: return 8;
  case TSR_F32: return 4;
  case TSR_F64: return 8;
  default: return 0;
  }
}

const char *tsr_dtype_name(tsr_dtype dtype)
{
  switch (dtype) {
  case TSR_U8: return "u8";
  case TSR_I32: return "i32";
  case TSR_I64: return "i64";
  case TSR_F32: return "f32";
  case TSR_F64: return "f64";
  default: return NULL;
  }
}

tsr_dtype tsr_dtype_parse(const char *name)
{
  static const struct { const char *a, *b; tsr_dtype dtype; } names[] = {
    {"u8", "uint8", TSR_U8},     {"i32", "int32", TSR_I32}, {"i64", "int64", TSR_I64},
    {"f32", "float32", TSR_F32}, {"f64", "float64", TSR_F64},
  };
  if (name == NULL) return TSR_DTYPE_NONE;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i].a) == 0 || strcmp(name, names[i].b) == 0) return names[i].dtype;
  return TSR_DTYPE_NONE;
}

uint64_t tsr_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int tsr_fail(tsr_errbuf *err, int rc, const char *fmt, ...)
{
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
  }
  return rc;
}

int tsr_parse_i64(const char *text, int64_t *value_p)
{
  if (text == NULL || *text == '\0') return TSR_EINVAL;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0') return TSR_EINVAL;
  *value_p = (int64_t)v;
  return 0;
}

/* Splits "1.5GiB" into 1.5 and "GiB"; rejects an empty or negative number. */
static int split_number(const char *text, double *number_p, const char **unit_p)
{
  if (text == NULL) return TSR_EINVAL;
  while (isspace((unsigned char)*text)) text++;
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno != 0 || !(v >= 0) || !isfinite(v)) return TSR_EINVAL;
  while (isspace((unsigned char)*end)) end++;
  *number_p = v;
  *unit_p = end;
  return 0;
}

int tsr_parse_bytes(const char *text, uint64_t *bytes_p)
{
  static const struct { const char *unit; double scale; } units[] = {
    {"", 1},          {"b", 1},
    {"k", 1e3},       {"kb", 1e3},       {"kib", 1024.0},
    {"m", 1e6},       {"mb", 1e6},       {"mib", 1048576.0},
    {"g", 1e9},       {"gb", 1e9},       {"gib", 1073741824.0},
    {"t", 1e12},      {"tb", 1e12},      {"tib", 1099511627776.0},
  };
  double number;
  const char *unit;
  if (split_number(text, &number, &unit) != 0) return TSR_EINVAL;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcasecmp(unit, units[i].unit) != 0) continue;
    double bytes = number * units[i].scale;
    if (bytes >= 18446744073709551615.0) return TSR_EINVAL;
    *bytes_p = (uint64_t)(bytes + 0.5);
    return 0;
  }
  return TSR_EINVAL;
}

int tsr_parse_duration_ms(const char *text, uint64_t *ms_p)
{
  static const struct { const char *unit; double ms; } units[] = {
    {"", 1000}, {"s", 1000}, {"ms", 1}, {"us", 1e-3}, {"m", 60000}, {"min", 60000}, {"h", 3600000},
  };
  double number;
  const char *unit;
  if (split_number(text, &number, &unit) != 0) return TSR_EINVAL;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcasecmp(unit, units[i].unit) != 0) continue;
    double ms = number * units[i].ms;
    if (ms >= 1e18) return TSR_EINVAL;
    *ms_p = (uint64_t)(ms + 0.5);
    return 0;
  }
  return TSR_EINVAL;
}

char *tsr_format_bytes(uint64_t bytes, char *buf, size_t len)
{
  static const char *names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof names / sizeof names[0]) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%" PRIu64 " B", bytes);
  else
    snprintf(buf, len, "%.2f %s", v, names[u]);
  return buf;
}

int64_t tsr_meta_count(const tsr_meta *meta)
{
  int64_t count = 1;
  if (meta->ndim < 0 || meta->ndim > TSR_MAX_NDIM) return -1;
  for (int d = 0; d < meta->ndim; d++) {
    int64_t dim = meta->shape[d];
    if (dim < 0) return -1;
    if (dim != 0 && count > INT64_MAX / dim) return -1;
    count *= dim;
  }
  return count;
}

int64_t tsr_meta_nbytes(const tsr_meta *meta)
{
  int64_t count = tsr_meta_count(meta);
  int64_t size = (int64_t)tsr_dtype_size(meta->dtype);
  if (count < 0 || size == 0) return -1;
  if (count > INT64_MAX / size) return -1;
  return count * size;
}

int tsr_meta_check(const tsr_meta *meta, tsr_errbuf *err)
{
  if (tsr_dtype_size(meta->dtype) == 0)
    return tsr_fail(err, TSR_ESHAPE, "unknown dtype %d", (int)meta->dtype);
  if (meta->ndim < 0 || meta->ndim > TSR_MAX_NDIM)
    return tsr_fail(err, TSR_ESHAPE, "ndim %d outside 0..%d", meta->ndim, TSR_MAX_NDIM);
  for (int d = 0; d < meta->ndim; d++)
    if (meta->shape[d] < 0)
      return tsr_fail(err, TSR_ESHAPE, "dimension %d is negative (%" PRId64 ")", d, meta->shape[d]);
  if (tsr_meta_nbytes(meta) < 0) return tsr_fail(err, TSR_ELIMIT, "shape overflows 64-bit byte count");
  return 0;
}

bool tsr_meta_equal(const tsr_meta *a, const tsr_meta *b)
{
  if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

char *tsr_meta_format(const tsr_meta *meta, char *buf, size_t len)
{
  const char *name = tsr_dtype_name(meta->dtype);
  size_t used = (size_t)snprintf(buf, len, "%s[", name ? name : "?");
  for (int d = 0; d < meta->ndim && d < TSR_MAX_NDIM && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, d ? ",%" PRId64 : "%" PRId64, meta->shape[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}
