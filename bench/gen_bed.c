/* bench/gen_bed: synthetic PLINK 1 genotypes for the PCA benchmark
 * (bench/pca.sh). Writes PREFIX.bed/.bim/.fam of N samples x M SNPs with
 * population structure, so that a PCA has K-1 well separated top
 * eigenvalues (the Balding-Nichols model):
 *
 * - samples are split into K populations of consecutive samples (sample i
 *   is in population i*K/N; the .fam's FID is "popK");
 * - each SNP has an ancestral A1 frequency p ~ U(0.05, 0.95) and, in each
 *   population k, p_k ~ Beta(p(1-F)/F, (1-p)(1-F)/F) (F is Fst);
 * - a genotype is missing with probability R, else its A1 dosage is
 *   Binomial(2, p_k): .bed code 00 (dosage 2) with probability p_k^2,
 *   10 with 2 p_k (1-p_k), 11 with (1-p_k)^2.
 *
 * Randomness is counter-based: a SNP's frequencies come from a stream
 * keyed by (seed, SNP), its genotypes from a hash of (key, sample pair),
 * 16 bits a genotype compared with integer thresholds. So the files do
 * not depend on the thread count, and any SNP can be made on its own.
 * Threads take blocks of SNPs and pwrite them in place; the genotypes are
 * made in 32-bit vector lanes (AVX2 where the CPU has it), so disk speed,
 * not the generator, bounds the time.
 *
 * Uses libc and pthreads only. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tessera/base.h"

#define GOLDEN 0x9e3779b97f4a7c15ull
#define MAX_POPS 255
/* Bytes of .bed a thread makes before each pwrite. */
#define BLOCK_BYTES ((int64_t)4 << 20)

typedef struct gen_opts {
  const char *out;
  int64_t samples, snps;
  uint64_t seed;
  double missing, fst;
  int pops, threads;
} gen_opts;

typedef struct gen_job {
  const gen_opts *o;
  int fd;
  int64_t bps, block_snps;
  const uint8_t *pop;     /* [samples] population of each sample */
  atomic_llong next;      /* next SNP block to make */
  atomic_int failed;      /* errno of the first failed write, or 0 */
} gen_job;

/* ---------- randomness ---------- */

