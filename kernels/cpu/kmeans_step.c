/* kernels/cpu/kmeans_step.c — Lloyd iterations with Hamerly's bounds, the
 * state of each row chunk carried from iteration to iteration as a chunk
 * (graphs/kmeans.c chains them; docs/cluster.md, "k-means").
 *
 * The model (f64 [KM_MODEL_LEN(k, d)]): a header of KM_HDR values (below),
 * the centers k·d, each center's last move δ[k] (an upper bound of the
 * Euclidean distance it moved), half[k] (a lower bound of half the
 * distance to the nearest other center), and the cumulative moves of
 * each center and of the largest over the last KM_EPOCHS iterations.
 *
 * A chunk's state (f64 [KM_STATE_LEN(k, d, rows)]): a partial (kmeans.h:
 * sums and counts of the rows by label, the exact inertia when the model
 * has converged, the farthest points after a full pass), the chunk's
 * column sums and the total of its rows' squared norms (2·d values, the
 * total in the first of the second d, for sklearn's tol), then per
 * row a km_row (label, epoch i32, u and l f32) packed into the f64 tail:
 * u an upper bound of the distance to its center, l a lower bound of the
 * distance to every other center, both for the centers of iteration
 * `epoch` (moved by the cumulative drifts since when read). A step's
 * x input may be several chunks (params parts): a run of rows.
 *
 * Invariant: the labels are plain Lloyd's (exact f64 squared distances,
 * ties to the smaller index). A row keeps its label without a distance
 * only when u·(1 + KM_SLACK) < max(l, half[label]): the bounds are kept
 * conservative of rounding (KM_UP / KM_DOWN), and the relative slack is
 * far above the rounding of a computed distance, so the computed argmin
 * cannot differ. Otherwise the row takes the distances to all centers:
 * f32 dots screened with a certified gap, else exact f64 as plain Lloyd. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans.h"

/* v >= 0 rounded to f32 above / below v: a relative nudge of 1e-7 is
 * more than the half-ulp of rounding to nearest (at most 6e-8 relative
 * for normal floats); tiny values are clamped out of the subnormals. */
static float f32_up(double v) { return v < 1e-30 ? 1e-30f : (float)(v * (1 + 1e-7)); }
static float f32_down(double v) { return v < 1e-30 ? 0 : (float)(v * (1 - 1e-7)); }

static int km_int(const char *op, const tsr_params *p, const char *name, int64_t *v, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, name, v, err);
  return rc == 0 ? 0 : tsr_k_param_fail(op, rc, err);
}

/* Σ_j (a[j] − b[j])² (b NULL: Σ_j a[j]²) in eight interleaved partial
 * sums joined pairwise: a fixed order, so the same bits on every ISA, and
 * no chain of d dependent adds. Not plain Lloyd's order (exact_d2 and
 * tsr_km_row_dists): for bounds, screening and the inertia only. */
typedef double km_v8 __attribute__((vector_size(64)));
__attribute__((target_clones("avx512f", "avx2", "default")))
static double fast_d2(const double *a, const double *b, int64_t d)
{
  km_v8 acc = {0};
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    km_v8 x, y = {0};
    memcpy(&x, a + j, sizeof x);
    if (b != NULL) memcpy(&y, b + j, sizeof y);
    x -= y;
    acc += x * x;
  }
  double t[8];
  memcpy(t, &acc, sizeof t);
  double s = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
  for (; j < d; j++) {
    double v = a[j] - (b != NULL ? b[j] : 0);
    s += v * v;
  }
  return s;
}

/* fast_d2 of an f32 row: the same order and the same bits as fast_d2 of
 * the row converted to f64 (the conversion is exact), without the copy. */
typedef float km_f8 __attribute__((vector_size(32)));
__attribute__((target_clones("avx512f", "avx2", "default")))
static double fast_d2_f32(const float *a, const double *b, int64_t d)
{
  km_v8 acc = {0};
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    km_f8 xf;
    km_v8 y;
    memcpy(&xf, a + j, sizeof xf);
    memcpy(&y, b + j, sizeof y);
    km_v8 x = __builtin_convertvector(xf, km_v8) - y;
    acc += x * x;
  }
  double t[8];
  memcpy(t, &acc, sizeof t);
  double s = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
  for (; j < d; j++) {
    double v = (double)a[j] - b[j];
    s += v * v;
  }
  return s;
}

/* ---------- kmeans_step ---------- */

/* The step's x chunks: params parts (default 1) inputs, then the model
 * and the previous state. */
static int step_parts(const char *op, const tsr_params *p, int n, int64_t *parts_p, tsr_errbuf *err)
{
  int64_t parts = 1;
  if (tsr_params_find(p, "parts") != NULL && km_int(op, p, "parts", &parts, err) != 0) return TSR_EINVAL;
  if (parts < 1 || (n != parts + 1 && n != parts + 2))
    return tsr_fail(err, TSR_EINVAL, "%s: %d inputs for parts = %lld (the x chunks, the model, a state)", op, n, (long long)parts);
  *parts_p = parts;
  return 0;
}

static int step_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t k, row0, parts = 1, rows = 0;
  int rc = km_int("kmeans_step", p, "k", &k, err);
  if (rc == 0) rc = km_int("kmeans_step", p, "row0", &row0, err);
  if (rc == 0) rc = step_parts("kmeans_step", p, n, &parts, err);
  if (rc != 0) return rc;
  for (int i = 0; i < parts; i++) {
    if (in[i].ndim != 2 || !tsr_k_is_float(in[i].dtype) || in[i].dtype != in[0].dtype || in[i].shape[1] != in[0].shape[1])
      return tsr_fail(err, TSR_ESHAPE, "kmeans_step: input %d is %s, not an f32/f64 2-D chunk like input 0 (%s)", i,
                      tsr_k_str(&in[i]).s, tsr_k_str(&in[0]).s);
    rows += in[i].shape[0];
  }
  int64_t d = in[0].shape[1], len = KM_STATE_LEN(k, d, rows);
  const tsr_meta *m = &in[parts], *st = n == parts + 2 ? &in[parts + 1] : NULL;
  if (k < 1 || m->ndim != 1 || m->dtype != TSR_F64 || m->shape[0] != KM_MODEL_LEN(k, d))
    return tsr_fail(err, TSR_ESHAPE, "kmeans_step: input %lld is %s, not a model of k = %lld x %lld", (long long)parts,
                    tsr_k_str(m).s, (long long)k, (long long)d);
  if (st != NULL && (st->ndim != 1 || st->dtype != TSR_F64 || st->shape[0] != len))
    return tsr_fail(err, TSR_ESHAPE, "kmeans_step: input %lld is %s, not the state of %lld rows", (long long)parts + 1,
                    tsr_k_str(st).s, (long long)rows);
  tsr_k_meta_set(out, TSR_F64, 1, &len);
  return 0;
}

