"""One rule for a topic's stored overrides, which the store does not vouch for: a broker applies
those the topic key's check accepts (normalised) and ignores the others, the broker-level value
applying instead (as Kafka ignores an invalid override); DescribeConfigs reports the same
(``applied_topic_overrides``, tested there against a real store)."""

from __future__ import annotations

from types import SimpleNamespace

from broker_core.broker import BrokerService
from broker_core.config.broker_config import BrokerConfig
from broker_core.config.topic_keys import applied_topic_overrides
from broker_core.log import LogConfig

MINIMAL = {"broker.id": "1", "log.dirs": "d", "zookeeper.connect": "zk:2181",
           "unclean.leader.election.enable": "true", "min.insync.replicas": "2"}


def test_known_valid_overrides_are_applied_normalised_and_the_others_ignored_with_why():
    applied, ignored = applied_topic_overrides({
        "retention.ms": " 1000 ", "unclean.leader.election.enable": "TRUE",
        "min.insync.replicas": "0", "segment.bytes": "big", "x.future.key": "y"})
    assert applied == {"retention.ms": "1000", "unclean.leader.election.enable": "true"}
    assert ignored == {
        "min.insync.replicas": "invalid value '0' for 'min.insync.replicas': expected an "
                               "integer ≥ 1",
        "segment.bytes": ignored["segment.bytes"]}
    assert "'segment.bytes'" in ignored["segment.bytes"]


def broker_with(overrides: dict[str, str]) -> SimpleNamespace:
    """The parts of a BrokerService its per-topic settings read, for topic ``t``."""
    cfg = BrokerConfig.from_mapping(MINIMAL)
    b = SimpleNamespace(topic_configs={"t": overrides}, effective_config=cfg,
                        default_log_config=LogConfig(retention_ms=5000),
                        log=SimpleNamespace(warn=lambda *a, **kw: None))
    return b


def test_a_broker_falls_back_to_its_own_values_for_invalid_overrides():
    bad = broker_with({"unclean.leader.election.enable": "yes", "min.insync.replicas": "0",
                       "retention.ms": "soon", "segment.bytes": "4096"})
    assert BrokerService._unclean_allowed(bad, "t") is True
    assert BrokerService._min_insync_replicas(bad, "t") == 2
    config = BrokerService._topic_log_config(bad, "t")
    assert (config.retention_ms, config.segment_bytes) == (5000, 4096)
    good = broker_with({"unclean.leader.election.enable": "FALSE", "min.insync.replicas": "3"})
    assert BrokerService._unclean_allowed(good, "t") is False
    assert BrokerService._min_insync_replicas(good, "t") == 3
