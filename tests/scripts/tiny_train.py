"""A tiny plain-torch CPU training loop (MLP, DataLoader, about 1 ms a step, 400 steps) for fast tests."""

import argparse
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

WARMUP_STEPS = 5

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--num-workers", type=int, default=0)
parser.add_argument("--steps", type=int, default=400)
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
loader = DataLoader(data, batch_size=args.batch_size, num_workers=args.num_workers, shuffle=True, drop_last=True)

step = 0
samples = 0
start = None
while step < args.steps:
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        step += 1
        if step <= 3:
            print(f"loss {loss.item():.6f}")
        if start is not None:
            samples += x.shape[0]
        elif step == WARMUP_STEPS:
            start = time.perf_counter()
        if step >= args.steps:
            break
print(f"steady-state throughput: {samples / (time.perf_counter() - start):.2f} samples/s")
