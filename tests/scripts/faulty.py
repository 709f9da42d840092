"""A training loop that fails as its trial's `fault` parameter says (read via the optional API)."""
import ctypes
import os
import signal
import subprocess
import sys
import time

import autotune
import gate  # noqa: F401  (waits at a test's gate, where it has one)

fault = autotune.param("fault", "none")
marker = os.environ.get("FAULT_MARKER_DIR")

if fault == "compile_error":
    # XLA reads XLA_FLAGS when it starts: an unknown flag aborts the process (exit 134).
    os.environ["XLA_FLAGS"] = "--xla_this_flag_does_not_exist=true"
    os.environ["PJRT_DEVICE"] = "CPU"
    import torch_xla

    torch_xla.device()
    import torch

    (torch.ones(2, device=torch_xla.device()) * 2).cpu()

import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(8192, 8), torch.randn(8192, 1)), batch_size=16)
hog = []
for step, (x, y) in enumerate(data):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.002)
    if step != 20:
        continue
    if fault == "segfault":
        ctypes.string_at(0)
    elif fault == "hang":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        time.sleep(3600)
    elif fault == "raise":
        raise RuntimeError("deliberate failure in the user's script")
    elif fault == "host_oom":
        while True:
            hog.append(torch.ones(50_000_000, dtype=torch.uint8))  # 50 MB a step, touched
            time.sleep(0.05)
    elif fault == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "worker_dies_once" and marker:
        # Kill the Ray worker that runs this trial (the launcher's process), the first time only.
        flag = os.path.join(marker, "worker-killed")
        if not os.path.exists(flag):
            open(flag, "w").close()
            print("attempt 1: its worker is killed", flush=True)
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(3600)
        print("a later attempt: its worker lives", flush=True)
    elif fault == "worker_always_dies":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(3600)
