"""scanpy's run of tsr-cluster's pipeline, for test_cluster_cli.

    python scanpy_pipeline.py COUNTS.mtx BARCODES.tsv OUT.tsv [N_TOP_GENES]

The .mtx is genes x cells (read as sc.read_mtx(...).T). The steps and
parameters are tsr-cluster's defaults: filter_cells(min_genes=200),
filter_genes(min_cells=3), normalize_total(target_sum=1e4), log1p,
highly_variable_genes(flavor='seurat', n_top_genes), subset, scale
(max_value=10), pca(50), neighbors(15), leiden(resolution 1, leidenalg,
n_iterations=-1). Writes "barcode<TAB>cluster" per kept cell.
"""
import sys

import scanpy as sc
import scipy.sparse as sp

# scanpy 1.11.5 calls csr_array.getnnz, which SciPy >= 1.15 removed from
# sparse arrays (numpy 2.4 needs such a SciPy).
if not hasattr(sp.csr_array, "getnnz"):
    sp.csr_array.getnnz = lambda self, axis=None: self._getnnz(axis=axis)


def main():
    counts, barcodes, out = sys.argv[1:4]
    n_top = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
    adata = sc.read_mtx(counts).T
    adata.obs_names = [l.rstrip("\n").split("\t")[0] for l in open(barcodes)]
    sc.pp.filter_cells(adata, min_genes=200)
    sc.pp.filter_genes(adata, min_cells=3)
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    sc.pp.highly_variable_genes(adata, flavor="seurat", n_top_genes=min(n_top, adata.n_vars))
    adata = adata[:, adata.var.highly_variable].copy()
    sc.pp.scale(adata, max_value=10)
    sc.tl.pca(adata, n_comps=50)
    sc.pp.neighbors(adata, n_neighbors=15)
    sc.tl.leiden(adata, resolution=1.0, flavor="leidenalg", n_iterations=-1, random_state=0)
    with open(out, "w") as f:
        for b, c in zip(adata.obs_names, adata.obs["leiden"]):
            f.write(f"{b}\t{c}\n")
    print(f"scanpy: {adata.n_obs} cells, {adata.obs['leiden'].nunique()} clusters")


if __name__ == "__main__":
    main()
