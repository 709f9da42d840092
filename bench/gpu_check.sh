#!/usr/bin/env bash
# The inductor target on a CUDA GPU: two studies (a small CNN, and the ViT example) over
# torch.compile's modes (max-autotune among them), bf16 autocast and the batch size, each trial
# holding one GPU (--gpus-per-trial 1); then each study's best applied to the plain script with
# `autotune exec`, as the job afterwards meets it. It prints each study's speedup over the script
# as it is, the compile seconds of its trials, and the applied job's own figure.
#
#     bash bench/gpu_check.sh                 # on a machine with a CUDA GPU
#     bash bench/gpu_check.sh --trials 6      # a shorter study
#
# On a machine without a CUDA device it says so and exits 0: CI and the CPU machines run it too.
# It builds a virtual environment of its own under $WORK (default: a temporary folder) that sees
# the machine's own torch (--system-site-packages: a GPU machine's torch matches its driver), and
# installs autotune into it with what is missing: from the package index, or from the wheels in
# $AUTOTUNE_WHEELS where the machine reaches no index.
set -euo pipefail
trials=10
while [ $# -gt 0 ]; do
    case "$1" in
        --trials) trials="$2"; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_check.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
[[ "$trials" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check.sh: --trials takes a positive number, not '$trials'" >&2; exit 2; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check.sh: no CUDA device on this machine (nvidia-smi finds none): nothing to check here"
    exit 0
fi
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/autotune-gpu.XXXXXX")}"
mkdir -p "$work"
export PYTHONUNBUFFERED=1
say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

python="${PYTHON:-python3}"
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check.sh: nvidia-smi sees a GPU but $python's torch does not (is it a CUDA build?): nothing to check"
    exit 0
fi
nvidia-smi -L
say "virtual environment in $work/venv (the machine's torch: $("$python" -c 'import torch; print(torch.__version__)'))"
"$python" -m venv --system-site-packages "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
index=()
[ -n "${AUTOTUNE_WHEELS:-}" ] && index=(--no-index --find-links "$AUTOTUNE_WHEELS")
# The machine's torch stays: only what it lacks is installed (autotune declares torch>=2.9).
pip install -q "${index[@]}" -e "$repo" timm

export XDG_CACHE_HOME="$work/cache" AUTOTUNE_IMDS_ENDPOINT="http://127.0.0.1:9"
cd "$work"
cat > cnn.py <<'EOF'
"""A small CNN trained on random images, as a user's script: DataLoader, forward, backward, step."""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda"
torch.manual_seed(0)
data = TensorDataset(torch.randn(16384, 3, 64, 64), torch.randint(0, 100, (16384,)))
loader = DataLoader(data, batch_size=64, shuffle=True, drop_last=True)
model = nn.Sequential(
    nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(128, 256, 3, padding=1), nn.BatchNorm2d(256), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    nn.Flatten(), nn.Linear(256, 100)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for epoch in range(3):
    start, seen = time.perf_counter(), 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        seen += len(x)
    torch.cuda.synchronize()
    print(f"epoch {epoch}: {seen / (time.perf_counter() - start):,.1f} samples/s, loss {loss.item():.3f}")
EOF
# The ViT example as it is, but on the GPU: its model, its batches, and a synchronise before its
# clock stops.
python - "$repo/examples/vit_train.py" <<'EOF'
import sys
from pathlib import Path

source = Path(sys.argv[1]).read_text()
for old, new in (("    model = build_model()\n", "    model = build_model().to('cuda')\n"),
                 ("            loss = loss_fn(model(images), labels)\n",
                  "            images, labels = images.to('cuda'), labels.to('cuda')\n"
                  "            loss = loss_fn(model(images), labels)\n"),
                 ("    timed_end = time.perf_counter()\n", "    torch.cuda.synchronize()\n    timed_end = time.perf_counter()\n")):
    if old not in source:
        sys.exit(f"gpu_check.sh: examples/vit_train.py changed: no {old.strip()!r} to move to the GPU")
    source = source.replace(old, new)
Path("vit.py").write_text(source)
EOF

study() {  # study NAME SCRIPT -- ARGS: a study on the GPU, its best applied afterwards
    local name="$1" script="$2"; shift 3
    say "$name: autotune run $script --trials $trials --target inductor --gpus-per-trial 1"
    SECONDS=0
    autotune run "$script" --trials "$trials" --target inductor --gpus-per-trial 1 --study "$name" \
        --set mode=default,max-autotune,max-autotune-no-cudagraphs,eager --set precision=fp32,bf16_autocast \
        --json -- "$@" > "$name.json"
    local took=$SECONDS
    say "$name: the script as it is, then with the best applied (autotune exec)"
    python "$script" "$@" > "$name.plain.log" 2>&1
    autotune exec "$name" -- python "$script" "$@" > "$name.applied.log" 2>&1
    python - "$name" "$took" <<'EOF'
import json, re, statistics, sys
from pathlib import Path

name, took = sys.argv[1], int(sys.argv[2])
result = json.loads(Path(f"{name}.json").read_text())
best = result["best"]
compiles = [t["compile_seconds"] for t in result["trials"] if t.get("compile_seconds") is not None]


def own(log: str) -> float | None:
    """The script's own figure: its steady-state line, else the mean of its epochs after the first."""
    text = Path(log).read_text()
    steady = re.search(r"steady-state throughput: ([\d.]+) samples/s", text)
    if steady:
        return float(steady.group(1))
    figures = [float(m.replace(",", "")) for m in re.findall(r"([\d,]+\.\d) samples/s", text)]
    return statistics.fmean(figures[1:]) if len(figures) > 1 else (figures[0] if figures else None)


plain, applied = own(f"{name}.plain.log"), own(f"{name}.applied.log")
print(f"{name}: study of {len(result['trials'])} trials in {took} s; best {best['value']:,.1f} samples/s "
      f"[{best['value_ci95_low']:,.1f}, {best['value_ci95_high']:,.1f}] over {len(best['runs'])} runs, "
      f"{best['speedup']:.2f}x the baseline; params {best['params']}")
if compiles:
    print(f"{name}: compile seconds per trial: median {statistics.median(compiles):.1f}, most {max(compiles):.1f}")
if plain and applied:
    print(f"{name}: the script's own figure: {plain:,.1f} samples/s as it is, {applied:,.1f} with the best applied "
          f"({applied / plain:.2f}x; the study's best read {best['value'] / plain:.2f}x of the script as it is)")
else:
    print(f"{name}: the script printed no figure of its own (see {name}.plain.log, {name}.applied.log)")
EOF
}

study cnn cnn.py --
study vit vit.py -- --epochs 3
say "done: the files are in $work"
