"""DescribeConsumerGroups (Sluice key 1006): the coordinator's view of consumer groups, for
``sluice groups list|describe``: members, their streams and partitions, the offsets the
coordinator holds (reported by Ping/StopFetcher, not yet necessarily in ZooKeeper). A null
``groups`` asks for every group. Committed offsets and lag are read by the admin tool from
ZooKeeper and the partition leaders."""

from __future__ import annotations

from typing import Any

from broker_core.wire.messages.group_types import OFFSETS
from broker_core.wire.schema import BOOL, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0"
FLEXIBLE = "0+"

REQUEST = Message("DescribeConsumerGroupsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("groups", Array(STRING), nullable="0+"),
])

RESPONSE = Message("DescribeConsumerGroupsResponse", versions=VERSIONS, flexible=FLEXIBLE,
                   fields=[
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("groups", Array(Schema("SluiceGroupDescription", [
        Field("group_id", STRING),
        Field("error_code", INT16),
        # "stable", "rebalancing", "empty" or "dead" (unknown group)
        Field("state", STRING),
        Field("generation_id", INT32),
        Field("rebalance_failures", INT32),
        Field("members", Array(Schema("SluiceMemberDescription", [
            Field("consumer_id", STRING),
            Field("host", STRING),
            Field("topic_count", STRING),
            Field("session_timeout_ms", INT32),
            Field("auto_commit", BOOL),
            Field("failed_pings", INT32),
            Field("ownership", Array(Schema("SluiceMemberThread", [
                Field("consumer_thread_id", STRING),
                Field("partitions", OFFSETS),
            ]))),
        ]))),
        Field("offsets", OFFSETS),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code)}
