"""bench/tiles GPU peer: the best Python GPU path on the device machine
(torch, torchvision, tifffile are on its image; cuCIM and DALI are not).

  python3 peer_gpu.py SLIDE... TILE [BATCH]

tifffile finds each level-0 source tile's compressed bytes (and Aperio's
shared JPEG tables); torchvision.io.decode_jpeg decodes them on the GPU,
BATCH at a time (nvJPEG through PyTorch); PyTorch lays level 0 out on the
device and computes, per full TILE x TILE tile, what bench/tiles/peer.py
computes with numpy: grey8 (Pillow's convert("L") formula), min, max, p5 and
p50 (numpy.percentile's linear rule, from a sort), mean RGB, and the seed's
rule. The CUDA context and nvJPEG are warmed up before the clock starts.
Prints "tiles N kept K seconds S".
"""
import sys
import time

import tifffile
import torch
from torchvision.io import ImageReadMode, decode_jpeg

DEV = "cuda"


def compressed_tiles(path):
    """Level 0's tile grid and every source tile's JPEG bytes, tables merged in."""
    with tifffile.TiffFile(path) as tif:
        page = tif.pages[0]
        tables = page.jpegtables
        fh = tif.filehandle
        streams = []
        for off, cnt in zip(page.dataoffsets, page.databytecounts):
            fh.seek(off)
            data = fh.read(cnt)
            streams.append(tables[:-2] + data[2:] if tables else data)
        return page.imagelength, page.imagewidth, page.tilelength, page.tilewidth, streams


def decode_level(path, batch):
    h, w, th, tw, streams = compressed_tiles(path)
    ny, nx = -(-h // th), -(-w // tw)
    grid = torch.empty((ny * nx, th, tw, 3), dtype=torch.uint8, device=DEV)
    for i in range(0, len(streams), batch):
        data = [torch.frombuffer(s, dtype=torch.uint8) for s in streams[i:i + batch]]
        out = decode_jpeg(data, mode=ImageReadMode.RGB, device=DEV)
        grid[i:i + len(out)] = torch.stack(out).permute(0, 2, 3, 1)
    level = grid.view(ny, nx, th, tw, 3).permute(0, 2, 1, 3, 4).reshape(ny * th, nx * tw, 3)
    return level[:h, :w]


def percentile(sorted_grey, q):
    """numpy.percentile(..., method="linear") of each row of a sorted batch."""
    pos = q * (sorted_grey.shape[1] - 1)
    lo = int(pos)
    frac = pos - lo
    a = sorted_grey[:, lo].float()
    return a + frac * (sorted_grey[:, min(lo + 1, sorted_grey.shape[1] - 1)].float() - a)


def tile_stats(level, tile, chunk=1024):
    h, w = level.shape[0] // tile, level.shape[1] // tile
    tiles = level[:h * tile, :w * tile].reshape(h, tile, w, tile, 3).permute(0, 2, 1, 3, 4).reshape(h * w, tile * tile, 3)
    kept = 0
    for i in range(0, tiles.shape[0], chunk):
        rgb = tiles[i:i + chunk].int()
        grey = ((19595 * rgb[..., 0] + 38470 * rgb[..., 1] + 7471 * rgb[..., 2] + 32768) >> 16).to(torch.uint8)
        mn, mx = grey.amin(dim=1), grey.amax(dim=1)
        s = grey.sort(dim=1).values
        p5, p50 = percentile(s, 0.05), percentile(s, 0.50)
        rgb.float().mean(dim=1)
        kept += int(((mn < 135) & (mx >= 255) & (p5 < 162) & (p50 < 225)).sum())
    return tiles.shape[0], kept


def main():
    args = sys.argv[1:]
    batch = 256
    if len(args) >= 3 and args[-1].isdigit() and args[-2].isdigit():
        batch = int(args.pop())
    slides, tile = args[:-1], int(args[-1])
    _, _, _, _, streams = compressed_tiles(slides[0])
    decode_jpeg([torch.frombuffer(streams[0], dtype=torch.uint8)], mode=ImageReadMode.RGB, device=DEV)
    torch.cuda.synchronize()
    t0 = time.time()
    n = kept = 0
    for path in slides:
        level = decode_level(path, batch)
        a, b = tile_stats(level, tile)
        n, kept = n + a, kept + b
        del level
    torch.cuda.synchronize()
    print(f"tiles {n} kept {kept} seconds {time.time() - t0:.2f}")


if __name__ == "__main__":
    main()
