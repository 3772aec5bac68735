"""What TLS and SASL cost: acks=all produce and fetch throughput over PLAINTEXT, SSL and SASL_SSL.

Starts a real ZooKeeper and three broker processes on 127.0.0.1, each with four named
listeners: ``BROKER`` (PLAINTEXT, the inter-broker listener: replication and the controller's
requests go there, so every client listener serves the load generator only), ``PLAINTEXT``,
``SSL`` and ``SASL_SSL`` (SCRAM-SHA-512; certificates made for the run with ``cryptography``,
EC P-256, TLS 1.2 or later as the listener allows). The SCRAM user is made with ``sluice users
add`` through the brokers, so its credential sits in the metadata store as any user's.

Topics: one per client listener to produce to and one to fetch from, ``--partitions``
partitions each (default 6, leaders spread over the brokers), replication factor 3,
``min.insync.replicas=2``; the fetch topic is filled once with ``--messages`` messages.

Each of ``--rounds`` rounds (default 5) runs, for each listener in an order that rotates from
round to round (no listener always goes first on this noisy shared machine):

- **produce**: ``kcat -P -X acks=all -l FILE`` of ``--messages`` (default 1,000,000)
  ``--size``-byte (default 100) messages (librdkafka: up to 10,000 messages a batch,
  ``linger.ms=10``, no compression), as ``bench/replicated_produce.py`` does;
- **fetch**: ``kcat -C -e`` of the whole fetch topic from offset 0 (``--fetch-multiple``
  times ``--messages``, default 3), one newline printed per message (as
  ``bench/broker_throughput.py``), counted.

Each run's time includes kcat's start, TLS handshakes and SASL logins (a few milliseconds
against seconds of transfer). For every run the script also takes the CPU time the three
brokers used (``/proc/PID/stat``) and kcat used, per message: that says where a slower
listener spends its time, and gives the **CPU ratio**: PLAINTEXT's CPU per message (brokers
and kcat together) over the listener's, the throughput ratio to expect when the cores are the
limit (brokers and load generator share them here). The figures to read are the ratios to
PLAINTEXT **within each round** (the same minute of the same machine), printed with their
median and spread, and the load average before and after.

Usage: python bench/security_overhead.py [--messages 1000000] [--size 100] [--partitions 6]
       [--rounds 5] [--fetch-multiple 3]
Everything runs in a temp dir that is removed afterwards. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

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
from tests.support.certs import make_pki  # noqa: E402
from tests.support.procs import ProcessCluster  # noqa: E402
from tests.support.users import add_user  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402

#: The client listeners measured, PLAINTEXT (the reference) first.
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
#: Every broker's listeners: the inter-broker one first (the cluster's plaintext ``port``).
LISTENERS = [("BROKER", "PLAINTEXT"), *((p, p) for p in PROTOCOLS)]
USER = "bench"
PASSWORD = "bench-password-for-the-security-overhead-run"
FETCH_TOPIC = "fetch"


def produce_topic(protocol: str) -> str:
    return f"produce-{protocol.lower().replace('_', '-')}"


@dataclass(frozen=True)
class Run:
    """One timed kcat run."""

    seconds: float
    messages: int
    broker_cpu: float
    client_cpu: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def client_config(protocol: str, cafile: Path) -> dict[str, str]:
    """librdkafka's settings for one listener (kcat ``-X`` and confluent-kafka alike)."""
    if protocol == "PLAINTEXT":
        return {}
    config = {"security.protocol": protocol, "ssl.ca.location": str(cafile)}
    if protocol == "SASL_SSL":
        config.update({"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER,
                       "sasl.password": PASSWORD})
    return config


def kcat_args(config: dict[str, str]) -> list[str]:
    return [a for k, v in config.items() for a in ("-X", f"{k}={v}")]


def timed(argv: list[str], pids: list[int], expect: int | None = None) -> Run:
    """Run ``argv``; with ``expect`` None it is a producer of a known count (the caller's),
    else its output lines are counted (a consumer)."""
    broker0, client0 = process_cpu(pids), children_cpu()
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, timeout=600)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{argv[:2]}...{argv[-6:]} failed ({out.returncode}):\n"
                           + out.stderr.decode(errors="replace")[-3000:])
    count = out.stdout.count(b"\n") if expect is not None else 0
    if expect is not None and count != expect:
        print(f"    WARNING: {argv[argv.index('-t') + 1]}: read {count:,} messages, "
              f"expected {expect:,}")
    return Run(seconds, count, process_cpu(pids) - broker0, children_cpu() - client0)


def wait_logins(cluster: ProcessCluster, cafile: Path, timeout: float = 60.0) -> None:
    """Until every broker's SASL_SSL listener accepts the user (each broker's user cache is
    filled by a watch, so the first brokers may know it a moment before the last)."""
    deadline = time.monotonic() + timeout
    for b in cluster.brokers.values():
        while True:
            p = Producer({"bootstrap.servers": b.address_of("SASL_SSL"), "log_level": 0,
                          **client_config("SASL_SSL", cafile)})
            try:
                p.list_topics(timeout=5)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker {b.broker_id} refuses user {USER}") from None
                time.sleep(0.5)


