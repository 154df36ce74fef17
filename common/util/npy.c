/* The .npy header: magic, version, header length, then a Python dict
 * literal such as {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces to a multiple of 64 bytes and ended by '\n'. */
#include "npy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAX_HEADER (1u << 20)

static const struct { const char *descr; tsr_dtype dtype; } npy_types[] = {
  {"<u1", TSR_U8}, {"|u1", TSR_U8}, {"<i4", TSR_I32}, {"<i8", TSR_I64}, {"<f4", TSR_F32}, {"<f8", TSR_F64},
};

/* Finds 'name': in the dict text and returns the text after the colon. */
static const char *dict_value(const char *dict, const char *name)
{
  char pattern[64];
  snprintf(pattern, sizeof pattern, "'%s'", name);
  const char *p = strstr(dict, pattern);
  if (p == NULL) return NULL;
  p = strchr(p + strlen(pattern), ':');
  if (p == NULL) return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

static int parse_descr(const char *dict, tsr_meta *meta, tsr_errbuf *err)
{
  const char *v = dict_value(dict, "descr");
  if (v == NULL || (*v != '\'' && *v != '"')) return tsr_fail(err, TSR_EINVAL, "header has no 'descr'");
  char descr[16] = "";
  const char *end = strchr(v + 1, *v);
  if (end == NULL || end - v - 1 >= (long)sizeof descr) return tsr_fail(err, TSR_EINVAL, "bad 'descr'");
  memcpy(descr, v + 1, (size_t)(end - v - 1));
  for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
    if (strcmp(descr, npy_types[i].descr) == 0) {
      meta->dtype = npy_types[i].dtype;
      return 0;
    }
  return tsr_fail(err, TSR_EINVAL, "unsupported dtype '%s' (need little-endian u1, i4, i8, f4 or f8)", descr);
}

static int parse_shape(const char *dict, tsr_meta *meta, tsr_errbuf *err)
{
  const char *v = dict_value(dict, "shape");
  if (v == NULL || *v != '(') return tsr_fail(err, TSR_EINVAL, "header has no 'shape' tuple");
  v++;
  meta->ndim = 0;
  while (*v != ')') {
    while (*v == ' ' || *v == ',') v++;
    if (*v == ')') break;
    char *end = NULL;
    long long dim = strtoll(v, &end, 10);
    if (end == v || dim < 0) return tsr_fail(err, TSR_EINVAL, "bad 'shape' in header");
    if (meta->ndim == TSR_MAX_NDIM) return tsr_fail(err, TSR_ESHAPE, "more than %d dimensions", TSR_MAX_NDIM);
    meta->shape[meta->ndim++] = dim;
    v = end;
    while (*v == ' ' || *v == 'L') v++;
    if (*v != ',' && *v != ')') return tsr_fail(err, TSR_EINVAL, "bad 'shape' in header");
  }
  return tsr_meta_check(meta, err);
}

int tsr_npy_parse(FILE *f, tsr_npy_info *info, tsr_errbuf *err)
{
  unsigned char pre[12];
  if (fread(pre, 1, 10, f) != 10) return tsr_fail(err, TSR_EIO, "file too short for an .npy header");
  if (memcmp(pre, "\x93NUMPY", 6) != 0) return tsr_fail(err, TSR_EINVAL, "not an .npy file (bad magic)");
  uint32_t header_len;
  uint64_t prefix;
  if (pre[6] == 1) {
    header_len = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    prefix = 10;
  } else if (pre[6] == 2 || pre[6] == 3) {
    if (fread(pre + 10, 1, 2, f) != 2) return tsr_fail(err, TSR_EIO, "file too short for an .npy header");
    header_len = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    prefix = 12;
  } else {
    return tsr_fail(err, TSR_EINVAL, "unsupported .npy version %d.%d", pre[6], pre[7]);
  }
  if (header_len > NPY_MAX_HEADER) return tsr_fail(err, TSR_EINVAL, ".npy header of %u bytes is too long", header_len);
  char *dict = malloc(header_len + 1);
  if (dict == NULL) return TSR_ENOMEM;
  int rc = 0;
  if (fread(dict, 1, header_len, f) != header_len) rc = tsr_fail(err, TSR_EIO, "truncated .npy header");
  dict[header_len] = '\0';
  memset(&info->meta, 0, sizeof info->meta);
  const char *fortran = rc == 0 ? dict_value(dict, "fortran_order") : NULL;
  if (rc == 0 && (fortran == NULL || strncmp(fortran, "False", 5) != 0))
    rc = tsr_fail(err, TSR_EINVAL, "Fortran-order arrays are not supported (save in C order)");
  if (rc == 0) rc = parse_descr(dict, &info->meta, err);
  if (rc == 0) rc = parse_shape(dict, &info->meta, err);
  info->data_offset = prefix + header_len;
  free(dict);
  return rc;
}

int tsr_npy_read_header(const char *path, tsr_npy_info *info, tsr_errbuf *err)
{
  FILE *f = fopen(path, "rb");
  if (f == NULL) return tsr_fail(err, TSR_EIO, "cannot open %s: %s", path, strerror(errno));
  int rc = tsr_npy_parse(f, info, err);
  fclose(f);
  if (rc != 0 && err != NULL) {
    char inner[TSR_ERRMSG_LEN];
    snprintf(inner, sizeof inner, "%s", err->text);
    tsr_fail(err, rc, "%s: %s", path, inner);
  }
  return rc;
}

int tsr_npy_write_header(FILE *f, const tsr_meta *meta, tsr_errbuf *err)
{
  const char *descr = NULL;
  for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
    if (npy_types[i].dtype == meta->dtype && npy_types[i].descr[0] == '<') descr = npy_types[i].descr;
  if (meta->dtype == TSR_U8) descr = "|u1";
  if (descr == NULL) return tsr_fail(err, TSR_EINVAL, "no .npy descr for dtype %d", (int)meta->dtype);
  char dict[512];
  int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int d = 0; d < meta->ndim; d++)
    len += snprintf(dict + len, sizeof dict - (size_t)len, "%" PRId64 "%s", meta->shape[d],
                    meta->ndim == 1 ? "," : (d + 1 < meta->ndim ? ", " : ""));
  len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
  /* Pad with spaces so magic + lengths + dict + '\n' is a multiple of 64. */
  int total = 10 + len + 1;
  int pad = (64 - total % 64) % 64;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
  uint16_t header_len = (uint16_t)(len + pad + 1);
  pre[8] = (unsigned char)(header_len & 0xff);
  pre[9] = (unsigned char)(header_len >> 8);
  if (fwrite(pre, 1, 10, f) != 10 || fwrite(dict, 1, (size_t)len, f) != (size_t)len)
    return tsr_fail(err, TSR_EIO, "writing .npy header: %s", strerror(errno));
  for (int i = 0; i < pad; i++) fputc(' ', f);
  if (fputc('\n', f) == EOF) return tsr_fail(err, TSR_EIO, "writing .npy header: %s", strerror(errno));
  return 0;
}
