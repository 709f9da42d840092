"""Train, then exit 1 because the accuracy is below the target, as torch-xla's test scripts do
(``sys.exit(21)`` there) when a short run cannot reach its target accuracy."""

import argparse
import sys

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--num_steps", type=int, default=1500)
parser.add_argument("--target_accuracy", type=float, default=0.98)
args = parser.parse_args()

torch.manual_seed(0)
inputs, labels = torch.randn(2048, 32), torch.randint(0, 10, (2048,))  # random labels: nothing to learn
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
steps_per_epoch = inputs.size(0) // args.batch_size
for step in range(args.num_steps):
    i = (step % steps_per_epoch) * args.batch_size
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(inputs[i:i + args.batch_size]), labels[i:i + args.batch_size])
    loss.backward()
    optimizer.step()
with torch.no_grad():
    accuracy = (model(inputs).argmax(1) == labels).float().mean().item()
print(f"Accuracy: {accuracy:.4f}", flush=True)
if accuracy < args.target_accuracy:
    print(f"Accuracy {accuracy:.4f} is below target {args.target_accuracy:.4f}", flush=True)
    sys.exit(1)
