"""Kafka's consumer protocol: the bytes a classic group of protocol type ``"consumer"`` carries
opaquely (JoinGroup's member metadata, SyncGroup's assignment), decoded for the coordinator's
OffsetDelete (which topics a group subscribes to) and the ``sluice groups`` CLI (which
partitions a member was assigned).

Every version (0-3) begins with an INT16 version, then the fields of v0, later versions only
appending; a newer version than 3 is read by its v0 prefix, as Kafka's own clients do. Both
decoders raise :class:`~broker_core.wire.primitives.MalformedFrame` on bytes that are not a
consumer-protocol message; they read only the fields they return, bounded by the buffer.
"""

from __future__ import annotations

from broker_core.wire.errors import MalformedFrame
from broker_core.wire.primitives import Reader

__all__ = ["MalformedFrame", "assigned_partitions", "subscribed_topics"]


def _version(r: Reader) -> int:
    version = r.int16()
    if version < 0:
        raise MalformedFrame(f"consumer protocol version {version}")
    return version


def subscribed_topics(metadata: bytes) -> list[str]:
    """The topics a ``ConsumerProtocolSubscription`` names (its ``topics`` field)."""
    r = Reader(metadata)
    _version(r)
    n = r.array_length(2) or 0
    return [r.string() for _ in range(n)]


def assigned_partitions(assignment: bytes) -> list[tuple[str, list[int]]]:
    """(topic, partitions) of a ``ConsumerProtocolAssignment``; empty bytes (a member not
    given an assignment yet) are no partitions."""
    if not assignment:
        return []
    r = Reader(assignment)
    _version(r)
    out = []
    for _ in range(r.array_length(6) or 0):
        topic = r.string()
        out.append((topic, [r.int32() for _ in range(r.array_length(4) or 0)]))
    return out
