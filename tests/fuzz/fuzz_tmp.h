/* tests/fuzz/fuzz_tmp.h — what the file-reading fuzz targets share: a
 * private temporary directory per process (made once, removed at exit)
 * and writing the fuzz input's pieces there as the files a reader opens,
 * plus splitting an input into pieces at a separator. Header-only: each
 * target is one translation unit. */
#ifndef TSR_TESTS_FUZZ_TMP_H
#define TSR_TESTS_FUZZ_TMP_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[64];

static void fuzz_rmdir(void)
{
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
  if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
}

/* Makes the directory; aborts (the run cannot go on) when it cannot. */
static inline void fuzz_tmp_init(void)
{
  const char *base = getenv("TMPDIR");
  snprintf(fuzz_dir, sizeof fuzz_dir, "%s/tsr-fuzz-XXXXXX", base && strlen(base) < 32 ? base : "/tmp");
  if (mkdtemp(fuzz_dir) == NULL) {
    perror("fuzz: mkdtemp");
    abort();
  }
  atexit(fuzz_rmdir);
}

/* TSR_FUZZ_VERBOSE=1 prints every refusal (to see which seeds a reader
 * accepts); off while fuzzing. */
static inline void fuzz_say(const char *what, const char *msg)
{
  static int verbose = -1;
  if (verbose < 0) verbose = getenv("TSR_FUZZ_VERBOSE") != NULL;
  if (verbose) fprintf(stderr, "fuzz: %s: %s\n", what, msg);
}

/* dir/name, into buf of cap bytes. */
static inline const char *fuzz_path(const char *name, char *buf, size_t cap)
{
  snprintf(buf, cap, "%s/%s", fuzz_dir, name);
  return buf;
}

/* Writes len bytes to dir/name (replacing it); aborts on an I/O error,
 * which is the machine's fault and not the input's. */
static inline void fuzz_write(const char *name, const uint8_t *data, size_t len)
{
  char path[128];
  FILE *f = fopen(fuzz_path(name, path, sizeof path), "wb");
  if (f == NULL || (len > 0 && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
    perror("fuzz: writing a temporary file");
    abort();
  }
}

/* Cuts the input at each occurrence of sep into at most max pieces (the
 * last one takes the rest). Returns the number of pieces. */
static inline int fuzz_split(const uint8_t *data, size_t size, const char *sep, const uint8_t **piece, size_t *len, int max)
{
  size_t seplen = strlen(sep);
  int n = 0;
  const uint8_t *p = data, *end = data + size;
  while (n < max - 1) {
    const uint8_t *next = memmem(p, (size_t)(end - p), sep, seplen);
    if (next == NULL) break;
    piece[n] = p;
    len[n++] = (size_t)(next - p);
    p = next + seplen;
  }
  piece[n] = p;
  len[n++] = (size_t)(end - p);
  return n;
}

#endif
