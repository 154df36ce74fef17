#!/usr/bin/env python3
"""Reference values for tests/integration/test_tenx.c, from scanpy's own
readers (never from Tessera's output). Run once; see README.md.

For each data set it writes NAME.txt (shape, nonzeros, checksums of the
dense cells x genes float32 matrix and of the name lists, first and last
names) and NAME.cell_sums.txt / NAME.gene_sums.txt (one sum per line).
"""
import sys
from pathlib import Path

import numpy as np
import scanpy as sc
from importlib.metadata import version

FNV_OFFSET, FNV_PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def fnv1a(data: bytes) -> int:
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def names_hash(names) -> int:
    """FNV-1a 64 of the names, each followed by a newline."""
    return fnv1a("".join(f"{n}\n" for n in names).encode())


def weighted_sum(x: np.ndarray) -> float:
    """sum of x[i, j] * (1 + (31 i + 17 j) % 101), in float64."""
    i = np.arange(x.shape[0])[:, None]
    j = np.arange(x.shape[1])[None, :]
    return float((x.astype(np.float64) * (1 + (31 * i + 17 * j) % 101)).sum())


def write(out: Path, name: str, dense: np.ndarray, lists: dict):
    dense = np.ascontiguousarray(dense, dtype=np.float32)
    lines = [
        f"n_cells {dense.shape[0]}",
        f"n_genes {dense.shape[1]}",
        f"nonzeros {int(np.count_nonzero(dense))}",
        f"total {float(dense.astype(np.float64).sum())!r}",
        f"weighted_sum {weighted_sum(dense)!r}",
        f"dense_fnv1a64 {fnv1a(dense.tobytes()):016x}",
    ]
    for key, values in lists.items():
        if values is None:
            lines.append(f"{key}_count 0")
            continue
        values = [str(v) for v in values]
        lines += [f"{key}_count {len(values)}", f"{key}_first {values[0]}", f"{key}_last {values[-1]}",
                  f"{key}_fnv1a64 {names_hash(values):016x}"]
    (out / f"{name}.txt").write_text("\n".join(lines) + "\n")
    np.savetxt(out / f"{name}.cell_sums.txt", dense.astype(np.float64).sum(axis=1), fmt="%.17g")
    np.savetxt(out / f"{name}.gene_sums.txt", dense.astype(np.float64).sum(axis=0), fmt="%.17g")


def main():
    data = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data")
    out = Path(sys.argv[2] if len(sys.argv) > 2 else Path(__file__).parent)
    fx = data / "tenx_format_fixtures"
    pbmc = data / "pbmc68k_reduced_10x"

    a = sc.read_10x_h5(fx / "v3_filtered_feature_bc_matrix.h5", gex_only=False)
    write(out, "v3_h5", a.X.toarray(), {"barcodes": a.obs_names, "gene_ids": a.var["gene_ids"],
                                        "gene_names": a.var_names, "feature_types": a.var["feature_types"],
                                        "genomes": a.var["genome"]})
    a = sc.read_10x_h5(fx / "v1_2_filtered_gene_bc_matrices_h5.h5")
    write(out, "v2_h5", a.X.toarray(), {"barcodes": a.obs_names, "gene_ids": a.var["gene_ids"],
                                        "gene_names": a.var_names, "feature_types": None})
    for name, sub in (("v3_mtx", "v3_filtered_feature_bc_matrix"), ("v2_mtx", "v1_2_filtered_gene_bc_matrices_hg19_chr21")):
        a = sc.read_10x_mtx(fx / sub, var_names="gene_ids", make_unique=False, gex_only=False)
        ft = a.var["feature_types"] if "feature_types" in a.var else None
        write(out, name, a.X.toarray(), {"barcodes": a.obs_names, "gene_ids": a.var_names,
                                         "gene_names": a.var["gene_symbols"], "feature_types": ft})
    # pbmc68k: the counts as Matrix Market genes x cells; cells x genes is
    # sc.read_mtx(...).T, and the names are those of the .h5ad it came from.
    a = sc.read_mtx(pbmc / "counts_genes_x_cells.mtx").T
    h = sc.read_h5ad(pbmc / "10x_pbmc68k_reduced.h5ad")
    write(out, "pbmc68k_mtx", a.X.toarray(), {"barcodes": h.obs_names, "gene_ids": h.var_names,
                                              "gene_names": h.var_names, "feature_types": None})
    print(", ".join(f"{m} {version(m)}" for m in ("scanpy", "anndata", "numpy", "scipy", "h5py", "pandas")))


if __name__ == "__main__":
    main()
