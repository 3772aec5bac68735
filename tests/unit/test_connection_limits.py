"""Connection counting by peer: the broker-wide and per-address limits, the per-address
overrides, the refusal log's rate limit, and the idle tracker's LRU."""

from __future__ import annotations

import pytest

from broker_core.config.broker_config import BrokerConfig
from broker_core.config.listener_keys import parse_overrides
from broker_core.config.parsing import ConfigError
from broker_core.server.connection_limits import (
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_IP,
    ConnectionLimiter,
    RefusalLog,
    ServerLimits,
    normalise_host,
)
from broker_core.server.idle import IdleTracker


def test_per_ip_limit_refuses_past_the_limit_and_frees_on_release():
    limiter = ConnectionLimiter(max_connections=100, max_per_ip=2)
    assert limiter.admit("10.0.0.1") is None
    assert limiter.admit("10.0.0.1") is None
    assert limiter.admit("10.0.0.1") == MAX_CONNECTIONS_PER_IP
    assert limiter.admit("10.0.0.2") is None  # another address has its own count
    assert (limiter.total, limiter.per_ip) == (3, {"10.0.0.1": 2, "10.0.0.2": 1})
    limiter.release("10.0.0.1")
    assert limiter.admit("10.0.0.1") is None


def test_total_limit_refuses_whatever_the_address():
    limiter = ConnectionLimiter(max_connections=2, max_per_ip=10)
    assert limiter.admit("10.0.0.1") is None
    assert limiter.admit("10.0.0.2") is None
    assert limiter.admit("10.0.0.3") == MAX_CONNECTIONS
    assert limiter.total == 2 and "10.0.0.3" not in limiter.per_ip  # a refusal counts nothing


def test_overrides_raise_or_lower_one_address_limit():
    limiter = ConnectionLimiter(max_connections=100, max_per_ip=1,
                                overrides=parse_overrides("10.0.0.9:3, ::1:0"))
    assert [limiter.admit("10.0.0.9") for _ in range(4)] == [None, None, None,
                                                               MAX_CONNECTIONS_PER_IP]
    assert limiter.admit("0:0::1") == MAX_CONNECTIONS_PER_IP  # ::1 spelt another way: limit 0
    assert limiter.admit("10.0.0.1") is None
    assert limiter.admit("10.0.0.1") == MAX_CONNECTIONS_PER_IP


def test_released_hosts_leave_the_table():
    limiter = ConnectionLimiter(max_connections=10, max_per_ip=10)
    limiter.admit("10.0.0.1")
    limiter.release("10.0.0.1")
    assert (limiter.total, limiter.per_ip) == (0, {})
    with pytest.raises(RuntimeError):
        limiter.release("10.0.0.1")


@pytest.mark.parametrize("bad", ["10.0.0.1", "10.0.0.1:x", ":5", "10.0.0.1:-1"])
def test_bad_overrides_are_refused(bad):
    with pytest.raises(ValueError):
        parse_overrides(bad)


def test_refusal_log_says_one_line_per_peer_and_reason_per_interval():
    log = RefusalLog(interval_s=60.0)
    assert log.refused("a", MAX_CONNECTIONS_PER_IP, 0.0) == 0
    assert [log.refused("a", MAX_CONNECTIONS_PER_IP, t) for t in (1.0, 2.0, 59.0)] == [None] * 3
    assert log.refused("a", MAX_CONNECTIONS, 3.0) == 0  # another reason: its own line
    assert log.refused("b", MAX_CONNECTIONS_PER_IP, 3.0) == 0  # another peer too
    assert log.refused("a", MAX_CONNECTIONS_PER_IP, 60.0) == 3  # the 3 silent ones, told once


def test_refusal_log_table_is_bounded():
    log = RefusalLog(interval_s=60.0, max_hosts=2)
    assert log.refused("a", MAX_CONNECTIONS, 0.0) == 0
    assert log.refused("b", MAX_CONNECTIONS, 0.0) == 0
    assert log.refused("c", MAX_CONNECTIONS, 1.0) is None  # full: counted, not logged
    assert log.unlogged == 1
    assert log.refused("c", MAX_CONNECTIONS, 61.0) == 0  # a and b aged out: room again


