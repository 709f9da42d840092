"""Faults of a fleet's machines under real studies, as ``bench/fleet_faults.py`` plays them (its
short form): the study database restarts under two drivers, and under a daemon and its job."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fleet_faults import FaultOutcome, daemon_database_restart, database_restart
from bench.lib.postgres import ThrowawayPostgres

pytestmark = pytest.mark.slow

#: How long the database is down: half the heartbeats' grace period, as a restart takes.
OUTAGE_S = 10.0


def _kept_everything(outcome: FaultOutcome) -> None:
    assert outcome.finished, outcome.notes
    assert (outcome.completed, outcome.lost, outcome.measured_twice) == (outcome.trials, 0, 0), outcome


def test_two_drivers_wait_for_a_database_that_restarts(ray_fleet, postgres: ThrowawayPostgres, tmp_path: Path):
    ray_fleet.start_second()
    outcome = database_restart(tmp_path, postgres, trials=4, outage_s=OUTAGE_S, ray_address=ray_fleet.address)
    _kept_everything(outcome)
    waited = [n for n in outcome.notes if "did not answer once" in n]
    assert len(waited) == 2, "each driver says once that it waited for the database"
    assert outcome.failures == {}, "no trial failed for the outage"


def test_a_daemon_and_its_job_wait_for_a_database_that_restarts(postgres: ThrowawayPostgres, tmp_path: Path):
    outcome = daemon_database_restart(tmp_path, postgres, trials=2, outage_s=OUTAGE_S)
    _kept_everything(outcome)
    said = "\n".join(outcome.notes)
    assert "does not answer" in said and "answers again" in said, said
    assert "took over" not in said and "job runner:" not in said, "the daemon kept its lease and its runner"
