"""Topic and partition listeners: which groups a topic change affects.

A children watch on ``/brokers/topics`` reports new (and deleted) topics; a data watch on each
``/brokers/topics/[topic]`` reports its partition count (Sluice keeps a topic's partitions in
that znode's assignment, so a partition added through the controller changes its data). The
callbacks run on the reactor and call ``on_topics(new, deleted)`` (the first report included)
and ``on_partitions(topic)`` (from a topic's second report on: its first only records the count).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.logger import Logger

from broker_core import metadata_paths as paths

log = Logger(namespace="sluice.coordinator.listeners")


class TopicListeners:
    """See the module docstring. Invariant: ``partitions[t]`` is the last partition count read
    for every topic ``t`` in ``topics`` (absent until its first data read)."""

    def __init__(self, store: Any, *, on_topics: Callable[[set[str], set[str]], None],
                 on_partitions: Callable[[str], None]) -> None:
        self.store = store
        self.on_topics = on_topics
        self.on_partitions = on_partitions
        self.topics: set[str] = set()
        self.partitions: dict[str, int] = {}
        self._root: Any = None
        self._topic_watches: dict[str, Any] = {}
        self._loaded = False

    def start(self) -> None:
        self._root = self.store.watch_children(paths.TOPICS, self._topics_changed)

    def stop(self) -> None:
        if self._root is not None:
            self._root.cancel()
            self._root = None
        for w in self._topic_watches.values():
            w.cancel()
        self._topic_watches.clear()
        self.topics.clear()
        self.partitions.clear()
        self._loaded = False

    def _topics_changed(self, children: list[str] | None) -> None:
        if self._root is None:
            return
        current = set(children or ())
        new = current - self.topics
        deleted = self.topics - current
        self.topics = current
        for t in deleted:
            w = self._topic_watches.pop(t, None)
            if w is not None:
                w.cancel()
            self.partitions.pop(t, None)
        for t in sorted(new):
            self._topic_watches[t] = self.store.watch_data(
                paths.topic(t), lambda data, stat, t=t: self._topic_data(t, data))
        # The first report is reported too: a group that registered between the election and
        # this first read may have computed its topics without them (wildcards).
        self._loaded = True
        if new or deleted:
            self.on_topics(new, deleted)

    def _topic_data(self, topic: str, data: bytes | None) -> None:
        if topic not in self._topic_watches or data is None:
            return
        try:
            count = len(paths.TopicAssignment.from_bytes(data).partitions)
        except ValueError as e:
            log.warn("unreadable assignment of topic {t}: {e}", t=topic, e=e)
            return
        previous = self.partitions.get(topic)
        self.partitions[topic] = count
        if previous is not None and previous != count:
            self.on_partitions(topic)
