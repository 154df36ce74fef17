"""Zarr fixtures for tests/integration/test_zarr.c, written and checked
with zarr-python (the reference implementation).

  zarr_fixtures.py write OUT   writes arrays under OUT, each NAME.zarr with
                               NAME.raw beside it (what zarr-python reads
                               from it: C order, little-endian), listed in
                               OUT/manifest.tsv as
                               name, zarr dir, raw file, dtype, shape, chunks;
                               and bad inputs under OUT/bad/.
  zarr_fixtures.py check LIST  reads each array LIST names (lines: name,
                               zarr dir, raw file, dtype, shape, format)
                               with zarr-python and compares it bit for bit
                               with the raw file. Prints one line per array
                               and "checked N arrays, M failed"; exits 1
                               when any failed.
"""
import os
import sys

import numcodecs
import numpy as np
import zarr
from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec, TransposeCodec,
                         ZstdCodec)

TESSERA = {"|u1": "u8", "<i4": "i32", "<i8": "i64", "<f4": "f32", "<f8": "f64"}
CNAMES = ["lz4", "lz4hc", "zstd", "zlib", "blosclz"]
SHUFFLES = ["noshuffle", "shuffle", "bitshuffle"]
DTYPES = ["|u1", "<i4", "<i8", "<f4", "<f8"]

rng = np.random.default_rng(20240611)


