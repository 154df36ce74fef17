#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the main job on
# an embedded local cluster (a scheduler and two CPU workers on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# The genomics workload: the PCA of real genotypes (HapMap3, from their
# PLINK files), then a randomized SVD (k=10, two power iterations) of a
# genotype-like 100,000 x 20,000 uint8 matrix of randint(0, 3), in Dask's
# genomics chunks; then a small one checked against LAPACK in-process.
build/bin/tessera local --cpu-workers 2 --threads-per-worker 1 -- \
  build/bin/tsr-pca --bed ../shared/data/hapmap3_1kg_genotypes/HM3_thinned_autosomal_overlap --k 10 --out build/hm3
build/bin/tessera local --cpu-workers 2 --threads-per-worker 1 -- \
  build/bin/tsr-svd --rows 100000 --cols 20000 --chunks 20000,5000 \
    --dtype u8 --dist randint:0:3 --k 10 --power-iters 2
exec build/bin/tessera local --cpu-workers 2 --threads-per-worker 1 -- \
  build/bin/tsr-svd --rows 4000 --cols 1000 --chunks 1000,250 \
    --dtype u8 --dist randint:0:3 --k 10 --power-iters 2 --verify
