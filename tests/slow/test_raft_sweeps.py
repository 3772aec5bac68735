"""The long seeded sweeps of the quorum simulation (the slow tier: CI runs them with the rest of
the suite; ``scripts/test.sh tests/unit`` leaves them out). The unit tier runs the same
simulations on fewer, shorter seeds (``tests/unit/test_raft_simulation.py`` and
``test_raft_simulation_disk.py``); a seed that fails here replays there exactly.
Wider sweeps: ``scripts/raft_sim_sweep.py``."""

from __future__ import annotations

import pytest

from tests.support.raft_chaos import chaotic_simulation, run_chaos_then_heal
from tests.support.raft_chaos_disk import run_on_disk

pytestmark = pytest.mark.slow


def test_many_longer_random_runs():
    # About 35 s on a 2-core machine: 1,000 seeds keep the whole suite well under its time
    # budget; a change to the Raft core runs scripts/raft_sim_sweep.py's wider sweep too.
    for seed in range(10_000, 11_000):
        run_chaos_then_heal(chaotic_simulation(seed), chaos_ms=4000.0)


def test_many_random_runs_with_logs_on_disk(tmp_path):
    for seed in range(1_000, 1_100):
        run_on_disk(seed, tmp_path / str(seed), chaos_ms=3000.0)