def values(dtype, shape):
    """Random values over the dtype's whole range (floats: normals)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, dtype=dt.newbyteorder("="), endpoint=True).astype(dt)


class Writer:
    def __init__(self, out):
        self.out = out
        self.lines = []

    def add(self, name, shape, chunks, dtype, fmt, fill=0, part=None, tchunks=None, **kw):
        """Creates OUT/name.zarr, writes random data (only the region part,
        when given: the other chunks stay missing), and records what
        zarr-python reads back."""
        path = os.path.join(self.out, name + ".zarr")
        z = zarr.create_array(path, shape=shape, chunks=chunks, dtype=dtype, zarr_format=fmt, fill_value=fill,
                              overwrite=True, **kw)
        data = values(dtype, shape)
        if part is None:
            z[...] = data
        else:
            z[part] = data[part]
        got = np.asarray(zarr.open_array(path, mode="r")[...])
        little = got.astype(got.dtype.newbyteorder("<"))
        raw = os.path.join(self.out, name + ".raw")
        with open(raw, "wb") as f:
            f.write(np.ascontiguousarray(little).tobytes())
        tdtype = TESSERA[little.dtype.str if little.dtype.itemsize > 1 else "|u1"]
        dims = lambda v: ",".join(str(x) for x in v) if len(v) else "-"
        self.lines.append("\t".join([name, path, raw, tdtype, dims(shape), dims(tchunks or chunks)]))

    def finish(self):
        with open(os.path.join(self.out, "manifest.tsv"), "w") as f:
            f.write("\n".join(self.lines) + "\n")
        return len(self.lines)


def v2_cases(w):
    for i, (cname, shuffle) in enumerate((c, s) for c in CNAMES for s in range(3)):
        w.add(f"v2_blosc_{cname}_{shuffle}", (37, 23), (10, 8), DTYPES[i % 5], 2,
              compressors=numcodecs.Blosc(cname=cname, clevel=5, shuffle=shuffle))
    for name, comp in [("zstd", numcodecs.Zstd(level=3)), ("gzip", numcodecs.GZip(level=5)),
                       ("zlib", numcodecs.Zlib(level=1)), ("none", None)]:
        w.add(f"v2_{name}", (9, 10, 11), (4, 5, 6), "<f8", 2, compressors=comp)
    for dt in DTYPES + [">i4", ">i8", ">f4", ">f8"]:
        w.add("v2_dtype_" + dt.replace("<", "le_").replace(">", "be_").replace("|", ""), (1000,), (300,), dt, 2,
              compressors=numcodecs.Zstd(level=1))
    w.add("v2_slash", (30, 20), (7, 6), "<i8", 2, chunk_key_encoding={"name": "v2", "separator": "/"},
          compressors=numcodecs.Blosc("zstd", 3, numcodecs.Blosc.BITSHUFFLE))
    w.add("v2_forder_2d", (13, 9), (5, 4), "<f4", 2, order="F", compressors=numcodecs.Blosc("lz4", 5, 1))
    w.add("v2_forder_3d", (5, 6, 7), (2, 3, 4), ">i4", 2, order="F", compressors=None)
    w.add("v2_missing_i32", (37, 23), (10, 8), "<i4", 2, fill=42, part=(slice(0, 10), slice(None)))
    w.add("v2_missing_nan", (20, 20), (8, 8), "<f8", 2, fill=np.nan, part=(slice(8, 16), slice(0, 8)))
    w.add("v2_scalar", (), (), "<f8", 2)
    w.add("v2_4d", (3, 4, 5, 6), (2, 3, 2, 4), "|u1", 2, compressors=numcodecs.GZip(1))


def v3_cases(w):
    for i, (cname, shuffle) in enumerate((c, s) for c in CNAMES for s in SHUFFLES):
        w.add(f"v3_blosc_{cname}_{shuffle}", (37, 23), (10, 8), DTYPES[(i + 2) % 5], 3,
              compressors=BloscCodec(cname=cname, clevel=5, shuffle=shuffle))
    w.add("v3_zstd", (9, 10, 11), (4, 5, 6), "<f4", 3, compressors=ZstdCodec(level=5))
    w.add("v3_zstd_checksum", (100,), (33,), "<i8", 3, compressors=ZstdCodec(level=1, checksum=True))
    w.add("v3_gzip", (9, 10, 11), (4, 5, 6), "<i4", 3, compressors=GzipCodec(level=6))
    w.add("v3_none", (50, 3), (16, 2), "<f8", 3, compressors=None)
    w.add("v3_gzip_crc32c", (40, 30), (16, 16), "<f8", 3, compressors=[GzipCodec(level=1), Crc32cCodec()])
    for dt in DTYPES:
        w.add("v3_dtype_" + dt[1:], (1000,), (300,), dt, 3)
        if dt != "|u1":
            w.add("v3_dtype_be_" + dt[1:], (1000,), (300,), dt, 3, serializer=BytesCodec(endian="big"),
                  compressors=ZstdCodec(level=0))
    w.add("v3_sep_dot", (30, 20), (7, 6), "|u1", 3, chunk_key_encoding={"name": "default", "separator": "."})
    w.add("v3_keys_v2", (30, 20), (7, 6), "<i4", 3, chunk_key_encoding={"name": "v2", "separator": "."})
    w.add("v3_keys_v2_slash", (30, 20), (7, 6), "<i4", 3, chunk_key_encoding={"name": "v2", "separator": "/"})
    w.add("v3_transpose_2d", (13, 9), (5, 4), "<f8", 3, filters=[TransposeCodec(order=(1, 0))])
    w.add("v3_transpose_3d", (5, 6, 7), (2, 3, 4), "<i4", 3, filters=[TransposeCodec(order=(2, 0, 1))],
          compressors=None)
    w.add("v3_missing_nan", (37, 23), (10, 8), "<f4", 3, fill=np.nan, part=(slice(10, 20), slice(8, 16)))
    w.add("v3_missing_i64", (37, 23), (10, 8), "<i8", 3, fill=-5, part=(slice(0, 37, 3), slice(0, 8)))
    w.add("v3_scalar", (), (), "<i4", 3)
    v3_shard_cases(w)


def v3_shard_cases(w):
    inner = [BytesCodec(), ZstdCodec(level=1)]
    w.add("v3_shard_end", (37, 23), (10, 8), "<f8", 3, shards=(20, 16), compressors=ZstdCodec(level=1))
    w.add("v3_shard_start", (37, 23), (20, 16), "<i4", 3, tchunks=(5, 8), compressors=None,
          serializer=ShardingCodec(chunk_shape=(5, 8), index_location="start",
                                   codecs=[BytesCodec(), BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")]))
    w.add("v3_shard_missing", (40, 40), (20, 20), "<f4", 3, tchunks=(5, 10), fill=np.nan, compressors=None,
          part=(slice(0, 5), slice(0, 10)), serializer=ShardingCodec(chunk_shape=(5, 10), codecs=inner))
    w.add("v3_shard_3d", (9, 10, 11), (4, 5, 6), "|u1", 3, shards=(8, 10, 12), compressors=GzipCodec(level=3))
    w.add("v3_shard_be_transpose", (12, 10), (6, 10), "<i8", 3, tchunks=(3, 5), compressors=None,
          serializer=ShardingCodec(chunk_shape=(3, 5), codecs=[TransposeCodec(order=(1, 0)),
                                                              BytesCodec(endian="big"), Crc32cCodec()]))


def write_bad(out):
    """Inputs Tessera must refuse with a clear message."""
    bad = os.path.join(out, "bad")
    os.makedirs(bad, exist_ok=True)
    for name, dt in [("dtype_f2", "<f2"), ("dtype_b1", "|b1"), ("dtype_u2", "<u2")]:
        zarr.create_array(os.path.join(bad, name), shape=(4,), chunks=(2,), dtype=dt, zarr_format=2,
                          overwrite=True)[...] = np.ones(4, dt)
    zarr.create_array(os.path.join(bad, "dtype_v3_u16"), shape=(4,), chunks=(2,), dtype="uint16", overwrite=True)
    zarr.create_array(os.path.join(bad, "codec_lzma"), shape=(4,), chunks=(2,), dtype="<f8", zarr_format=2,
                      compressors=numcodecs.LZMA(), overwrite=True)[...] = np.arange(4.0)
    z = zarr.create_array(os.path.join(bad, "corrupt"), shape=(10, 10), chunks=(5, 5), dtype="<f8",
                          compressors=BloscCodec(cname="lz4"), overwrite=True)
    z[...] = np.arange(100.0).reshape(10, 10)
    with open(os.path.join(bad, "corrupt", "c", "1", "0"), "r+b") as f:  # a blosc header that makes no sense
        f.write(b"\x02\x01garbage\xff\xff\xff\xff\xff\xff")


def check(listing):
    failed = n = 0
    for line in open(listing):
        if not line.strip():
            continue
        name, path, raw, dtype, shape, fmt = line.rstrip("\n").split("\t")
        n += 1
        try:
            z = zarr.open_array(path, mode="r")
            got = np.asarray(z[...])
            want_shape = tuple(int(x) for x in shape.split(",")) if shape != "-" else ()
            problem = None
            if z.metadata.zarr_format != int(fmt):
                problem = f"format {z.metadata.zarr_format}, expected {fmt}"
            elif got.dtype != np.dtype(dtype) or got.shape != want_shape:
                problem = f"{got.dtype}{got.shape}, expected {dtype}{want_shape}"
            elif np.ascontiguousarray(got).tobytes() != open(raw, "rb").read():
                problem = "values differ from the source bytes"
        except Exception as e:  # noqa: BLE001 - any failure to read is a failed check
            problem = f"{type(e).__name__}: {e}"
        print(f"{'FAIL' if problem else 'ok'} {name}" + (f": {problem}" if problem else ""))
        failed += problem is not None
    print(f"checked {n} arrays, {failed} failed")
    return 1 if failed or n == 0 else 0


def main(argv):
    if len(argv) != 3 or argv[1] not in ("write", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[1] == "check":
        return check(argv[2])
    os.makedirs(argv[2], exist_ok=True)
    w = Writer(argv[2])
    v2_cases(w)
    v3_cases(w)
    write_bad(argv[2])
    print(f"wrote {w.finish()} arrays (zarr {zarr.__version__}, numcodecs {numcodecs.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
