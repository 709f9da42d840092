"""A net trained one layer after the other, each layer with an optimizer of its own, as
pytorch/examples' forward-forward MNIST does: every optimizer is made up front, and the second
layer (narrower) trains about three times as fast as the first. Prints each phase's own rate and
the whole run's, from its own stopwatch."""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300, help="full-batch steps per layer")
parser.add_argument("--batch_size", type=int, default=256)
args = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(args.batch_size, 512)
layers = [nn.Linear(512, 512), nn.Linear(512, 64)]
optimizers = [torch.optim.Adam(layer.parameters(), lr=1e-3) for layer in layers]

total_seconds = 0.0
for i, (layer, opt) in enumerate(zip(layers, optimizers)):
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = layer(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    total_seconds += seconds
    print(f"layer {i}: {args.steps * args.batch_size / seconds:.1f} samples/s", flush=True)
    x = layer(x).detach()
print(f"whole run: {2 * args.steps * args.batch_size / total_seconds:.1f} samples/s", flush=True)
