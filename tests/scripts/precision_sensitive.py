"""A regression whose outputs sit near 1000: bf16 rounds them to steps of 4-8, swamping the loss."""
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(4096, 16)
y = 1000.0 + x @ torch.randn(16, 1) * 0.1
model = torch.nn.Linear(16, 1)
with torch.no_grad():
    model.bias.fill_(1000.0)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for epoch in range(2):
    for xb, yb in DataLoader(TensorDataset(x, y), batch_size=32):
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