#define KM_BATCH 4         /* rows a pass of the f32 dot kernel */
#define KM_BLOCK_ROWS 256  /* rows whose bounds are tested before their distances */
#define KM_PREFETCH 16     /* rows ahead */

typedef struct km_step {
  int64_t k, d, kp, rows, row0;
  const tsr_buf *xs;        /* the x chunks, parts of them, rows in order */
  int64_t parts, *starts;   /* starts[p]: part p's first row (parts + 1) */
  const double *centers, *shift, *half;
  const double *prev;       /* the previous state, or NULL */
  bool full, far, converged;  /* no usable bounds; find the farthest points; the final E-step */
  int64_t epoch;            /* the model's iteration */
  const double *drift, *mdrift; /* [KM_EPOCHS][k] cumulative moves of each center, [KM_EPOCHS] of the largest */
  double *ct;               /* f64 centers transposed [d][kp] (the exact distances) */
  float *ct32;              /* f32 centers transposed [d][kp32] (the screening dots) */
  int64_t kp32;
  double *cn, cmax;         /* |c|² of each center (f64), the largest |c| */
  double *row, *dist;       /* KM_BATCH rows of d (f64), kp distances */
  float *row32, *dots;      /* KM_BATCH rows of d (f32), KM_BATCH × kp32 dots */
  int64_t *unsure;          /* two blocks' rows needing every distance (this block's, the next's) */
  double *part, *colsum, *colsq;  /* out */
  km_row *state;
  int64_t groups;           /* Yinyang's groups (kmeans_loop); 0 or 1: Hamerly's bound alone */
  const int32_t *group_of;  /* [k] */
  const double *gdrift;     /* [KM_EPOCHS][groups] cumulative largest move in each group */
  float *glb;               /* [rows][groups] the rows' group bounds (this pass's rows from 0) */
  float *key;               /* [rows] or NULL: each row's scan key (row_key), this pass's rows from 0 */
  double *norm2;            /* [rows] or NULL: each row's |x|² (-1 until computed), this pass's rows from 0 */
  double *gmask;            /* [groups][kp32]: 0 for the group's centers, else infinite */
} km_step;

/* Row r of x in f64 (row) and f32 (row32), read where x holds it. */
static inline __attribute__((always_inline)) void load_row(const km_step *s, int64_t r, double *row, float *row32)
{
  int64_t p = 0;
  while (r >= s->starts[p + 1]) p++;
  const tsr_buf *x = &s->xs[p];
  r -= s->starts[p];
  if (x->meta.dtype == TSR_F32) {  /* a loop, not memcpy: no libc call for 50-odd values */
    const float *src = (const float *)x->data + r * s->d;
    for (int64_t j = 0; j < s->d; j++) row32[j] = src[j], row[j] = src[j];
  } else {
    memcpy(row, (const double *)x->data + r * s->d, (size_t)s->d * sizeof *row);
    for (int64_t j = 0; j < s->d; j++) row32[j] = (float)row[j];
  }
}

/* fast_d2 of row r of x and c, read where x holds it. */
static double row_d2(const km_step *s, int64_t r, const double *c)
{
  int64_t p = 0;
  while (r >= s->starts[p + 1]) p++;
  const tsr_buf *x = &s->xs[p];
  r -= s->starts[p];
  if (x->meta.dtype == TSR_F32) return fast_d2_f32((const float *)x->data + r * s->d, c, s->d);
  return fast_d2((const double *)x->data + r * s->d, c, s->d);
}

/* Asks for row r of x ahead of its use: the passes are bound by the
 * latency of x's rows, which the hardware prefetcher does not hide. */
static void prefetch_row(const km_step *s, int64_t r)
{
  if (r >= s->rows) return;
  int64_t p = 0;
  while (r >= s->starts[p + 1]) p++;
  size_t es = s->xs[p].meta.dtype == TSR_F32 ? 4 : 8, bytes = (size_t)s->d * es;
  const char *row = (const char *)s->xs[p].data + (size_t)(r - s->starts[p]) * bytes;
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(row + off);
}

/* dots[i·kp32 + q] = Σ_j rows[i·d + j]·ct32[j·kp32 + q] in f32 for
 * KM_BATCH rows (kp32 a multiple of 32). FMA where the CPU has it: these
 * only screen (kmeans_step's error bound covers either rounding); the
 * labels come from exact f64 distances or a certified gap. */
typedef float km_f16 __attribute__((vector_size(64)));
/* GCC contracts this one function to FMA; clang (the fuzz build) has no
 * optimize attribute and keeps its own contraction default. */
#if defined(__clang__)
#define KM_FP_CONTRACT
#else
#define KM_FP_CONTRACT , optimize("fp-contract=fast")
#endif
__attribute__((target_clones("avx512f", "arch=haswell", "default") KM_FP_CONTRACT))
static void dots_batch(const float *rows, const float *ct32, int64_t d, int64_t kp32, float *dots)
{
  for (int64_t q0 = 0; q0 < kp32; q0 += 32) {
    km_f16 acc[KM_BATCH][2];
    memset(acc, 0, sizeof acc);
    for (int64_t j = 0; j < d; j++) {
      km_f16 c0, c1;
      memcpy(&c0, ct32 + j * kp32 + q0, sizeof c0);
      memcpy(&c1, ct32 + j * kp32 + q0 + 16, sizeof c1);
      for (int i = 0; i < KM_BATCH; i++) {
        float v = rows[i * d + j];
        acc[i][0] += v * c0, acc[i][1] += v * c1;
      }
    }
    for (int i = 0; i < KM_BATCH; i++) memcpy(dots + i * kp32 + q0, acc[i], sizeof acc[i]);
  }
}

/* Plain Lloyd's nearest center of row (exact f64 squared distances, ties
 * to the smaller index), its squared distance and the second smallest. */
static int64_t nearest_exact(const km_step *s, const double *row, double *bd_p, double *second_p)
{
  tsr_km_row_dists(row, s->ct, s->d, s->kp, s->dist);
  int64_t best = 0;
  double bd = INFINITY, second = INFINITY;
  for (int64_t q = 0; q < s->k; q++) {
    double v = s->dist[q];
    if (v < bd) second = bd, bd = v, best = q;
    else if (v < second) second = v;
  }
  *bd_p = bd, *second_p = second;
  return best;
}

