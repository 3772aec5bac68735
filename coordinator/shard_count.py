"""The cluster's coordinator shard count (docs/coordinator.md#sharding): stored once at
``/coordinator_shards/count``, created by the first broker to start with its
``group.coordinator.shards``; every broker then uses the stored count, whatever its own
configuration says (a group's shard depends on the count, so all brokers must use one).

Invariants: the stored value is read as hostile: anything but a decimal integer within
[MIN_SHARDS, MAX_SHARDS] is refused (:class:`BadShardCount`), never guessed at; the node is
never rewritten here (changing the count of a running cluster would move every group).
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import NodeExists
from coordinator.shard_hash import MAX_SHARDS, MIN_SHARDS

log = Logger(namespace="sluice.coordinator.shards")


class BadShardCount(ValueError):
    """The stored shard count cannot be used."""


def parse_shard_count(data: bytes | None) -> int:
    """The shard count a stored value holds; :class:`BadShardCount` unless it is a decimal
    integer (ASCII digits only, at most 4 of them) within [MIN_SHARDS, MAX_SHARDS]."""
    text = (data or b"").strip()
    if not text or len(text) > 4 or not text.isdigit() or not text.isascii():
        raise BadShardCount(f"{paths.COORDINATOR_SHARD_COUNT} holds {bytes(data or b'')[:40]!r}, "
                            f"not a decimal shard count")
    count = int(text)
    if not MIN_SHARDS <= count <= MAX_SHARDS:
        raise BadShardCount(f"{paths.COORDINATOR_SHARD_COUNT} holds {count}, outside "
                            f"[{MIN_SHARDS}, {MAX_SHARDS}]")
    return count


async def agree_shard_count(store: Any, configured: int) -> int:
    """Create the count with ``configured`` unless it exists, then read and return the stored
    one (warning when it differs from ``configured``). Raises :class:`BadShardCount` for an
    unusable stored value, and the store's errors."""
    try:
        await store.create(paths.COORDINATOR_SHARD_COUNT, str(configured).encode(),
                           makepath=True)
    except NodeExists:
        pass
    data, _ = await store.get(paths.COORDINATOR_SHARD_COUNT)
    count = parse_shard_count(data)
    if count != configured:
        log.warn("the cluster's coordinator shard count is {n} "
                 "({path}); this broker's group.coordinator.shards={c} is ignored",
                 n=count, path=paths.COORDINATOR_SHARD_COUNT, c=configured)
    return count
