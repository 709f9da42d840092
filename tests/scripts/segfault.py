"""Crash with a real segmentation fault (SIGSEGV) by reading address 0, after a few DataLoader steps."""

import ctypes

import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(8, 1)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
for step, (x, y) in enumerate(loader):
    torch.nn.functional.mse_loss(model(x), y).backward()
    if step == 2:
        print("reading address 0", flush=True)
        ctypes.string_at(0)
