/* kernels/cpu/kmeans.h — what the k-means ops share (kmeans.c: the plain
 * Lloyd partials and k-means++; kmeans_step.c: the bounded steps that
 * carry their state from iteration to iteration; kmeans_update.c: their
 * model; kmeans_loop.c: the whole loop in one task). Internal to kernels/.
 *
 * A partial is an f64 vector of KM_LEN(k, d): sums[k·d], counts[k],
 * inertia, then the k points farthest from their centers (distance²,
 * global index, label) × k and their coordinates k·d; unused far slots
 * have index −1. */
#ifndef TSR_KERNELS_CPU_KMEANS_H
#define TSR_KERNELS_CPU_KMEANS_H

#include <stdbool.h>
#include <stdint.h>

#include "ops.h"

#define KM_LEN(k, d) ((k) * (d) + (k) + 1 + (k) * (3 + (d)))

/* dist[q] = Σ_j (row[j] − ct[j·kp + q])² for q < kp, the terms added in
 * order of j (the same bits as one center at a time); ct holds the
 * centers transposed, kp a multiple of 8 with zero padding columns. */
void tsr_km_row_dists(const double *row, const double *ct, int64_t d, int64_t kp, double *dist);

/* Keeps the k farthest points (distance desc, index asc) in far (k slots
 * of 3) and their rows in fx: offers (dist, idx, lab, row). */
void tsr_km_far_insert(double *far, double *fx, int64_t k, int64_t d, double dist, int64_t idx, int64_t lab,
                       const double *row);

/* Bounds are kept conservative of rounding: KM_UP / KM_DOWN of a computed
 * distance, and a row keeps its label only when its bounds part by a
 * relative KM_SLACK (kmeans_step.c). */
#define KM_SLACK 1e-9
#define KM_UP(v) ((v) * (1 + 1e-12))
#define KM_DOWN(v) ((v) * (1 - 1e-12))

/* Plain Lloyd's squared distance (terms added in order of j). */
static inline double exact_d2(const double *row, const double *c, int64_t d)
{
  double s = 0;
  for (int64_t j = 0; j < d; j++) {
    double t = row[j] - c[j];
    s += t * t;
  }
  return s;
}

/* The bounded ops' layouts (kmeans_step.c describes them). */
#define KM_HDR 8
enum { M_IT, M_PHASE, M_NEED_FAR, M_INERTIA, M_TOL, M_TOL_ABS, M_MAX_ITER, M_ROWS };
enum { PH_RUN = 0, PH_CONVERGED = 1, PH_DONE = 2 };
/* Drift epochs kept: a row's bounds are relative to the epoch (model
 * iteration) it was last written in, moved by the centers' cumulative
 * drift since; rows are rewritten at least every KM_EPOCHS / 2. */
#define KM_EPOCHS 32
#define KM_MODEL_LEN(k, d) (KM_HDR + (k) * (d) + 2 * (k) + KM_EPOCHS * ((k) + 1))
#define KM_STATE_HEAD(k, d) (KM_LEN(k, d) + 2 * (d))
#define KM_STATE_LEN(k, d, r) (KM_STATE_HEAD(k, d) + 2 * (r))
#define KM_STATE_ROWS(k, d, len) (((len) - KM_STATE_HEAD(k, d)) / 2)
/* A row of a state: 16 bytes, the bounds rounded outward to f32, valid
 * for the centers of model iteration `epoch`. A row that keeps its label
 * is not rewritten (the state is copied whole), so an iteration costs a
 * read of the bounds, not a write. */
typedef struct km_row {
  int32_t label, epoch;
  float u, l;
} km_row;

/* A pass of kmeans_step over the parts x chunks at xs (rows from row0 of
 * x) under the model m: the state into part; prev the last state, NULL
 * (a full pass), or part itself (kmeans_loop: updated in place). */
int tsr_km_step_pass(int64_t k, int64_t row0, const tsr_buf *xs, int64_t parts, const double *m, const double *prev,
                     double *part, tsr_errbuf *err);

/* Yinyang's group bounds (Ding et al. 2015) in kmeans_loop's private
 * memory: the centers in n groups, fixed for the run; per row, for each
 * group, a lower bound of the distance to the group's centers but the
 * row's own, as of the row's epoch (its km_row), moved at iteration t by
 * the group's cumulative largest move since. The row's km_row l stays
 * the smallest of them, so the state reads as Hamerly's to anyone else.
 * n = 1: Hamerly's single bound alone (no lb). */
#define KM_GROUPS_MAX 64
typedef struct km_private {
  int64_t n;
  int32_t *of;      /* [k] each center's group */
  double *drift;    /* [KM_EPOCHS][n] cumulative largest move in each group */
  float *lb;        /* [rows][n] */
  float *key;       /* [rows] (n = 1) each row's scan key (kmeans_step.c, row_key) */
  double *norm2;    /* [rows] each row's |x|² once a pass has computed it, else -1 */
} km_private;

void tsr_km_private_rebase(const double *m, int64_t k, int64_t d, km_row *rows, int64_t n_rows, const km_private *groups);

/* A pass over row slices (kmeans_loop's threads): begin prepares the
 * model m's centers for the rows of the parts chunks at xs (first: no row
 * labelled yet, every distance taken and the columns summed; groups:
 * Yinyang's bounds, or NULL for Hamerly's alone); then any
 * thread may run slice over rows [r0, r1), disjoint from the other
 * slices': it labels those rows of state (all the rows) in place and
 * writes into acc (KM_STATE_HEAD values, its own) the slice's delta: the
 * sums and counts of its rows (a full pass) or of their moves, the
 * inertia (final E-step), the farthest points (a relocation's pass), the
 * column sums (first). The caller adds the slices up in a fixed order. */
typedef struct km_pass km_pass;
int tsr_km_pass_begin(int64_t k, const tsr_buf *xs, int64_t parts, const double *m, bool first, const km_private *groups,
                      km_pass **pass_p, tsr_errbuf *err);
int tsr_km_pass_slice(const km_pass *p, int64_t r0, int64_t r1, km_row *state, double *acc, tsr_errbuf *err);
void tsr_km_pass_end(km_pass **pass_p);

/* kmeans_update on m (a copy of the last model) from the states in[1..n). */
int tsr_km_update_model(double *m, const tsr_buf *in, int n, int64_t k, int64_t d, tsr_errbuf *err);

#endif
