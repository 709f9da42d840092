"""DDP over gloo, run by torchrun on each node of a trial that spans several (``--nnodes``).

Where ``AUTOTUNE_TEST_GATE`` names a folder, each rank writes ``rank-<rank>-<pid>`` there (the world
size) once it has trained a few steps, and waits while the folder holds ``hold``: the ranks are then
held mid-trial, in their next all-reduce, as long as a test needs.
"""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loader = DataLoader(TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,))), batch_size=32,
                    shuffle=True, drop_last=True)
gate = os.environ.get("AUTOTUNE_TEST_GATE")
step = 0
while step < 100_000:
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        step += 1
        if gate and step == 10:
            Path(gate, f"rank-{dist.get_rank()}-{os.getpid()}").write_text(str(dist.get_world_size()))
            while Path(gate, "hold").exists():
                time.sleep(0.1)
