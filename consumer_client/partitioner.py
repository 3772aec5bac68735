"""Which partition a record goes to: the partitioner seam and Kafka's default rule.

:class:`IPartitioner` is the seam (docs/design.md#shared-decisions): the producer calls
``partition(topic, key, partitions, available)`` once per record whose partition the application
did not choose. :class:`DefaultPartitioner` is Kafka's rule, so a keyed record lands in the same
partition whichever client (Java, librdkafka with ``partitioner=murmur2_random``, kafka-python
or this one) produced it:

- with a key: ``(murmur2(key) & 0x7fffffff) % partition_count`` over *all* partitions, available
  or not (``Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions`` in Kafka's
  ``BuiltInPartitioner``), so a key's partition never moves while its leader is down;
- without a key: round robin over the partitions that have a leader (all of them when none has),
  per topic. Kafka 2.4+ is "sticky" per batch instead (KIP-480); round robin spreads load evenly
  from the first record, which matters more for a Python producer whose batches fill slowly.
"""

from __future__ import annotations

from collections.abc import Sequence

from zope.interface import Interface, implementer

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: MurmurHash2, 32 bit, seed 0x9747b28c, as a *signed* int32.

    Word by word in little-endian order, then the 1-3 tail bytes, then the final mix, all mod
    2**32; the result is reinterpreted as Java's signed int so it matches Kafka's test values.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length & ~3
    # int.from_bytes over a 4-byte slice is the cheapest word read in pure Python.
    for i in range(0, end, 4):
        k = (int.from_bytes(data[i:i + 4], "little") * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length & 3
    if extra >= 3:
        h ^= data[end + 2] << 16
    if extra >= 2:
        h ^= data[end + 1] << 8
    if extra >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``: abs(MIN_INT) overflows)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition Kafka's default partitioner picks for ``key`` among ``partition_count``."""
    return to_positive(murmur2(key)) % partition_count


class IPartitioner(Interface):
    """Chooses the partition of a record the application did not place itself.

    Called on the producer's thread of control (the reactor thread for the Twisted producer, the
    sending thread for the blocking one) once per record; it must be quick and must not block.
    """

    def partition(topic: str, key: bytes | None, partitions: Sequence[int],  # noqa: N805
                  available: Sequence[int]) -> int:
        """Return one of ``partitions`` (every partition of ``topic``, sorted; never empty).
        ``available`` lists those that have a leader now (possibly empty)."""


@implementer(IPartitioner)
class DefaultPartitioner:
    """Kafka's default: murmur2 of the key, round robin without a key (module docstring).

    Invariant: a given key maps to the same partition for as long as the partition count of
    its topic does not change, whatever the leaders do.
    """

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, partitions: Sequence[int],
                  available: Sequence[int]) -> int:
        if key is not None:
            return partitions[to_positive(murmur2(key)) % len(partitions)]
        pool = available or partitions
        n = self._next.get(topic, 0)
        self._next[topic] = n + 1
        return pool[n % len(pool)]
