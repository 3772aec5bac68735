"""What the read-path batch check costs: sequential reads of one partition log, old code against
new, alternating in one run.

Each round runs a worker process per code version (the current tree, and the tree of
``--old-rev`` extracted with ``git archive`` into a temp dir): it appends ``--mb`` MiB of
batches of ``--records`` records of ``--size`` bytes to a fresh log and reads it back
sequentially in ``--read-kb`` KiB reads (the shape of a consumer or follower fetch), three ways:

- ``appended``: data appended by this process — the hot path of a running broker (the new code
  checks nothing here: one comparison per read, and a length bound per batch);
- ``first read``: the same log closed cleanly and reopened, read once — the new code checks each
  batch's framing and CRC-32C now, because a clean open trusted them without reading them;
- ``second read``: read again — already verified, nothing checked.

Reports the median read throughput (MB/s) of each way over ``--rounds`` rounds, the versions
alternating so machine load hits both alike. Temp dirs are removed afterwards.

Usage: python bench/log_read_check.py [--old-rev main] [--rounds 5] [--mb 128]
       [--records 10] [--size 100] [--read-kb 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("appended", "first read", "second read")


def worker(directory: Path, mb: int, records: int, size: int, read_kb: int) -> dict[str, float]:
    from broker_core.log import Log, LogConfig
    from broker_core.wire.records import Record, build_batch

    def now_ms() -> int:
        return int(time.time() * 1000)

    config = LogConfig(segment_bytes=64 << 20)
    batch = build_batch([Record(b"k", os.urandom(size), [], 1000) for _ in range(records)])
    log = Log.open(directory / "bench-0", config, time_ms=now_ms)
    total = 0
    while total < mb << 20:
        log.append_as_leader(batch, 1)
        total += len(batch)
    log.high_watermark = log.log_end_offset

    head = struct.Struct(">qi")  # base offset, batch length

    def read_all() -> float:
        """MB/s of the log reads alone (finding the next offset is not timed)."""
        offset, got, spent = 0, 0, 0.0
        while offset < log.log_end_offset:
            start = time.perf_counter()
            data = log.read(offset, read_kb << 10).records
            spent += time.perf_counter() - start
            got += len(data)
            pos = 0
            while True:
                base, length = head.unpack_from(data, pos)
                if pos + length + 12 >= len(data):
                    break
                pos += length + 12
            offset = base + int.from_bytes(data[pos + 23:pos + 27], "big") + 1
        assert got == log.size_bytes
        return got / spent / 1e6

    out = {"appended": read_all()}
    log.close()
    log = Log.open(directory / "bench-0", config, time_ms=now_ms)
    log.high_watermark = log.log_end_offset
    out["first read"] = read_all()
    out["second read"] = read_all()
    log.close()
    return out


def run_worker(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="log-read-check-"))
    try:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(work),
               "--mb", str(args.mb), "--records", str(args.records), "--size", str(args.size),
               "--read-kb", str(args.read_kb)]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = subprocess.run(cmd, env=env, cwd=tree, check=True, capture_output=True, text=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-rev", default="main")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mb", type=int, default=128)
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--read-kb", type=int, default=1024)
    ap.add_argument("--worker", type=Path)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.mb, args.records, args.size, args.read_kb)))
        return
    # Not at the top: a worker imports broker_core from its PYTHONPATH tree, not this one.
    sys.path.insert(0, str(ROOT))
    from bench.common import extract_revision

    old_tree = Path(tempfile.mkdtemp(prefix="log-read-check-old-"))
    try:
        extract_revision(ROOT, args.old_rev, old_tree, ("broker_core",))
        results: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        for r in range(args.rounds):
            order = [("old", old_tree), ("new", ROOT)] if r % 2 == 0 else \
                [("new", ROOT), ("old", old_tree)]
            for name, tree in order:
                results[name].append(run_worker(tree, args))
        print(f"sequential reads of {args.mb} MiB in {args.read_kb} KiB reads, batches of "
              f"{args.records} x {args.size} B records; median of {args.rounds} rounds, "
              f"old = {args.old_rev}")
        print(f"{'':14}{'old MB/s':>10}{'new MB/s':>10}{'new/old':>9}")
        for way in WAYS:
            old = statistics.median(x[way] for x in results["old"])
            new = statistics.median(x[way] for x in results["new"])
            print(f"{way:14}{old:10.0f}{new:10.0f}{new / old:9.2f}")
    finally:
        shutil.rmtree(old_tree, ignore_errors=True)


if __name__ == "__main__":
    main()
