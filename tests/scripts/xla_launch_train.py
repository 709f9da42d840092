"""A tiny torch-xla loop that starts its own worker with ``torch_xla.launch`` (a child process
started with ``spawn`` that imports this script again): the worker prints the batch it got and its
own steady-state samples/s."""

import argparse
import time

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader, TensorDataset

WARMUP_STEPS = 5


def train(index: int, batch_size: int, steps: int) -> None:
    torch.manual_seed(0)
    device = torch_xla.device()
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, drop_last=True)
    step = samples = 0
    start = None
    while step < steps:
        for x, y in pl.MpDeviceLoader(loader, device):
            if step == 0:
                print(f"worker {index} batch {x.shape[0]}", flush=True)
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
            if step >= steps:
                break
    xm.wait_device_ops()
    print(f"worker {index} steady-state throughput: {samples / (time.perf_counter() - start):.2f} samples/s",
          flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch_xla.launch(train, args=(args.batch_size, args.steps))
