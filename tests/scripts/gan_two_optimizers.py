"""A DCGAN-style loop as pytorch/examples writes it: two models, two optimizers, three backward
calls and two optimizer steps per iteration; the real samples are one tensor made once and sliced
per step (no DataLoader), and the batch size is the script's own ``--batchSize``."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batchSize", type=int, default=32)
parser.add_argument("--nz", type=int, default=16)
parser.add_argument("--niter", type=int, default=200)
parser.add_argument("--lr", type=float, default=0.0002)
args = parser.parse_args()

torch.manual_seed(0)
real_samples = torch.randn(4096, 64)
netG = nn.Sequential(nn.Linear(args.nz, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh())
netD = nn.Sequential(nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1), nn.Sigmoid())
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=args.lr, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=args.lr, betas=(0.5, 0.999))
real_label, fake_label = 1.0, 0.0

for epoch in range(args.niter):
    for i in range(0, real_samples.size(0) - args.batchSize + 1, args.batchSize):
        # (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        real = real_samples[i:i + args.batchSize]
        label = torch.full((real.size(0),), real_label)
        errD_real = criterion(netD(real).view(-1), label)
        errD_real.backward()
        noise = torch.randn(real.size(0), args.nz)
        fake = netG(noise)
        label.fill_(fake_label)
        errD_fake = criterion(netD(fake.detach()).view(-1), label)
        errD_fake.backward()
        optimizerD.step()
        # (2) Update G: maximize log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        errG = criterion(netD(fake).view(-1), label)
        errG.backward()
        optimizerG.step()
    print(f"[{epoch}/{args.niter}] Loss_D: {(errD_real + errD_fake).item():.4f} Loss_G: {errG.item():.4f}",
          flush=True)