def summarise(kind: str, runs: dict[str, list[Run]], size: int) -> None:
    """Per listener: median rate and spread, the ratio to PLAINTEXT taken round by round, the
    CPU per message (brokers, kcat) and the CPU ratio: PLAINTEXT's CPU per message (brokers +
    kcat) over this listener's, round by round, i.e. the throughput ratio when the machine's
    cores are what limits (all processes share them here)."""
    print(f"\n{kind}: msg/s (median, min-max over rounds); ratio to PLAINTEXT within each "
          f"round (median, min-max); CPU per message (median); CPU ratio (median, min-max)")
    base = runs["PLAINTEXT"]
    for protocol in PROTOCOLS:
        own = runs[protocol]
        rates = [r.rate for r in own]
        ratios = [r.rate / b.rate for r, b in zip(own, base, strict=True)]
        cpu_ratios = [(b.broker_cpu + b.client_cpu) / b.messages
                      / ((r.broker_cpu + r.client_cpu) / r.messages)
                      for r, b in zip(own, base, strict=True)]
        broker_us = statistics.median(r.broker_cpu / r.messages * 1e6 for r in own)
        client_us = statistics.median(r.client_cpu / r.messages * 1e6 for r in own)
        med = statistics.median(rates)
        print(f"  {protocol:<10} {med:>10,.0f} msg/s ({med * size / (1 << 20):5.1f} MB/s; "
              f"{min(rates):>9,.0f} - {max(rates):>9,.0f})  ratio "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f} - {max(ratios):.2f})  "
              f"brokers {broker_us:4.2f} us/msg, kcat {client_us:4.2f} us/msg  CPU ratio "
              f"{statistics.median(cpu_ratios):.2f} ({min(cpu_ratios):.2f} - "
              f"{max(cpu_ratios):.2f})")


def main() -> None:
    # Long on purpose: the benchmark as one script read top to bottom (arguments, cluster
    # set-up, the measured steps in order, the report, teardown in one finally); split up, the
    # order of what is measured would be scattered over helpers used once.
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fetch-multiple", type=int, default=3,
                    help="the fetch topic holds this many times --messages (default 3)")
    args = ap.parse_args()
    if shutil.which("kcat") is None:
        sys.exit("kcat is not installed (scripts/bootstrap.sh installs it)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # run the cleanup
    print("load average before: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-security-"))
    zk = ZooKeeperServer()
    cluster = None
    try:
        zk.start()
        pki = make_pki(tmp / "pki")
        cluster = ProcessCluster(zk.hosts, tmp, 3, listeners=LISTENERS, extra={
            "inter.broker.listener.name": "BROKER",
            "ssl.certfile": str(pki.server.certfile), "ssl.keyfile": str(pki.server.keyfile),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512"})
        cluster.start()
        cluster.wait_registered()
        plain = cluster.bootstrap_of("PLAINTEXT")
        add_user(plain, tmp, USER, PASSWORD)
        admin = AdminClient({"bootstrap.servers": plain, "log_level": 2})
        topics = [FETCH_TOPIC, *(produce_topic(p) for p in PROTOCOLS)]
        futures = admin.create_topics(
            [NewTopic(t, args.partitions, 3, config={"min.insync.replicas": "2"})
             for t in topics], request_timeout=60)
        for f in futures.values():
            f.result()
        wait_full_isr(cluster, topics)
        wait_logins(cluster, pki.cafile)

        payload = tmp / "messages.txt"
        n, mb = write_kcat_payload(payload, args.messages, args.size)
        produce_opts = ["-X", "acks=all", "-X", "linger.ms=10", "-X", "batch.num.messages=10000",
                        "-X", "queue.buffering.max.messages=1000000", "-l", str(payload)]
        pids = [b.proc.pid for b in cluster.brokers.values() if b.proc is not None]
        for _ in range(args.fetch_multiple):
            subprocess.run(["kcat", "-b", plain, "-P", "-t", FETCH_TOPIC, *produce_opts],
                           check=True, timeout=600)
        fetch_n = n * args.fetch_multiple
        print(f"{n:,} messages of {args.size} B ({mb:.1f} MB) per produce run, {fetch_n:,} per "
              f"fetch run, {args.partitions} partitions, RF 3, min.insync.replicas=2, acks=all; "
              f"{args.rounds} rounds")

        produced: dict[str, list[Run]] = {p: [] for p in PROTOCOLS}
        fetched: dict[str, list[Run]] = {p: [] for p in PROTOCOLS}
        for rnd in range(args.rounds):
            order = PROTOCOLS[rnd % 3:] + PROTOCOLS[:rnd % 3]
            line = []
            for protocol in order:
                opts = kcat_args(client_config(protocol, pki.cafile))
                bootstrap = cluster.bootstrap_of(protocol)
                run = timed(["kcat", "-b", bootstrap, *opts, "-P", "-t", produce_topic(protocol),
                             *produce_opts], pids)
                run = Run(run.seconds, n, run.broker_cpu, run.client_cpu)
                produced[protocol].append(run)
                line.append(f"produce {protocol} {run.rate:,.0f}")
            for protocol in order:
                opts = kcat_args(client_config(protocol, pki.cafile))
                run = timed(["kcat", "-b", cluster.bootstrap_of(protocol), *opts, "-C",
                             "-t", FETCH_TOPIC, "-o", "beginning", "-e", "-q", "-f", "\n"],
                            pids, expect=fetch_n)
                fetched[protocol].append(run)
                line.append(f"fetch {protocol} {run.rate:,.0f}")
            print(f"round {rnd + 1}: " + ", ".join(line) + " msg/s")
        payload.unlink()

        summarise("produce (kcat -P, acks=all)", produced, args.size)
        summarise("fetch (kcat -C -e)", fetched, args.size)
        for protocol in PROTOCOLS:
            hw = high_watermarks(plain, produce_topic(protocol), args.partitions)
            if hw != n * args.rounds:
                print(f"WARNING: {produce_topic(protocol)} holds {hw:,} messages, "
                      f"produced {n * args.rounds:,}")
    finally:
        if cluster is not None:
            cluster.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
