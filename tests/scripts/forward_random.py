"""A forward-only benchmark as benchmark scripts write it: random inputs made once, no DataLoader,
no optimizer, no backward, ``torch.no_grad()``, the batch size the script's own ``-b``."""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("-b", "--batch-size", type=int, default=16)
parser.add_argument("--warmup", type=int, default=10)
parser.add_argument("--iters", type=int, default=3000)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                      nn.Linear(128, 10)).eval()
images = torch.randn(args.batch_size, 3, 16, 16)
with torch.no_grad():
    for _ in range(args.warmup):
        model(images)
    start = time.perf_counter()
    for _ in range(args.iters):
        model(images)
    elapsed = time.perf_counter() - start
print(f"{args.iters * args.batch_size / elapsed:.1f} samples/s at batch {args.batch_size}")