typedef int64_t km_i8 __attribute__((vector_size(64)));

/* acc = the lanewise smaller of x and acc (a macro: a function returning
 * a 64-byte vector would change its ABI with the clone's ISA). */
#define KM_MIN8(x, acc) ((acc) = (km_v8)(((km_i8)(x) & ((x) < (acc))) | ((km_i8)(acc) & ~((x) < (acc)))))

/* The nearest center from the f32 dots when their gap certifies it: the
 * screened |x|² + |c|² − 2x·c is within e of the exact squared distance
 * (e from the f32 dot's rounding, (d + 3)·2⁻²⁴·|x|·|c|, doubled), so a
 * second best more than 2e (and a relative KM_SLACK) above the best
 * cannot be below it. For the n rows of a batch: lab[i] −1 when the gap
 * is too small (or xn[i] is not finite), else the label and the bounds
 * u[i] (above the best's distance) and l[i] (below every other's). */
/* The lanewise smaller of a and b (macros: a function returning a 64-byte
 * vector would change its ABI with the clone's ISA); v's smallest lane in
 * every lane, by three swaps of halves. */
#define KM_VMIN(a, b) ((km_v8)(((km_i8)(a) & ((a) < (b))) | ((km_i8)(b) & ~((a) < (b)))))
#define KM_IMIN(a, b) (((a) & ((a) < (b))) | ((b) & ~((a) < (b))))
#define KM_HMIN8(v, MIN)                                                    \
  do {                                                                     \
    (v) = MIN((v), __builtin_shufflevector((v), (v), 4, 5, 6, 7, 0, 1, 2, 3)); \
    (v) = MIN((v), __builtin_shufflevector((v), (v), 2, 3, 0, 1, 6, 7, 4, 5)); \
    (v) = MIN((v), __builtin_shufflevector((v), (v), 1, 0, 3, 2, 5, 4, 7, 6)); \
  } while (0)

#define KM_VSEL(m, a, b) ((km_v8)(((km_i8)(a) & (m)) | ((km_i8)(b) & ~(m))))
#define KM_ISEL(m, a, b) (((a) & (m)) | ((b) & ~(m)))

__attribute__((target_clones("avx512f", "avx2", "default")))
static void nearest_screened(const km_step *s, const float *dots, const double *xn, int n, int64_t *lab, double *u, double *l)
{
  /* the screened squared distances eight centers a vector (the padding
   * centers' |c|² is infinite), in one sweep that keeps per lane the
   * smallest, the first index holding it (a strict <) and the smallest of
   * the lane's others; then across lanes: the smallest, the smallest
   * index holding it (ties to the smaller index), and the second, the
   * smallest of the other lanes' smallest and the winning lane's others.
   * Lanewise selects, no store of the distances: one read of the dots. */
  const km_v8 inf = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
  const km_i8 lane = {0, 1, 2, 3, 4, 5, 6, 7}, none = lane + (1 << 30);
  int64_t kp = s->kp32;
  km_v8 lo1[KM_BATCH], lo2[KM_BATCH];
  km_i8 at[KM_BATCH];
  for (int i = 0; i < n; i++) {
    lo1[i] = inf, lo2[i] = inf, at[i] = none;
    for (int64_t q = 0; q < kp; q += 8) {
      km_f8 df;
      km_v8 c;
      memcpy(&df, dots + i * kp + q, sizeof df);
      memcpy(&c, s->cn + q, sizeof c);
      km_v8 x = (xn[i] + c) - 2 * __builtin_convertvector(df, km_v8);
      km_i8 lt = x < lo1[i];
      lo2[i] = KM_VSEL(lt, lo1[i], KM_VMIN(x, lo2[i]));
      at[i] = KM_ISEL(lt, lane + q, at[i]);
      lo1[i] = KM_VSEL(lt, x, lo1[i]);
    }
  }
  for (int i = 0; i < n; i++) {
    km_v8 best = lo1[i];
    KM_HMIN8(best, KM_VMIN);
    km_i8 idx = KM_ISEL(lo1[i] == best, at[i], none + (1 << 30));
    KM_HMIN8(idx, KM_IMIN);
    km_v8 others = KM_VSEL(at[i] == idx, lo2[i], lo1[i]);
    KM_HMIN8(others, KM_VMIN);
    lo1[i] = best, lo2[i] = others, at[i] = idx;
  }
  for (int i = 0; i < n; i++) {
    double bd = lo1[i][0], second = lo2[i][0];
    double e = 2 * ((double)(s->d + 3) * 0x1p-24 * 1.01 * sqrt(xn[i]) * s->cmax) + 1e-13 * (xn[i] + s->cmax * s->cmax);
    lab[i] = -1;
    if (!isfinite(xn[i]) || !(bd < INFINITY) || !(second - bd > 2 * e + KM_SLACK * second)) continue;  /* no finite value, no gap */
    double lo = second - e;
    lab[i] = at[i][0], u[i] = KM_UP(sqrt(bd + e)), l[i] = lo > 0 ? KM_DOWN(sqrt(lo)) : 0;
  }
}