static inline uint64_t mix64(uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The key of SNP v's stream in domain d (0: genotypes, 1: frequencies). */
static uint64_t snp_key(uint64_t seed, int64_t v, uint64_t d)
{
  return mix64(mix64(seed + GOLDEN) ^ mix64(((uint64_t)v << 1 | d) + 3 * GOLDEN));
}

typedef struct rng {
  uint64_t s;
} rng;

/* Uniform in [0, 1). */
static double unif(rng *r)
{
  r->s += GOLDEN;
  return (double)(mix64(r->s) >> 11) * 0x1.0p-53;
}

static double normal(rng *r)
{
  double u1 = 1.0 - unif(r), u2 = unif(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Gamma(a, 1), Marsaglia and Tsang; a < 1 through Gamma(a+1) U^(1/a). */
static double gamma_draw(rng *r, double a)
{
  if (a < 1.0) return gamma_draw(r, a + 1.0) * pow(1.0 - unif(r), 1.0 / a);
  double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
  for (;;) {
    double x = normal(r), v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    if (log(1.0 - unif(r)) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
  }
}

static double beta_draw(rng *r, double a, double b, double fallback)
{
  double x = gamma_draw(r, a), y = gamma_draw(r, b);
  return x + y > 0.0 ? x / (x + y) : fallback;
}

/* ---------- one SNP ---------- */

/* Thresholds of a population, compared with 16-bit uniforms u: u < t[0]
 * → code 00, < t[1] → 01 (missing), < t[2] → 10, else 11, so the code is
 * the number of t <= u. */
typedef struct pop_thresholds {
  int32_t t[MAX_POPS][3];
} pop_thresholds;

static void snp_thresholds(const gen_opts *o, int64_t v, pop_thresholds *th)
{
  rng r = {snp_key(o->seed, v, 1)};
  double p = 0.05 + 0.9 * unif(&r), f = o->fst, m = o->missing;
  for (int k = 0; k < o->pops; k++) {
    double pk = beta_draw(&r, p * (1.0 - f) / f, (1.0 - p) * (1.0 - f) / f, p);
    double c0 = (1.0 - m) * pk * pk, c1 = c0 + m, c2 = c1 + (1.0 - m) * 2.0 * pk * (1.0 - pk);
    double c[3] = {c0, c1, c2};
    for (int i = 0; i < 3; i++) {
      double t = floor(c[i] * 65536.0 + 0.5);
      th->t[k][i] = t > 65536.0 ? 65536 : (int32_t)t;
    }
  }
}

/* The genotype words: word j of a SNP holds the uniforms of samples 2j
 * (low 16 bits) and 2j+1, a 32-bit hash (Wellons' lowbias32, twice, with
 * the SNP's two key halves) so that it vectorizes on 32-bit lanes. */
static inline uint32_t lowbias32(uint32_t x)
{
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

typedef struct snp_stream {
  uint32_t k1, k2;
} snp_stream;

static inline uint32_t word_at(snp_stream k, uint32_t j)
{
  return lowbias32(lowbias32(j + k.k1) ^ k.k2);
}

static inline unsigned code_of(uint32_t u, const int32_t t[3])
{
  return (unsigned)(((int32_t)u >= t[0]) + ((int32_t)u >= t[1]) + ((int32_t)u >= t[2]));
}

/* Byte b (samples 4b..4b+n-1, n <= 4; pad bits zero), one sample at a time. */
static uint8_t byte_at(const pop_thresholds *th, const uint8_t *pop, snp_stream k, int64_t b, int n)
{
  unsigned byte = 0;
  for (int s = 0; s < n; s++) {
    uint32_t w = word_at(k, (uint32_t)(2 * b + s / 2)), u = s % 2 ? w >> 16 : w & 0xffffu;
    byte |= code_of(u, th->t[pop[4 * b + s]]) << (2 * s);
  }
  return (uint8_t)byte;
}

typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint8_t v8b __attribute__((vector_size(8)));

/* Always inlined, also at -O0: a call from the AVX2 clone to a helper
 * compiled for the default target passes 256-bit vectors in registers the
 * callee does not read them from (the ABI change GCC's -Wpsabi warns of). */
#define VEC_INLINE static inline __attribute__((always_inline))

VEC_INLINE v8u lowbias32_v(v8u x)
{
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

VEC_INLINE v8i codes_v(v8u u, const int32_t t[3])
{
  v8i x = (v8i)u;
  return -((x >= t[0]) + (x >= t[1]) + (x >= t[2]));
}

/* Bytes [b0, b1) of one population (thresholds t): 8 bytes a step in
 * 32-bit lanes, the same values byte_at gives. Cloned for AVX2, chosen
 * at load time, so one binary runs anywhere at the speed it can. */
__attribute__((target_clones("avx2", "default"))) static void run_bytes(const int32_t t[3], snp_stream k, int64_t b0,
                                                                         int64_t b1, uint8_t *rec)
{
  static const v8u lane = {0, 2, 4, 6, 8, 10, 12, 14};
  int64_t b = b0;
  for (; b + 8 <= b1; b += 8) {
    v8u j = lane + (uint32_t)(2 * b);
    v8u w0 = lowbias32_v(lowbias32_v(j + k.k1) ^ k.k2), w1 = lowbias32_v(lowbias32_v(j + 1 + k.k1) ^ k.k2);
    v8i byte = codes_v(w0 & 0xffffu, t) | codes_v(w0 >> 16, t) << 2 | codes_v(w1 & 0xffffu, t) << 4 |
               codes_v(w1 >> 16, t) << 6;
    v8b out = __builtin_convertvector(byte, v8b);
    memcpy(rec + b, &out, 8);
  }
  for (; b < b1; b++) {
    uint32_t w0 = word_at(k, (uint32_t)(2 * b)), w1 = word_at(k, (uint32_t)(2 * b + 1));
    rec[b] = (uint8_t)(code_of(w0 & 0xffffu, t) | code_of(w0 >> 16, t) << 2 | code_of(w1 & 0xffffu, t) << 4 |
                       code_of(w1 >> 16, t) << 6);
  }
}

/* SNP v's .bed record (bps bytes) into rec: runs of whole bytes within a
 * population at vector speed, the bytes across a boundary and the last
 * partial byte one sample at a time. */
static void make_record(const gen_job *job, int64_t v, uint8_t *rec)
{
  pop_thresholds th;
  snp_thresholds(job->o, v, &th);
  uint64_t key = snp_key(job->o->seed, v, 0);
  snp_stream k = {(uint32_t)key, (uint32_t)(key >> 32)};
  int64_t n = job->o->samples, full = n / 4;
  for (int64_t b = 0; b < full;) {
    int p = job->pop[4 * b];
    int64_t e = b;
    while (e < full && job->pop[4 * e + 3] == p) e++;  /* whole bytes of population p */
    run_bytes(th.t[p], k, b, e, rec);
    if (e < full) rec[e] = byte_at(&th, job->pop, k, e, 4);
    b = e + 1;
  }
  if (full < job->bps) rec[full] = byte_at(&th, job->pop, k, full, (int)(n - 4 * full));
}

/* ---------- files ---------- */

static int write_at(int fd, const uint8_t *p, size_t len, int64_t off)
{
  while (len > 0) {
    ssize_t n = pwrite(fd, p, len, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    p += n, len -= (size_t)n, off += n;
  }
  return 0;
}

static void *bed_worker(void *arg)
{
  gen_job *job = arg;
  uint8_t *buf = malloc((size_t)(job->block_snps * job->bps));
  if (buf == NULL) atomic_store(&job->failed, ENOMEM);
  for (;;) {
    int64_t v0 = (int64_t)atomic_fetch_add(&job->next, 1) * job->block_snps;
    if (buf == NULL || v0 >= job->o->snps || atomic_load(&job->failed) != 0) break;
    int64_t nv = job->o->snps - v0 < job->block_snps ? job->o->snps - v0 : job->block_snps;
    for (int64_t i = 0; i < nv; i++) make_record(job, v0 + i, buf + i * job->bps);
    int e = write_at(job->fd, buf, (size_t)(nv * job->bps), 3 + v0 * job->bps);
    if (e != 0) atomic_store(&job->failed, e);
  }
  free(buf);
  return NULL;
}

static FILE *open_text(const char *prefix, const char *ext, char *path, size_t cap)
{
  snprintf(path, cap, "%s%s", prefix, ext);
  FILE *f = fopen(path, "w");
  if (f == NULL) fprintf(stderr, "tsr-gen-bed: cannot create %s: %s\n", path, strerror(errno));
  else setvbuf(f, NULL, _IOFBF, 1 << 20);
  return f;
}

static int close_text(FILE *f, const char *path)
{
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    fprintf(stderr, "tsr-gen-bed: writing %s failed\n", path);
    return 1;
  }
  return 0;
}

static int write_fam(const gen_opts *o, const uint8_t *pop)
{
  char path[4200];
  FILE *f = open_text(o->out, ".fam", path, sizeof path);
  if (f == NULL) return 1;
  for (int64_t i = 0; i < o->samples; i++) fprintf(f, "pop%d\ts%lld\t0\t0\t0\t-9\n", pop[i] + 1, (long long)i + 1);
  return close_text(f, path);
}

/* 22 chromosomes of consecutive SNPs, 1 kb apart; alleles by SNP. */
static int write_bim(const gen_opts *o)
{
  static const char alleles[4][2] = {{'A', 'G'}, {'C', 'T'}, {'A', 'C'}, {'G', 'T'}};
  char path[4200];
  FILE *f = open_text(o->out, ".bim", path, sizeof path);
  if (f == NULL) return 1;
  for (int64_t v = 0; v < o->snps; v++) {
    int64_t chrom = v * 22 / o->snps, first = (chrom * o->snps + 21) / 22;
    fprintf(f, "%lld\tsnp%lld\t0\t%lld\t%c\t%c\n", (long long)chrom + 1, (long long)v + 1,
            (long long)(10000 + 1000 * (v - first)), alleles[v % 4][0], alleles[v % 4][1]);
  }
  return close_text(f, path);
}

static int write_bed(const gen_opts *o, const uint8_t *pop)
{
  char path[4200];
  snprintf(path, sizeof path, "%s.bed", o->out);
  gen_job job = {.o = o, .bps = (o->samples + 3) / 4, .pop = pop};
  job.block_snps = BLOCK_BYTES / job.bps > 0 ? BLOCK_BYTES / job.bps : 1;
  job.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  static const uint8_t magic[3] = {0x6c, 0x1b, 0x01};
  int e = job.fd < 0 ? errno : write_at(job.fd, magic, 3, 0);
  pthread_t tid[256];
  int started = 0;
  for (; e == 0 && started < o->threads; started++)
    if (pthread_create(&tid[started], NULL, bed_worker, &job) != 0) break;
  for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
  if (e == 0 && started == 0) e = EAGAIN;
  if (e == 0) e = atomic_load(&job.failed);
  if (job.fd >= 0 && close(job.fd) != 0 && e == 0) e = errno;
  if (e != 0) fprintf(stderr, "tsr-gen-bed: writing %s: %s\n", path, strerror(e));
  return e != 0;
}

/* ---------- flags ---------- */

static void usage(FILE *f)
{
  fprintf(f,
          "usage: tsr-gen-bed --out PREFIX --samples N --snps M [--seed S] [--missing R] [--pops K]\n"
          "                   [--fst F] [--threads T]\n"
          "Writes PREFIX.bed/.bim/.fam: N samples x M SNPs of K populations (default 5) drawn from\n"
          "the Balding-Nichols model with Fst F (default 0.05), each genotype missing with\n"
          "probability R (default 0.01), from seed S (default 1). T threads (default: all CPUs);\n"
          "the files do not depend on T.\n");
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || x < lo || x > hi) return false;
  *v = x;
  return true;
}

static bool parse_f64(const char *s, double lo, double hi, double *v)
{
  char *end;
  double x = strtod(s, &end);
  if (end == s || *end != '\0' || !(x >= lo && x <= hi)) return false;
  *v = x;
  return true;
}

/* 0, or 2 after printing what was wrong. */
static int parse_flags(int argc, char **argv, gen_opts *o)
{
  int64_t v;
  for (int i = 1; i < argc; i += 2) {   /* every flag takes a value */
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = val != NULL;
    if (strcmp(a, "--out") == 0 && ok) o->out = val;
    else if (strcmp(a, "--samples") == 0 && ok) ok = parse_i64(val, 1, INT64_MAX / 4, &o->samples);
    else if (strcmp(a, "--snps") == 0 && ok) ok = parse_i64(val, 1, INT64_MAX / 4, &o->snps);
    else if (strcmp(a, "--seed") == 0 && ok) ok = parse_i64(val, 0, INT64_MAX, &v) && ((o->seed = (uint64_t)v), true);
    else if (strcmp(a, "--missing") == 0 && ok) ok = parse_f64(val, 0.0, 0.999, &o->missing);
    else if (strcmp(a, "--fst") == 0 && ok) ok = parse_f64(val, 1e-6, 0.999, &o->fst);
    else if (strcmp(a, "--pops") == 0 && ok) ok = parse_i64(val, 1, MAX_POPS, &v) && ((o->pops = (int)v), true);
    else if (strcmp(a, "--threads") == 0 && ok) ok = parse_i64(val, 1, 256, &v) && ((o->threads = (int)v), true);
    else {
      fprintf(stderr, "tsr-gen-bed: unknown flag or missing value: %s\n", a);
      usage(stderr);
      return 2;
    }
    if (!ok) {
      fprintf(stderr, "tsr-gen-bed: bad value for %s: %s\n", a, val);
      return 2;
    }
  }
  if (o->out == NULL || o->samples == 0 || o->snps == 0) {
    fprintf(stderr, "tsr-gen-bed: --out, --samples and --snps are required\n");
    usage(stderr);
    return 2;
  }
  if ((o->samples + 3) / 4 > INT64_MAX / o->snps) {
    fprintf(stderr, "tsr-gen-bed: %lld x %lld is too large\n", (long long)o->samples, (long long)o->snps);
    return 2;
  }
  return 0;
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--version") == 0) {
      printf("tsr-gen-bed %s\n", TSR_VERSION_STRING);
      return 0;
    }
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  gen_opts o = {NULL, 0, 0, 1, 0.01, 0.05, 5, cpus < 1 ? 1 : cpus > 256 ? 256 : (int)cpus};
  int rc = parse_flags(argc, argv, &o);
  if (rc != 0) return rc;
  uint8_t *pop = malloc((size_t)o.samples);
  if (pop == NULL) {
    fprintf(stderr, "tsr-gen-bed: out of memory for %lld samples\n", (long long)o.samples);
    return 1;
  }
  for (int64_t i = 0; i < o.samples; i++) pop[i] = (uint8_t)((__int128)i * o.pops / o.samples);
  double t0 = now_s();
  rc = write_fam(&o, pop) || write_bim(&o) || write_bed(&o, pop);
  double dt = now_s() - t0, bytes = 3.0 + (double)((o.samples + 3) / 4) * (double)o.snps;
  if (rc == 0)
    printf("tsr-gen-bed: %s.bed: %lld samples x %lld SNPs, %d populations, %.0f bytes in %.2f s (%.0f MB/s, %d threads)\n",
           o.out, (long long)o.samples, (long long)o.snps, o.pops, bytes, dt, bytes / dt / 1e6, o.threads);
  free(pop);
  return rc;
}
