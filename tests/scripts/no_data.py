"""A training script whose data set is not on this machine: torchvision's MNIST read from a folder
that has none, with download=False, fails as it does in a plain run where nobody put the data."""

import torch
import torchvision

data = torchvision.datasets.MNIST("data-that-is-not-here", train=True, download=False,
                                  transform=torchvision.transforms.ToTensor())
loader = torch.utils.data.DataLoader(data, batch_size=32)
model = torch.nn.Linear(28 * 28, 10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x.flatten(1)), y).backward()
    optimizer.step()
