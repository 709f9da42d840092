"""Leave with os._exit(3) in the middle of a tiny DataLoader training loop (no exception, no cleanup)."""

import os

import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
for step, (x, y) in enumerate(loader, start=1):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    if step == 3:
        print("exiting with os._exit(3)", flush=True)
        os._exit(3)
