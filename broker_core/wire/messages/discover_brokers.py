"""DiscoverBrokers (Sluice key 1007, docs/design.md#bootstrapping): the metadata
quorum's gossip API. A node sends what it knows and gets what the other knows:

- ``node``: the sender's own endpoint (-1 node id from a tool that is no node) and its boot
  time (milliseconds since the epoch when it started), which orders a node's endpoints: a
  restarted node may come back at another address;
- ``brokers``: every other node the sender knows, the same way;
- the quorum state the sender knows: ``cluster_id`` (null before it knows one), ``leader_id``
  (-1: none known), ``leader_epoch``, ``voters_offset`` (the log offset of the voter assignment
  ``voter_ids`` comes from, -1 for ``quorum.voters``) and ``voter_ids``.

Both sides merge what they receive only when it is newer (``broker_core.raft.discovery``):
a node's endpoint by boot time, the quorum state by (epoch, voters offset). Served by the
quorum listener only; not listed in its ApiVersions answer, as Sluice's own APIs never are.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "0"
FLEXIBLE = "0+"

NODE = Schema("DiscoveredNode", [
    Field("node_id", INT32),
    Field("host", STRING),
    Field("port", INT32),
    Field("boot_time_ms", INT64),
])


def _quorum_fields() -> list[Field]:
    return [
        Field("cluster_id", STRING, nullable="0+"),
        Field("leader_id", INT32, default=-1),
        Field("leader_epoch", INT32, default=-1),
        Field("voters_offset", INT64, default=-1),
        Field("voter_ids", Array(INT32)),
    ]


REQUEST = Message("DiscoverBrokersRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("node", NODE),
    Field("brokers", Array(NODE)),
    *_quorum_fields(),
])

RESPONSE = Message("DiscoverBrokersResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("node", NODE),
    Field("brokers", Array(NODE)),
    *_quorum_fields(),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code),
            "node": {"node_id": -1, "host": "", "port": 0, "boot_time_ms": -1},
            "brokers": [], "cluster_id": None, "voter_ids": []}
