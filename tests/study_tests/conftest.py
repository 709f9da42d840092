from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray for the whole session (it takes about 6 s to start here).

    It declares 8 NeuronCores: Ray hands them out and sets NEURON_RT_VISIBLE_CORES on a machine
    without a Neuron device, which is what makes fleet placement testable here. And 2 compile
    workers' places (``--compile-workers``).
    """
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=os.cpu_count(), resources={"neuron_cores": 8, "compile_slots": 2}, include_dashboard=False,
                 log_to_driver=False, logging_level="ERROR")
    yield ray


@pytest.fixture(autouse=True)
def own_cache_root(tmp_path, monkeypatch):
    """Each test its own cache root: results remembered by one test must not answer another's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
