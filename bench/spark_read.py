"""Batch read with the PySpark data source against a single-process read, in the same run.

Starts a real ZooKeeper and ``--brokers`` broker processes on 127.0.0.1, creates a topic of
``--partitions`` partitions (replication factor ``--replication-factor``), produces
``--messages`` messages of ``--size`` bytes with ``kcat -P`` (null keys: librdkafka spreads them
over the partitions), then times, in this order:

1. **single process** (twice, best kept): one Python process (this one) reads every
   partition in turn with the data source's range reader (Fetch from the leader, the
   consumer client's decoder ``consumer_records.decode_chunk``), summing value lengths; no
   Arrow. This is what one consumer process does with the data;
2. **single process + Arrow**: the same ranges read as a Spark task reads them, decoded
   column-wise into Arrow record batches (``read_range``: what Spark's Python workers do,
   here on one core and without Spark);
2b. **BlockingConsumer**: the application-facing consumer client in this process (a fresh
   group, every partition from its leader), timed from its first message;
3. **Spark**: ``spark.read.format("sluice")`` on ``local[--master-cores]``, then
   ``count(*)`` and ``sum(length(value))`` in one aggregation (every row goes through Arrow
   into the JVM). Run ``--spark-runs`` times (default 4): the first pays Python worker
   start-up and imports, the later ones find workers ready (``spark.python.worker.reuse``);
   the best run is the figure;
4. **Spark ceiling**: the same query over a data source whose workers yield one prebuilt
   Arrow batch (same schema, 100-byte values) over and over, ``--messages`` rows in 8
   partitions: what Spark itself (Arrow hand-over to the JVM, the aggregation, task
   scheduling) does on this machine when reading costs nothing. Run three times, best kept.

Prints rows/s for each and the ratio Spark / single process. Session start-up (JVM) is not
timed. Everything runs in a temp dir that is removed afterwards. Prints figures; asserts nothing
but that every read saw every message.

Usage: python bench/spark_read.py [--messages 2000000] [--size 100] [--partitions 8]
       [--master-cores 2] [--spark-runs 4] [--min-partitions N] [--brokers 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import write_kcat_payload  # noqa: E402
from tests.support.procs import ProcessCluster  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402


def single_process(bootstrap: str, topic: str, arrow: bool) -> tuple[int, int, float]:
    """(rows, total value bytes, seconds) reading every partition in turn in this process."""
    import pyarrow.compute as pc

    from consumer_client.spark.offsets import OffsetRange
    from consumer_client.spark.options import Subscription
    from consumer_client.spark.reader import Cluster, read_messages, read_range

    cluster = Cluster(bootstrap)
    start = time.perf_counter()
    rows = size = 0
    try:
        tps = cluster.partitions_of(Subscription(topics=(topic,)))
        first, last = cluster.earliest(tps), cluster.latest(tps)
        for tp in tps:
            rng = OffsetRange(tp[0], tp[1], first[tp], last[tp])
            if arrow:
                for batch in read_range(cluster, rng):
                    rows += batch.num_rows
                    size += pc.sum(pc.binary_length(batch.column(1))).as_py()
            else:
                for chunk in read_messages(cluster, rng):
                    rows += len(chunk)
                    size += sum(len(m.value) for m in chunk)
    finally:
        cluster.close()
    return rows, size, time.perf_counter() - start


def consumer_read(bootstrap: str, topic: str, total: int) -> tuple[int, int, float]:
    """(rows, value bytes, seconds from the first message to the last) with one
    ``BlockingConsumer`` (the application-facing consumer client: joins a fresh group with the
    coordinator, fetches every partition from its leader, hands messages to this thread)."""
    import uuid

    from consumer_client.blocking_consumer import BlockingConsumer

    rows = size = 0
    start = None
    with BlockingConsumer(bootstrap_servers=bootstrap, group_id=f"bench-{uuid.uuid4().hex[:8]}",
                          topics={topic: 1}, auto_offset_reset="smallest",
                          auto_commit_enable=False) as consumer:
        for m in consumer:
            if start is None:
                start = time.perf_counter()
            rows += 1
            size += len(m.value)
            if rows >= total:
                break
        secs = time.perf_counter() - (start or time.perf_counter())
    return rows, size, secs


def spark_read(spark, bootstrap: str, topic: str, min_partitions: int | None
               ) -> tuple[int, int, float]:
    options = {"bootstrap.servers": bootstrap, "subscribe": topic}
    if min_partitions:
        options["minPartitions"] = str(min_partitions)
    return spark_read_format(spark, "sluice", **options)


def spark_read_format(spark, fmt: str, **options: str) -> tuple[int, int, float]:
    """(rows, value bytes, seconds) of ``count(*)`` and ``sum(length(value))`` over
    ``spark.read.format(fmt)``: every row goes through Arrow into the JVM."""
    from pyspark.sql import functions as F

    r = spark.read.format(fmt).options(**options)
    start = time.perf_counter()
    row = r.load().agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
    return row.n, row.b, time.perf_counter() - start


def constant_source(rows: int, partitions: int, batch_rows: int = 5000) -> type:
    """A PySpark data source (format ``"sluice-bench-constant"``, Sluice's schema) whose
    ``partitions`` tasks each yield one prebuilt Arrow batch until ``rows / partitions`` rows."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from consumer_client.spark.source import SCHEMA_DDL

    class ConstantReader(DataSourceReader):
        def partitions(self) -> list:
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            from consumer_client.spark.arrow_records import arrow_schema

            n = batch_rows
            schema = arrow_schema(False)
            cols = [pa.nulls(n, pa.binary()), pa.array([b"x" * 99] * n, pa.binary()),
                    pa.repeat(pa.scalar("bench", pa.string()), n),
                    pa.repeat(pa.scalar(partition.value, pa.int32()), n),
                    pa.array(range(n), pa.int64()),
                    pa.array([0] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                    pa.repeat(pa.scalar(0, pa.int32()), n)]
            batch = pa.RecordBatch.from_arrays(cols, schema=schema)
            for _ in range(rows // partitions // n):
                yield batch

    class ConstantSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "sluice-bench-constant"

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema: object) -> DataSourceReader:
            return ConstantReader()

    return ConstantSource


def main() -> None:
    # Long on purpose: the benchmark as one script read top to bottom (arguments, cluster
    # set-up, the measured steps in order, the report, teardown in one finally); split up, the
    # order of what is measured would be scattered over helpers used once.
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--replication-factor", type=int, default=1)
    ap.add_argument("--master-cores", type=int, default=2)
    ap.add_argument("--spark-runs", type=int, default=4)
    ap.add_argument("--min-partitions", type=int, default=None)
    args = ap.parse_args()
    if shutil.which("kcat") is None:
        sys.exit("kcat is not installed (scripts/bootstrap.sh installs it)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-spark-"))
    zk = ZooKeeperServer()
    zk.start()
    cluster = ProcessCluster(zk.hosts, tmp / "cluster", size=args.brokers)
    spark = None
    try:
        cluster.start()
        cluster.wait_registered()
        b = cluster.bootstrap
        subprocess.run([sys.executable, "-m", "sluice_tools.cli", "topics", "create",
                        "--bootstrap-server", b, "--topic", "bench", "--partitions",
                        str(args.partitions), "--replication-factor",
                        str(args.replication_factor)], check=True, cwd=ROOT)
        time.sleep(1.0)
        payload = tmp / "messages.txt"
        n, mb = write_kcat_payload(payload, args.messages, args.size)
        start = time.perf_counter()
        subprocess.run(["kcat", "-b", b, "-P", "-t", "bench", "-X", "linger.ms=10",
                        "-X", "batch.num.messages=10000",
                        "-X", "queue.buffering.max.messages=1000000", "-l", str(payload)],
                       check=True)
        print(f"produced {n:,} x {args.size} B ({mb:.0f} MB) over {args.partitions} partitions "
              f"in {time.perf_counter() - start:.1f} s (kcat -P); {args.brokers} brokers, "
              f"replication factor {args.replication_factor}")
        value_bytes = n * (args.size - 1)

        results: dict[str, float] = {}
        # Twice each, best kept: the first pass also warms the brokers' page cache.
        for name, arrow in (("single process", False), ("single process + Arrow", True)) * 2:
            rows, size, secs = single_process(b, "bench", arrow)
            assert rows == n, f"{name} read {rows} rows, expected {n}"
            results[name] = max(results.get(name, 0.0), n / secs)
            print(f"{name:<24} {rows:>10,} rows in {secs:6.2f} s = {n / secs:>11,.0f} rows/s")
        for _ in range(2):
            rows, size, secs = consumer_read(b, "bench", n)
            assert rows == n, f"BlockingConsumer read {rows} rows, expected {n}"
            name = "BlockingConsumer"
            results[name] = max(results.get(name, 0.0), n / secs)
            print(f"{name:<24} {rows:>10,} rows in {secs:6.2f} s = {n / secs:>11,.0f} rows/s "
                  "(from its first message)")

        from consumer_client.spark import session
        scratch = tmp / "spark"
        spark = session("sluice-bench", master=f"local[{args.master_cores}]", **{
            "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
            "spark.local.dir": str(scratch), "spark.driver.memory": "2g",
            "spark.python.authenticate.socketTimeout": "120s"})
        spark.sparkContext.setLogLevel("ERROR")
        best = 0.0
        for i in range(args.spark_runs):
            rows, size, secs = spark_read(spark, b, "bench", args.min_partitions)
            assert rows == n and size == value_bytes, (rows, size)
            best = max(best, n / secs)
            print(f"Spark local[{args.master_cores}] run {i + 1}   {rows:>10,} rows in "
                  f"{secs:6.2f} s = {n / secs:>11,.0f} rows/s"
                  + ("  (Python workers starting)" if i == 0 else ""))
        rows_per_task = 5000 * (n // 8 // 5000)
        spark.dataSource.register(constant_source(rows_per_task * 8, 8))
        ceiling = 0.0
        for i in range(3):
            rows, size, secs = spark_read_format(spark, "sluice-bench-constant")
            assert rows == rows_per_task * 8 and size == rows * (args.size - 1), (rows, size)
            ceiling = max(ceiling, rows / secs)
            print(f"Spark ceiling run {i + 1}    {rows:>10,} rows in {secs:6.2f} s = "
                  f"{rows / secs:>11,.0f} rows/s  (constant Arrow batches, no reading)")
        print(f"Spark best: {best:,.0f} rows/s = {best / results['single process']:.2f}x the "
              f"single-process read, {best / results['single process + Arrow']:.2f}x the "
              f"single-process read + Arrow, {best / results['BlockingConsumer']:.2f}x the "
              f"BlockingConsumer; {best / ceiling:.0%} of Spark's ceiling here "
              f"({ceiling:,.0f} rows/s)")
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
