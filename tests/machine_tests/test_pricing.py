"""The instance catalogue, where a price comes from, and the cost arithmetic against figures
computed by hand."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

from autotune.errors import PricingError, UnknownInstanceTypeError
from autotune.machine.pricing import (
    Cost,
    Price,
    catalogue,
    check_instance_type,
    cost_per_million_samples,
    instance_info,
    instance_throughput,
    read_prices,
    resolve_price,
    trial_rate,
    utilisation,
)
from autotune.targets import get_target

#: The on-demand us-east-1 prices of the issue that asked for them, US dollars per hour.
ON_DEMAND = {"trn1.2xlarge": 1.34375, "trn1.32xlarge": 21.50, "trn1n.32xlarge": 24.78, "inf2.xlarge": 0.7582,
             "inf2.8xlarge": 1.96786, "inf2.24xlarge": 6.49, "inf2.48xlarge": 12.981, "trn2.48xlarge": None}
#: GPU instances and their GPUs; no price of theirs is in the sources of the catalogue.
GPUS = {"p5.48xlarge": 8, "p5en.48xlarge": 8, "p4d.24xlarge": 8, "p4de.24xlarge": 8, "g6.xlarge": 1,
        "g6.12xlarge": 4, "g6.48xlarge": 8, "g6e.xlarge": 1, "g6e.12xlarge": 4, "g6e.48xlarge": 8}
CATALOGUE_SOURCE = "catalogue: us-east-1 on-demand, 2026-11-23"


def test_the_catalogue_lists_the_neuron_instances_with_their_prices() -> None:
    rows = {row.name: row for row in catalogue().instances if row.device == "neuron_cores"}
    assert set(rows) == set(ON_DEMAND)
    assert {name: row.usd_per_hour for name, row in rows.items()} == ON_DEMAND
    assert catalogue().prices.region == "us-east-1" and catalogue().prices.date == datetime.date(2026, 11, 23)
    assert catalogue().source == CATALOGUE_SOURCE
    # Two NeuronCores per Trainium/Inferentia2 chip; trn2: 128 physical, 64 logical at LNC=2.
    assert [(rows[n].devices, rows[n].vcpus, rows[n].memory_gib) for n in
            ("trn1.2xlarge", "trn1.32xlarge", "inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge")] == \
        [(2, 8, 32), (32, 128, 512), (2, 4, 16), (2, 32, 128), (12, 96, 384), (24, 192, 768)]
    assert (rows["trn2.48xlarge"].devices, rows["trn2.48xlarge"].physical_neuron_cores) == (64, 128)
    assert instance_info("inf2.xlarge") == rows["inf2.xlarge"] and instance_info("m5.large") is None


def test_the_catalogue_counts_the_gpus_of_gpu_instances_as_their_devices() -> None:
    rows = {row.name: row for row in catalogue().instances if row.device == "GPU"}
    assert {name: row.devices for name, row in rows.items()} == GPUS
    assert all(row.usd_per_hour is None for row in rows.values()), "no GPU price without a source"
    assert {g.description for g in catalogue().gpus} >= {row.chip for row in rows.values()}


def test_a_gpu_trial_is_priced_by_the_gpus_it_held() -> None:
    """A trial of 2 of a p5.48xlarge's 8 GPUs is a quarter of the instance: 4 run side by side.
    Before, the catalogue counted NeuronCores alone, and a GPU trial stood for the whole instance."""
    price = Price(per_hour=98.32, source="--price-per-hour")
    cost = Cost.of(100.0, price, instance_type="p5.48xlarge", devices_per_trial=2)
    assert (cost.trials_side_by_side, cost.instance_samples_per_second) == (4, 400.0)
    assert cost.usd_per_million_samples == pytest.approx(1e6 / 400.0 * 98.32 / 3600)
    assert trial_rate(price, instance_type="g6.12xlarge", devices_per_trial=1) == pytest.approx(98.32 / 3600 / 4)
    # What a trial holds comes from its target: inductor on a GPU holds --gpus-per-trial of them.
    assert get_target("inductor", 2).devices_per_trial(cores_per_trial=1) == 2
    assert get_target("neuron").devices_per_trial(cores_per_trial=2, processes=2) == 4


def test_a_trial_that_held_gpus_is_held_to_their_peak() -> None:
    prov = {"device": "cuda:NVIDIA H100 80GB HBM3", "host_device": "cuda:NVIDIA H100 80GB HBM3",
            "instance_type": "p5.48xlarge"}
    use = utilisation(1e9, 1000.0, prov, devices_per_trial=2)
    assert use is not None and use.peak_flops_per_second == 2 * 989e12, use.peak_source
    assert use.peak_source.endswith("x 2 GPUs")


def test_a_price_comes_from_the_flag_then_the_prices_file_then_the_catalogue(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("inf2.xlarge: 0.2951  # a three-year reserved rate\nm5.large: 0.096\n")
    assert resolve_price("inf2.xlarge") == Price(per_hour=0.7582, source=CATALOGUE_SOURCE)
    assert resolve_price("inf2.xlarge", prices_file=prices) == \
        Price(per_hour=0.2951, source=f"prices file {prices.resolve()}")
    assert resolve_price("m5.large", prices_file=prices).per_hour == 0.096, "any instance type may be priced"
    assert resolve_price("trn1.2xlarge", prices_file=prices).source == CATALOGUE_SOURCE, "not listed: the catalogue's"
    assert resolve_price("inf2.xlarge", price_per_hour=0.5, prices_file=prices) == \
        Price(per_hour=0.5, source="--price-per-hour")
    assert resolve_price(None, price_per_hour=0.5).per_hour == 0.5, "a price for this machine, whatever it is"
    assert resolve_price("trn2.48xlarge") is None, "no public on-demand price"
    assert resolve_price("m5.large") is None and resolve_price(None) is None


def test_json_prices_files_are_read_too(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"trn2.48xlarge": 35.76, "inf2.xlarge": 1}')
    assert read_prices(prices) == {"trn2.48xlarge": 35.76, "inf2.xlarge": 1.0}


@pytest.mark.parametrize("text, message", [
    ("inf2.xlarge: -0.5\n", "inf2.xlarge: -0.5 is not a price"),
    ("inf2.xlarge: 0\n", "is not a price"),
    ("inf2.xlarge: cheap\n", "'cheap' is not a price"),
    ("inf2.xlarge: .nan\n", "is not a price"),
    ("inf2.xlarge: true\n", "True is not a price"),
    ("- inf2.xlarge\n- 0.76\n", "expected a mapping"),
    ("", "expected a mapping"),
    ("inf2.xlarge: [0.76\n", "line 2: not YAML or JSON"),
])
def test_a_bad_prices_file_is_refused_naming_the_problem(tmp_path: Path, text: str, message: str) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(text)
    with pytest.raises(PricingError, match=f"^prices file {prices}.*{re.escape(message)}"):
        resolve_price("inf2.xlarge", price_per_hour=1.0, prices_file=prices)


def test_a_missing_prices_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PricingError, match="cannot read it .No such file"):
        resolve_price("inf2.xlarge", prices_file=tmp_path / "nowhere.yaml")


def test_an_unknown_instance_type_needs_a_price(tmp_path: Path) -> None:
    with pytest.raises(UnknownInstanceTypeError, match="'inf2.xlarg': not in autotune's catalogue .*--price-per-hour"):
        check_instance_type("inf2.xlarg")
    assert check_instance_type("m5.large", price_per_hour=0.096).per_hour == 0.096
    prices = tmp_path / "prices.yaml"
    prices.write_text("m5.large: 0.096\n")
    assert check_instance_type("m5.large", prices_file=prices).per_hour == 0.096
    assert check_instance_type("trn2.48xlarge") is None, "known, only not priced: no cost figures, no error"
    assert check_instance_type(None) is None


def test_instance_throughput_counts_the_trials_that_fit_side_by_side() -> None:
    assert instance_throughput(100.0, devices_per_trial=2, instance_devices=32) == (1600.0, 16)
    assert instance_throughput(100.0, devices_per_trial=3, instance_devices=32) == (1000.0, 10)
    assert instance_throughput(100.0, devices_per_trial=1, instance_devices=2) == (200.0, 2)
    assert instance_throughput(100.0, devices_per_trial=1, instance_devices=None) == (100.0, 1), "no devices held"
    assert instance_throughput(100.0, devices_per_trial=4, instance_devices=2) == (100.0, 1), "does not fit: once"
    with pytest.raises(ValueError):
        instance_throughput(100.0, devices_per_trial=0, instance_devices=2)


def test_a_trial_of_several_nodes_costs_a_share_of_each() -> None:
    # A trial of 32 cores on each of 2 trn1.32xlarge: each instance makes half its samples/s, and a
    # second of it costs two instances' seconds.
    assert instance_throughput(1000.0, devices_per_trial=32, instance_devices=32, nodes=2) == (500.0, 1)
    price = Price(per_hour=21.50, source="x")
    assert trial_rate(price, instance_type="trn1.32xlarge", devices_per_trial=32, nodes=2) \
        == pytest.approx(2 * 21.50 / 3600)


def test_cost_per_million_samples_against_hand_computed_figures() -> None:
    # 1e6 samples at 1000 samples/s take 1000 s; 1000 s of $0.7582/h cost $0.21061.
    assert cost_per_million_samples(1000.0, Price(per_hour=0.7582, source="x")) == pytest.approx(0.2106111, rel=1e-6)
    # 1e6 / 1600 = 625 s at $21.50/h = $3.7326.
    assert cost_per_million_samples(1600.0, Price(per_hour=21.50, source="x")) == pytest.approx(3.7326389, rel=1e-6)
    with pytest.raises(ValueError):
        cost_per_million_samples(0.0, Price(per_hour=1.0, source="x"))


def test_a_cost_scales_a_trial_on_some_neuroncores_to_the_whole_instance() -> None:
    price = resolve_price("trn1.32xlarge")
    cost = Cost.of(100.0, price, instance_type="trn1.32xlarge", devices_per_trial=2)
    assert (cost.trials_side_by_side, cost.instance_samples_per_second) == (16, 1600.0)
    assert cost.usd_per_million_samples == pytest.approx(3.7326389, rel=1e-6)
    assert (cost.per_hour, cost.source, cost.trial_samples_per_second) == (21.50, CATALOGUE_SOURCE, 100.0)
    on_cpu = Cost.of(100.0, price, instance_type="trn1.32xlarge", devices_per_trial=None)
    assert on_cpu.trials_side_by_side == 1 and on_cpu.usd_per_million_samples == pytest.approx(1e4 * 21.5 / 3600)
    unknown = Cost.of(100.0, Price(per_hour=0.096, source="--price-per-hour"), instance_type=None, devices_per_trial=2)
    assert unknown.trials_side_by_side == 1 and unknown.usd_per_million_samples == pytest.approx(1e4 * 0.096 / 3600)


# -- peaks and utilisation ------------------------------------------------------------------------

def _neuron_provenance(tmp_path: Path, instance_type: str) -> dict:
    """Where a Neuron study measures, as the study records it (on this machine, with no device)."""
    from autotune.provenance import provenance
    from autotune.targets import get_target

    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    return provenance(get_target("neuron"), script, [], instance_type=instance_type)


@pytest.mark.parametrize("instance, cores, peak_tflops", [
    ("trn1.32xlarge", 2, 190.0),          # one Trainium chip: two NeuronCore-v2 of 95 TFLOPS
    ("inf2.xlarge", 1, 95.0),             # one NeuronCore of an Inferentia2 chip
    ("inf2.48xlarge", 24, 12 * 190.0),    # every core of twelve chips
    ("trn2.48xlarge", 1, 667.0 / 4),      # a logical NeuronCore (LNC=2) is a quarter of a Trainium2 chip
])
def test_a_neuron_trials_utilisation_is_its_flops_over_the_catalogue_peak_of_the_cores_it_held(
        tmp_path: Path, instance: str, cores: int, peak_tflops: float) -> None:
    use = utilisation(3e9, 5000.0, _neuron_provenance(tmp_path, instance), devices_per_trial=cores)
    assert use is not None
    assert use.flops_per_second == 3e9 * 5000.0
    assert use.peak_flops_per_second == pytest.approx(peak_tflops * 1e12)
    assert use.mfu == pytest.approx(3e9 * 5000.0 / (peak_tflops * 1e12))
    assert use.peak_source.startswith("catalogue: ") and instance in use.peak_source


def test_a_neuron_trial_on_an_unknown_instance_says_why_it_has_no_utilisation(tmp_path: Path) -> None:
    prov = _neuron_provenance(tmp_path, "trn1.2xlarge")
    use = utilisation(3e9, 5000.0, {**prov, "instance_type": None}, devices_per_trial=2)
    assert use is not None and use.mfu is None and "--instance-type" in use.peak_source


def test_a_cpu_has_no_peak_and_says_so() -> None:
    use = utilisation(1e6, 100.0, {"device": "xla:CPU", "host_device": "cpu:Intel(R) Xeon(R) Processor"},
                      devices_per_trial=None)
    assert use is not None and use.flops_per_second == 1e8
    assert use.peak_flops_per_second is None and use.mfu is None
    assert use.peak_source == "no peak is known for a CPU (Intel(R) Xeon(R) Processor): no utilisation"


@pytest.mark.parametrize("device, host, peak_tflops", [
    ("cuda:NVIDIA H100 80GB HBM3", "cuda:NVIDIA H100 80GB HBM3", 989.0),
    ("cuda:NVIDIA H100 PCIe", "cuda:NVIDIA H100 PCIe", 756.0),
    ("xla:CUDA", "cuda:NVIDIA A100-SXM4-80GB", 312.0),
    ("cuda:NVIDIA L4", "cuda:NVIDIA L4", 121.0),
    ("cuda:NVIDIA L40S", "cuda:NVIDIA L40S", 362.0),
    ("cuda:NVIDIA GeForce RTX 2080", "cuda:NVIDIA GeForce RTX 2080", None),
])
def test_a_gpus_peak_is_found_by_its_model_name(device: str, host: str, peak_tflops: float | None) -> None:
    use = utilisation(1e9, 1000.0, {"device": device, "host_device": host}, devices_per_trial=None)
    assert use is not None
    if peak_tflops is None:
        assert use.mfu is None and "no peak is known for the GPU" in use.peak_source
    else:
        assert use.peak_flops_per_second == peak_tflops * 1e12 and use.mfu == pytest.approx(1e12 / (peak_tflops * 1e12))


def test_no_counted_flops_is_no_utilisation() -> None:
    assert utilisation(None, 1000.0, {"device": "xla:CPU"}, devices_per_trial=None) is None


def test_a_model_left_on_the_cpu_of_a_gpu_host_is_held_to_no_gpus_peak() -> None:
    prov = {"device": "cuda:NVIDIA H100 80GB HBM3", "host_device": "cuda:NVIDIA H100 80GB HBM3"}
    on_gpu = utilisation(1e9, 1000.0, prov, devices_per_trial=None, model_device="cuda")
    assert on_gpu is not None and on_gpu.peak_flops_per_second == 989e12
    use = utilisation(1e9, 1000.0, prov, devices_per_trial=None, model_device="cpu")
    assert use is not None and use.mfu is None and use.peak_flops_per_second is None
    assert "CPU" in use.peak_source and "where the model ran" in use.peak_source
