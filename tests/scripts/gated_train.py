"""tiny_train.py's loop, held at its start by a gate that a test controls: a test acts while
trials are running (stops the database, fills the disk), then lets them go.

The gate is the folder named by ``AUTOTUNE_TEST_GATE`` (no variable: no gate). A trial passes when
the folder holds ``open``, or when it takes one of the folder's ``ticket-*`` files (renamed, so
that each ticket lets exactly one trial through); until then it shows that it waits with a file
``waiting-<pid>``, renamed ``passed-<pid>`` once it goes on.
"""

import os
import time
from pathlib import Path

gate = os.environ.get("AUTOTUNE_TEST_GATE")
if gate:
    folder, me = Path(gate), os.getpid()
    waiting = folder / f"waiting-{me}"

    def passes() -> bool:
        if (folder / "open").exists():
            return True
        for ticket in sorted(folder.glob("ticket-*")):
            try:
                ticket.rename(folder / f"taken-{ticket.name}-{me}")
                return True
            except FileNotFoundError:  # another trial took it first
                continue
        return False

    while not passes():
        waiting.touch()
        time.sleep(0.05)
    if waiting.exists():
        waiting.rename(folder / f"passed-{me}")

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
loader = DataLoader(data, batch_size=32, shuffle=True, drop_last=True)
for epoch in range(4):
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.6f}")
