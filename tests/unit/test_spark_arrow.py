"""The range reader's Arrow batches match what PySpark expects for the source's schema."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from consumer_client.consumer_records import Message  # noqa: E402
from consumer_client.spark.arrow_records import arrow_schema, to_record_batch  # noqa: E402


def _spark_arrow_schema(include_headers):
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return to_arrow_schema(StructType(fields), timezone="UTC")


@pytest.mark.parametrize("include_headers", [False, True])
def test_schema_is_what_pyspark_checks_against(include_headers):
    assert arrow_schema(include_headers).equals(_spark_arrow_schema(include_headers))


def test_record_batch_columns():
    msgs = [Message("t", 3, 10, None, b"v0", 1_700_000_000_123, 0, ()),
            Message("t", 3, 11, b"k", b"", 1_700_000_000_124, 1, (("h", b"x"), ("n", None)))]
    b = to_record_batch(msgs, True)
    assert b.num_rows == 2
    d = b.to_pydict()
    assert d["key"] == [None, b"k"] and d["value"] == [b"v0", b""]
    assert d["topic"] == ["t", "t"] and d["partition"] == [3, 3] and d["offset"] == [10, 11]
    assert [t.timestamp() for t in d["timestamp"]] == [1_700_000_000.123, 1_700_000_000.124]
    assert d["timestampType"] == [0, 1]
    assert d["headers"] == [[], [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]]
    assert to_record_batch(msgs, False).schema.equals(_spark_arrow_schema(False))
