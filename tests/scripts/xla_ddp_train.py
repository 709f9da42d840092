"""A tiny torch-xla data-parallel loop, for torchrun: ``init_process_group('xla')``, MpDeviceLoader
and ``xm.optimizer_step`` (which all-reduces the gradients); each rank prints the batch it got
and its own steady-state samples/s."""

import argparse
import time

import torch
import torch.distributed as dist
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the 'xla' backend)
from torch.utils.data import DataLoader, TensorDataset

WARMUP_STEPS = 5

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()

dist.init_process_group("xla", init_method="xla://")
rank = dist.get_rank()
torch.manual_seed(0)
device = torch_xla.device()
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)

step = samples = 0
start = None
while step < args.steps:
    for x, y in pl.MpDeviceLoader(loader, device):
        if step == 0:
            print(f"rank {rank} batch {x.shape[0]}", flush=True)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        step += 1
        if start is not None:
            samples += x.shape[0]
        elif step == WARMUP_STEPS:
            xm.wait_device_ops()
            start = time.perf_counter()
        if step >= args.steps:
            break
xm.wait_device_ops()
print(f"rank {rank} steady-state throughput: {samples / (time.perf_counter() - start):.2f} samples/s", flush=True)
