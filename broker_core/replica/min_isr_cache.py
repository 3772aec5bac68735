"""Each topic's ``min.insync.replicas``, looked up once per change of the topic's settings.

Every acks=all produce asks for it twice per partition, and the answer (the topic's override
parsed and checked, or the broker's default) changes only when the topic's overrides or the
broker's configs change. The replica manager forgets a topic's value whenever those are read,
replaced or removed, and when one of its partitions is created (a topic deleted and created
again under its name), and every value when the broker's configs change.

Invariant: a cached value is what ``lookup`` answered after the last such change.
"""

from __future__ import annotations

from collections.abc import Callable


class MinIsrCache:
    """Callable like ``lookup`` (topic → min.insync.replicas), answering from a cache."""

    __slots__ = ("lookup", "_values")

    def __init__(self, lookup: Callable[[str], int]) -> None:
        self.lookup = lookup
        self._values: dict[str, int] = {}

    def __call__(self, topic: str) -> int:
        value = self._values.get(topic)
        if value is None:
            value = self._values[topic] = self.lookup(topic)
        return value

    def forget(self, topic: str) -> None:
        """The topic's settings changed (or the topic is new): ask ``lookup`` next time."""
        self._values.pop(topic, None)

    def clear(self) -> None:
        """The broker's settings changed: ask ``lookup`` again for every topic."""
        self._values.clear()