/* gl[g] = the smallest of v over group g's centers but best (infinite
 * when none), v (kp32 values, infinite past k) read eight a vector and
 * masked by the groups' gmask; returns the smallest of them all. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static double group_mins(const km_step *s, double *v, int64_t best, double *gl)
{
  const km_v8 inf = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
  double was = v[best], second = INFINITY;
  v[best] = INFINITY;
  for (int64_t g = 0; g < s->groups; g++) {
    km_v8 lo = inf;
    for (int64_t q = 0; q < s->kp32; q += 8) {
      km_v8 x, mask;
      memcpy(&x, v + q, sizeof x), memcpy(&mask, s->gmask + g * s->kp32 + q, sizeof mask);
      x += mask;
      KM_MIN8(x, lo);
    }
    double m[8];
    memcpy(m, &lo, sizeof m);
    gl[g] = m[0];
    for (int i = 1; i < 8; i++) gl[g] = m[i] < gl[g] ? m[i] : gl[g];
    second = gl[g] < second ? gl[g] : second;
  }
  v[best] = was;
  return second;
}

/* nearest_screened for Yinyang: the same certified gap (a tie is no gap:
 * the exact distances decide it), the screened distances kept (in
 * s->dist) for each group's lower bound gl[g] (a distance, not squared)
 * of its centers but the nearest. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static int64_t nearest_groups(const km_step *s, const float *dots, double xn, double *u_p, double *l_p, double *gl)
{
  double *v = s->dist, bd = INFINITY;
  int64_t best = -1;
  for (int64_t q = 0; q < s->kp32; q++) v[q] = (xn + s->cn[q]) - 2 * (double)dots[q];
  for (int64_t q = 0; q < s->k; q++) {
    bool lt = v[q] < bd;  /* ties to the smaller index */
    bd = lt ? v[q] : bd, best = lt ? q : best;
  }
  if (best < 0) return -1;
  double second = group_mins(s, v, best, gl);
  double e = 2 * ((double)(s->d + 3) * 0x1p-24 * 1.01 * sqrt(xn) * s->cmax) + 1e-13 * (xn + s->cmax * s->cmax);
  if (!(second - bd > 2 * e + KM_SLACK * second)) return -1;
  for (int64_t g = 0; g < s->groups; g++) gl[g] = gl[g] - e > 0 ? KM_DOWN(sqrt(gl[g] - e)) : 0;
  double lo = second - e;
  *u_p = KM_UP(sqrt(bd + e)), *l_p = lo > 0 ? KM_DOWN(sqrt(lo)) : 0;
  return best;
}

/* The label of a row (its distances' nearest, certified by the screen or
 * exact) and its bounds: u, l and (Yinyang) the groups' gl; −1 for a row
 * with a NaN or infinity. */
static inline __attribute__((always_inline)) int64_t row_label(km_step *s, const double *row, const float *dots, double xn,
                                                               int64_t screened, double *u_p, double *l_p, double *gl)
{
  double bd, second;
  bool groups = s->groups > 1;
  int64_t lab = !isfinite(xn) ? -1 : groups ? nearest_groups(s, dots, xn, u_p, l_p, gl) : screened;
  if (lab >= 0) return lab;
  lab = nearest_exact(s, row, &bd, &second);
  if (!isfinite(bd)) return -1;
  *u_p = KM_UP(sqrt(bd)), *l_p = KM_DOWN(sqrt(second));
  if (groups) {
    for (int64_t q = s->k; q < s->kp32; q++) s->dist[q] = INFINITY;  /* past the centers: no bound */
    group_mins(s, s->dist, lab, gl);
    for (int64_t g = 0; g < s->groups; g++) gl[g] = KM_DOWN(sqrt(gl[g]));
  }
  return lab;
}

/* dst ± row over d values; restrict: the compiler may then run them as
 * vectors (it must otherwise assume the sums overlap the row). */
static inline __attribute__((always_inline)) void vec_add(double *restrict dst, const double *restrict row, int64_t d, double sign)
{
  for (int64_t j = 0; j < d; j++) dst[j] += sign * row[j];
}

static inline __attribute__((always_inline)) void add_row(const km_step *s, const double *row, int64_t from, int64_t to)
{
  double *sums = s->part, *counts = sums + s->k * s->d;
  vec_add(sums + to * s->d, row, s->d, 1);
  counts[to] += 1;
  if (from < 0) return;
  vec_add(sums + from * s->d, row, s->d, -1);
  counts[from] -= 1;
}

/* A row's scan key (kmeans_loop's private memory, Hamerly's path): the
 * cumulative largest move M (the model's mdrift) below which the row
 * keeps its label whatever the centers did, from bounds u, l valid at M =
 * mt: its center moves at most as far as the largest and every other at
 * most that far too, so (u + ΔM)(1 + KM_SLACK) < l − ΔM holds while ΔM <
 * (l − u(1 + KM_SLACK)) / (2 + KM_SLACK). Rounded down (a relative 1e-12
 * for the subtractions, f32_down); −1: no margin, the full test. */
static inline float row_key(double mt, double u, double l)
{
  double room = l - u * (1 + KM_SLACK);
  return room > 0 ? f32_down(mt + room * (1 / (2 + KM_SLACK)) - 1e-12 * (mt + u + l)) : -1;  /* a product: the margin covers its rounding */
}

/* Labels one row of a batch anew and accounts for it: sums (from scratch
 * in a full pass, else moved from its old label), farthest points, the
 * column sums of the first pass. */
static inline __attribute__((always_inline)) int place_row(km_step *s, int64_t r, const double *row, const float *dots, double xn,
                                                           int64_t screened, double u, double l)
{
  double gl[KM_GROUPS_MAX];
  int64_t lab = row_label(s, row, dots, xn, screened, &u, &l, gl);
  if (lab < 0) return -1;
  km_row *st = s->state + r;
  if (s->full) add_row(s, row, -1, lab);
  else if (st->label != lab) add_row(s, row, st->label, lab);
  if (s->far) {
    double *far = s->part + s->k * s->d + s->k + 1;
    tsr_km_far_insert(far, far + 3 * s->k, s->k, s->d, exact_d2(row, s->centers + lab * s->d, s->d), s->row0 + r, lab, row);
  }
  st->label = (int32_t)lab, st->epoch = (int32_t)s->epoch, st->u = f32_up(u), st->l = f32_down(l);
  for (int64_t g = 0; g < s->groups && s->groups > 1; g++) s->glb[r * s->groups + g] = f32_down(gl[g]);
  if (s->key != NULL) s->key[r] = row_key(s->mdrift[s->epoch & (KM_EPOCHS - 1)], u, l);
  return 0;
}

/* |x|² of row r (its f64 values at row): kmeans_loop keeps it from the
 * row's first pass on (x does not change), a fast_d2 less per row placed
 * (a fifth of a late pass's work on the bench). */
static inline __attribute__((always_inline)) double row_norm2(const km_step *s, int64_t r, const double *row)
{
  if (s->norm2 == NULL) return fast_d2(row, NULL, s->d);
  if (s->norm2[r] < 0) s->norm2[r] = fast_d2(row, NULL, s->d);
  return s->norm2[r];
}

/* Labels the n (<= KM_BATCH) rows at idx: one pass of the dot kernel,
 * the exact distances for the rows it cannot certify. */
