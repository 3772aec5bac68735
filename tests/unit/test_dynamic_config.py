"""Dynamic configs in a real metadata store (a one-voter quorum on a task.Clock): the
conditional read-modify-write of broker_core.config_changes.alter_entity, and the watches of
broker_core.dynamic_config that hand every change to the broker, untrusted values sorted out."""

from __future__ import annotations

import pytest
from twisted.internet import defer, task

from broker_core.config import BrokerConfig
from broker_core.config_changes import (
    BROKER,
    TOPIC,
    Change,
    ConfigChangeError,
    alter_entity,
    apply_full,
)
from broker_core.dynamic_config import DynamicConfigWatcher, effective_broker_config
from broker_core.raft.metadata_store import QuorumMetadataStore
from broker_core.wire.errors import ErrorCode
from broker_core.zk import paths
from tests.support.local_quorum import LocalQuorum, run


@pytest.fixture
def clock():
    return task.Clock()


@pytest.fixture
def store(clock):
    quorum = LocalQuorum(clock)
    s = QuorumMetadataStore(quorum, reactor=clock, session_timeout=3.0)
    run(clock, s.start())
    run(clock, s.ensure_path(paths.TOPIC_CONFIGS))
    run(clock, s.create(paths.topic("t"), b"{}", makepath=True))
    yield s
    run(clock, s.stop())
    quorum.stop()


def d(coro) -> defer.Deferred:
    return defer.Deferred.fromCoroutine(coro)


def stored(clock, store, path: str) -> dict[str, str]:
    data, _ = run(clock, store.get(path))
    return paths.TopicConfig.from_bytes(data).config


def test_alter_creates_then_rewrites_the_node_and_validate_only_writes_nothing(clock, store):
    path = paths.topic_config("t")
    run(clock, d(alter_entity(store, 2, "t", lambda cur: {**cur, "retention.ms": "1"})))
    assert stored(clock, store, path) == {"retention.ms": "1"}
    run(clock, d(alter_entity(store, 2, "t", lambda cur: {**cur, "segment.ms": "5"})))
    assert stored(clock, store, path) == {"retention.ms": "1", "segment.ms": "5"}
    got = run(clock, d(alter_entity(store, 2, "t", lambda cur: {}, validate_only=True)))
    assert got == {} and stored(clock, store, path) == {"retention.ms": "1", "segment.ms": "5"}
    # The cluster-wide broker defaults have a node of their own.
    run(clock, d(alter_entity(store, 4, "", lambda cur: apply_full(
        BROKER, [Change("min.insync.replicas", "2")]))))
    assert stored(clock, store, paths.broker_config("<default>")) == {"min.insync.replicas": "2"}


def test_refusals_write_nothing(clock, store):
    def refuse(current):
        return apply_full(TOPIC, [Change("retention.ms", "x")])

    with pytest.raises(ConfigChangeError) as info:
        run(clock, d(alter_entity(store, 2, "t", refuse)))
    assert info.value.code == ErrorCode.INVALID_CONFIG
    assert run(clock, store.exists(paths.topic_config("t"))) is None
    with pytest.raises(ConfigChangeError) as info:
        run(clock, d(alter_entity(store, 2, "ghost", lambda cur: {})))
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert run(clock, store.exists(paths.topic_config("ghost"))) is None


def test_watcher_delivers_each_topic_change_and_the_merged_broker_configs(clock, store):
    topics: list[tuple[str, dict]] = []
    brokers: list[dict] = []
    w = DynamicConfigWatcher(store, 3, on_topic=lambda t, c: topics.append((t, c)),
                             on_broker=brokers.append)
    w.start()
    w.watch_topics(["t"])
    w.watch_topics(["t"])  # once per topic
    run(clock, task.deferLater(clock, 0.1, lambda: None))
    assert topics == [("t", {})] and brokers == []  # absent nodes: no overrides
    run(clock, store.create(paths.topic_config("t"),
                            paths.TopicConfig({"retention.ms": "9"}).to_bytes()))
    run(clock, store.create(paths.broker_config("<default>"), paths.TopicConfig(
        {"log.retention.ms": "1", "min.insync.replicas": "2"}).to_bytes(), makepath=True))
    run(clock, store.create(paths.broker_config("3"),
                            paths.TopicConfig({"log.retention.ms": "5"}).to_bytes()))
    run(clock, task.deferLater(clock, 0.1, lambda: None))
    assert topics[-1] == ("t", {"retention.ms": "9"})
    assert brokers[-1] == {"log.retention.ms": "5", "min.insync.replicas": "2"}  # own wins
    # Unreadable values are ignored as no overrides; the watch goes on.
    run(clock, store.set(paths.topic_config("t"), b"not json"))
    run(clock, task.deferLater(clock, 0.1, lambda: None))
    assert topics[-1] == ("t", {})
    # A forgotten (deleted) topic's watch is cancelled; watching it again reads it anew.
    w.forget_topics(["t", "never-watched"])
    run(clock, store.set(paths.topic_config("t"), paths.TopicConfig({"x": "1"}).to_bytes()))
    run(clock, task.deferLater(clock, 0.1, lambda: None))
    assert topics[-1] == ("t", {}) and w.watched_topics == frozenset()
    w.watch_topics(["t"])
    run(clock, task.deferLater(clock, 0.1, lambda: None))
    assert topics[-1] == ("t", {"x": "1"})
    w.stop()
    run(clock, store.set(paths.topic_config("t"), paths.TopicConfig({"a": "b"}).to_bytes()))
    run(clock, task.deferLater(clock, 0.1, lambda: None))
    assert topics[-1] == ("t", {"x": "1"})  # stopped: no more deliveries


def test_effective_broker_config_keeps_only_dynamic_keys_with_good_values():
    static = BrokerConfig.from_mapping({"broker.id": "1", "zookeeper.connect": "z:1",
                                        "log.dirs": "/d", "min.insync.replicas": "1"})
    effective, ignored = effective_broker_config(static, {
        "min.insync.replicas": "2", "log.retention.ms": "soon", "listeners": "tcp:1"})
    assert effective.min_insync_replicas == 2
    assert effective.log_retention_ms == static.log_retention_ms
    assert effective.listeners == static.listeners
    assert set(ignored) == {"log.retention.ms", "listeners"}
    assert "not a key that can change" in ignored["listeners"]
