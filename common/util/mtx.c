/* common/util/mtx.c — Matrix Market line parsing (mtx.h). Entry lines are
 * the hot path (a worker parses every line of its range): indices and
 * integer values are parsed by hand, real values with strtod. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mtx.h"

static const char *skip_blanks(const char *p)
{
  while (*p == ' ' || *p == '\t') p++;
  return p;
}

static bool at_end(const char *p)
{
  p = skip_blanks(p);
  return *p == '\0' || *p == '\n' || *p == '\r';
}

/* The next blank-separated word of *p into w (cap bytes, truncated). */
static void next_word(const char **p, char *w, size_t cap)
{
  const char *s = skip_blanks(*p);
  size_t n = 0;
  while (*s != '\0' && !isspace((unsigned char)*s)) {
    if (n + 1 < cap) w[n++] = *s;
    s++;
  }
  w[n] = '\0';
  *p = s;
}

int tsr_mtx_banner(const char *line, tsr_mtx_header *h, tsr_errbuf *err)
{
  static const char want[] = "the header must be '%%MatrixMarket matrix coordinate real|integer general'";
  char w[5][32];
  const char *p = line;
  for (int i = 0; i < 5; i++) next_word(&p, w[i], sizeof w[i]);
  if (strcasecmp(w[0], "%%MatrixMarket") != 0)
    return tsr_fail(err, TSR_EINVAL, "not a Matrix Market file: %s", want);
  if (strcasecmp(w[1], "matrix") != 0 || strcasecmp(w[2], "coordinate") != 0)
    return tsr_fail(err, TSR_EINVAL, "'%s %s' is not supported (only sparse 'matrix coordinate'): %s", w[1], w[2], want);
  bool integer = strcasecmp(w[3], "integer") == 0;
  if (!integer && strcasecmp(w[3], "real") != 0)
    return tsr_fail(err, TSR_EINVAL, "field '%s' is not supported (real or integer): %s", w[3], want);
  if (strcasecmp(w[4], "general") != 0 || !at_end(p))
    return tsr_fail(err, TSR_EINVAL, "symmetry '%s' is not supported (general): %s", w[4], want);
  h->integer = integer;
  return 0;
}

bool tsr_mtx_skip(const char *line)
{
  return line[0] == '%' || at_end(line);
}

/* Length of line without its line end, at most 60: for messages. */
static int line_len(const char *line)
{
  size_t n = strcspn(line, "\r\n");
  return n < 60 ? (int)n : 60;
}

/* A non-negative decimal integer at *p (advanced past it); false when
 * there is none or it exceeds 2^62. */
static bool parse_count(const char **p, int64_t *v_p)
{
  const char *s = skip_blanks(*p);
  int64_t v = 0;
  if (*s == '+') s++;
  if (*s < '0' || *s > '9') return false;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > ((int64_t)1 << 62) / 10) return false;
    v = v * 10 + (*s - '0');
  }
  if (*s != '\0' && !isspace((unsigned char)*s)) return false;
  *p = s;
  *v_p = v;
  return true;
}

int tsr_mtx_size(const char *line, tsr_mtx_header *h, tsr_errbuf *err)
{
  const char *p = line;
  int64_t r, c, n;
  if (!parse_count(&p, &r) || !parse_count(&p, &c) || !parse_count(&p, &n) || !at_end(p))
    return tsr_fail(err, TSR_EINVAL, "the size line must be 'rows columns entries' (three integers), not '%.*s'",
                    line_len(line), line);
  if (r > TSR_MTX_MAX_DIM || c > TSR_MTX_MAX_DIM)
    return tsr_fail(err, TSR_ELIMIT, "%lld x %lld exceeds the limit of %lld rows and columns", (long long)r,
                    (long long)c, (long long)TSR_MTX_MAX_DIM);
  /* Not checked against rows x cols: a file may repeat an entry (summed). */
  if (n > TSR_MTX_MAX_ENTRIES)
    return tsr_fail(err, TSR_ELIMIT, "%lld entries exceed the limit of %lld", (long long)n, (long long)TSR_MTX_MAX_ENTRIES);
  h->rows = r, h->cols = c, h->entries = n;
  return 0;
}

/* Length of the word at s (to its first blank, at most 40), for messages. */
static int word_len(const char *s)
{
  int n = 0;
  while (n < 40 && s[n] != '\0' && !isspace((unsigned char)s[n])) n++;
  return n;
}

/* The value field: an integer field's is parsed by hand (exact, and a
 * real number there is an error), a real field's by strtod. */
static int parse_value(const char *p, bool integer, double *v_p, tsr_errbuf *err)
{
  const char *s = skip_blanks(p);
  char *end = NULL;
  double v;
  if (integer) {
    bool neg = *s == '-';
    int64_t m;
    const char *q = s + (neg || *s == '+');
    if (!parse_count(&q, &m) || !at_end(q))
      return tsr_fail(err, TSR_EINVAL, "the value '%.*s' is not an integer (the header says integer)", word_len(s), s);
    v = neg ? -(double)m : (double)m;
  } else {
    errno = 0;
    v = strtod(s, &end);
    if (end == s || !at_end(end))
      return tsr_fail(err, TSR_EINVAL, "the value '%.*s' is not a number", word_len(s), s);
  }
  *v_p = v;
  return 0;
}

int tsr_mtx_entry(const char *line, const tsr_mtx_header *h, int64_t *i_p, int64_t *j_p, double *v_p,
                  tsr_errbuf *err)
{
  const char *p = line;
  int64_t i, j;
  if (!parse_count(&p, &i) || !parse_count(&p, &j))
    return tsr_fail(err, TSR_EINVAL, "an entry must be 'row column value', not '%.*s'", line_len(line), line);
  if (i < 1 || i > h->rows || j < 1 || j > h->cols)
    return tsr_fail(err, TSR_EINVAL, "entry (%lld, %lld) is out of range: the matrix is %lld x %lld (1-based)",
                    (long long)i, (long long)j, (long long)h->rows, (long long)h->cols);
  if (at_end(p)) return tsr_fail(err, TSR_EINVAL, "entry (%lld, %lld) has no value", (long long)i, (long long)j);
  int rc = parse_value(p, h->integer, v_p, err);
  if (rc != 0) return rc;
  *i_p = i - 1;
  *j_p = j - 1;
  return 0;
}
