"""Open file descriptors of a broker's log storage, and one partition's append/read speed.

In-process, no broker, no ZooKeeper: a ``LogManager`` in a temp dir.

1. creates N partitions (default 10,000), appends a few ~1 KB batches to each; every
   ``--roll-every``-th partition has small segments, so it rolls into several segments;
   prints the process's open descriptors (``/proc/self/fd``) before, after, after a clean
   shutdown and after loading the directory again. Running out of descriptors (EMFILE) is
   reported with how far it got, not raised;
2. reads offset 0 (an old, rolled segment) of every partition with several segments: with the
   segment-descriptor LRU this reopens evicted segments;
3. times appends to one partition (small and large batches), a sequential read of it from
   offset 0 in 1 MiB fetches (crossing rolled segments), and small tail reads of the active
   segment; best of ``--repeats`` runs.

Usage: python bench/open_files.py [--partitions 10000] [--batches 6] [--roll-every 4]
       [--max-open-segments K]   (passed to LogManager when given)
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import errno
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker_core.log import Log, LogConfig, LogManager  # noqa: E402
from broker_core.wire.records import Record, build_batch  # noqa: E402


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def make_manager(directory: Path, config: LogConfig, cap: int | None) -> LogManager:
    kwargs = {} if cap is None else {"max_open_segments": cap}
    return LogManager(directory, config, time_ms=lambda: int(time.time() * 1000), **kwargs)


def many_partitions(directory: Path, args: argparse.Namespace) -> None:
    small = LogConfig(segment_bytes=2 * 1100)  # about two batches per segment
    batch = build_batch([Record(None, b"p" * 100, [], 0)] * 9)  # ~1 KB
    base = open_fds()
    print(f"open descriptors at start: {base}")
    manager = make_manager(directory, LogConfig(), args.max_open_segments)
    created = segments = 0
    start = time.perf_counter()
    try:
        for p in range(args.partitions):
            rolled = args.roll_every and p % args.roll_every == 0
            log = manager.get_or_create("fds", p, small if rolled else None)
            for _ in range(args.batches):
                log.append_as_leader(batch, 0)
            created += 1
            segments += len(log.segments)
    except OSError as e:
        if e.errno != errno.EMFILE:
            raise
        for log in manager.logs():
            log.close()
        print(f"OUT OF DESCRIPTORS (EMFILE) after {created} partitions / {segments} segments "
              f"(limit {resource.getrlimit(resource.RLIMIT_NOFILE)[0]})")
        return
    elapsed = time.perf_counter() - start
    now = open_fds()
    print(f"{created} partitions, {segments} segments, {args.batches} batches each, created in "
          f"{elapsed:.1f} s: {now} open descriptors ({now - base} for the logs, "
          f"{(now - base) / created:.2f} per partition, {(now - base) / segments:.2f} per "
          f"segment)")
    multi = [log for log in manager.logs() if len(log.segments) > 1]
    best = float("inf")
    for _pass in range(5):
        start = time.perf_counter()
        for log in multi:
            log.read(0, 1 << 20)
        best = min(best, time.perf_counter() - start)
    print(f"read offset 0 (a rolled segment) of {len(multi)} partitions, best of 5 passes: "
          f"{len(multi) / best:,.0f} reads/s, {open_fds() - base} descriptors open after")
    manager.shutdown()
    print(f"after a clean shutdown: {open_fds() - base} descriptors open")
    start = time.perf_counter()
    again = make_manager(directory, LogConfig(), args.max_open_segments)
    try:
        logs = again.load()
    except OSError as e:
        if e.errno != errno.EMFILE:
            raise
        for log in again.logs():
            log.close()
        print("OUT OF DESCRIPTORS (EMFILE) loading the directory again")
        return
    rebuilt = sum(r.indexes_rebuilt for r in again.recovery_reports.values())
    print(f"loaded {len(logs)} partitions again in {time.perf_counter() - start:.1f} s "
          f"({rebuilt} indexes rebuilt): {open_fds() - base} descriptors open")
    again.shutdown()


def _one_run(log: Log, small: bytes, large: bytes, args: argparse.Namespace) -> dict:
    """Seconds taken by each figure in one run on a fresh log; ``fetches`` is a count."""
    took: dict[str, float] = {}
    for name, batch, count in (("small", small, args.small_appends),
                               ("large", large, args.large_appends)):
        start = time.perf_counter()
        for _ in range(count):
            log.append_as_leader(batch, 0)
        took[name] = time.perf_counter() - start
    log.high_watermark = log.log_end_offset
    for _pass in range(2):  # the first pass warms the page cache
        start = time.perf_counter()
        offset = fetches = 0
        while offset < log.log_end_offset:
            offset = _next_offset(log.read(offset, 1 << 20).records)
            fetches += 1
        took["read"] = time.perf_counter() - start
    took["fetches"] = fetches
    tail = max(log.log_end_offset - 50, 0)
    start = time.perf_counter()
    for _ in range(args.tail_reads):
        log.read(tail, 16 << 10)
    took["tail"] = time.perf_counter() - start
    return took


def one_partition(directory: Path, args: argparse.Namespace) -> None:
    """Best of ``--repeats`` runs of each figure (the machine is shared: the best run is the one
    least disturbed)."""
    config = LogConfig(segment_bytes=64 << 20)
    small = build_batch([Record(None, b"s" * 100, [], 0)] * 10)  # ~1.2 KB
    large = build_batch([Record(None, b"l" * 100, [], 0)] * 1000)  # ~110 KB
    best: dict[str, float] = {}
    size = segments = 0
    for rep in range(args.repeats):
        log = Log.open(directory / f"speed-{rep}", config, time_ms=lambda: 0)
        took = _one_run(log, small, large, args)
        for name, value in took.items():
            best[name] = value if name == "fetches" else min(best.get(name, value), value)
        size, segments = log.size_bytes, len(log.segments)
        log.delete()
    for name, batch, count in (("small", small, args.small_appends),
                               ("large", large, args.large_appends)):
        print(f"append {name} batches ({len(batch):,} B): {count / best[name]:,.0f} appends/s, "
              f"{count * len(batch) / best[name] / (1 << 20):,.1f} MB/s")
    print(f"  partition: {size / (1 << 20):.0f} MB in {segments} segments; best of "
          f"{args.repeats} runs")
    print(f"read from offset 0 in 1 MiB fetches: {size / best['read'] / (1 << 20):,.0f} MB/s "
          f"({best['fetches'] / best['read']:,.0f} fetches/s)")
    print(f"tail reads of the active segment (16 KiB): {args.tail_reads / best['tail']:,.0f} "
          f"reads/s")


def _next_offset(data: bytes) -> int:
    """One past the last offset of the whole batches in ``data``."""
    pos = last = 0
    while pos + 61 <= len(data):
        base = int.from_bytes(data[pos:pos + 8], "big")
        length = int.from_bytes(data[pos + 8:pos + 12], "big")
        delta = int.from_bytes(data[pos + 23:pos + 27], "big")
        last = base + delta + 1
        pos += length + 12
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--roll-every", type=int, default=4)
    parser.add_argument("--max-open-segments", type=int, default=None)
    parser.add_argument("--small-appends", type=int, default=50_000)
    parser.add_argument("--large-appends", type=int, default=1_000)
    parser.add_argument("--tail-reads", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-partitions", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sluice-fds-"))
    try:
        if not args.skip_partitions:
            many_partitions(tmp / "many", args)
        if not args.skip_speed:
            one_partition(tmp / "one", args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
