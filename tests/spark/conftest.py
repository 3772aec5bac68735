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




