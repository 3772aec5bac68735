"""LeaderAndIsr (key 4), v5 only (flexible): the controller tells a broker which partitions it
leads or follows. ``type`` 1 ("full") is the design's INIT flag: the request names every partition
the broker hosts. Fields of v0-4 are listed for completeness; Sluice brokers send only v5.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import (
    BOOL,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    UUID,
    Array,
    Field,
    Message,
    Schema,
)

VERSIONS = "5"
FLEXIBLE = "4+"

TYPE_INCREMENTAL = 0
TYPE_FULL = 1

PARTITION_STATE = Schema("LeaderAndIsrPartitionState", [
    Field("topic_name", STRING, "0-1", ignorable=True),
    Field("partition_index", INT32),
    Field("controller_epoch", INT32),
    Field("leader", INT32),
    Field("leader_epoch", INT32),
    Field("isr", Array(INT32)),
    Field("partition_epoch", INT32),  # the leaderAndISR znode's version (zkVersion)
    Field("replicas", Array(INT32)),
    Field("adding_replicas", Array(INT32), "3+", ignorable=True),
    Field("removing_replicas", Array(INT32), "3+", ignorable=True),
    Field("is_new", BOOL, "1+", ignorable=True),
])

REQUEST = Message("LeaderAndIsrRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("controller_id", INT32),
    Field("controller_epoch", INT32),
    Field("broker_epoch", INT64, "2+", default=-1, ignorable=True),
    Field("type", INT8, "5+"),
    Field("ungrouped_partition_states", Array(PARTITION_STATE), "0-1"),
    Field("topic_states", Array(Schema("LeaderAndIsrTopicState", [
        Field("topic_name", STRING),
        Field("topic_id", UUID, "5+", ignorable=True),
        Field("partition_states", Array(PARTITION_STATE)),
    ])), "2+"),
    Field("live_leaders", Array(Schema("LeaderAndIsrLiveLeader", [
        Field("broker_id", INT32),
        Field("host_name", STRING),
        Field("port", INT32),
    ]))),
])

PARTITION_ERROR = Schema("LeaderAndIsrPartitionError", [
    Field("topic_name", STRING, "0-4", ignorable=True),
    Field("partition_index", INT32),
    Field("error_code", INT16),
])

RESPONSE = Message("LeaderAndIsrResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("partition_errors", Array(PARTITION_ERROR), "0-4"),
    Field("topics", Array(Schema("LeaderAndIsrTopicError", [
        Field("topic_id", UUID, "5+"),
        Field("partition_errors", Array(PARTITION_ERROR)),
    ])), "5+"),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code)}
