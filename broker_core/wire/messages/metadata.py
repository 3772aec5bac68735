"""Metadata (key 3), v1-12: brokers, controller and partition leaders.

Topic ids (v10+) are always the zero UUID on Sluice's side; v10+ requests may leave a topic name
null (a lookup by id, which then fails with UNKNOWN_TOPIC_ID upstream).
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import (
    BOOL,
    INT16,
    INT32,
    STRING,
    UUID,
    Array,
    Field,
    Message,
    Schema,
)

VERSIONS = "1-12"
FLEXIBLE = "9+"

# Kafka's "no authorized operations reported" bitfield.
AUTHORIZED_OPERATIONS_OMITTED = -2147483648

REQUEST = Message("MetadataRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    # null = every topic (v1+); an empty list = no topics.
    Field("topics", Array(Schema("MetadataRequestTopic", [
        Field("topic_id", UUID, "10+", ignorable=True),
        Field("name", STRING, nullable="10+"),
    ])), nullable="1+"),
    Field("allow_auto_topic_creation", BOOL, "4+", default=True),
    Field("include_cluster_authorized_operations", BOOL, "8-10"),
    Field("include_topic_authorized_operations", BOOL, "8+"),
])

RESPONSE = Message("MetadataResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "3+", ignorable=True),
    Field("brokers", Array(Schema("MetadataResponseBroker", [
        Field("node_id", INT32),
        Field("host", STRING),
        Field("port", INT32),
        Field("rack", STRING, "1+", nullable="1+", ignorable=True),
    ]))),
    Field("cluster_id", STRING, "2+", nullable="2+", ignorable=True),
    Field("controller_id", INT32, "1+", default=-1, ignorable=True),
    Field("topics", Array(Schema("MetadataResponseTopic", [
        Field("error_code", INT16),
        Field("name", STRING, nullable="12+"),
        Field("topic_id", UUID, "10+", ignorable=True),
        Field("is_internal", BOOL, "1+", ignorable=True),
        Field("partitions", Array(Schema("MetadataResponsePartition", [
            Field("error_code", INT16),
            Field("partition_index", INT32),
            Field("leader_id", INT32),
            Field("leader_epoch", INT32, "7+", default=-1, ignorable=True),
            Field("replica_nodes", Array(INT32)),
            Field("isr_nodes", Array(INT32)),
            Field("offline_replicas", Array(INT32), "5+", ignorable=True),
        ]))),
        Field("topic_authorized_operations", INT32, "8+", default=AUTHORIZED_OPERATIONS_OMITTED),
    ]))),
    Field("cluster_authorized_operations", INT32, "8-10",
          default=AUTHORIZED_OPERATIONS_OMITTED),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    """Every requested topic with ``error_code`` and no partitions (Kafka's error response)."""
    if request is None:
        return None
    topics = request.topics or []
    return {"brokers": [], "topics": [
        {"error_code": int(error_code), "name": t.name, "topic_id": t.topic_id,
         "partitions": []} for t in topics]}
