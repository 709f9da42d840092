"""FLOPs and utilisation in a study's outputs: a real study of the ViT example on XLA:CPU."""

from __future__ import annotations

import csv
import sys
from io import StringIO
from pathlib import Path

import optuna
import pytest
import torch
from rich.console import Console
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from autotune.records import MeasurementProtocol
from autotune.rendering import fmt_flops, render_study
from autotune.report.write import report_html
from autotune.study.loop import tune
from autotune.study.outputs import BestConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def training_step_flops_per_sample(batch: int = 16) -> float:
    """The example's model trained one step on real tensors, counted by torch as a user would; its
    attention in the math kernel, which torch's counter knows (it has no count for the CPU's flash
    kernel, and would leave attention out)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        from vit_xla_train import build_model
    finally:
        sys.path.pop(0)
    model = build_model()
    images, labels = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(images), labels).backward()
    return counter.get_total_flops() / batch


@pytest.mark.slow
def test_best_json_carries_the_models_flops_and_the_flops_its_throughput_makes(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = tune(EXAMPLES / "vit_xla_train.py", trials=1, target="xla", seed=0,
                  protocol=MeasurementProtocol(max_measure_seconds=3.0))
    assert result.exit_code == 0, result.trials
    best = BestConfig.model_validate_json((Path(result.out_dir) / "best.json").read_text())
    use = best.utilisation
    assert use is not None
    assert use.flops_per_sample == training_step_flops_per_sample()
    assert use.flops_per_second == pytest.approx(use.flops_per_sample * best.throughput, rel=1e-9)
    # XLA on a CPU: no peak is known, and the outputs say so rather than guess one.
    assert use.peak_flops_per_second is None and use.mfu is None and "CPU" in use.peak_source
    row = next(csv.DictReader((Path(result.out_dir) / "trials.csv").open()))
    assert float(row["flops_per_sample"]) == use.flops_per_sample
    assert float(row["flops_per_second"]) == pytest.approx(float(row["throughput"]) * use.flops_per_sample)
    assert row["mfu"] == ""
    shown = StringIO()
    render_study(result, Console(file=shown, width=240))
    assert "model FLOP/s" in shown.getvalue()
    assert "compute: 11.3 MFLOP per sample" in shown.getvalue() and "no peak is known for a CPU" in shown.getvalue()
    page, _ = report_html(optuna.load_study(study_name=result.study, storage=result.storage), result.study)
    assert f"11.3 MFLOP per sample, {fmt_flops(use.flops_per_second)}/s achieved; no peak is known for a CPU" in page
    assert f"<td class='num'>{fmt_flops(use.flops_per_second)}/s</td><td class='num'>-</td>" in page
