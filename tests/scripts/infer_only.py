"""A forward-only inference loop as people write it: no DataLoader, no optimizer, no autotune
import; random inputs made once, the batch size its own flag, its own latency printed."""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--iters", type=int, default=400)
parser.add_argument("--width", type=int, default=256)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, args.width), nn.GELU(), nn.Linear(args.width, args.width), nn.GELU(),
                      nn.Linear(args.width, 10)).eval()
x = torch.randn(args.batch_size, 64)
times = []
with torch.no_grad():
    for _ in range(args.iters):
        start = time.perf_counter()
        out = model(x)
        times.append(time.perf_counter() - start)
times.sort()
print(f"p50 latency {times[len(times) // 2] * 1e3:.3f} ms, {args.batch_size / times[len(times) // 2]:.1f} samples/s")