/* Cloned per ISA with the row handling inlined: the conversions and the
 * sums of a full pass are most of its work besides the dots. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static int place_rows(km_step *s, const int64_t *idx, int n, tsr_errbuf *err)
{
  double xn[KM_BATCH];
  if (n < KM_BATCH) memset(s->row32 + n * s->d, 0, (size_t)((KM_BATCH - n) * s->d) * sizeof *s->row32);
  for (int i = 0; i < n && (s->full || s->converged); i++) prefetch_row(s, idx[i] + KM_PREFETCH);  /* rows in order */
  for (int i = 0; i < n; i++) {
    double *row = s->row + i * s->d;
    load_row(s, idx[i], row, s->row32 + i * s->d);
    xn[i] = row_norm2(s, idx[i], row);
    if (s->prev == NULL) s->colsq[0] += xn[i];  /* first_cols */
  }
  dots_batch(s->row32, s->ct32, s->d, s->kp32, s->dots);
  int64_t lab[KM_BATCH];
  double u[KM_BATCH], l[KM_BATCH];
  for (int i = 0; i < n; i++) lab[i] = -1, u[i] = l[i] = 0;  /* the groups' path screens in row_label */
  if (s->groups <= 1) nearest_screened(s, s->dots, xn, n, lab, u, l);
  for (int i = 0; i < n; i++)
    if (place_row(s, idx[i], s->row + i * s->d, s->dots + i * s->kp32, xn[i], lab[i], u[i], l[i]) != 0)
      return tsr_fail(err, TSR_EINVAL, "kmeans_step: row %lld holds a NaN or infinity", (long long)(s->row0 + idx[i]));
  return 0;
}

/* Hamerly's test for row st with bounds from the previous state (copied
 * into the output) at model iteration t: true when it keeps its label
 * without a distance; its moved bounds in *u_p, *l_p (the scan rewrites
 * a kept row with them when its epoch grows old). Reads only: the scan
 * runs it over a block first, which the compiler can vectorize (its
 * loads stay in range for a row of any epoch). Since epoch t0 the row's
 * center moved at most D_a(t) − D_a(t0) and every other at most M(t) −
 * M(t0) (cumulative sums: their rounding, relative to the sums, is the
 * margin); the lower bound is the larger of l and half the distance from
 * the row's center to its nearest other center. */
static inline __attribute__((always_inline)) bool bounds_keep(const km_step *s, const km_row *st, int64_t t, double *u_p, double *l_p)
{
  int64_t a = st->label, t0 = st->epoch, k = s->k;
  bool valid = (uint64_t)(t - t0) < KM_EPOCHS;
  int64_t e = t & (KM_EPOCHS - 1), e0 = valid ? t0 & (KM_EPOCHS - 1) : e;  /* in range for the loads either way */
  double dta = s->drift[e * k + a], mt = s->mdrift[e], margin = 1e-12 * (dta + mt);
  double u = KM_UP(st->u + (dta - s->drift[e0 * k + a]) + margin), l = st->l - (mt - s->mdrift[e0]) - margin;
  l = l > 0 ? KM_DOWN(l) : 0;
  double z = l > s->half[a] ? l : s->half[a];
  *u_p = u, *l_p = l;
  return valid && u * (1 + KM_SLACK) < z;
}

/* Yinyang's test for row r (its km_row st) at model iteration t: as
 * bounds_keep, with each group's bound moved by the group's own largest
 * move instead of every center's largest (Ding et al.'s global filter);
 * the moved bounds in *u_p, gl (for a rewrite of an old row). */
static inline __attribute__((always_inline)) bool groups_keep(const km_step *s, int64_t r, const km_row *st, int64_t t,
                                                              double *u_p, double *gl)
{
  int64_t a = st->label, t0 = st->epoch, k = s->k, n = s->groups;
  bool valid = (uint64_t)(t - t0) < KM_EPOCHS;
  int64_t e = t & (KM_EPOCHS - 1), e0 = valid ? t0 & (KM_EPOCHS - 1) : e;
  const double *gd = s->gdrift + e * n, *gd0 = s->gdrift + e0 * n;
  const float *lb = s->glb + r * n;
  double dta = s->drift[e * k + a], u = KM_UP(st->u + (dta - s->drift[e0 * k + a]) + 1e-12 * (dta + s->mdrift[e]));
  double z = s->half[a];
  for (int64_t g = 0; g < n; g++) {
    double l = lb[g] - (gd[g] - gd0[g]) - 1e-12 * (dta + gd[g]);
    gl[g] = l > 0 ? KM_DOWN(l) : 0;
  }
  double lmin = INFINITY;
  for (int64_t g = 0; g < n; g++) lmin = gl[g] < lmin ? gl[g] : lmin;
  *u_p = u;
  return valid && u * (1 + KM_SLACK) < (lmin > z ? lmin : z);
}

/* block_scan with Yinyang's groups. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static int64_t block_scan_groups(km_step *s, int64_t b0, int64_t b1, int64_t *unsure)
{
  int64_t check[KM_BLOCK_ROWS], n_check = 0, n = 0, t = s->epoch;
  double m_now = s->mdrift[t & (KM_EPOCHS - 1)];
  float mt = f32_up(m_now * (1 + 1e-9));
  for (int64_t r = b0; r < b1; r++) check[n_check] = r, n_check += !(s->key[r] > mt);
  for (int64_t i = 0; i < n_check; i++) __builtin_prefetch(s->state + check[i]), __builtin_prefetch(s->glb + check[i] * s->groups);
  for (int64_t i = 0; i < n_check; i++) {
    int64_t r = check[i];
    km_row *st = s->state + r;
    double u, gl[KM_GROUPS_MAX], l = INFINITY;
    if (!groups_keep(s, r, st, t, &u, gl)) {
      unsure[n++] = r;
      prefetch_row(s, r);
      continue;
    }
    for (int64_t g = 0; g < s->groups; g++) l = gl[g] < l ? gl[g] : l;
    if (t - st->epoch >= KM_EPOCHS / 2) {  /* rewritten before its epoch leaves the window */
      for (int64_t g = 0; g < s->groups; g++) s->glb[r * s->groups + g] = f32_down(gl[g]);
      st->epoch = (int32_t)t, st->u = f32_up(u), st->l = f32_down(l);
    }
    s->key[r] = row_key(m_now, u, l);
  }
  return n;
}

/* Fills s's output header: from scratch for a full pass, else the
 * previous sums and counts, which the moved rows then update. */
