#!/usr/bin/python3
"""Peer: PIL decode + torchvision RandomResizedCrop(224) + flip + ToTensor + Normalize on
one thread, images from memory. Prints images/sec and images per CPU-second. usage: bench_torchvision.py DIR SECONDS"""
import glob
import io
import sys
import time

import torch
import torchvision.transforms as T
from PIL import Image


def main():
    files = sorted(glob.glob(sys.argv[1] + "/photos/*.jpg"))
    seconds = float(sys.argv[2])
    data = [open(f, "rb").read() for f in files]
    torch.set_num_threads(1)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    for b in data[:10]:
        tf(Image.open(io.BytesIO(b)).convert("RGB"))
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        for b in data:
            tf(Image.open(io.BytesIO(b)).convert("RGB"))
            n += 1
    print("%.1f %.1f" % (n / (time.perf_counter() - t0), n / (time.process_time() - c0)))


if __name__ == "__main__":
    main()
