"""FLOPs and utilisation in a study's outputs: a real study of the ViT example on XLA:CPU, and a
Neuron study's stored result against the catalogue's peak."""

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

from autotune.provenance import provenance
from autotune.records import Measurement, MeasurementProtocol, TrialPlan, TrialResult
from autotune.rendering import fmt_flops, render_study, render_trials
from autotune.report.write import report_html
from autotune.study.study import tune
from autotune.results.outputs import BestConfig, trials_csv
from autotune.results.best import best_config
from autotune.results.summaries import study_summaries
from autotune.targets import get_target
from autotune.storage.attrs import trial_attrs, write

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


def test_a_neuron_studys_best_gives_its_utilisation_of_the_catalogue_peak_of_the_cores_it_held(tmp_path) -> None:
    """What a Neuron study stores (where it measured, as the Neuron target describes it, and the
    NeuronCores a trial held) becomes best.json's utilisation, trials.csv's column and the table's line:
    two NeuronCores of a trn1.32xlarge are one Trainium chip, 190 bf16 TFLOPS."""

    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    prov = provenance(get_target("neuron"), script, [], instance_type="trn1.32xlarge")
    study = optuna.create_study(direction="maximize")
    write(study, target="neuron", provenance=prov, devices_per_trial=2)
    measured = TrialResult(status="ok", plan=TrialPlan(target="neuron", params={"x": "a"}), measurement=Measurement(
        throughput=1000.0, ci95_low=990.0, ci95_high=1010.0, step_time_median=0.008, step_time_p90=0.009,
        samples_per_step=8, steps_measured=100, windows=5, converged=True, warmup_steps=3, warmup_seconds=1.0,
        flops_per_sample=3e9))
    dist = {"x": optuna.distributions.CategoricalDistribution(["a"])}
    attrs = trial_attrs(config_key="a", counted=True, result=measured.model_dump_json())
    study.add_trial(optuna.trial.create_trial(params={"x": "a"}, distributions=dist, value=1000.0, user_attrs=attrs))
    use = best_config(study, "s", prov).utilisation
    assert use.flops_per_second == 3e12 and use.peak_flops_per_second == 190e12
    assert use.mfu == pytest.approx(3e12 / 190e12)
    assert use.peak_source == ("catalogue: Trainium (Trn1) chip, 190 bf16 TFLOPS over 2 NeuronCores; "
                               "2 NeuronCores of trn1.32xlarge")
    (row,) = csv.DictReader(trials_csv(study_summaries(study), None).splitlines())
    assert float(row["mfu"]) == pytest.approx(3e12 / 190e12)
    shown = StringIO()
    render_trials("s", study_summaries(study), None, best_config(study, "s", prov), Console(file=shown, width=240))
    assert "compute: 3 GFLOP per sample, 3 TFLOP/s achieved; 1.58% of the peak (catalogue: Trainium" in shown.getvalue()
    assert "1.6%" in shown.getvalue(), "the table's MFU column"
