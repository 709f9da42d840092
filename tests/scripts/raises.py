"""Raise RuntimeError("deliberate failure") after two DataLoader steps of a tiny model."""

import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
for step, (x, y) in enumerate(loader, start=1):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    if step == 2:
        raise RuntimeError("deliberate failure")
