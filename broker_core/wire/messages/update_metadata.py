"""UpdateMetadata (key 6), v7 only (flexible): the controller pushes live brokers and partition
states into every broker's metadata cache. Fields of v0-6 are listed for completeness."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, INT64, STRING, UUID, Array, Field, Message, Schema

VERSIONS = "7"
FLEXIBLE = "6+"

PARTITION_STATE = Schema("UpdateMetadataPartitionState", [
    Field("topic_name", STRING, "0-4", ignorable=True),
    Field("partition_index", INT32),
    Field("controller_epoch", INT32),
    Field("leader", INT32),
    Field("leader_epoch", INT32),
    Field("isr", Array(INT32)),
    Field("zk_version", INT32),
    Field("replicas", Array(INT32)),
    Field("offline_replicas", Array(INT32), "4+", ignorable=True),
])

REQUEST = Message("UpdateMetadataRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("controller_id", INT32),
    Field("controller_epoch", INT32),
    Field("broker_epoch", INT64, "5+", default=-1, ignorable=True),
    Field("ungrouped_partition_states", Array(PARTITION_STATE), "0-4"),
    Field("topic_states", Array(Schema("UpdateMetadataTopicState", [
        Field("topic_name", STRING, "5+"),
        Field("topic_id", UUID, "7+", ignorable=True),
        Field("partition_states", Array(PARTITION_STATE), "5+"),
    ])), "5+"),
    Field("live_brokers", Array(Schema("UpdateMetadataBroker", [
        Field("id", INT32),
        Field("v0_host", STRING, "0", ignorable=True),
        Field("v0_port", INT32, "0", ignorable=True),
        Field("endpoints", Array(Schema("UpdateMetadataEndpoint", [
            Field("port", INT32, "1+"),
            Field("host", STRING, "1+"),
            Field("listener", STRING, "3+", ignorable=True),
            Field("security_protocol", INT16, "1+"),
        ])), "1+", ignorable=True),
        Field("rack", STRING, "2+", nullable="0+", ignorable=True),
    ]))),
])

RESPONSE = Message("UpdateMetadataResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code)}
