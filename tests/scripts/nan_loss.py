"""Train a linear regression with SGD at lr=1e10: the loss is inf by step 3 and NaN by step 5."""

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e10)
loader = DataLoader(TensorDataset(torch.randn(1024, 16), torch.randn(1024, 1)), batch_size=8)
for epoch in range(2):
    for step, (x, y) in enumerate(loader, start=1):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if epoch == 0 and step <= 8:
            print(f"loss {loss.item()}", flush=True)
print(f"final loss {loss.item()}")
