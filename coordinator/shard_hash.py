"""Which coordinator shard a group belongs to (docs/coordinator.md#sharding).

A group's shard is ``crc32(group id as UTF-8) mod count``: the same on every broker, in every
process and every release (never Python's ``hash()``, which is salted per process), so all
brokers and clients agree on a group's shard once they agree on the count. The count is the
cluster's stored one (:mod:`coordinator.shard_count`), never a broker's own configuration.
"""

from __future__ import annotations

import zlib

#: The range of ``group.coordinator.shards`` and of the stored count.
MIN_SHARDS = 1
MAX_SHARDS = 1024


def shard_of(group_id: str, count: int) -> int:
    """The shard (0 .. count-1) of ``group_id`` among ``count`` shards. A group id that is not
    valid UTF-8 text (lone surrogates) is hashed by its code points all the same, so every id
    has a shard."""
    if not MIN_SHARDS <= count <= MAX_SHARDS:
        raise ValueError(f"shard count {count} is outside [{MIN_SHARDS}, {MAX_SHARDS}]")
    return zlib.crc32(group_id.encode("utf-8", "surrogatepass")) % count
