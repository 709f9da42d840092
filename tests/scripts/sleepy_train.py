"""A training loop that needs no device: a tiny model whose steps take about 5 ms of sleep."""
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

time.sleep(2.0)  # long enough that trials started together overlap
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1)), batch_size=16)
for x, y in data:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.005)
