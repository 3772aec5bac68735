"""DescribeLogDirs (key 35, KIP-113), v1-v4 (flexible from v2): each log directory of the broker
asked, and the size of every partition replica in it. A null ``topics`` asks for every partition.

v0 is not served (Kafka 4 dropped it too); v3 adds the top-level ``error_code``, v4 each
directory's ``total_bytes`` and ``usable_bytes`` (KIP-827). v5 (KIP-1066's ``is_cordoned``) is
left out.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "1-4"
FLEXIBLE = "2+"

REQUEST = Message("DescribeLogDirsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("topics", Array(Schema("DescribableLogDirTopic", [
        Field("topic", STRING),
        Field("partitions", Array(INT32)),
    ])), nullable="0+"),
])

RESPONSE = Message("DescribeLogDirsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16, "3+"),
    Field("results", Array(Schema("DescribeLogDirsResult", [
        Field("error_code", INT16),
        Field("log_dir", STRING),
        Field("topics", Array(Schema("DescribeLogDirsTopic", [
            Field("name", STRING),
            Field("partitions", Array(Schema("DescribeLogDirsPartition", [
                Field("partition_index", INT32),
                Field("partition_size", INT64),
                Field("offset_lag", INT64),
                Field("is_future_key", BOOL),
            ]))),
        ]))),
        Field("total_bytes", INT64, "4+", ignorable=True, default=-1),
        Field("usable_bytes", INT64, "4+", ignorable=True, default=-1),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    """v3+ carry the error at the top; v1-v2 have no error field and answer no directories
    (as Kafka does, e.g. to a principal that may not describe the cluster)."""
    if version < 3:
        return {"results": []}
    return {"error_code": int(error_code), "results": []}
