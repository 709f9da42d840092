"""Train a small ViT with torch-xla: DataLoader -> MpDeviceLoader -> forward, backward, xm.optimizer_step.

The training loop of the seeds' ViT script, scaled down (32x32 images, 2 blocks) so that it trains on a
CPU in seconds: ``PJRT_DEVICE=CPU python examples/vit_xla_train.py``. It knows nothing of autotune.

It prints the average step time of each epoch, as the seeds' script did, and at the end its own
steady-state throughput: the first steps (graph compiles, warm-up) are left out, and the clock starts
and stops only once the device has finished its queued work, since XLA executes asynchronously.

Three epochs by default: an epoch of 2,048 images is 32 steps at batch 64, under a second on two CPU
cores, so that a measurement of one epoch, which ends with the script, rests on some 25 steps (at
batch 64 with openxla, one epoch measured to within +-32% at 95%, three epochs to within +-4%).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from timm.models.vision_transformer import VisionTransformer
from torch.utils.data import DataLoader, Dataset

WARMUP_STEPS = 5
LOSSES_PRINTED = 5


class RandomImages(Dataset):
    """Fixed random 32x32 images whose label is a fixed random linear function of the pixels,
    so that the loss has something to learn."""

    def __init__(self, size: int = 2048, num_classes: int = 10, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randn(size, 3, 32, 32, generator=g)
        projection = torch.randn(3 * 32 * 32, num_classes, generator=g)
        self.labels = (self.images.flatten(1) @ projection).argmax(dim=1)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


def build_model() -> torch.nn.Module:
    return VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = build_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    loader = DataLoader(RandomImages(), batch_size=args.batch_size, num_workers=args.num_workers,
                        shuffle=True, drop_last=True)
    device_loader = pl.MpDeviceLoader(loader, device)

    model.train()
    first_losses: list[torch.Tensor] = []  # read only at the end: .item() would force a sync per step
    step = 0
    timed_samples = 0
    timed_start: float | None = None
    for epoch in range(1, args.epochs + 1):
        epoch_start = time.perf_counter()
        epoch_steps = 0
        for images, labels in device_loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            xm.optimizer_step(optimizer)
            step += 1
            epoch_steps += 1
            if len(first_losses) < LOSSES_PRINTED:
                first_losses.append(loss.detach())
            if timed_start is not None:
                # The batch's own size: with drop_last every batch is full, and this stays right
                # if something else chose the batch size.
                timed_samples += images.shape[0]
            elif step == WARMUP_STEPS:
                # MpDeviceLoader would execute this step's graph when the next batch is fetched,
                # inside the timed window: run it now, so the clock starts with nothing queued.
                torch_xla.sync()
                xm.wait_device_ops()
                timed_start = time.perf_counter()
        xm.wait_device_ops()
        epoch_seconds = time.perf_counter() - epoch_start
        print(f"epoch {epoch}: {epoch_steps} steps, average step time "
              f"{1000 * epoch_seconds / max(epoch_steps, 1):.1f} ms", flush=True)

    torch_xla.sync()
    xm.wait_device_ops()
    timed_end = time.perf_counter()
    for loss in first_losses:
        print(f"loss {loss.item():.6f}")
    if timed_start is None or timed_samples == 0:
        print(f"too few steps ({step}) for a steady-state throughput: more than {WARMUP_STEPS} are needed")
        return
    print(f"steady-state throughput: {timed_samples / (timed_end - timed_start):.2f} samples/s")


if __name__ == "__main__":
    main()