static void start_state(km_step *s)
{
  int64_t k = s->k, d = s->d;
  if (s->prev == s->part) {  /* kmeans_loop: the state is its own previous (sums, counts, columns, rows kept) */
    int64_t keep = s->full ? 0 : k * d + k;
    memset(s->part + keep, 0, (size_t)(KM_LEN(k, d) - keep) * sizeof *s->part);
    for (int64_t j = 0; j < k; j++) s->part[k * d + k + 1 + 3 * j + 1] = -1;
    return;
  }
  memset(s->part, 0, (size_t)KM_STATE_HEAD(k, d) * sizeof *s->part);
  double *far = s->part + k * d + k + 1;
  for (int64_t j = 0; j < k; j++) far[3 * j + 1] = -1;
  if (s->prev != NULL) memcpy(s->colsum, s->prev + KM_LEN(k, d), (size_t)(2 * d) * sizeof *s->colsum);
  if (s->prev != NULL && !s->full) {
    memcpy(s->part, s->prev, (size_t)(k * d + k) * sizeof *s->part);
    memcpy(s->state, s->prev + KM_STATE_HEAD(k, d), (size_t)s->rows * sizeof *s->state);
  }
}

/* One block's rows whose bounds cannot keep their label (not a full
 * pass), their x rows prefetched, into unsure; returns how many. They
 * take every distance, not first the distance to their own center
 * (Hamerly's tightening of u): the row is read from memory either way,
 * the dots of 30-odd centers cost little beside that read, and the fresh
 * lower bound keeps the row out of the next iterations' list, where a
 * tightened u alone with a stale lower bound soon fails again (the
 * bench's kmeans_loop: 38-39 ms of CPU time instead of 40-44 ms). */
__attribute__((target_clones("avx512f", "avx2", "default")))
static int64_t block_scan(km_step *s, int64_t b0, int64_t b1, int64_t *unsure)
{
  bool keep[KM_BLOCK_ROWS];
  int64_t n = 0, t = s->epoch;
  for (int64_t r = b0; r < b1; r++) {  /* no stores but keep: the compiler may run it eight rows a vector */
    double u, l;
    keep[r - b0] = bounds_keep(s, s->state + r, t, &u, &l);
  }
  for (int64_t r = b0; r < b1; r++) {
    km_row *st = s->state + r;
    if (!keep[r - b0]) {
      unsure[n++] = r;
      prefetch_row(s, r);
    } else if (t - st->epoch >= KM_EPOCHS / 2) {  /* rewritten before its epoch leaves the window */
      double u, l;
      bounds_keep(s, st, t, &u, &l);
      st->epoch = (int32_t)t, st->u = f32_up(u), st->l = f32_down(l);
    }
  }
  return n;
}

/* block_scan with the rows' keys (kmeans_loop): a row whose key is above
 * the largest cumulative move now (rounded up, with a relative 1e-9 for
 * the rounding of the cumulative sums) keeps its label unread; only the
 * others take the full test, and a row that passes it gets a fresh key
 * from its moved bounds. Most rows of a late iteration are read as one
 * f32 each instead of a 16-byte row and its centers' drifts. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static int64_t block_scan_keys(km_step *s, int64_t b0, int64_t b1, int64_t *unsure)
{
  int64_t check[KM_BLOCK_ROWS], n_check = 0, n = 0, t = s->epoch;
  double m_now = s->mdrift[t & (KM_EPOCHS - 1)];
  float mt = f32_up(m_now * (1 + 1e-9));
  for (int64_t r = b0; r < b1; r++) check[n_check] = r, n_check += !(s->key[r] > mt);
  for (int64_t i = 0; i < n_check; i++) __builtin_prefetch(s->state + check[i]);  /* scattered: their misses overlap */
  for (int64_t i = 0; i < n_check; i++) {
    int64_t r = check[i];
    km_row *st = s->state + r;
    double u, l;
    if (!bounds_keep(s, st, t, &u, &l)) {
      unsure[n++] = r;
      prefetch_row(s, r);
      continue;
    }
    if (t - st->epoch >= KM_EPOCHS / 2) st->epoch = (int32_t)t, st->u = f32_up(u), st->l = f32_down(l);
    s->key[r] = row_key(m_now, u, l);
  }
  return n;
}

static int64_t scan(km_step *s, int64_t b0, int64_t b1, int64_t *unsure)
{
  if (s->groups > 1) return block_scan_groups(s, b0, b1, unsure);
  return s->key != NULL ? block_scan_keys(s, b0, b1, unsure) : block_scan(s, b0, b1, unsure);
}

/* The first pass's column statistics for sklearn's tol (the mean of the
 * columns' variances, kmeans_update): the column sums are the clusters'
 * sums added up (q in order), and the squares enter only as their total,
 * the rows' |x|² that the screening computes anyway (place_rows), kept in
 * colsq[0] (the other colsq values stay 0). No second read of x. */
static void first_cols(km_step *s)
{
  for (int64_t j = 0; j < s->d; j++) {
    double t = 0;
    for (int64_t q = 0; q < s->k; q++) t += s->part[q * s->d + j];
    s->colsum[j] = t;
  }
}

/* Rows in blocks of KM_BLOCK_ROWS: the bounds of the next block are
 * scanned (its rows to place prefetched) before this block's rows are
 * placed, so those reads from memory overlap a block's scan instead of
 * stalling; then (final E-step) the inertia, while the block's rows are
 * still in cache. */
static int step_run(km_step *s, tsr_errbuf *err)
{
  int rc = 0, cur = 0;
  double inertia = 0;
  int64_t n_next = 0, first = KM_BLOCK_ROWS < s->rows ? KM_BLOCK_ROWS : s->rows;
  if (!s->full) n_next = scan(s, 0, first, s->unsure);
  for (int64_t b0 = 0; rc == 0 && b0 < s->rows; b0 += KM_BLOCK_ROWS, cur = 1 - cur) {
    int64_t b1 = b0 + KM_BLOCK_ROWS < s->rows ? b0 + KM_BLOCK_ROWS : s->rows, n_unsure = n_next;
    int64_t *unsure = s->unsure + cur * KM_BLOCK_ROWS;
    if (!s->full && b1 < s->rows) {
      int64_t b2 = b1 + KM_BLOCK_ROWS < s->rows ? b1 + KM_BLOCK_ROWS : s->rows;
      n_next = scan(s, b1, b2, s->unsure + (1 - cur) * KM_BLOCK_ROWS);
    }
    if (s->full)
      for (n_unsure = 0; n_unsure < b1 - b0; n_unsure++) unsure[n_unsure] = b0 + n_unsure;
    for (int64_t i = 0; rc == 0 && i < n_unsure; i += KM_BATCH)
      rc = place_rows(s, unsure + i, n_unsure - i < KM_BATCH ? (int)(n_unsure - i) : KM_BATCH, err);
    for (int64_t r = b0; rc == 0 && s->converged && r < b1; r++) {
      prefetch_row(s, r + KM_PREFETCH);
      inertia += row_d2(s, r, s->centers + s->state[r].label * s->d);
    }
  }
  s->part[s->k * s->d + s->k] = inertia;
  if (rc == 0 && s->prev == NULL) first_cols(s);
  return rc;
}

