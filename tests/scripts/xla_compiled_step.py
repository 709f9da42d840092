"""A torch-xla loop as its newer examples write it: the step is wrapped in
``torch_xla.compile(step_fn)`` (which cuts the graph itself), the inputs are fixed tensors made
once on the device (as torch-xla's SampleGenerator yields), and there is no DataLoader."""

import argparse

import torch
import torch_xla
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch_size", type=int, default=16)
parser.add_argument("--num_steps", type=int, default=2000)
args = parser.parse_args()

device = torch_xla.device()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.zeros(args.batch_size, 32, device=device)
target = torch.zeros(args.batch_size, dtype=torch.int64, device=device)


def step_fn(x, y):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


step_fn = torch_xla.compile(step_fn)
for step in range(args.num_steps):
    loss = step_fn(data, target)
    if step % 500 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
