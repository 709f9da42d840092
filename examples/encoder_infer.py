"""Run a small transformer encoder in inference and report its per-batch latency to autotune.

The model is built from a config (no weights to download): token and position embeddings, two
``nn.TransformerEncoder`` layers and a classification head over the mean of the sequence. A
DataLoader feeds batches of random token ids; ``--iterations`` batches are run and each forward
pass is timed. ``python examples/encoder_infer.py``.

This script uses autotune's optional API: after the loop it reports its median and 90th percentile
latency with ``autotune.report``, so that a study can minimise latency rather than maximise
throughput (``autotune run examples/encoder_infer.py --metric latency_ms --direction minimize``).
Outside a trial the call does nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import autotune

WARMUP_BATCHES = 5


@dataclass(frozen=True)
class EncoderConfig:
    vocab_size: int = 1000
    d_model: int = 128
    num_layers: int = 2
    num_heads: int = 4
    dim_feedforward: int = 512
    seq_len: int = 64
    num_classes: int = 2


class Encoder(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Parameter(torch.randn(1, config.seq_len, config.d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(config.d_model, config.num_heads, config.dim_feedforward,
                                           dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.num_classes)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.token_embedding(token_ids) + self.position_embedding
        hidden = self.encoder(hidden)
        return self.head(self.norm(hidden).mean(dim=1))


class RandomTokens(Dataset):
    """Fixed random token-id sequences."""

    def __init__(self, config: EncoderConfig, size: int = 1024, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, config.vocab_size, (size, config.seq_len), generator=g)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.tokens[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200, help="batches to run")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-workers", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(0)
    config = EncoderConfig()
    model = Encoder(config).eval()
    loader = DataLoader(RandomTokens(config), batch_size=args.batch_size, num_workers=args.num_workers,
                        drop_last=True)

    latencies_ms: list[float] = []
    batches = 0
    samples_after_warmup = 0
    steady_start: float | None = None
    with torch.inference_mode():
        while batches < args.iterations:  # as many passes over the data as the iterations need
            for token_ids in loader:
                start = time.perf_counter()
                logits = model(token_ids)
                latency_ms = 1000 * (time.perf_counter() - start)
                batches += 1
                if steady_start is not None:
                    latencies_ms.append(latency_ms)
                    samples_after_warmup += logits.shape[0]
                elif batches == WARMUP_BATCHES:
                    steady_start = time.perf_counter()
                if batches >= args.iterations:
                    break
    steady_end = time.perf_counter()

    if steady_start is None or not latencies_ms:
        print(f"too few batches ({batches}) to measure: more than {WARMUP_BATCHES} are needed")
        return
    latency_ms = statistics.median(latencies_ms)
    latency_p90_ms = statistics.quantiles(latencies_ms, n=10)[-1] if len(latencies_ms) > 1 else latency_ms
    autotune.report(latency_ms=latency_ms, latency_p90_ms=latency_p90_ms)
    print(f"latency_ms {latency_ms:.3f}")
    print(f"latency_p90_ms {latency_p90_ms:.3f}")
    print(f"steady-state throughput: {samples_after_warmup / (steady_end - steady_start):.2f} samples/s")


if __name__ == "__main__":
    main()