/* The centers in the layouts the distance passes read. */
static int step_centers(km_step *s, tsr_errbuf *err)
{
  int64_t k = s->k, d = s->d;
  s->ct = calloc((size_t)(s->kp * d + 1), sizeof *s->ct);
  s->ct32 = calloc((size_t)(s->kp32 * d + 1), sizeof *s->ct32);
  s->cn = malloc((size_t)s->kp32 * sizeof *s->cn);
  if (!s->ct || !s->ct32 || !s->cn) return tsr_fail(err, TSR_ENOMEM, "kmeans_step: out of memory for %lld centers", (long long)k);
  s->cmax = 0;
  for (int64_t q = k; q < s->kp32; q++) s->cn[q] = INFINITY;  /* the padding centers never win the screening */
  for (int64_t q = 0; q < k; q++) {
    const double *c = s->centers + q * d;
    s->cn[q] = 0;
    for (int64_t j = 0; j < d; j++) s->cn[q] += c[j] * c[j];
    if (sqrt(s->cn[q]) > s->cmax) s->cmax = sqrt(s->cn[q]);
    for (int64_t j = 0; j < d; j++) s->ct[j * s->kp + q] = c[j], s->ct32[j * s->kp32 + q] = (float)c[j];
  }
  return 0;
}

/* Yinyang's masks: gmask[g][q] = 0 for the centers of group g, else
 * infinite (the padding centers too). */
static int step_gmask(km_step *s, tsr_errbuf *err)
{
  s->gmask = malloc((size_t)(s->groups * s->kp32) * sizeof *s->gmask);
  if (s->gmask == NULL) return tsr_fail(err, TSR_ENOMEM, "kmeans_loop: out of memory for %lld groups", (long long)s->groups);
  for (int64_t g = 0; g < s->groups; g++)
    for (int64_t q = 0; q < s->kp32; q++) s->gmask[g * s->kp32 + q] = q < s->k && s->group_of[q] == g ? 0 : INFINITY;
  return 0;
}

/* The buffers of one thread's pass: rows, dots, distances, the lists. */
static int step_scratch(km_step *s, tsr_errbuf *err)
{
  int64_t d = s->d;
  s->dist = malloc((size_t)(KM_BATCH * s->kp32) * sizeof *s->dist);
  s->row = malloc((size_t)(KM_BATCH * d) * sizeof *s->row), s->row32 = malloc((size_t)(KM_BATCH * d) * sizeof *s->row32);
  s->dots = malloc((size_t)(KM_BATCH * s->kp32) * sizeof *s->dots), s->unsure = malloc(2 * KM_BLOCK_ROWS * sizeof *s->unsure);
  if (!s->dist || !s->row || !s->row32 || !s->dots || !s->unsure)
    return tsr_fail(err, TSR_ENOMEM, "kmeans_step: out of memory for %lld rows", (long long)s->rows);
  return 0;
}

static void scratch_free(km_step *s)
{
  free(s->dist), free(s->row), free(s->row32), free(s->dots), free(s->unsure);
  s->dist = NULL, s->row = NULL, s->row32 = NULL, s->dots = NULL, s->unsure = NULL;
}

/* The rows of joined states (Hamerly's bounds of their own epochs) as
 * rows of Yinyang at the model m's iteration: u and l moved to it, every
 * group's bound l (a bound of every other center); a row whose epoch left
 * the window gets bounds that fail, so its next pass places it. */
void tsr_km_private_rebase(const double *m, int64_t k, int64_t d, km_row *rows, int64_t n_rows, const km_private *groups)
{
  km_step s = {0};
  s.k = k, s.centers = m + KM_HDR, s.half = s.centers + k * d + k, s.drift = s.half + k, s.mdrift = s.drift + KM_EPOCHS * k;
  int64_t t = (int64_t)m[M_IT];
  for (int64_t r = 0; r < n_rows; r++) {
    double u, l;
    km_row *st = rows + r;
    bounds_keep(&s, st, t, &u, &l);
    if ((uint64_t)(t - st->epoch) >= KM_EPOCHS) u = INFINITY, l = 0;
    st->epoch = (int32_t)t, st->u = f32_up(u), st->l = f32_down(l);
    for (int64_t g = 0; g < groups->n; g++) groups->lb[r * groups->n + g] = st->l;
  }
}

static void step_free(km_step *s)
{
  free(s->ct), free(s->ct32), free(s->cn), free(s->gmask);
  scratch_free(s);
}

/* s's fields from the model m over the rows of the parts chunks at xs. */
static void step_init(km_step *s, int64_t k, int64_t row0, const tsr_buf *xs, int64_t parts, const double *m)
{
  s->k = k, s->d = xs[0].meta.shape[1], s->kp = (k + 7) / 8 * 8, s->kp32 = (k + 31) / 32 * 32, s->row0 = row0;
  s->rows = s->starts[parts], s->xs = xs, s->parts = parts;
  s->centers = m + KM_HDR, s->shift = s->centers + k * s->d, s->half = s->shift + k;
  s->drift = s->half + k, s->mdrift = s->drift + KM_EPOCHS * k, s->epoch = (int64_t)m[M_IT];
  s->far = m[M_NEED_FAR] != 0, s->converged = m[M_PHASE] == PH_CONVERGED;
}

/* One pass of the steps over the rows of the parts chunks at xs (rows
 * from row0 of x) under the model m: the state into part (prev: the last
 * state, NULL, or part itself for kmeans_loop's in-place passes). */
