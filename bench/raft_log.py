"""Append and read speed of the metadata log on disk (``DiskRaftLog``), in-process.

1. Appends: ``--entries`` entries of ``--size`` bytes, one ``append`` call per entry (a leader
   appends one entry per proposal), with a ``flush`` (fsync) every N entries for each N of
   ``--flush-every``. With a flush after every entry the figure is the disk's fsync rate; the
   run stops early after ``--max-seconds`` so slow disks finish. The in-memory log's rate is
   printed alongside, as the ceiling of the Raft core's own cost.
2. Reads of the log written last: ``read(start, M)`` (decoded ``LogEntry`` tuples) and
   ``read_records(start, M)`` (the stored batches as bytes, what a leader sends in a fetch) for
   M in ``--read-sizes``, from random start offsets.

Usage: python bench/raft_log.py [--entries 20000] [--size 100] [--flush-every 1,10,100,1000]
Runs in a temp dir that is removed afterwards; prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_core.raft.entries import LogEntry  # noqa: E402
from broker_core.raft.log import InMemoryRaftLog  # noqa: E402
from broker_core.raft.storage import DiskRaftLog  # noqa: E402


def append_rate(log, entries: list[LogEntry], flush_every: int,
                max_seconds: float) -> tuple[int, float]:
    """(entries appended, seconds) appending one at a time with a flush every ``flush_every``."""
    start = time.perf_counter()
    done = 0
    for entry in entries:
        log.append((entry,))
        done += 1
        if done % flush_every == 0:
            log.flush()
            if time.perf_counter() - start > max_seconds:
                break
    log.flush()
    return done, time.perf_counter() - start


def read_rate(read, end: int, max_entries: int, seconds: float = 1.0) -> tuple[float, float]:
    """(calls/s, entries/s) of ``read(start, max_entries)`` from random starts for ~seconds."""
    rng = random.Random(1)
    calls = got = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(20):
            result = read(rng.randrange(max(end - max_entries, 1)), max_entries)
            got += len(result) if isinstance(result, tuple) else max_entries
            calls += 1
    elapsed = time.perf_counter() - start
    return calls / elapsed, got / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--flush-every", default="1,10,100,1000")
    parser.add_argument("--read-sizes", default="1,100,1000")
    parser.add_argument("--max-seconds", type=float, default=10.0)
    args = parser.parse_args()

    payload = b"m" * args.size
    entries = [LogEntry(i, 1, payload) for i in range(args.entries)]
    memory = InMemoryRaftLog()
    n, secs = append_rate(memory, entries, args.entries, args.max_seconds)
    print(f"in-memory log append: {n / secs:,.0f} entries/s ({n} entries)")

    tmp = Path(tempfile.mkdtemp(prefix="raft-log-bench-"))
    try:
        log = None
        for every in (int(x) for x in args.flush_every.split(",")):
            data_dir = tmp / f"flush-{every}"
            log = DiskRaftLog.open(data_dir, time_ms=lambda: 0)
            n, secs = append_rate(log, entries, every, args.max_seconds)
            size = log.log.size_bytes
            print(f"disk log append, flush every {every:>5}: {n / secs:>10,.0f} entries/s "
                  f"({n} entries in {secs:.2f} s, {size / n:.0f} B stored per entry, "
                  f"{n / every / secs:,.0f} flushes/s)")
            if every != int(args.flush_every.split(",")[-1]):
                log.close()
        assert log is not None
        end = log.end_offset()
        for m in (int(x) for x in args.read_sizes.split(",")):
            calls, per_entry = read_rate(log.read, end, m)
            raw_calls, raw_entries = read_rate(log.read_records, end, m)
            print(f"read {m:>5} entries: {calls:>9,.0f} reads/s ({per_entry:>10,.0f} entries/s); "
                  f"read_records: {raw_calls:>9,.0f} reads/s ({raw_entries:>10,.0f} entries/s)")
        log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
