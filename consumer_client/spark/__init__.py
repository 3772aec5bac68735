"""Sluice for PySpark: the ``sluice`` data source (Spark's Kafka source and sink, in Python).

    >>> from consumer_client.spark import register                         # doctest: +SKIP
    >>> register(spark)                                                    # doctest: +SKIP
    >>> spark.read.format("sluice").option("bootstrap.servers", "127.0.0.1:9092") \\
    ...     .option("subscribe", "events").load()                          # doctest: +SKIP

Needs the ``spark`` extra (pyspark >= 4.2, pyarrow >= 18) and Java 17; the Python workers must
run this environment's interpreter (:func:`session` sets ``PYSPARK_PYTHON`` for that). See
docs/spark.md.
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: PySpark's switch for Python errors without their traceback: a worker whose environment has
#: it reports an error as ``SluiceSourceError: option 'subscribe': ...`` alone, so the first
#: line of the query's error says what went wrong instead of ``Traceback (most recent call
#: last):``. (Spark's ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` sets it for
#: batch planning and tasks, not for a stream's driver-side calls, and for every UDF.)
HIDE_TRACEBACK_ENV = "SPARK_HIDE_TRACEBACK"


def register(spark: Any, *, hide_tracebacks: bool = True) -> None:
    """Register format ``"sluice"`` with ``spark`` (a SparkSession). Idempotent.

    With ``hide_tracebacks`` (the default) the data source's own Python workers (planning, a
    stream's offsets, the read tasks) get :data:`HIDE_TRACEBACK_ENV`: its errors come without
    the Python traceback, message first. Only Sluice's functions carry it (the variable is
    in the environment Spark copies into the data source when it is registered); the
    session's other UDFs and its settings are left alone. Without a SparkContext (Spark
    Connect) the data source is registered as is."""
    from consumer_client.spark.source import SluiceDataSource

    try:
        env = spark.sparkContext.environment if hide_tracebacks else None
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext to carry it
        env = None
    if env is None:
        spark.dataSource.register(SluiceDataSource)
        return
    before = env.get(HIDE_TRACEBACK_ENV)
    env[HIDE_TRACEBACK_ENV] = "1"
    try:
        spark.dataSource.register(SluiceDataSource)
    finally:
        if before is None:
            del env[HIDE_TRACEBACK_ENV]
        else:
            env[HIDE_TRACEBACK_ENV] = before


def use_this_python() -> None:
    """Make Spark's Python workers run this interpreter (the one with Sluice and pyarrow
    installed), unless ``PYSPARK_PYTHON`` is already set. Call before the session starts."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def session(app_name: str = "sluice", master: str = "local[2]", **conf: str) -> Any:
    """A SparkSession with format ``"sluice"`` registered and the workers on this
    interpreter; ``conf`` are extra Spark settings (``{"spark.sql.shuffle.partitions": "4"}``,
    dots allowed through ``**{...}``)."""
    use_this_python()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).master(master)
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    register(spark)
    return spark


__all__ = ["HIDE_TRACEBACK_ENV", "register", "session", "use_this_python"]
