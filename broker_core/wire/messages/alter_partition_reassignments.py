"""AlterPartitionReassignments (key 45, KIP-455), v0-v1 (flexible): an admin asks the controller
to move a partition's replicas. v1 (KIP-860) adds ``allow_replication_factor_change`` (default
true): when false, a target whose size differs from the partition's replica count is refused.
Sluice reuses it for the metadata quorum: on
``__cluster_metadata``-0, ``replicas`` are the target voters and ``null`` cancels an ongoing
reassignment (:mod:`broker_core.raft.wire` maps it to the Raft core's request).

Served on both kinds of listener with different handlers: a client listener reassigns
topic partitions (:mod:`broker_core.server.cluster_admin`), the quorum listener changes its voters
(:mod:`broker_core.raft.listener_admin`). The quorum listener serves v0 only: a voter set may
change size by design, so KIP-860's flag has no meaning there.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-1"
FLEXIBLE = "0+"

REQUEST = Message("AlterPartitionReassignmentsRequest", versions=VERSIONS, flexible=FLEXIBLE,
                  fields=[
    Field("timeout_ms", INT32, default=60_000),
    Field("allow_replication_factor_change", BOOL, "1+", default=True),
    Field("topics", Array(Schema("ReassignableTopic", [
        Field("name", STRING),
        Field("partitions", Array(Schema("ReassignablePartition", [
            Field("partition_index", INT32),
            # The replicas to move to; null cancels the partition's pending reassignment.
            Field("replicas", Array(INT32), nullable="0+"),
        ]))),
    ]))),
])

RESPONSE = Message("AlterPartitionReassignmentsResponse", versions=VERSIONS, flexible=FLEXIBLE,
                   fields=[
    Field("throttle_time_ms", INT32),
    # Echoes the request's flag (Kafka marks it ignorable: a v0 answer drops it).
    Field("allow_replication_factor_change", BOOL, "1+", default=True, ignorable=True),
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("responses", Array(Schema("ReassignableTopicResponse", [
        Field("name", STRING),
        Field("partitions", Array(Schema("ReassignablePartitionResponse", [
            Field("partition_index", INT32),
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    """A top-level error, and the same code on every partition the request named (v1: the
    request's ``allow_replication_factor_change`` echoed)."""
    code = int(error_code)
    responses = [] if request is None else [
        {"name": t.name,
         "partitions": [{"partition_index": p.partition_index, "error_code": code}
                        for p in t.partitions]}
        for t in request.topics]
    allow = True if request is None or version < 1 else request.allow_replication_factor_change
    return {"error_code": code, "responses": responses, "allow_replication_factor_change": allow}
