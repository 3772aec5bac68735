"""DescribeCluster (key 60, KIP-700), v0-v2 (flexible): the cluster id, the controller and the
brokers, as Metadata gives them but without topics (what ``AdminClient.describe_cluster`` and
``KafkaAdminClient.describe_cluster`` send).

v1 adds ``endpoint_type`` (1 brokers, 2 controllers, KIP-919); Sluice answers brokers only. v2
(KIP-1073) adds ``include_fenced_brokers`` and each broker's ``is_fenced``.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-2"
FLEXIBLE = "0+"

#: ``endpoint_type`` values (KIP-919).
ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2

REQUEST = Message("DescribeClusterRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("include_cluster_authorized_operations", BOOL),
    Field("endpoint_type", INT8, "1+", default=ENDPOINT_BROKERS),
    Field("include_fenced_brokers", BOOL, "2+"),
])

RESPONSE = Message("DescribeClusterResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("endpoint_type", INT8, "1+", default=ENDPOINT_BROKERS),
    Field("cluster_id", STRING),
    Field("controller_id", INT32, default=-1),
    Field("brokers", Array(Schema("DescribeClusterBroker", [
        Field("broker_id", INT32),
        Field("host", STRING),
        Field("port", INT32),
        Field("rack", STRING, nullable="0+"),
        Field("is_fenced", BOOL, "2+"),
    ]))),
    Field("cluster_authorized_operations", INT32, default=-2147483648),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code), "cluster_id": "", "brokers": []}
