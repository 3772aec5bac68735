"""Replicated produce: acks=all throughput and latency with replication factor 3, three brokers.

Starts a real ZooKeeper and three broker processes on 127.0.0.1 (all on this machine, so the
brokers, their followers' fetchers and the load generator share its cores), creates topics with
``--partitions`` partitions (default 6; preferred leaders spread over the three brokers),
replication factor 3 and ``min.insync.replicas=2``, waits for full ISRs, then:

(a) **throughput**, C load generator: writes ``--messages`` (default 1,000,000) messages of
    ``--size`` (default 100) bytes to a file and times ``kcat -P -X acks=all -l FILE``
    (librdkafka: up to 10,000 messages per batch, ``linger.ms=10``, no compression). A batch
    is acknowledged only when both followers have fetched it and the leader's high watermark
    passed it, so this measures the leader append + two follower fetches + the acks=all
    purgatory. The sum of the partitions' high watermarks is checked afterwards.

    Unless ``--fresh``, one message first goes to every partition (not timed): a partition's
    first batch fills its segments' first pages and, on each follower, starts the leader's
    epoch there (a small file, written by an IO thread), and librdkafka's sticky partitioner
    sends each batch of unkeyed messages to one partition, so with hundreds of partitions a
    fresh topic's run is mostly *first* writes (2,000,000 messages come in a few hundred
    batches). The figures printed after the throughput say where the time went: the
    brokers' and kcat's CPU per message (on two shared cores they take turns), and the
    produce requests the brokers answered, which on this path is the number of batches
    (their size varies between runs with librdkafka's timing, and the brokers' cost per
    message with it).

(b) **latency**, confluent-kafka (librdkafka under a thin Python loop): ``--rate`` (default
    10,000) messages a second for ``--seconds`` (default 10) to a second topic, ``acks=all``,
    ``linger.ms`` = each value of ``--linger-ms`` (default 0; ``0,1,5`` makes three runs on
    the same cluster, each with a fresh producer), ``socket.nagle.disable=true`` as Kafka's
    Java client has it (``--client-nagle`` keeps librdkafka's default, Nagle on, whose small
    requests wait for the broker's ACK of the previous ones). Each message's latency is the
    time from just before its ``produce()`` call (``time.perf_counter``, kept in the
    callback's closure) to its delivery callback, which runs in ``poll()``. Between send
    slots (0.1 ms apart at 10,000 msg/s) the loop blocks in ``poll()`` for the whole
    milliseconds to the next slot and sleeps the rest: ``poll()`` truncates its timeout to
    whole milliseconds, so handing it the 0.1 ms to the next slot returned at once and the
    loop spun a full core, which on a 2-core machine shared with three brokers took CPU from
    them. librdkafka's own figure (``Message.latency()``, taken in C from enqueue to the
    broker's answer) is printed next to it as a cross-check. Percentiles are over all
    messages after a 1-second warm-up.

Why the Python side is not the bottleneck at 10,000 msg/s: one ``produce()`` plus one delivery
callback costs a few microseconds of Python, i.e. a few percent of one core at this rate; the
script prints its CPU time while sending (process time, including librdkafka's threads) and
how far the send loop ever fell behind its schedule, so a run in which the generator could not
keep up is visible. Latency is measured from the actual send time, not the schedule (no coordinated-
omission correction): read the schedule lag next to the percentiles.

Usage: python bench/replicated_produce.py [--messages 1000000] [--size 100] [--partitions 6]
       [--rate 10000] [--seconds 10] [--linger-ms 0[,1,5]] [--client-nagle]
       [--fresh] [--skip-throughput] [--skip-latency]
Everything runs in a temp dir that is removed afterwards. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.common import (  # noqa: E402
    children_cpu,
    high_watermarks,
    process_cpu,
    wait_full_isr,
    write_kcat_payload,
)
from tests.support.procs import ProcessCluster  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(round(q * len(sorted_values))) - 1))
    return sorted_values[i]


def warm_up(bootstrap: str, topic: str, partitions: int) -> None:
    """One acknowledged message to each partition of ``topic``."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 2})
    for partition in range(partitions):
        p.produce(topic, b"warm-up", partition=partition)
    if p.flush(60):
        raise RuntimeError(f"the warm-up of {topic} was not acknowledged within 60 s")


def produce_requests(cluster: ProcessCluster) -> float:
    return sum(b.metric("sluice_requests_total", api="PRODUCE") for b in cluster.brokers.values())


def throughput(args: argparse.Namespace, cluster: ProcessCluster, tmp: Path) -> None:
    bootstrap = cluster.bootstrap
    pids = [b.proc.pid for b in cluster.brokers.values() if b.proc is not None]
    warm = 0 if args.fresh else args.partitions
    if warm:
        warm_up(bootstrap, "throughput", args.partitions)
    payload = tmp / "messages.txt"
    n, mb = write_kcat_payload(payload, args.messages, args.size)
    requests0 = produce_requests(cluster)
    broker0, kcat0 = process_cpu(pids), children_cpu()
    start = time.perf_counter()
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", "throughput", "-X", "acks=all",
                    "-X", "linger.ms=10", "-X", "batch.num.messages=10000",
                    "-X", "queue.buffering.max.messages=1000000", "-l", str(payload)],
                   check=True)
    elapsed = time.perf_counter() - start
    broker_cpu, kcat_cpu = process_cpu(pids) - broker0, children_cpu() - kcat0
    requests = produce_requests(cluster) - requests0
    payload.unlink()
    print(f"(a) throughput: {n:,} x {args.size} B, acks=all, RF 3, {args.partitions} partitions "
          f"in {elapsed:.2f} s = {n / elapsed:,.0f} msg/s ({mb / elapsed:.1f} MB/s), kcat -P"
          + ("" if warm else ", fresh partitions"))
    print(f"    CPU per message: brokers {broker_cpu / n * 1e6:.2f} us, kcat "
          f"{kcat_cpu / n * 1e6:.2f} us; {requests:,.0f} produce requests "
          f"({n / max(requests, 1):,.0f} messages each); load average {os.getloadavg()[0]:.2f}")
    try:
        hw = high_watermarks(bootstrap, "throughput", args.partitions) - warm
        print(f"    sum of high watermarks: {hw:,}" + ("" if hw == n else
                                                       f"  (WARNING: produced {n:,})"))
    except Exception as e:  # a figure, not a test: report and go on
        print(f"    could not read the high watermarks: {e}")


