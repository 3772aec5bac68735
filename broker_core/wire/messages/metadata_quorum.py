"""Sluice's metadata-quorum client APIs, served on the quorum listener only (Sluice-only keys):

- **MetadataWrite** (1020): a node that does not lead forwards one metadata command (the bytes
  of :mod:`broker_core.raft.metadata_commands`) to the quorum leader. The leader proposes it
  and answers, once the entry is committed, with the entry's offset; the forwarding node then
  waits until its own tree has applied that offset and takes its local apply result
  (identical on every replica), so its caller reads its own write.
- **SessionHeartbeat** (1021): a node's metadata session is alive; only the leader tracks
  session liveness. The answer carries (tagged, so an older node skips it) the leader's
  liveness table, each live session's age in ms, which the follower keeps as its view for when
  it leads (:mod:`broker_core.raft.metadata_sessions`).

Both answer ``NOT_LEADER_OR_FOLLOWER`` with the leader the responder knows (-1: none) when it
does not lead. MetadataWrite answers ``REQUEST_TIMED_OUT`` when its entry did not commit in
time (it may still commit: the forwarding node cannot tell, and reports a lost connection), and
refuses a command that does not validate without appending anything: ``UNSUPPORTED_VERSION``
for another encoding version, ``INVALID_REQUEST`` for anything else, the reason in
``error_message`` (the forwarding node fails the write with it at once);
SessionHeartbeat answers ``UNKNOWN_MEMBER_ID`` for a session the leader does not hold live.

Registered in ``DEFINED`` (not ``SUPPORTED``): a broker's client listener never serves them.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import (
    BYTES,
    INT16,
    INT32,
    INT64,
    STRING,
    Array,
    Field,
    Message,
    Schema,
)

VERSIONS = "0"
FLEXIBLE = "0+"

METADATA_WRITE_REQUEST = Message("MetadataWriteRequest", versions=VERSIONS, flexible=FLEXIBLE,
                                 fields=[
    Field("node_id", INT32),  # the forwarding node, for the leader's log lines
    Field("command", BYTES),
])

METADATA_WRITE_RESPONSE = Message("MetadataWriteResponse", versions=VERSIONS, flexible=FLEXIBLE,
                                  fields=[
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("leader_id", INT32, default=-1),
    Field("offset", INT64, default=-1),  # the committed entry's offset when error_code is 0
])

SESSION_HEARTBEAT_REQUEST = Message("SessionHeartbeatRequest", versions=VERSIONS,
                                    flexible=FLEXIBLE, fields=[
    Field("node_id", INT32),
    Field("session_id", INT64),
])

SESSION_HEARTBEAT_RESPONSE = Message("SessionHeartbeatResponse", versions=VERSIONS,
                                     flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("leader_id", INT32, default=-1),
    # The leader's liveness table (empty unless error_code is 0).
    Field("sessions", Array(Schema("SessionLiveness", [
        Field("session_id", INT64),
        Field("age_ms", INT32),
    ])), tag=0, ignorable=True),
])


class _Api:
    """One API's schemas in the shape :func:`broker_core.wire.apis.spec_from_module` reads."""

    def __init__(self, request: Message, response: Message) -> None:
        self.REQUEST = request
        self.RESPONSE = response

    @staticmethod
    def error_body(version: int, request: Any, error_code: int) -> dict:
        return {"error_code": int(error_code), "error_message": None, "leader_id": -1}


METADATA_WRITE = _Api(METADATA_WRITE_REQUEST, METADATA_WRITE_RESPONSE)
SESSION_HEARTBEAT = _Api(SESSION_HEARTBEAT_REQUEST, SESSION_HEARTBEAT_RESPONSE)
