"""Consumer throughput: Sluice's blocking and Twisted consumers against kafka-python and
confluent-kafka, in the same run, on the same topic, reading the same messages.

Starts a real ZooKeeper and ONE broker process on 127.0.0.1 (one, not three: the machine has
two cores, and three broker processes plus a consumer would measure CPU contention between
them rather than the client; with one broker every client fetches every partition from the same
leader, as it would from each leader of a larger cluster). The broker is also the elected
consumer coordinator; ``group.initial.rebalance.delay.ms`` is set low (``--rebalance-delay-ms``,
default 200) so our consumers' join does not dominate. A topic of ``--partitions`` partitions
(default 4) is filled with N messages of SIZE bytes (no key) by ``kcat -P`` (librdkafka, C),
N/partitions to each partition.

Each measurement then consumes the whole topic from offset 0 to its end with one client:

- ``sluice-blocking``: ``BlockingConsumer`` iterator (``for message in consumer``);
- ``sluice-blocking-consume``: ``BlockingConsumer.consume(10000)`` lists (as confluent's below);
- ``sluice-blocking-python``: ``sluice-blocking`` with the pure-Python record loop (what runs when the
  compiled one is not built), for comparison in the same run;
- ``sluice-twisted``: Twisted ``Consumer``, an ``await consumer.get_many()`` loop on the reactor;
- ``kafka-python``: ``KafkaConsumer`` with ``poll(max_records=10000)``;
- ``confluent``: confluent-kafka ``Consumer`` with ``consume(10000)``;
- ``confluent-tuned``: the same with ``queued.min.messages=10000000`` and
  ``fetch.queue.backoff.ms=10`` (by default librdkafka stops fetching a partition for 1 s once
  100,000 of its messages wait locally, so a slower Python loop idles on an empty queue).

Ours register with our coordinator in a fresh group (``auto.offset.reset=smallest``,
auto-commit off so close() does not wait for a Ping). The broker serves no Kafka group
protocol (JoinGroup/SyncGroup), so the Kafka clients ``assign()`` every partition from offset 0
(no auto-commit either). Every client uses the same fetch sizes (``fetch.max.bytes``,
``max.partition.fetch.bytes``: our defaults unless given) and checks CRCs (librdkafka's default
is off; it is turned on so every client does the same work; ``--no-check-crcs`` turns it off for
all of them). Every client sums ``len(value)`` of every message, so nothing is left undecoded.

"join" is the time from creating the consumer to its first message (ours: coordinator lookup,
registration, the initial rebalance delay, StartFetcher, first fetch; theirs: metadata and the
first fetch). Throughput is measured from the first message to the last, and so is this
process's CPU time (all threads; the steadier figure on a shared machine); the broker's CPU is
printed per run. Each client runs ``--repeat`` times (interleaved: a, b, c, d, a, b, ...),
and the best and median are printed, with the ratios ours/kafka-python and
ours/confluent-kafka (issue 4's acceptance: >= 3x and >= 0.5x) and the CPU per message of
ours relative to theirs.

Usage: python bench/consumer_throughput.py [--messages 1000000] [--size 100] [--partitions 4]
       [--repeat 3]
       [--clients sluice-blocking,sluice-blocking-consume,sluice-blocking-python,sluice-twisted,
                  kafka-python,confluent,confluent-tuned]
       [--fetch-max-bytes 52428800] [--max-partition-fetch-bytes 1048576] [--no-check-crcs]
       python bench/consumer_throughput.py --decode-only [--repeat 5] [--size 100]
(the latter times the pure-Python and the compiled record loops alone, alternating, no broker)
Prints figures; asserts nothing beyond every client reading every message.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import process_cpu  # noqa: E402
from tests.support.cluster import BrokerProcess  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402


@dataclass
class Setup:
    bootstrap: str
    topic: str
    partitions: int
    messages: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    check_crcs: bool


@dataclass
class Run:
    join_s: float
    elapsed_s: float  # first message to last
    messages: int
    value_bytes: int
    cpu_s: float  # this process's CPU time (all threads), first message to last
    broker_cpu_s: float = 0.0  # the broker process's, over the whole run (join included)


def _group() -> str:
    return f"bench-{uuid.uuid4().hex[:8]}"


def _ours_config(s: Setup) -> dict:
    return {"bootstrap.servers": s.bootstrap, "group.id": _group(), "topics": {s.topic: 1},
            "auto.offset.reset": "smallest", "auto.commit.enable": "false",
            "fetch.max.bytes": s.fetch_max_bytes,
            "max.partition.fetch.bytes": s.max_partition_fetch_bytes,
            "check.crcs": "true" if s.check_crcs else "false"}


def sluice_blocking(s: Setup) -> Run:
    from consumer_client.blocking_consumer import BlockingConsumer

    n, total = s.messages, 0
    start = time.perf_counter()
    consumer = BlockingConsumer(_ours_config(s))
    it = iter(consumer)
    total += len(next(it).value)
    first, cpu0 = time.perf_counter(), time.process_time()
    count = 1
    if count < n:
        for m in it:
            total += len(m.value)
            count += 1
            if count == n:
                break
    last, cpu1 = time.perf_counter(), time.process_time()
    consumer.close()
    return Run(first - start, last - first, count, total, cpu1 - cpu0)


def sluice_blocking_consume(s: Setup) -> Run:
    """``BlockingConsumer.consume(10000)`` lists, read as confluent-kafka's are."""
    from consumer_client.blocking_consumer import BlockingConsumer

    n, total, count = s.messages, 0, 0
    start = time.perf_counter()
    consumer = BlockingConsumer(_ours_config(s))
    consume = consumer.consume
    first, cpu0 = None, 0.0
    while count < n:
        msgs = consume(10000, 1.0)
        if first is None:
            first, cpu0 = time.perf_counter(), time.process_time()
        for m in msgs:
            total += len(m.value)
        count += len(msgs)
    last, cpu1 = time.perf_counter(), time.process_time()
    consumer.close()
    # first is taken after the first chunk was decoded: its messages count from there.
    return Run(first - start, last - first, count, total, cpu1 - cpu0)


