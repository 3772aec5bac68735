"""The chaotic quorum simulation with every node's log on disk (:class:`DiskRaftLog` under
``tmp_path``) and power cuts that cut the files: the bytes written since the last flush survive
up to a random point, so the last batch is often torn, and each restart goes through the log's
recovery (no clean-shutdown marker). A lost disk is a new, empty directory.

These complement ``test_raft_simulation.py``, whose in-memory disk model covers thousands of
seeds: here the torn bytes are real and the recovery that cuts them is the real one.
"""

from __future__ import annotations

import pytest

from broker_core.raft.storage import DiskRaftLog
from tests.support.manual_time import ManualTime
from tests.support.raft_chaos import run_chaos_then_heal
from tests.support.raft_chaos_disk import SMALL, DiskSimulation, run_on_disk
from tests.support.raft_sim import Faults


@pytest.mark.parametrize("seed", range(8))
def test_random_faults_with_logs_on_disk_and_torn_writes_keep_every_invariant(tmp_path, seed):
    sim = run_on_disk(seed, tmp_path)
    assert sim.checker.steps > 0
    # What the files hold is the committed log: reopen each live node's directory.
    committed = tuple(sim.checker.committed)
    for n in sim.ids:
        log = DiskRaftLog.open(sim.data_dir / f"node-{n}-disk-{sim.disk_generation[n]}",
                               time_ms=ManualTime(), config=SMALL)
        try:
            start = max(log.start_offset(), 0)
            end = min(log.end_offset(), len(committed), sim.nodes[n].high_watermark)
            assert log.read(start, end - start) == committed[start:end]
        finally:
            log.close()


def test_power_cuts_tear_batches_that_recovery_cuts_and_lost_disks_are_replaced(tmp_path):
    # The faults are real: power cuts leave torn bytes that the log's recovery truncates, and
    # nodes lose their disks and come back through the reassignment procedure.
    faults = Faults(drop=0.05, max_delay_ms=20.0, crashes_per_s=1.0, power_cuts_per_s=4.0,
                    disk_losses_per_s=1.5)
    torn = lost = 0
    for seed in range(4):
        sim = DiskSimulation(seed, data_dir=tmp_path / str(seed), voters=(1, 2, 3),
                             observers=(4,), faults=faults)
        try:
            run_chaos_then_heal(sim)
            assert sim.run_until(lambda s=sim: not s.replacing, 40_000)
        finally:
            sim.close()
        torn += sum(1 for b in sim.recoveries if b > 0)
        lost += len(sim.disks_lost)
    assert torn > 0 and lost > 0
