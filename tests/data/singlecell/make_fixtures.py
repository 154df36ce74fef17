"""Reference values for tests/integration/test_singlecell.c, from scanpy.

Run once with the pinned environment (see README.md):
    /tmp/pv/bin/python make_fixtures.py /work/shared/data/pbmc68k_reduced_10x
Writes the .tsv files next to this script. Every number here comes from
scanpy / h5py / numpy, never from Tessera.
"""
import os
import sys

import anndata as ad
import h5py
import numpy as np
import scanpy as sc
import scipy.io
import scipy.sparse as sp

data = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))


def save(name, arr, fmt="%.17g"):
    np.savetxt(os.path.join(here, name), np.asarray(arr), fmt=fmt, delimiter="\t")


# 1. The HVG mask of the stored /X (309 genes), for the PCA reproduction.
with h5py.File(os.path.join(data, "10x_pbmc68k_reduced.h5ad"), "r") as f:
    hv = f["var"]["highly_variable"][:]
save("pbmc68k_stored_hvg.tsv", hv.astype(np.int64), "%d")

# 2. The preprocessing chain on the raw counts (genes x cells in the mtx).
counts = sp.csr_matrix(scipy.io.mmread(os.path.join(data, "counts_genes_x_cells.mtx")).T)
adata = ad.AnnData(counts.astype(np.int32))
sc.pp.filter_cells(adata, min_genes=230)
kept_cells = adata.obs_names.astype(int).to_numpy()
sc.pp.filter_genes(adata, min_cells=20)
kept_genes = adata.var_names.astype(int).to_numpy()
save("kept_cells.tsv", kept_cells, "%d")
save("kept_genes.tsv", kept_genes, "%d")

totals = np.asarray(adata.X.sum(axis=1)).ravel()
target = float(np.median(np.asarray(adata.X.astype(np.float32).sum(axis=1)).ravel()))
sc.pp.normalize_total(adata)
save("normalize_target.tsv", [target])
x = adata.X.astype(np.float64)
save("normalized_col_sums.tsv", np.asarray(x.sum(axis=0)).ravel())
save("normalized_row_sums.tsv", np.asarray(x.sum(axis=1)).ravel())

sc.pp.log1p(adata)
x = adata.X.astype(np.float64)
save("log1p_col_sums.tsv", np.asarray(x.sum(axis=0)).ravel())

sc.pp.highly_variable_genes(adata, flavor="seurat", n_top_genes=300)
v = adata.var
save("hvg_seurat_300.tsv", np.column_stack([v["means"], v["dispersions"], v["dispersions_norm"],
                                             v["highly_variable"].astype(np.float64)]))

# PCA of the sparse log1p HVG subset (scanpy: implicit centering, arpack).
hvg = adata[:, v["highly_variable"].to_numpy()].copy()
sc.pp.pca(hvg, n_comps=20, svd_solver="arpack")
save("pca_sparse_hvg_variance.tsv", hvg.uns["pca"]["variance"])
save("pca_sparse_hvg_variance_ratio.tsv", hvg.uns["pca"]["variance_ratio"])
save("pca_sparse_hvg_scores_first3.tsv", hvg.obsm["X_pca"][:, :3])

# scale(max_value=10) then PCA, as the pbmc3k tutorial does.
sc.pp.scale(hvg, max_value=10)
save("scaled_col_sums.tsv", np.asarray(hvg.X, dtype=np.float64).sum(axis=0))
save("scaled_max_abs.tsv", [float(np.abs(hvg.X).max())])
sc.pp.pca(hvg, n_comps=20, svd_solver="arpack")
save("pca_scaled_hvg_variance.tsv", hvg.uns["pca"]["variance"])

with open(os.path.join(here, "versions.txt"), "w") as f:
    f.write(f"scanpy {sc.__version__}\nanndata {ad.__version__}\nnumpy {np.__version__}\n")
print("cells", len(kept_cells), "genes", len(kept_genes), "target", target, "hvg", int(v["highly_variable"].sum()))
