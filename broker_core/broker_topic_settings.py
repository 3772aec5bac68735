"""A broker's per-topic settings: each topic's stored overrides over the broker's (dynamic)
defaults, as the logs, produce checks and elections read them, and the callbacks that keep
them equal to the store while the broker runs (functions of the
:class:`~broker_core.broker.BrokerService` whose ``topic_configs``, ``effective_config`` and
``default_log_config`` they read and replace).

Invariant: a stored override is applied only if it passes the topic key's check (the store is
not trusted); one that does not is left out and reported, and the broker's value applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from broker_core import metadata_paths as paths
from broker_core.config.broker_config import BrokerConfig
from broker_core.config.topic_keys import applied_topic_overrides
from broker_core.config_changes import read_entity
from broker_core.dynamic_config import effective_broker_config
from broker_core.log import LogConfig

if TYPE_CHECKING:
    from broker_core.broker import BrokerService

#: The topic keys the log itself applies (the rest are read by produce checks and elections).
LOG_KEYS = {"segment.bytes", "segment.ms", "retention.bytes", "retention.ms", "flush.messages",
            "flush.ms", "index.interval.bytes", "max.message.bytes", "compression.type",
            "message.timestamp.type", "message.timestamp.difference.max.ms",
            "message.timestamp.before.max.ms", "message.timestamp.after.max.ms"}


def log_config_from(cfg: BrokerConfig) -> LogConfig:
    """Broker-level log defaults as a :class:`LogConfig`."""
    return LogConfig(
        segment_bytes=cfg.log_segment_bytes,
        segment_ms=cfg.log_roll_effective_ms,
        retention_bytes=cfg.log_retention_bytes,
        retention_ms=cfg.log_retention_ms,
        flush_messages=cfg.log_flush_interval_messages,
        flush_ms=cfg.log_flush_interval_ms,
        index_interval_bytes=cfg.log_index_interval_bytes,
        max_message_bytes=cfg.message_max_bytes,
        message_timestamp_before_max_ms=cfg.log_message_timestamp_before_max_ms,
        message_timestamp_after_max_ms=cfg.log_message_timestamp_after_max_ms,
    )


def applied_override(overrides: Mapping[str, str], key: str) -> str | None:
    """A topic's stored override of ``key`` when a broker applies it (it passes the topic key's
    check: the store is not trusted), normalised; else None: the broker's value applies."""
    value = overrides.get(key)
    return None if value is None else applied_topic_overrides({key: value})[0].get(key)


def topic_log_config(broker: BrokerService, topic: str) -> LogConfig:
    """The topic's overrides over the broker's (dynamic) defaults. An override the topic
    key's check refuses, or the log cannot take (written to the store by another tool), is
    left out and reported, so one bad value neither stops the partition nor hides the
    topic's other settings (DescribeConfigs reports the same: ``applied_topic_overrides``)."""
    overrides, ignored = applied_topic_overrides(broker.topic_configs.get(topic, {}))
    for k, why in ignored.items():
        broker.log.warn("topic {t}: ignoring its config {k}: {why}", t=topic, k=k, why=why)
    log_keys = {k: v for k, v in overrides.items() if k in LOG_KEYS}
    try:
        return LogConfig.from_topic_config(broker.default_log_config, log_keys)
    except ValueError:
        good = {}
        for k, v in log_keys.items():
            try:
                LogConfig.from_topic_config(broker.default_log_config, {k: v})
                good[k] = v
            except ValueError as e:
                broker.log.warn("topic {t}: ignoring its config {k}={v!r}: {e}", t=topic, k=k,
                              v=v, e=e)
        return LogConfig.from_topic_config(broker.default_log_config, good)


def min_insync_replicas(broker: BrokerService, topic: str) -> int:
    """The topic's applied ``min.insync.replicas``, else the broker's (dynamic) value."""
    value = applied_override(broker.topic_configs.get(topic, {}), "min.insync.replicas")
    if value is None:
        return broker.effective_config.min_insync_replicas
    return int(value)


def unclean_allowed(broker: BrokerService, topic: str) -> bool:
    """The topic's applied ``unclean.leader.election.enable``, else the broker's value."""
    value = applied_override(broker.topic_configs.get(topic, {}),
                              "unclean.leader.election.enable")
    if value is None:
        return bool(broker.effective_config.unclean_leader_election_enable)
    return value == "true"


def on_topic_config(broker: BrokerService, topic: str, overrides: dict[str, str]) -> None:
    """A topic's overrides changed in the store (or were read for the first time)."""
    if broker.topic_configs.get(topic) == overrides:
        return
    broker.topic_configs[topic] = overrides
    broker.replicas.update_topic_config(topic)


def on_dynamic_broker_config(broker: BrokerService, dynamic: dict[str, str]) -> None:
    """The dynamic broker configs changed: new defaults for every log without its own
    override, and for produce checks and elections."""
    broker.effective_config, ignored = effective_broker_config(broker.config, dynamic)
    for key, why in ignored.items():
        broker.log.warn("ignoring the dynamic broker config {k}: {why}", k=key, why=why)
    broker.default_log_config = log_config_from(broker.effective_config)
    broker.log.info("dynamic broker configs now {d}", d=dynamic)
    for topic in {t for t, _ in broker.replicas.partitions}:
        broker.replicas.update_topic_config(topic)


async def load_topic_config(broker: BrokerService, topic: str) -> None:
    # No node, or an unreadable one (logged): no overrides, the broker defaults apply.
    broker.topic_configs[topic], _ = await read_entity(broker.store, paths.topic_config(topic))
    broker.replicas.forget_topic_settings(topic)


async def ensure_topic_configs(broker: BrokerService, topics: set[str]) -> None:
    """Reads the overrides of every topic not known yet. LeaderAndIsr waits for this
    before it makes a partition leader or follower here, so that the log opens with the
    topic's own settings and produces are checked against its own
    ``min.insync.replicas``: a produce that came between the two was once checked against
    the broker's default (acks=all with one replica of a topic that asks for two)."""
    broker.dynamic_configs.watch_topics(topics)  # later changes come through the watches
    unknown = sorted(topics - broker.topic_configs.keys())
    if not unknown:
        return
    try:  # one batched read: a LeaderAndIsr may bring thousands of new topics
        found = await broker.store.get_many([paths.topic_config(t) for t in unknown])
    except Exception as e:  # the store is unreachable: serve, as before, with defaults
        broker.log.warn("could not read the config of topics {t} before leading or "
                      "following them; using the broker defaults until the next metadata "
                      "update: {e}", t=unknown[:5], e=e)
        return
    for t, got in zip(unknown, found, strict=True):
        try:
            broker.topic_configs[t] = {} if got is None else dict(
                paths.TopicConfig.from_bytes(got[0]).config)
            broker.replicas.forget_topic_settings(t)
        except ValueError as e:  # unreadable: defaults, as a failed read
            broker.log.warn("the config of topic {t} is unreadable; using the broker "
                          "defaults: {e}", t=t, e=e)


def on_metadata_update(broker: BrokerService, topics: set[str]) -> None:
    # Every topic in the metadata gets a watch on its overrides; its first delivery reads
    # them (unless a LeaderAndIsr read them already), each later one applies a change. A
    # topic gone from the metadata (deleted) loses its watch and its overrides, so a topic
    # of the same name created later starts from its own.
    gone = {t for t in topics if t not in broker.cache.topics}
    broker.dynamic_configs.forget_topics(gone)
    for t in gone:
        broker.topic_configs.pop(t, None)
        broker.replicas.forget_topic_settings(t)
    broker.dynamic_configs.watch_topics(topics - gone)


