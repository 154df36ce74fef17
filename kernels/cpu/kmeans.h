/* kernels/cpu/kmeans.h — what the k-means ops share (kmeans.c: the plain
 * Lloyd partials and k-means++; kmeans_step.c: the bounded steps that
 * carry their state from iteration to iteration). Internal to kernels/.
 *
 * A partial is an f64 vector of KM_LEN(k, d): sums[k·d], counts[k],
 * inertia, then the k points farthest from their centers (distance²,
 * global index, label) × k and their coordinates k·d; unused far slots
 * have index −1. */
#ifndef TSR_KERNELS_CPU_KMEANS_H
#define TSR_KERNELS_CPU_KMEANS_H

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

#endif
