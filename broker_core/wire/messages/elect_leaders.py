"""ElectLeaders (key 43, KIP-460), v0-v2 (flexible from v2): elect the preferred (0) or, where no
in-sync replica is left, an out-of-sync (1, unclean) replica as the leader of each partition
named, or of every partition when ``topic_partitions`` is null.

v0 has no ``election_type`` (preferred only, as KIP-183's request) and no top-level error code.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-2"
FLEXIBLE = "2+"

#: ``election_type`` values.
PREFERRED = 0
UNCLEAN = 1

REQUEST = Message("ElectLeadersRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("election_type", INT8, "1+"),
    Field("topic_partitions", Array(Schema("TopicPartitions", [
        Field("topic", STRING),
        Field("partitions", Array(INT32)),
    ])), nullable="0+"),
    Field("timeout_ms", INT32, default=60_000),
])

RESPONSE = Message("ElectLeadersResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16, "1+"),
    Field("replica_election_results", Array(Schema("ReplicaElectionResult", [
        Field("topic", STRING),
        Field("partition_result", Array(Schema("PartitionResult", [
            Field("partition_id", INT32),
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    """The top-level error (v1+), and the same code on every partition the request named."""
    code = int(error_code)
    named = [] if request is None or request.topic_partitions is None else \
        request.topic_partitions
    answer = {"replica_election_results": [
        {"topic": t.topic, "partition_result": [
            {"partition_id": p, "error_code": code} for p in t.partitions]}
        for t in named]}
    if version >= 1:  # v0 has no top-level error code
        answer["error_code"] = code
    return answer
