"""AlterPartition (key 56, Kafka's AlterIsr, KIP-497), v0-1 (flexible): a partition leader asks
the controller to change the partition's ISR. Only the controller writes the
leaderAndISR znode; the leader names the state it holds (``leader_epoch`` and
``partition_epoch``, the znode's zkVersion) so the controller can refuse a change based on a stale
state. Sluice brokers are the only clients, so the versions that name topics by id (2+) and carry
broker epochs per ISR member (3+) are left out.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT8, INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "0-1"
FLEXIBLE = "0+"

# KIP-704: 1 while a partition recovers from an unclean election; Sluice always sends 0.
LEADER_RECOVERY_RECOVERED = 0

REQUEST = Message("AlterPartitionRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("broker_id", INT32),
    Field("broker_epoch", INT64, default=-1),  # the czxid of the leader's /brokers/ids node
    Field("topics", Array(Schema("AlterPartitionTopicData", [
        Field("topic_name", STRING, "0-1", ignorable=True),
        Field("partitions", Array(Schema("AlterPartitionPartitionData", [
            Field("partition_index", INT32),
            Field("leader_epoch", INT32),
            Field("new_isr", Array(INT32), "0-2"),
            Field("leader_recovery_state", INT8, "1+", default=LEADER_RECOVERY_RECOVERED),
            Field("partition_epoch", INT32),  # the leaderAndISR znode version the leader holds
        ]))),
    ]))),
])

RESPONSE = Message("AlterPartitionResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("topics", Array(Schema("AlterPartitionTopicResult", [
        Field("topic_name", STRING, "0-1", ignorable=True),
        Field("partitions", Array(Schema("AlterPartitionPartitionResult", [
            Field("partition_index", INT32),
            Field("error_code", INT16),
            Field("leader_id", INT32),
            Field("leader_epoch", INT32),
            Field("isr", Array(INT32)),
            Field("leader_recovery_state", INT8, "1+", default=LEADER_RECOVERY_RECOVERED,
                  ignorable=True),
            Field("partition_epoch", INT32),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    # A top-level error (NOT_CONTROLLER, STALE_BROKER_EPOCH, ...) speaks for every partition.
    return {"error_code": int(error_code)}
