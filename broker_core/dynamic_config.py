"""A broker's view of the dynamic configs (:mod:`broker_core.config_changes`), kept current by
watches so that AlterConfigs applies on every broker while it runs.

- Per topic: a data watch on ``/config/topics/[topic]`` for every topic in the broker's
  metadata (cancelled when the topic leaves it); each delivery (the first one included) hands
  the topic's overrides to ``on_topic`` (an empty mapping once the node is gone).
- Broker-level: data watches on ``/config/brokers/<default>`` and ``/config/brokers/[own id]``;
  each delivery hands the merged dynamic broker configs (this broker's own over the
  cluster-wide defaults) to ``on_broker``.

Values from the store are not trusted: :func:`effective_broker_config` keeps only keys of
:data:`~broker_core.config_changes.DYNAMIC_BROKER_KEYS` with values their parser accepts, and
reports the others; topic overrides are checked where they are turned into log settings.
Callbacks run on the reactor thread, one at a time (the store's contract).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.config.broker_config import BROKER_KEYS, BrokerConfig
from broker_core.config.parsing import ConfigError
from broker_core.config_changes import DEFAULT_BROKER, DYNAMIC_BROKER_KEYS

log = Logger(namespace="sluice.config")


def effective_broker_config(static: BrokerConfig, dynamic: Mapping[str, str]
                            ) -> tuple[BrokerConfig, dict[str, str]]:
    """``static`` with the dynamic values applied, and the ignored entries (key -> why)."""
    changes: dict[str, Any] = {}
    ignored: dict[str, str] = {}
    for key, raw in dynamic.items():
        if key not in DYNAMIC_BROKER_KEYS:
            ignored[key] = "not a key that can change while the broker runs"
            continue
        spec = BROKER_KEYS[key]
        try:
            changes[spec.attr] = spec.parse(key, raw)
        except ConfigError as e:
            ignored[key] = str(e)
    return dataclasses.replace(static, **changes), ignored


def _decode(path: str, data: bytes | None) -> dict[str, str]:
    if data is None:
        return {}
    try:
        return dict(paths.TopicConfig.from_bytes(data).config)
    except ValueError as e:
        log.warn("{p} is unreadable; ignoring it until it changes: {e}", p=path, e=e)
        return {}


class DynamicConfigWatcher:
    """See the module docstring. ``start()`` begins the broker-level watches, ``watch_topics``
    adds topic watches (idempotent), ``stop()`` cancels every watch."""

    def __init__(self, store: Any, broker_id: int, *,
                 on_topic: Callable[[str, dict[str, str]], None],
                 on_broker: Callable[[dict[str, str]], None]) -> None:
        self.store = store
        self.broker_id = broker_id
        self.on_topic = on_topic
        self.on_broker = on_broker
        self._topic_watches: dict[str, Any] = {}
        self._broker_watches: list[Any] = []
        self._levels: dict[str, dict[str, str]] = {DEFAULT_BROKER: {}, "own": {}}

    def start(self) -> None:
        for level, name in ((DEFAULT_BROKER, DEFAULT_BROKER), ("own", str(self.broker_id))):
            path = paths.broker_config(name)
            self._broker_watches.append(self.store.watch_data(
                path, lambda data, stat, level=level, path=path:
                self._broker_changed(level, _decode(path, data))))

    def _broker_changed(self, level: str, values: dict[str, str]) -> None:
        if values == self._levels[level]:
            return
        self._levels[level] = values
        self.on_broker({**self._levels[DEFAULT_BROKER], **self._levels["own"]})

    def watch_topics(self, topics: Iterable[str]) -> None:
        for topic in topics:
            if topic in self._topic_watches:
                continue
            path = paths.topic_config(topic)
            self._topic_watches[topic] = self.store.watch_data(
                path, lambda data, stat, topic=topic, path=path:
                self.on_topic(topic, _decode(path, data)))

    def forget_topics(self, topics: Iterable[str]) -> None:
        """Cancel the watches of deleted topics (a recreated one is watched anew)."""
        for topic in topics:
            w = self._topic_watches.pop(topic, None)
            if w is not None:
                w.cancel()

    @property
    def watched_topics(self) -> frozenset[str]:
        return frozenset(self._topic_watches)

    def stop(self) -> None:
        for w in [*self._topic_watches.values(), *self._broker_watches]:
            w.cancel()
        self._topic_watches.clear()
        self._broker_watches.clear()