def sluice_blocking_python(s: Setup) -> Run:
    """``sluice-blocking`` with the pure-Python record loop even where the compiled one is
    built (what an install without a C compiler runs), for a same-run comparison."""
    from consumer_client import consumer_records

    compiled = consumer_records._compiled_records
    consumer_records._compiled_records = None
    try:
        return sluice_blocking(s)
    finally:
        consumer_records._compiled_records = compiled


def decode_only(rounds: int, size: int) -> None:
    """Decoding alone, in this process: one 1 MB chunk of ``size``-byte values (one batch, as
    kcat writes them) decoded by the pure-Python record loop and by the compiled one in
    alternation, ``rounds`` times each; this thread's CPU time per message."""
    from broker_core.wire.records import Record, build_batch
    from consumer_client import consumer_records

    n = 1_000_000 // (size + 10)
    data = build_batch([Record(None, b"m" * size, [], 1_700_000_000_000 + i // 50)
                        for i in range(n)])
    loops = {"python": None, "compiled": consumer_records._compiled_records}
    if loops["compiled"] is None:
        sys.exit("the compiled record loop is not built (see setup.py)")
    decode = consumer_records._decode
    expected = decode("t", 0, data, 0, True, len(data) * 2, None)
    assert decode("t", 0, data, 0, True, len(data) * 2, loops["compiled"]) == expected
    per_msg: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(rounds):
        for name, loop in loops.items():
            t = time.thread_time()
            for _ in range(20):
                gc.disable()  # as decode_chunk does
                decode("t", 0, data, 0, True, len(data) * 2, loop)
                gc.enable()
            per_msg[name].append((time.thread_time() - t) / (20 * n) * 1e9)
    for name, xs in per_msg.items():
        print(f"{name:9s} decode: median {statistics.median(xs):6.0f} ns/msg "
              f"(rounds: {', '.join(f'{x:.0f}' for x in xs)})")
    speedup = statistics.median(per_msg["python"]) / statistics.median(per_msg["compiled"])
    print(f"compiled / python: {speedup:.2f}x faster")


def sluice_twisted(s: Setup) -> Run:
    from twisted.internet import defer

    from consumer_client.consumer import Consumer
    from consumer_client.reactor_thread import ReactorThread

    rt = ReactorThread.get()

    async def run() -> Run:
        n, total, count = s.messages, 0, 0
        start = time.perf_counter()
        consumer = Consumer(_ours_config(s), reactor=rt.reactor)
        consumer.start()
        get_many = consumer.messages.get_many
        first, cpu0 = None, 0.0
        while count < n:
            batch = await get_many()
            if first is None:
                first, cpu0 = time.perf_counter(), time.process_time()
            for m in batch:
                total += len(m.value)
            count += len(batch)
        last, cpu1 = time.perf_counter(), time.process_time()
        await consumer.close()
        # first is taken after the first chunk was decoded: its messages count from there.
        return Run(first - start, last - first, count, total, cpu1 - cpu0)

    return rt.call(lambda: defer.Deferred.fromCoroutine(run()))


def kafka_python(s: Setup) -> Run:
    from kafka import KafkaConsumer, TopicPartition

    n, total, count = s.messages, 0, 0
    start = time.perf_counter()
    consumer = KafkaConsumer(bootstrap_servers=s.bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_bytes=s.fetch_max_bytes,
                             max_partition_fetch_bytes=s.max_partition_fetch_bytes,
                             check_crcs=s.check_crcs)
    tps = [TopicPartition(s.topic, p) for p in range(s.partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    first, cpu0 = None, 0.0
    poll = consumer.poll
    while count < n:
        for recs in poll(timeout_ms=1000, max_records=10000).values():
            if first is None:
                first, cpu0 = time.perf_counter(), time.process_time()
            for r in recs:
                total += len(r.value)
            count += len(recs)
    last, cpu1 = time.perf_counter(), time.process_time()
    consumer.close()
    return Run(first - start, last - first, count, total, cpu1 - cpu0)


def confluent(s: Setup, **extra: object) -> Run:
    from confluent_kafka import Consumer, TopicPartition

    n, total, count = s.messages, 0, 0
    start = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": s.bootstrap, "group.id": _group(),
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "fetch.max.bytes": s.fetch_max_bytes,
                         "max.partition.fetch.bytes": s.max_partition_fetch_bytes,
                         "check.crcs": s.check_crcs, **extra})
    consumer.assign([TopicPartition(s.topic, p, 0) for p in range(s.partitions)])
    first, cpu0 = None, 0.0
    consume = consumer.consume
    while count < n:
        msgs = consume(10000, 1.0)
        if not msgs:
            continue
        if first is None:
            first, cpu0 = time.perf_counter(), time.process_time()
        for m in msgs:
            if m.error() is not None:
                raise RuntimeError(f"confluent-kafka: {m.error()}")
            total += len(m.value())
        count += len(msgs)
    last, cpu1 = time.perf_counter(), time.process_time()
    consumer.close()
    return Run(first - start, last - first, count, total, cpu1 - cpu0)


def confluent_tuned(s: Setup) -> Run:
    """librdkafka without its idle gaps: by default a partition whose local queue holds more
    than queued.min.messages (100,000) is not fetched again for fetch.queue.backoff.ms (1 s),
    so a Python loop slower than the fetcher waits on an empty queue."""
    return confluent(s, **{"queued.min.messages": 10_000_000, "fetch.queue.backoff.ms": 10})


CLIENTS = {"sluice-blocking": sluice_blocking, "sluice-blocking-consume": sluice_blocking_consume,
           "sluice-blocking-python": sluice_blocking_python,
           "sluice-twisted": sluice_twisted,
           "kafka-python": kafka_python, "confluent": confluent,
           "confluent-tuned": confluent_tuned}
OURS = ("sluice-blocking", "sluice-blocking-consume", "sluice-blocking-python",
        "sluice-twisted")


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, size: int,
            tmp: Path) -> None:
    """``per_partition`` values of exactly ``size`` bytes into every partition with kcat."""
    line = b"m" * size + b"\n"
    path = tmp / "messages.txt"
    with open(path, "wb") as f:
        full, rest = divmod(per_partition, 10_000)
        for _ in range(full):
            f.write(line * 10_000)
        f.write(line * rest)
    for p in range(partitions):
        subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", str(p),
                        "-X", "linger.ms=10", "-X", "batch.num.messages=10000",
                        "-X", "queue.buffering.max.messages=1000000", "-l", str(path)],
                       check=True)
    path.unlink()


