"""A training loop with no DataLoader: the data set is one tensor made once, sliced by the
script's own ``--batch_size`` at each step, as many tutorials and upstream tests write it."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=200)
parser.add_argument("--lr", type=float, default=0.05)
args = parser.parse_args()
print(f"batch_size={args.batch_size}", flush=True)

torch.manual_seed(0)
inputs, labels = torch.randn(4096, 32), torch.randint(0, 10, (4096,))
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
for epoch in range(args.epochs):
    for i in range(0, inputs.size(0) - args.batch_size + 1, args.batch_size):
        x, y = inputs[i:i + args.batch_size], labels[i:i + args.batch_size]
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
