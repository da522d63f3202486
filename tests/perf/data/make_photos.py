#!/usr/bin/python3
"""Cuts ImageNet-sized JPEGs (about 500x375, quality 90) from real photos of a Debian
package (mate-backgrounds or opencv-doc) for the pipeline benchmark.

usage: make_photos.py OUT_DIR [COUNT]   (writes OUT_DIR/photos/NNNN.jpg)
Exit status 77 when no source photos are installed."""
import glob
import os
import random
import sys

from PIL import Image

SOURCES = ["/usr/share/backgrounds/mate/**/*.jpg", "/usr/share/doc/opencv-doc/examples/data/*.jpg"]


def main():
    out = os.path.join(sys.argv[1], "photos")
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 240
    photos = sorted(p for pattern in SOURCES for p in glob.glob(pattern, recursive=True))
    photos = [p for p in photos if os.path.getsize(p) > 20000]
    if not photos:
        print("no source photos: apt-get install mate-backgrounds (or opencv-doc)")
        return 77
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1234)
    made = 0
    while made < count:
        for path in photos:
            if made >= count:
                break
            img = Image.open(path).convert("RGB")
            w, h = img.size
            if min(w, h) < 300:
                continue
            # Scale so that a 500x375 (or 375x500) window is 40-100% of the shorter side.
            portrait = made % 5 == 4
            cw, ch = (375, 500) if portrait else (500, 375)
            scale = max(cw / w, ch / h) / rng.uniform(0.4, 1.0)
            scale = min(scale, 1.0) if max(cw / w, ch / h) <= 1.0 else max(cw / w, ch / h)
            sw, sh = max(cw, int(w * scale)), max(ch, int(h * scale))
            small = img.resize((sw, sh), Image.BILINEAR)
            x, y = rng.randint(0, sw - cw), rng.randint(0, sh - ch)
            small.crop((x, y, x + cw, y + ch)).save(os.path.join(out, "%04d.jpg" % made), quality=90)
            made += 1
    print("wrote %d JPEGs to %s from %d photos" % (made, out, len(photos)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
