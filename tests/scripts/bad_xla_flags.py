"""A tiny torch_xla training loop; run with XLA_FLAGS=--xla_this_flag_does_not_exist, XLA aborts (SIGABRT)."""

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader, TensorDataset

device = torch_xla.device()
model = torch.nn.Linear(8, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
for x, y in pl.MpDeviceLoader(loader, device):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    xm.optimizer_step(optimizer)
print("finished")
