"""A tiny data-parallel training loop run as several processes, three ways (``--mode``):

- ``gloo``: DDP on CPU under torchrun;
- ``xla``: torch-xla under torchrun, ``init_process_group('xla')``, MpDeviceLoader and
  ``xm.optimizer_step`` (which all-reduces the gradients);
- ``spawn``: torch-xla, the loop in a worker the script starts itself with ``torch_xla.launch``;
- ``mp``: DDP on CPU in two workers the script starts itself with ``torch.multiprocessing.spawn``.

Each process prints the batch it got and, every 50 steps and at its end, its own steady-state
samples/s so far (a trial may stop it at any step).
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

WARMUP_STEPS = 5


def train(index: int, args: argparse.Namespace) -> None:
    xla = args.mode in ("xla", "spawn")
    if xla:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.distributed.parallel_loader as pl
    torch.manual_seed(0)
    device = torch_xla.device() if xla else torch.device("cpu")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    if not xla:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    step = samples = 0
    start = None
    while step < args.steps:
        for x, y in pl.MpDeviceLoader(loader, device) if xla else loader:
            if step == 0:
                print(f"rank {index} batch {x.shape[0]}", flush=True)
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            xm.optimizer_step(optimizer) if xla else optimizer.step()
            step += 1
            if start is not None:
                samples += x.shape[0]
            elif step == WARMUP_STEPS:
                start = time.perf_counter()
            if step % 50 == 0 or step >= args.steps:
                if xla:
                    xm.wait_device_ops()
                print(f"rank {index} steady-state throughput: {samples / (time.perf_counter() - start):.2f} "
                      "samples/s", flush=True)
            if step >= args.steps:
                break


def ddp_worker(index: int, args: argparse.Namespace, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=2)
    train(index, args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("gloo", "xla", "spawn", "mp"), required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    if args.mode == "spawn":
        import torch_xla

        torch_xla.launch(train, args=(args,))
    elif args.mode == "mp":
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            free = s.getsockname()[1]
        torch.multiprocessing.spawn(ddp_worker, args=(args, free), nprocs=2)
    else:
        if args.mode == "xla":
            import torch_xla.distributed.xla_backend  # noqa: F401  (registers the 'xla' backend)
        dist.init_process_group(args.mode, init_method="xla://" if args.mode == "xla" else None)
        train(dist.get_rank(), args)