def main() -> None:
    # Long on purpose: the benchmark as one script read top to bottom (arguments, cluster
    # set-up, the measured steps in order, the report, teardown in one finally); split up, the
    # order of what is measured would be scattered over helpers used once.
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--fetch-max-bytes", type=int, default=52_428_800)
    ap.add_argument("--max-partition-fetch-bytes", type=int, default=1_048_576)
    ap.add_argument("--no-check-crcs", action="store_true")
    ap.add_argument("--rebalance-delay-ms", type=int, default=200)
    ap.add_argument("--decode-only", action="store_true",
                    help="time the record loops alone (no broker), --repeat rounds of each")
    args = ap.parse_args()
    if args.decode_only:
        decode_only(args.repeat, args.size)
        return
    names = args.clients.split(",")
    for name in names:
        if name not in CLIENTS:
            sys.exit(f"unknown client {name!r}; choose from {', '.join(CLIENTS)}")
    if shutil.which("kcat") is None:
        sys.exit("kcat is not installed (scripts/bootstrap.sh installs it)")
    per_partition = args.messages // args.partitions
    n = per_partition * args.partitions
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    zk = ZooKeeperServer()
    zk.start()
    broker = BrokerProcess(1, zk.hosts, tmp, extra={
        "group.initial.rebalance.delay.ms": str(args.rebalance_delay_ms)})
    runs: dict[str, list[Run]] = {name: [] for name in names}
    try:
        broker.start()
        broker.wait_listening()
        topic = "bench-consume"
        subprocess.run([sys.executable, "-m", "sluice_tools.cli", "topics", "create",
                        "--bootstrap-server", broker.address, "--topic", topic,
                        "--partitions", str(args.partitions), "--replication-factor", "1"],
                       check=True, cwd=ROOT, capture_output=True)
        t = time.perf_counter()
        produce(broker.address, topic, args.partitions, per_partition, args.size, tmp)
        print(f"produced {n:,} x {args.size} B into {args.partitions} partitions with kcat in "
              f"{time.perf_counter() - t:.1f} s; one broker (also the coordinator), "
              f"fetch.max.bytes={args.fetch_max_bytes}, "
              f"max.partition.fetch.bytes={args.max_partition_fetch_bytes}, "
              f"check.crcs={not args.no_check_crcs}", flush=True)
        setup = Setup(broker.address, topic, args.partitions, n, args.fetch_max_bytes,
                      args.max_partition_fetch_bytes, not args.no_check_crcs)
        for r in range(args.repeat):
            for name in names:
                bcpu0 = process_cpu([broker.proc.pid])
                run = CLIENTS[name](setup)
                run.broker_cpu_s = process_cpu([broker.proc.pid]) - bcpu0
                if run.messages != n or run.value_bytes != n * args.size:
                    raise RuntimeError(f"{name} read {run.messages} messages / "
                                       f"{run.value_bytes} bytes, expected {n} / "
                                       f"{n * args.size}")
                runs[name].append(run)
                print(f"  run {r + 1} {name:16s} {n / run.elapsed_s:>10,.0f} msg/s "
                      f"{n * args.size / run.elapsed_s / 1e6:6.1f} MB/s  "
                      f"({run.elapsed_s:.2f} s, join {run.join_s:.2f} s; CPU: client "
                      f"{run.cpu_s:.2f} s, broker {run.broker_cpu_s:.2f} s)", flush=True)
        mb = n * args.size / 1e6
        best: dict[str, float] = {}
        median: dict[str, float] = {}
        cpu: dict[str, float] = {}
        print(f"\n{'client':16s} {'best msg/s':>12s} {'MB/s':>6s} {'median msg/s':>13s} "
              f"{'MB/s':>6s} {'CPU us/msg':>11s} {'join':>6s}")
        for name in names:
            rates = [n / x.elapsed_s for x in runs[name]]
            best[name] = max(rates)
            median[name] = statistics.median(rates)
            cpu[name] = statistics.median(x.cpu_s / n * 1e6 for x in runs[name])
            join = statistics.median(x.join_s for x in runs[name])
            print(f"{name:16s} {best[name]:>12,.0f} {best[name] * mb / n:>6.1f} "
                  f"{median[name]:>13,.0f} {median[name] * mb / n:>6.1f} {cpu[name]:>11.2f} "
                  f"{join:>5.2f}s")
        print("(CPU: this process, all threads, first message to last, median; join: median "
              "seconds from creating the consumer to its first message)")
        for ours in OURS:
            if ours not in best:
                continue
            for theirs, target in (("kafka-python", 3.0), ("confluent", 0.5),
                                   ("confluent-tuned", 0.5)):
                if theirs in best:
                    rb, rm = best[ours] / best[theirs], median[ours] / median[theirs]
                    print(f"{ours} / {theirs}: best {rb:.2f}x, median {rm:.2f}x "
                          f"(target >= {target}x: {'met' if rm >= target else 'NOT met'}); "
                          f"CPU per message {cpu[ours] / cpu[theirs]:.2f}x theirs")
    finally:
        broker.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
