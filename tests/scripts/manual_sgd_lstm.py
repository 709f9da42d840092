"""A word-language-model loop as pytorch/examples writes it: no DataLoader and no optimizer. The
corpus is one tensor made once and sliced per step, the weights are updated by hand
(``p.data.add_(p.grad, alpha=-lr)``), each epoch ends with an evaluation at another batch size,
and the batch size is the script's own ``--batch_size``. Rows are sequences (batch first)."""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch_size", type=int, default=20)
parser.add_argument("--eval_batch_size", type=int, default=10)
parser.add_argument("--bptt", type=int, default=16)
parser.add_argument("--lr", type=float, default=20.0)
parser.add_argument("--clip", type=float, default=0.25)
parser.add_argument("--epochs", type=int, default=40)
args = parser.parse_args()

torch.manual_seed(0)
NTOKENS = 200
train_corpus = torch.randint(0, NTOKENS, (20_000,))
val_corpus = torch.randint(0, NTOKENS, (2_000,))


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data[:nbatch * bsz].view(bsz, -1)


class RNNModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Embedding(NTOKENS, 32)
        self.rnn = nn.LSTM(32, 32, batch_first=True)
        self.decoder = nn.Linear(32, NTOKENS)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out), hidden

    def init_hidden(self, bsz: int):
        w = next(self.parameters())
        return w.new_zeros(1, bsz, 32), w.new_zeros(1, bsz, 32)


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


def get_batch(source: torch.Tensor, i: int):
    seq_len = min(args.bptt, source.size(1) - 1 - i)
    return source[:, i:i + seq_len], source[:, i + 1:i + 1 + seq_len]


def evaluate(source: torch.Tensor) -> float:
    model.eval()
    total, hidden = 0.0, model.init_hidden(args.eval_batch_size)
    with torch.no_grad():
        for i in range(0, source.size(1) - 1, args.bptt):
            data, targets = get_batch(source, i)
            output, hidden = model(data, hidden)
            total += criterion(output.reshape(-1, NTOKENS), targets.reshape(-1)).item()
    return total


train_data = batchify(train_corpus, args.batch_size)
val_data = batchify(val_corpus, args.eval_batch_size)
model = RNNModel()
criterion = nn.CrossEntropyLoss()
for epoch in range(1, args.epochs + 1):
    model.train()
    start, total_loss = time.time(), 0.0
    hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(1) - 1, args.bptt)):
        data, targets = get_batch(train_data, i)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output.reshape(-1, NTOKENS), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-args.lr)
        total_loss += loss.item()
    print(f"| epoch {epoch} | {time.time() - start:.2f} s | train loss {total_loss / (batch + 1):.2f} "
          f"| valid loss {evaluate(val_data):.2f}", flush=True)
