"""Fixtures for the PySpark tests: one three-broker process cluster for the whole run and one
``local[2]`` SparkSession per module, its workers on this interpreter.

Skipped (not failed) without pyspark/pyarrow (the ``spark`` extra) or without Java 17+.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark", reason="the 'spark' extra (pyspark) is not installed")
pytest.importorskip("pyarrow", reason="the 'spark' extra (pyarrow) is not installed")


def _java_major() -> int | None:
    if shutil.which("java") is None:
        return None
    out = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


@pytest.fixture(scope="session")
def spark_cluster(zookeeper_server, tmp_path_factory) -> Iterator:
    """Three brokers (ids 1-3) as processes. Short retention checks let a test see offsets
    deleted by retention; a short ZooKeeper session makes a killed leader's partitions move
    within seconds."""
    from tests.support.procs import ProcessCluster

    cluster = ProcessCluster(zookeeper_server.hosts, tmp_path_factory.mktemp("spark-cluster"),
                             size=3, extra={"replica.fetch.wait.max.ms": "50",
                                            "log.retention.check.interval.ms": "300"},
                             metrics=True)
    cluster.start()
    try:
        cluster.wait_registered()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator:
    major = _java_major()
    if major is None or major < 17:
        pytest.skip(f"PySpark 4 needs Java 17+ (found {major})")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from consumer_client.spark import register

    scratch = tempfile.mkdtemp(prefix="sluice-spark-")
    session = (SparkSession.builder.master("local[2]").appName("sluice-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.local.dir", scratch)
               .config("spark.sql.warehouse.dir", os.path.join(scratch, "warehouse"))
               .config("spark.sql.session.timeZone", "UTC")
               # A loaded two-core machine can take longer than the 15 s default for a Python
               # worker to connect back to the JVM.
               .config("spark.python.authenticate.socketTimeout", "120s")
               .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={scratch}")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
        # Stop the JVM too: the next module starts its own, and none outlives the run.
        gateway = SparkContext._gateway
        if gateway is not None:
            proc = getattr(gateway, "proc", None)
            gateway.shutdown()
            if proc is not None:
                try:
                    proc.stdin.close()
                    proc.wait(timeout=30)
                except (OSError, subprocess.TimeoutExpired):
                    proc.kill()
            SparkContext._gateway = None
            SparkContext._jvm = None
        shutil.rmtree(scratch, ignore_errors=True)


def create_topic(cluster, name: str, partitions: int, config: dict[str, str] | None = None,
                 replication_factor: int = 3) -> None:
    """Create ``name`` and wait until every partition has a leader."""
    from consumer_client.admin import AdminClient
    from consumer_client.spark.options import Subscription
    from consumer_client.spark.reader import Cluster

    AdminClient(bootstrap_servers=cluster.bootstrap).create_topic(
        name, partitions, replication_factor, config)
    c = Cluster(cluster.bootstrap)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                tps = c.partitions_of(Subscription(topics=(name,)), max_age_s=0)
                if len(tps) == partitions and all(c.leaders[tp] in c.brokers for tp in tps):
                    c.latest(tps)
                    return
            except Exception:  # noqa: BLE001 - not there yet
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {name} has no leaders after 30s")
            time.sleep(0.2)
    finally:
        c.close()


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes,
                                                             list | None]],
            batch_messages: int = 1000) -> None:
    """Produce ``(partition, key, value, headers)`` records with confluent-kafka, acks=all,
    each partition's records in list order; fails on any delivery error."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def report(err, msg):  # noqa: ANN001 - confluent-kafka's callback signature
        if err is not None:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "batch.num.messages": batch_messages, "enable.idempotence": False,
                  "max.in.flight.requests.per.connection": 1})
    for partition, key, value, headers in records:
        while True:
            try:
                p.produce(topic, value=value, key=key, partition=partition, headers=headers,
                          on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0, "records still undelivered after 60s"
    assert not errors, errors[:5]
