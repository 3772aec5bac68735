"""The quorum simulation with every node's log on a real disk log that power cuts can tear
(:class:`PowerCutDiskRaftLog`), and :func:`run_on_disk`, one seeded chaos run of it.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from broker_core.log import LogConfig
from broker_core.raft.storage import DiskRaftLog
from tests.support.manual_time import ManualTime
from tests.support.raft_chaos import chaotic_simulation, run_chaos_then_heal
from tests.support.raft_sim import Simulation

# Small segments, so the runs roll segments and a cut can fall in any of them.
SMALL = LogConfig(segment_bytes=2_000, index_interval_bytes=300)


class PowerCutDiskRaftLog(DiskRaftLog):
    """A :class:`DiskRaftLog` that remembers the size of each segment file at its last flush,
    so a power cut can put the files back there, plus a random part of what was written
    since."""

    _flushed: dict[str, int]
    _truncated: bool
    _cut: dict[str, int] | None
    stopped: bool  # closed, by a crash or cleanly

    @classmethod
    def open_for_sim(cls, data_dir: Path) -> PowerCutDiskRaftLog:
        log = cls.open(data_dir, time_ms=ManualTime(), config=SMALL)
        log._cut = None
        log.stopped = False
        log._note_flushed()
        return log

    def _segments(self) -> list[Path]:
        return sorted(self.directory.glob("*.log"))

    def _note_flushed(self) -> None:
        self._flushed = {p.name: p.stat().st_size for p in self._segments()}
        self._truncated = False

    def flush(self) -> None:
        super().flush()
        self._note_flushed()

    def reset(self, offset: int, epoch: int) -> None:
        super().reset(offset, epoch)  # flushes
        self._note_flushed()

    def truncate_to(self, offset: int) -> None:
        super().truncate_to(offset)
        self._truncated = True

    def power_cut(self, rng: random.Random) -> None:
        """Decide what the files keep: each segment its flushed size, then (half the time) a
        random number of the bytes written since, which usually ends inside a batch. After a
        truncation that was not flushed the overwritten bytes cannot be given back, so the
        files keep everything (what a process crash leaves). Applied at :meth:`crash_close`."""
        cut: dict[str, int] = {}
        if not self._truncated:
            for path in self._segments():
                size, flushed = path.stat().st_size, self._flushed.get(path.name, 0)
                if size > flushed:
                    cut[path.name] = flushed if rng.random() < 0.5 else rng.randint(flushed, size)
        self._cut = cut

    def crash_close(self) -> None:
        """Stop as a crash does (no flush, no clean-shutdown marker), then cut the files as
        :meth:`power_cut` decided."""
        if not self.stopped:
            self.stopped = True
            self.log.close()
        for name, size in (self._cut or {}).items():
            os.truncate(self.directory / name, size)
        self._cut = None


class DiskSimulation(Simulation):
    """:class:`Simulation` with each node's log in ``data_dir/node-<id>-disk-<n>`` (``n``: how
    many disks it lost before)."""

    def __init__(self, seed: int, *, data_dir: Path, **kwargs) -> None:
        self.data_dir = data_dir
        self.recoveries: list[int] = []  # bytes each unclean open truncated
        super().__init__(seed, **kwargs)

    def _dir(self, n: int) -> Path:
        return self.data_dir / f"node-{n}-disk-{self.disk_generation[n]}"

    def _start_node(self, n: int) -> None:
        current = self.logs[n]
        if isinstance(current, PowerCutDiskRaftLog):
            current.crash_close()
        log = self.logs[n] = PowerCutDiskRaftLog.open_for_sim(self._dir(n))
        if not log.recovery_report.clean_shutdown:
            self.recoveries.append(log.recovery_report.bytes_truncated)
        super()._start_node(n)

    def _new_log(self, n: int):
        current = self.logs[n]
        if isinstance(current, PowerCutDiskRaftLog):
            current.crash_close()
        return PowerCutDiskRaftLog.open_for_sim(self._dir(n))

    def close(self) -> None:
        for log in self.logs.values():
            if isinstance(log, PowerCutDiskRaftLog) and not log.stopped:
                log.stopped = True
                log.close()


def run_on_disk(seed: int, tmp_path: Path, chaos_ms: float = 2000.0) -> DiskSimulation:
    sim = chaotic_simulation(seed, sim_class=DiskSimulation, data_dir=tmp_path)
    assert isinstance(sim, DiskSimulation)
    try:
        run_chaos_then_heal(sim, chaos_ms)
    finally:
        sim.close()
    return sim


