"""Small synthetic data sets, written in exactly the on-disk formats the corpus scripts' loaders read.

The scripts of the corpus are kept as published, and several of them fetch their data on first
use (``datasets.MNIST(..., download=True)``) or read a file another script writes
(``traindata.pt``). Nothing may be downloaded while a trial runs, so the data are made here
beforehand, where the loaders look for them, and small enough that a trial starts in seconds:

- ``mnist``: torchvision's MNIST raw files, ``<root>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``
  (big-endian IDX headers, uint8 pixels and labels). torchvision 0.24's ``MNIST._check_exists``
  only checks that these four uncompressed files exist, so ``download=True`` finds them and
  fetches nothing. Each image is noise plus a bright bar whose place depends on its label, so a
  model has something to learn, and every label occurs at least twice (the Siamese example
  draws two different images of one class).
- ``sine``: ``traindata.pt`` as ``time_sequence_prediction/generate_sine_wave.py`` writes it (a
  float64 NumPy array of shifted sine waves saved with ``torch.save``), with fewer and shorter
  waves than its 100 x 1000.

    python tests/corpus/make_data.py mnist DIR [--train N] [--test N]
    python tests/corpus/make_data.py sine DIR [--waves N] [--length N]
"""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

import numpy as np

#: The IDX magic numbers: unsigned bytes, 3 dimensions (images) or 1 (labels).
IDX_IMAGES, IDX_LABELS = 0x00000803, 0x00000801
SIDE = 28


def _digits(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    labels = (np.arange(count) % 10).astype(np.uint8)
    rng.shuffle(labels)
    images = rng.integers(0, 64, size=(count, SIDE, SIDE), dtype=np.uint8)
    for i, label in enumerate(labels):
        row = 2 + int(label) * 2
        images[i, row:row + 3, 4:24] = 255
    return images, labels


def write_mnist(root: str | Path, train: int = 2048, test: int = 256, seed: int = 0) -> Path:
    """torchvision's MNIST raw files under ``root/MNIST/raw``; returns that folder."""
    if min(train, test) < 20:
        raise ValueError("each split needs at least 20 images: two of every label")
    raw = Path(root) / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, count in (("train", train), ("t10k", test)):
        images, labels = _digits(count, rng)
        (raw / f"{split}-images-idx3-ubyte").write_bytes(
            struct.pack(">4I", IDX_IMAGES, count, SIDE, SIDE) + images.tobytes())
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">2I", IDX_LABELS, count) + labels.tobytes())
    return raw


def write_sine(root: str | Path, waves: int = 10, length: int = 100) -> Path:
    """``traindata.pt`` in ``root`` as ``generate_sine_wave.py`` writes it, ``waves`` x ``length``."""
    import torch

    # The formula of generate_sine_wave.py, with its seed and period; only N and L are smaller.
    np.random.seed(2)
    period = 20
    x = np.empty((waves, length), "int64")
    x[:] = np.array(range(length)) + np.random.randint(-4 * period, 4 * period, waves).reshape(waves, 1)
    data = np.sin(x / 1.0 / period).astype("float64")
    path = Path(root) / "traindata.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        torch.save(data, f)
    return path


#: The data sets by name, as a corpus entry's ``data`` names them.
WRITERS = {"mnist": write_mnist, "sine": write_sine}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    mnist = sub.add_parser("mnist", help="torchvision MNIST raw files under DIR/MNIST/raw")
    mnist.add_argument("root", type=Path)
    mnist.add_argument("--train", type=int, default=2048)
    mnist.add_argument("--test", type=int, default=256)
    sine = sub.add_parser("sine", help="DIR/traindata.pt as generate_sine_wave.py writes it")
    sine.add_argument("root", type=Path)
    sine.add_argument("--waves", type=int, default=10)
    sine.add_argument("--length", type=int, default=100)
    args = parser.parse_args(argv)
    if args.kind == "mnist":
        print(write_mnist(args.root, args.train, args.test))
    else:
        print(write_sine(args.root, args.waves, args.length))


if __name__ == "__main__":
    main()
