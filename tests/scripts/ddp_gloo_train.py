"""A tiny DDP training loop on gloo, for torchrun: each rank prints the batch it got and, every 50
steps and at its end, its own steady-state samples/s so far (a trial may stop it at any step)."""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

WARMUP_STEPS = 5

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--steps", type=int, default=300)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                                    torch.nn.Linear(128, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)

step = samples = 0
start = None
while step < args.steps:
    for x, y in loader:
        if step == 0:
            print(f"rank {rank} batch {x.shape[0]}", flush=True)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        step += 1
        if start is not None:
            samples += x.shape[0]
        elif step == WARMUP_STEPS:
            start = time.perf_counter()
        if step % 50 == 0 or step >= args.steps:
            print(f"rank {rank} steady-state throughput: {samples / (time.perf_counter() - start):.2f} samples/s",
                  flush=True)
        if step >= args.steps:
            break
dist.destroy_process_group()
