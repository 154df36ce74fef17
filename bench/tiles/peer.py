"""bench/tiles peers: the seed's approach to the tile filter in Python.

  python peer.py tifffile SLIDE... TILE   tifffile reads each level-0 tile region, numpy computes the stats
  python peer.py openslide SLIDE... TILE  OpenSlide (python3-openslide) reads the same tiles

Per full tile: grey8 (Pillow's convert("L") formula), min, max, p5, p50, the
seed's rule, and mean RGB. Prints "tiles N kept K seconds S".
"""
import sys
import time

import numpy as np


def stats(rgb):
    r, g, b = (rgb[..., i].astype(np.uint32) for i in range(3))
    grey = ((19595 * r + 38470 * g + 7471 * b + 32768) >> 16).astype(np.uint8)
    mn, mx = grey.min(), grey.max()
    p5, p50 = np.percentile(grey, [5, 50])
    rgb.reshape(-1, 3).mean(axis=0)
    return mn < 135 and mx >= 255 and p5 < 162 and p50 < 225


def tiles_tifffile(path, tile):
    import tifffile
    with tifffile.TiffFile(path) as tif:
        img = tif.pages[0].asarray()  # the seed reads the level whole
    h, w = img.shape[:2]
    for y in range(0, h - tile + 1, tile):
        for x in range(0, w - tile + 1, tile):
            yield img[y:y + tile, x:x + tile, :3]


def tiles_openslide(path, tile):
    import openslide
    s = openslide.OpenSlide(path)
    w, h = s.dimensions
    for y in range(0, h - tile + 1, tile):
        for x in range(0, w - tile + 1, tile):
            yield np.asarray(s.read_region((x, y), 0, (tile, tile)))[..., :3]


def main():
    mode, slides, tile = sys.argv[1], sys.argv[2:-1], int(sys.argv[-1])
    src = tiles_tifffile if mode == "tifffile" else tiles_openslide
    t0 = time.time()
    n = kept = 0
    for path in slides:
        for t in src(path, tile):
            n += 1
            kept += bool(stats(t))
    print(f"tiles {n} kept {kept} seconds {time.time() - t0:.2f}")


if __name__ == "__main__":
    main()
