"""Produce and fetch throughput of one Sluice broker, driven by a C load generator (kcat).

Starts a real ZooKeeper and one broker process on 127.0.0.1, creates a topic, then:

1. writes N messages of SIZE bytes to a file and times ``kcat -P -l FILE`` (librdkafka batches
   up to 10,000 messages / 1 MB per request; acks=1, no compression unless --compression);
2. times ``kcat -C -e`` reading them all back from offset 0 (output to /dev/null);
3. measures the disk's sequential write rate in the same run (1 MB writes + fsync) and the
   broker log's append rate for the same bytes (in-process ``Log.append_as_leader`` + flush),
   and prints the ratio.

Usage: python bench/broker_throughput.py [--messages 2000000] [--size 100] [--partitions 1]
Everything runs in a temp dir that is removed afterwards. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import write_kcat_payload  # noqa: E402
from tests.support.cluster import BrokerProcess  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402


def disk_rate(directory: Path, mb: int = 512) -> float:
    path = directory / "disk-probe"
    chunk = os.urandom(1 << 20)
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(mb):
            os.write(fd, chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    path.unlink()
    return mb / elapsed


def log_append_rate(directory: Path, total_mb: int, size: int) -> float:
    from broker_core.log import Log, LogConfig
    from broker_core.wire.records import Record, build_batch

    batch = build_batch([Record(None, b"x" * size, [], 0)] * 1000)
    log = Log.open(directory / "bench-0", LogConfig(), time_ms=lambda: 0)
    n = (total_mb << 20) // len(batch)
    start = time.perf_counter()
    for _ in range(n):
        log.append_as_leader(batch, 0)
    log.flush()
    elapsed = time.perf_counter() - start
    log.delete()
    return n * len(batch) / elapsed / (1 << 20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--compression", default="none")
    args = ap.parse_args()
    if shutil.which("kcat") is None:
        sys.exit("kcat is not installed (scripts/bootstrap.sh installs it)")
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    zk = ZooKeeperServer()
    zk.start()
    broker = BrokerProcess(1, zk.hosts, tmp)
    try:
        broker.start()
        broker.wait_listening()
        b = broker.address
        subprocess.run([sys.executable, "-m", "sluice_tools.cli", "topics", "create",
                        "--bootstrap-server", b, "--topic", "bench", "--partitions",
                        str(args.partitions), "--replication-factor", "1"], check=True,
                       cwd=ROOT)
        payload = tmp / "messages.txt"
        n, mb = write_kcat_payload(payload, args.messages, args.size)

        start = time.perf_counter()
        subprocess.run(["kcat", "-b", b, "-P", "-t", "bench", "-z", args.compression,
                        "-X", "linger.ms=10", "-X", "batch.num.messages=10000",
                        "-X", "queue.buffering.max.messages=1000000", "-l", str(payload)],
                       check=True)
        produce_s = time.perf_counter() - start
        print(f"produce: {n:,} x {args.size} B in {produce_s:.2f} s = "
              f"{n / produce_s:,.0f} msg/s ({mb / produce_s:.1f} MB/s), kcat -P, acks=1")

        start = time.perf_counter()
        out = subprocess.run(["kcat", "-b", b, "-C", "-t", "bench", "-o", "beginning", "-e",
                              "-q", "-f", "\n"], check=True, capture_output=True)
        fetch_s = time.perf_counter() - start
        got = out.stdout.count(b"\n")
        print(f"fetch:   {got:,} messages in {fetch_s:.2f} s = {got / fetch_s:,.0f} msg/s "
              f"({mb / fetch_s:.1f} MB/s), kcat -C")
        if got != n:
            print(f"WARNING: read {got} messages, produced {n}")

        disk = disk_rate(tmp)
        append = log_append_rate(tmp, 512, args.size)
        print(f"disk sequential write (1 MB writes + fsync): {disk:,.0f} MB/s")
        print(f"log append (1,000-record batches + flush):    {append:,.0f} MB/s "
              f"= {disk / append:.2f}x slower than the disk" if append < disk else
              f"log append (1,000-record batches + flush):    {append:,.0f} MB/s "
              f"(at or above the measured disk rate: page cache)")
    finally:
        broker.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
