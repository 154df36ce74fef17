"""The seed's tile filter in Python, the peer of Tessera's tile_stats +
tile_filter (tests/integration/test_tiles.c): tifffile reads level 0,
numpy computes each full TILE x TILE tile's grey (Pillow's convert("L"):
(19595 R + 38470 G + 7471 B + 2^15) >> 16), its min, max, 5th percentile
and median (numpy.percentile), and keeps the tile when
min < 135, max >= 255, p5 < 162 and p50 < 225.

  python seed_filter.py SLIDE TILE   ->  "tx ty kept min max p5 p50" per tile
"""
import sys

import numpy as np
import tifffile


def grey8(rgb):
    r, g, b = (rgb[..., i].astype(np.uint32) for i in range(3))
    return ((19595 * r + 38470 * g + 7471 * b + 32768) >> 16).astype(np.uint8)


def main():
    path, tile = sys.argv[1], int(sys.argv[2])
    with tifffile.TiffFile(path) as tif:
        img = tif.pages[0].asarray()
    grey = grey8(img[..., :3])
    ny, nx = grey.shape[0] // tile, grey.shape[1] // tile
    for ty in range(ny):
        for tx in range(nx):
            t = grey[ty * tile:(ty + 1) * tile, tx * tile:(tx + 1) * tile]
            mn, mx = int(t.min()), int(t.max())
            p5, p50 = np.percentile(t, 5), np.percentile(t, 50)
            kept = int(mn < 135 and mx >= 255 and p5 < 162 and p50 < 225)
            print(f"{tx} {ty} {kept} {mn} {mx} {float(p5)!r} {float(p50)!r}")


if __name__ == "__main__":
    main()