int tsr_km_step_pass(int64_t k, int64_t row0, const tsr_buf *xs, int64_t parts, const double *m, const double *prev,
                     double *part, tsr_errbuf *err)
{
  km_step s = {0};
  s.starts = malloc((size_t)(parts + 1) * sizeof *s.starts);
  if (s.starts == NULL) return tsr_fail(err, TSR_ENOMEM, "kmeans_step: out of memory");
  s.starts[0] = 0;
  for (int64_t i = 0; i < parts; i++) s.starts[i + 1] = s.starts[i] + xs[i].meta.shape[0];
  step_init(&s, k, row0, xs, parts, m);
  int64_t d = s.d;
  s.prev = prev, s.full = prev == NULL || s.far;
  s.part = part, s.colsum = s.part + KM_LEN(k, d), s.colsq = s.colsum + d, s.state = (km_row *)(s.part + KM_STATE_HEAD(k, d));
  int rc = step_centers(&s, err);
  if (rc == 0) rc = step_scratch(&s, err);
  if (rc == 0) start_state(&s), rc = step_run(&s, err);
  step_free(&s);
  free(s.starts);
  return rc;
}

/* ---------- passes in slices (kmeans_loop's threads) ---------- */

struct km_pass {
  km_step s;           /* the model's centers in the kernels' layouts; no rows, no scratch */
  int64_t *starts;     /* the parts' first rows (parts + 1) */
  bool first;          /* no rows labelled yet: the pass sums the columns too */
};

int tsr_km_pass_begin(int64_t k, const tsr_buf *xs, int64_t parts, const double *m, bool first, const km_private *groups,
                      km_pass **pass_p, tsr_errbuf *err)
{
  km_pass *p = calloc(1, sizeof *p);
  if (p != NULL) p->starts = malloc((size_t)(parts + 1) * sizeof *p->starts);
  if (p == NULL || p->starts == NULL) return free(p), tsr_fail(err, TSR_ENOMEM, "kmeans_loop: out of memory");
  p->starts[0] = 0;
  for (int64_t i = 0; i < parts; i++) p->starts[i + 1] = p->starts[i] + xs[i].meta.shape[0];
  p->s.starts = p->starts;
  step_init(&p->s, k, 0, xs, parts, m);
  p->first = first, p->s.full = first || p->s.far;
  if (groups != NULL && groups->n > 1)
    p->s.groups = groups->n, p->s.group_of = groups->of, p->s.gdrift = groups->drift, p->s.glb = groups->lb;
  if (groups != NULL) p->s.key = groups->key, p->s.norm2 = groups->norm2;
  int rc = step_centers(&p->s, err);
  if (rc == 0 && p->s.groups > 1) rc = step_gmask(&p->s, err);
  if (rc != 0) return tsr_km_pass_end(&p), rc;
  *pass_p = p;
  return 0;
}

void tsr_km_pass_end(km_pass **pass_p)
{
  if (*pass_p == NULL) return;
  step_free(&(*pass_p)->s);
  free((*pass_p)->starts);
  free(*pass_p);
  *pass_p = NULL;
}

/* The parts of p's rows [r0, r1) as views (at most parts of them) with
 * their first rows in starts; returns how many. */
static int64_t slice_views(const km_pass *p, int64_t r0, int64_t r1, tsr_buf *views, int64_t *starts)
{
  int64_t n = 0;
  starts[0] = 0;
  for (int64_t i = 0; i < p->s.parts; i++) {
    int64_t lo = p->starts[i] > r0 ? p->starts[i] : r0, hi = p->starts[i + 1] < r1 ? p->starts[i + 1] : r1;
    if (lo >= hi) continue;
    const tsr_buf *x = &p->s.xs[i];
    size_t es = x->meta.dtype == TSR_F32 ? 4 : 8;
    views[n] = *x;
    views[n].meta.shape[0] = hi - lo;
    views[n].data = (char *)x->data + (size_t)((lo - p->starts[i]) * p->s.d) * es;
    views[n].nbytes = (size_t)((hi - lo) * p->s.d) * es;
    starts[n + 1] = starts[n] + (hi - lo), n++;
  }
  return n;
}

int tsr_km_pass_slice(const km_pass *p, int64_t r0, int64_t r1, km_row *state, double *acc, tsr_errbuf *err)
{
  int64_t k = p->s.k, d = p->s.d;
  km_step s = p->s;
  tsr_buf *views = malloc((size_t)p->s.parts * sizeof *views);
  s.starts = malloc((size_t)(p->s.parts + 1) * sizeof *s.starts);
  int rc = views && s.starts ? 0 : tsr_fail(err, TSR_ENOMEM, "kmeans_loop: out of memory");
  if (rc == 0) {
    s.parts = slice_views(p, r0, r1, views, s.starts);
    s.xs = views, s.rows = r1 - r0, s.row0 = r0, s.state = state + r0;
    if (s.groups > 1) s.glb = p->s.glb + r0 * s.groups;
    if (s.key != NULL) s.key += r0;
    if (s.norm2 != NULL) s.norm2 += r0;
    s.prev = p->first ? NULL : acc;  /* NULL: the first pass, which sums the columns (place_row) */
    s.part = acc, s.colsum = acc + KM_LEN(k, d), s.colsq = s.colsum + d;
    s.dist = NULL, s.row = NULL, s.row32 = NULL, s.dots = NULL, s.unsure = NULL;
    /* a delta from zero: the rows' sums in a full pass, else the moved rows' changes */
    memset(acc, 0, (size_t)(k * d + k + 1) * sizeof *acc);
    if (s.far) memset(acc + k * d + k + 1, 0, (size_t)(k * (3 + d)) * sizeof *acc);
    for (int64_t j = 0; j < k; j++) acc[k * d + k + 1 + 3 * j + 1] = -1;
    if (s.prev == NULL) memset(s.colsum, 0, (size_t)(2 * d) * sizeof *acc);
    rc = step_scratch(&s, err);
  }
  if (rc == 0) rc = step_run(&s, err);
  scratch_free(&s);
  free(views), free(s.starts);
  return rc;
}

static int step_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  int64_t k = 0, row0 = 0, parts = 1;
  tsr_params_get_int(p, "k", &k, NULL);
  tsr_params_get_int(p, "row0", &row0, NULL);
  step_parts("kmeans_step", p, n, &parts, NULL);
  const double *m = in[parts].data, *prev = n == parts + 2 ? in[parts + 1].data : NULL;
  if (m[M_PHASE] == PH_DONE) {
    if (prev == NULL) return tsr_fail(err, TSR_EINVAL, "kmeans_step: the model is done but no state came with it");
    memcpy(out->data, prev, out->nbytes);  /* converged earlier in this graph: nothing moves */
    return 0;
  }
  return tsr_km_step_pass(k, row0, in, parts, m, prev, out->data, err);
}

const tsr_op_def tsr_op_kmeans_step = {"kmeans_step", 2, -1, step_infer, step_cpu, false, NULL};
