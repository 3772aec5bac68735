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


def register(spark: Any) -> None:
    """Register format ``"sluice"`` with ``spark`` (a SparkSession). Idempotent."""
    from consumer_client.spark.source import SluiceDataSource

    spark.dataSource.register(SluiceDataSource)


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


__all__ = ["register", "session", "use_this_python"]
