"""A tiny torch_xla training loop (MLP, DataLoader -> MpDeviceLoader, a few ms a step, 300 steps) for fast tests."""

import argparse
import time

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader, TensorDataset

WARMUP_STEPS = 5

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--num-workers", type=int, default=0)
parser.add_argument("--steps", type=int, default=300)
args = parser.parse_args()

torch.manual_seed(0)
device = torch_xla.device()
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
loader = DataLoader(data, batch_size=args.batch_size, num_workers=args.num_workers, shuffle=True, drop_last=True)

step = 0
samples = 0
start = None
first_losses = []
while step < args.steps:
    for x, y in pl.MpDeviceLoader(loader, device):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        step += 1
        if step <= 3:
            first_losses.append(loss.detach())
        if start is not None:
            samples += x.shape[0]
        elif step == WARMUP_STEPS:
            torch_xla.sync()
            xm.wait_device_ops()
            start = time.perf_counter()
        if step >= args.steps:
            break
torch_xla.sync()
xm.wait_device_ops()
elapsed = time.perf_counter() - start
for loss in first_losses:
    print(f"loss {loss.item():.6f}")
print(f"steady-state throughput: {samples / elapsed:.2f} samples/s")
