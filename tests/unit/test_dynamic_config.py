"""Dynamic configs in a real metadata store (a one-voter quorum on a task.Clock): the
conditional read-modify-write of broker_core.config_changes.alter_entity, and the watches of
broker_core.dynamic_config that hand every change to the broker, untrusted values sorted out."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from twisted.internet import defer, task

from broker_core import metadata_paths as paths
from broker_core.broker import BrokerService
from broker_core.config.broker_config import BrokerConfig
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
from broker_core.server.describe_configs import describe_configs
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import describe_configs as dc
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


# -- an untrusted store: unreadable nodes and invalid stored values -------------------------------


def static_config() -> BrokerConfig:
    return BrokerConfig.from_mapping({"broker.id": "3", "zookeeper.connect": "z:1",
                                      "log.dirs": "/d", "min.insync.replicas": "1"})


def describe(clock, store, *resources: tuple[int, str]) -> list[dict]:
    request = dc.REQUEST.build({
        "resources": [{"resource_type": t, "resource_name": n, "configuration_keys": None}
                      for t, n in resources], "include_synonyms": True})
    body = run(clock, d(describe_configs(request, version=4, store=store,
                                         broker_config=static_config(), broker_id=3)))
    return body["results"]


@pytest.mark.parametrize("path, resource_type, name", [
    (paths.broker_config("<default>"), 4, ""),
    (paths.broker_config("3"), 4, "3"),
    (paths.topic_config("t"), 2, "t"),
])
def test_an_unreadable_node_is_no_configs_so_the_api_can_repair_it(clock, store, path,
                                                                    resource_type, name):
    """Another tool wrote garbage: AlterConfigs replaces it, IncrementalAlterConfigs starts
    from nothing, and DescribeConfigs answers meanwhile."""
    run(clock, store.create(path, b"garbage", makepath=True))
    kind = TOPIC if resource_type == 2 else BROKER
    key, value = ("retention.ms", "60000") if kind is TOPIC else ("log.retention.ms", "60000")
    results = describe(clock, store, (2, "t"), (4, "3"), (4, ""))
    assert [r["error_code"] for r in results] == [0, 0, 0]
    # IncrementalAlterConfigs (validate only) sees an empty set.
    got = run(clock, d(alter_entity(store, resource_type, name, lambda cur: {**cur, key: value},
                                    validate_only=True)))
    assert got == {key: value}
    assert run(clock, store.get(path))[0] == b"garbage"
    # AlterConfigs replaces the node, conditionally on the version read.
    run(clock, d(alter_entity(store, resource_type, name, lambda cur: apply_full(
        kind, [Change(key, value)]))))
    assert stored(clock, store, path) == {key: value}


def test_describe_reports_only_the_dynamic_broker_values_in_effect(clock, store):
    """A stored invalid value is ignored by every broker (effective_broker_config), so
    DescribeConfigs does not report it as the value in use."""
    run(clock, store.create(paths.broker_config("<default>"), paths.TopicConfig(
        {"min.insync.replicas": "²", "log.retention.ms": "60000", "listeners": "x"}).to_bytes(),
        makepath=True))
    run(clock, store.create(paths.broker_config("3"), paths.TopicConfig(
        {"log.retention.ms": "soon", "log.segment.bytes": "1048576"}).to_bytes()))
    own, defaults = describe(clock, store, (4, "3"), (4, ""))
    configs = {c["name"]: c for c in own["configs"]}
    mir = configs["min.insync.replicas"]
    assert (mir["value"], mir["config_source"]) == ("1", dc.ConfigSource.DEFAULT_CONFIG)
    assert [s["source"] for s in mir["synonyms"]] == [dc.ConfigSource.DEFAULT_CONFIG]
    ret = configs["log.retention.ms"]
    assert (ret["value"], ret["config_source"]) == (
        "60000", dc.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert configs["log.segment.bytes"]["value"] == "1048576"
    assert [(c["name"], c["value"]) for c in defaults["configs"]] == [
        ("log.retention.ms", "60000")]


def test_a_stored_min_insync_replicas_that_is_not_ascii_digits_falls_back(clock, store):
    """"²".isdigit() is true but int("²") raises: such a stored value must not break acks=all
    produces; the broker-level value applies, as for any value the topic key refuses."""
    broker = SimpleNamespace(effective_config=dataclasses.replace(static_config(),
                                                                  min_insync_replicas=2),
                             topic_configs={})
    for value, want in (("²", 2), ("١", 2), ("0", 2), (" 3 ", 3), ("3", 3)):
        broker.topic_configs["t"] = {"min.insync.replicas": value}
        assert BrokerService._min_insync_replicas(broker, "t") == want, value
    assert BrokerService._min_insync_replicas(broker, "other") == 2