def latency(args: argparse.Namespace, bootstrap: str, linger_ms: int) -> None:
    # librdkafka leaves Nagle's algorithm on unless told (socket.nagle.disable=false), unlike
    # Kafka's Java client, which sets TCP_NODELAY on every connection: with it on, a small
    # produce request waits behind the previous one's ACK, which is what --client-nagle shows.
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
                  "enable.idempotence": False, "log_level": 2,
                  "socket.nagle.disable": not args.client_nagle})
    value = b"l" * args.size
    for _ in range(1000):  # connections and metadata before the clock starts
        p.produce("latency", value)
    p.flush(30)

    ours: list[float] = []
    theirs: list[float] = []
    errors: list[str] = []
    warmup_until = [0.0]

    def delivered(sent: float, err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
            return
        if sent >= warmup_until[0]:
            ours.append(time.perf_counter() - sent)
            lat = msg.latency()
            if lat is not None:
                theirs.append(lat)

    total = int(args.rate * args.seconds)
    interval = 1.0 / args.rate
    cpu0 = time.process_time()
    start = time.perf_counter()
    warmup_until[0] = start + 1.0
    max_lag = 0.0
    i = 0
    produce, poll, clock, sleep = p.produce, p.poll, time.perf_counter, time.sleep
    while i < total:
        now = clock()
        wait = start + i * interval - now
        if wait > 0:
            # poll() takes whole milliseconds (librdkafka truncates 0.4 ms to 0, which returns
            # at once): block in poll() for the whole milliseconds to the next slot, so
            # delivery callbacks run as they arrive, and sleep the sub-millisecond rest. A
            # callback that arrives during that sleep runs at most one slot late.
            if wait >= 0.001:
                poll(int(wait * 1000) / 1000.0)
            else:
                sleep(wait)
            continue
        max_lag = max(max_lag, -wait)
        while i < total and start + i * interval <= now:
            t = clock()
            produce("latency", value, on_delivery=lambda err, msg, t=t: delivered(t, err, msg))
            i += 1
        poll(0)
    send_cpu = time.process_time() - cpu0
    sent_s = clock() - start
    p.flush(60)
    wall = clock() - start
    ours.sort()
    theirs.sort()
    ms = 1000.0
    print(f"(b) latency: {total:,} x {args.size} B at {args.rate:,} msg/s "
          f"(sent in {sent_s:.2f} s, send loop at most {max_lag * ms:.1f} ms behind schedule), "
          f"acks=all, linger.ms={linger_ms}, confluent-kafka "
          f"(client Nagle {'on' if args.client_nagle else 'off'}); {len(errors)} errors")
    print(f"    produce() -> delivery callback, {len(ours):,} messages after 1 s warm-up: "
          f"p50 {percentile(ours, .5) * ms:.2f} ms, p99 {percentile(ours, .99) * ms:.2f} ms, "
          f"p99.9 {percentile(ours, .999) * ms:.2f} ms, max {ours[-1] * ms if ours else 0:.2f} ms")
    print(f"    librdkafka Message.latency():                          "
          f"p50 {percentile(theirs, .5) * ms:.2f} ms, p99 {percentile(theirs, .99) * ms:.2f} ms, "
          f"p99.9 {percentile(theirs, .999) * ms:.2f} ms, "
          f"max {theirs[-1] * ms if theirs else 0:.2f} ms")
    print(f"    load generator CPU while sending: {send_cpu:.2f} s in {sent_s:.2f} s "
          f"({send_cpu / sent_s * 100:.0f}% of one core, Python loop + librdkafka threads; "
          f"all delivered after {wall:.2f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--linger-ms", default="0",
                    help="comma-separated: one latency run per value, e.g. 0,1,5")
    ap.add_argument("--client-nagle", action="store_true",
                    help="leave librdkafka's default socket.nagle.disable=false in (b)")
    ap.add_argument("--fresh", action="store_true",
                    help="time (a) on partitions never written (no warm-up message to each)")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    args = ap.parse_args()
    if shutil.which("kcat") is None:
        sys.exit("kcat is not installed (scripts/bootstrap.sh installs it)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # run the cleanup
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-replicated-"))
    zk = ZooKeeperServer()
    cluster = None
    try:
        zk.start()
        cluster = ProcessCluster(zk.hosts, tmp, 3, metrics=True)
        cluster.start()
        cluster.wait_registered()
        bootstrap = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
        topics = ["throughput", "latency"]
        futures = admin.create_topics(
            [NewTopic(t, args.partitions, 3, config={"min.insync.replicas": "2"})
             for t in topics], request_timeout=60)
        for f in futures.values():
            f.result()
        wait_full_isr(cluster, topics)
        if not args.skip_throughput:
            throughput(args, cluster, tmp)
        if not args.skip_latency:
            for linger_ms in (int(v) for v in args.linger_ms.split(",")):
                latency(args, bootstrap, linger_ms)
    finally:
        if cluster is not None:
            cluster.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
