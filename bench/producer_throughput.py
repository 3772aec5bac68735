"""Producer throughput: Sluice's Twisted and blocking producers against kafka-python and
confluent-kafka, in the same run, against the same broker, same message count and size.

Starts a real ZooKeeper and one broker process on 127.0.0.1 and creates one topic per client
(same partition count, replication factor 1). Each client then sends N messages of SIZE bytes
(no key) with acks=all, linger.ms=5, batch.size=16384, no compression unless --compression
(the same settings for all four; librdkafka's batch.size is in bytes too), waits for every
acknowledgement (flush), and the wall time from the first send to the end of the flush gives
msg/s and MB/s. The headline is our producers / kafka-python (the issue's acceptance figure:
>= 3x). Clients run one after the other in this process (the broker is its own process).

Usage: python bench/producer_throughput.py [--messages 500000] [--size 100] [--partitions 1]
       [--compression none] [--clients sluice-twisted,sluice-blocking,kafka-python,confluent]
Prints figures; asserts nothing (beyond every message being acknowledged).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cluster import BrokerProcess  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402

COMMON = {"acks": "all", "linger.ms": 5, "batch.size": 16384}


def sluice_twisted(bootstrap: str, topic: str, n: int, value: bytes, compression: str) -> float:
    from twisted.internet import defer

    from consumer_client.producer import Producer
    from consumer_client.reactor_thread import ReactorThread

    async def run() -> float:
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, **COMMON})
        await p.send(topic, value)  # metadata and connection, outside the timing
        send, capacity = p.send, p.wait_for_capacity
        start = time.perf_counter()
        last = None
        for i in range(n):
            last = send(topic, value)
            if not i & 1023:
                # Backpressure: fired at once while there is room, else once a request's
                # worth of buffer.memory is free again.
                await capacity()
        await p.flush()
        elapsed = time.perf_counter() - start
        await last
        await p.close()
        return elapsed

    rt = ReactorThread.get()
    return rt.call(lambda: defer.Deferred.fromCoroutine(run()))


def sluice_blocking(bootstrap: str, topic: str, n: int, value: bytes, compression: str) -> float:
    from consumer_client.blocking_producer import BlockingProducer

    p = BlockingProducer({"bootstrap.servers": bootstrap, "compression.type": compression,
                          **COMMON})
    p.send(topic, value).get(30)
    send = p.send
    start = time.perf_counter()
    for _ in range(n):
        f = send(topic, value)
    p.flush()
    elapsed = time.perf_counter() - start
    f.get(0)
    p.close()
    return elapsed


def kafka_python(bootstrap: str, topic: str, n: int, value: bytes, compression: str) -> float:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=16384,
                      compression_type=None if compression == "none" else compression,
                      enable_idempotence=False)  # Sluice serves no InitProducerId
    p.send(topic, value).get(30)
    send = p.send
    start = time.perf_counter()
    for _ in range(n):
        f = send(topic, value)
    p.flush()
    elapsed = time.perf_counter() - start
    f.get(0)
    p.close()
    return elapsed


def confluent(bootstrap: str, topic: str, n: int, value: bytes, compression: str) -> float:
    from confluent_kafka import Producer

    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": compression,
                  "queue.buffering.max.messages": 1_000_000, **COMMON})
    p.produce(topic, value)
    p.flush(30)
    produce, poll = p.produce, p.poll

    def report(err, msg):
        if err is not None:
            errors.append(err)

    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                produce(topic, value, on_delivery=report)
                break
            except BufferError:
                poll(0.001)
    p.flush(300)
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"confluent-kafka: {len(errors)} failed, first {errors[0]}")
    return elapsed


CLIENTS = {"sluice-twisted": sluice_twisted, "sluice-blocking": sluice_blocking,
           "kafka-python": kafka_python, "confluent": confluent}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--compression", default="none")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    args = ap.parse_args()
    names = args.clients.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    zk = ZooKeeperServer()
    zk.start()
    broker = BrokerProcess(1, zk.hosts, tmp)
    value = b"m" * args.size
    mb = args.messages * args.size / (1 << 20)
    rates: dict[str, float] = {}
    try:
        broker.start()
        broker.wait_listening()
        for name in names:
            subprocess.run([sys.executable, "-m", "sluice_tools.cli", "topics", "create",
                            "--bootstrap-server", broker.address, "--topic", f"bench-{name}",
                            "--partitions", str(args.partitions), "--replication-factor", "1"],
                           check=True, cwd=ROOT, capture_output=True)
        print(f"{args.messages:,} x {args.size} B, {args.partitions} partition(s), acks=all, "
              f"linger.ms=5, batch.size=16384, compression={args.compression}, one broker")
        for name in names:
            elapsed = CLIENTS[name](broker.address, f"bench-{name}", args.messages, value,
                                    args.compression)
            rates[name] = args.messages / elapsed
            print(f"{name:16s} {args.messages / elapsed:>10,.0f} msg/s  {mb / elapsed:6.1f} MB/s"
                  f"  ({elapsed:.2f} s)", flush=True)
        if "kafka-python" in rates:
            for name in ("sluice-twisted", "sluice-blocking"):
                if name in rates:
                    print(f"{name} / kafka-python = {rates[name] / rates['kafka-python']:.2f}x")
    finally:
        broker.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