def test_config_keys_defaults_and_checks():
    base = {"broker.id": "1", "log.dirs": "/tmp/x", "zookeeper.connect": "h:2181"}
    cfg = BrokerConfig.from_mapping(base)
    assert (cfg.connections_max_idle_ms, cfg.max_connections, cfg.max_connections_per_ip,
            cfg.queued_max_request_bytes, cfg.max_connections_per_ip_overrides) == (
        600000, 10000, 1000, 256 * 1024 * 1024, "")
    limits = ServerLimits.from_config(cfg)
    assert limits.idle_s == 600.0 and limits.pool.capacity == 256 * 1024 * 1024
    unbounded = ServerLimits.from_config(BrokerConfig.from_mapping(
        {**base, "queued.max.request.bytes": "-1", "connections.max.idle.ms": "-1"}))
    assert unbounded.pool.capacity is None and unbounded.idle_s is None
    # What a size prefix may reserve: half the pool per address, a 30 s read deadline, and a
    # small pool of its own before a SASL login.
    assert (cfg.socket_request_read_timeout_ms, cfg.queued_max_request_bytes_per_ip) == (
        30000, 128 * 1024 * 1024)
    assert limits.read_timeout_s == 30.0 and limits.pool.host_capacity == 128 * 1024 * 1024
    assert limits.unauthenticated_pool.capacity == 16 * 1024 * 1024
    assert limits.unauthenticated_pool.host_capacity == 2 * 1024 * 1024
    uncapped = ServerLimits.from_config(BrokerConfig.from_mapping(
        {**base, "queued.max.request.bytes.per.ip": "-1", "socket.request.read.timeout.ms": "-1"}))
    assert uncapped.pool.host_capacity is None and uncapped.read_timeout_s is None
    for key, value in (("queued.max.request.bytes", "1000"),  # below socket.request.max.bytes
                       ("queued.max.request.bytes.per.ip", "1000"),  # the same
                       ("queued.max.request.bytes.per.ip", "0"),
                       ("socket.request.read.timeout.ms", "0"),
                       ("queued.max.request.bytes", "0"), ("connections.max.idle.ms", "0"),
                       ("max.connections.per.ip.overrides", "nohost"),
                       ("max.connections", "-1")):
        with pytest.raises(ConfigError) as e:
            BrokerConfig.from_mapping({**base, key: value})
        assert e.value.key == key


def test_idle_tracker_expires_in_order_of_last_activity_and_skips_busy():
    tracker = IdleTracker(10.0)
    tracker.touch("a", 0.0)
    tracker.touch("b", 1.0)
    tracker.touch("c", 2.0)
    tracker.touch("a", 3.0)  # a active again: now the most recent
    assert tracker.next_deadline() == 11.0
    assert tracker.expired(10.9, busy=lambda c: False) == []
    assert tracker.expired(12.0, busy=lambda c: c == "b") == ["c"]  # b busy: looked at later
    assert tracker.next_deadline() == 13.0  # a, 3.0 + 10
    assert tracker.expired(13.0, busy=lambda c: False) == ["a"]
    assert tracker.expired(22.0, busy=lambda c: False) == ["b"]  # touched at 12.0 when busy
    assert len(tracker) == 0 and tracker.next_deadline() is None


def test_hosts_are_normalised_ipv4_mapped_addresses_as_ipv4():
    assert normalise_host("::ffff:10.0.0.5") == "10.0.0.5"
    assert normalise_host("::FFFF:0a00:0005") == "10.0.0.5"
    assert normalise_host("0::1") == "::1"
    assert normalise_host("Broker.Example") == "broker.example"
    assert parse_overrides("[::ffff:10.0.0.5]:7") == {"10.0.0.5": 7}
    limiter = ConnectionLimiter(10, 1)
    assert limiter.admit("::ffff:10.0.0.5") is None
    assert limiter.admit("10.0.0.5") == MAX_CONNECTIONS_PER_IP
    limiter.release("10.0.0.5")
    assert limiter.total == 0
