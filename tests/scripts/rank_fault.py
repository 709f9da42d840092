"""Two ranks under torchrun, rank 1 failing as ``--fault`` says: ``crash`` (exits hard after a few
steps), ``hang`` (stops in the middle of the loop), ``oom`` (takes host memory until it is
stopped) or ``absent`` (never joins the process group).
Every rank writes its pid to ``$RANK_PID_DIR/<rank>.pid``, so that a test can check none is left."""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--fault", choices=("crash", "hang", "oom", "absent"), required=True)
args = parser.parse_args()
rank = int(os.environ["RANK"])
with open(os.path.join(os.environ["RANK_PID_DIR"], f"{rank}.pid"), "w") as fh:
    fh.write(str(os.getpid()))
if rank == 1 and args.fault == "absent":
    print("rank 1 stays away from the process group", flush=True)
    time.sleep(3600)
dist.init_process_group("gloo")
model = DistributedDataParallel(torch.nn.Linear(16, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(4096, 16), torch.randint(0, 4, (4096,))), batch_size=8)
for step, (x, y) in enumerate(loader):
    if rank == 1 and step == 20:
        print(f"rank 1 fails by {args.fault}", flush=True)
        if args.fault == "crash":
            os._exit(3)
        hoard = []
        while args.fault == "oom":
            hoard.append(bytearray(100 * 2**20))
            time.sleep(0.02)
        time.sleep(3600)
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    time.sleep(0.002)
