"""The initial wait of a new thin-consumer group (coordinator.initial_rebalance), pure."""

from __future__ import annotations

import random

import pytest

from broker_core.config.broker_config import BrokerConfig
from broker_core.config.parsing import ConfigError
from coordinator import initial_rebalance


def test_a_lone_member_waits_one_quiet_period():
    assert initial_rebalance.opening(10.0, 0.25, 3.0) == (13.0, 10.25)


def test_the_quiet_period_is_clamped_to_the_delay():
    assert initial_rebalance.effective_quiet_s(5000, 3000) == 3.0
    assert initial_rebalance.effective_quiet_s(200, 3000) == 0.2
    assert initial_rebalance.effective_quiet_s(200, 0) == 0.0
    assert initial_rebalance.opening(0.0, initial_rebalance.effective_quiet_s(5000, 3000),
                                     3.0) == (3.0, 3.0)


@pytest.mark.parametrize("seed", range(20))
def test_the_bound_always_holds_and_arrivals_never_pull_the_deadline_earlier(seed):
    rnd = random.Random(seed)
    quiet, delay = rnd.choice([0.0, 0.05, 0.2, 1.0]), rnd.choice([0.0, 0.3, 3.0])
    quiet = min(quiet, delay)
    now = rnd.uniform(0, 100)
    bound, deadline = initial_rebalance.opening(now, quiet, delay)
    assert deadline <= bound
    while now < deadline:
        now += rnd.uniform(0, 2 * quiet) if quiet else 0.0
        if now >= deadline:
            break  # the rebalance ran; later members are not part of the initial wait
        new = initial_rebalance.arrival(now, quiet, bound, deadline)
        assert deadline <= new <= bound
        assert new == min(now + quiet, bound)
        deadline = new


def test_the_quiet_key_is_validated():
    required = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": "data"}
    cfg = BrokerConfig.from_mapping(required)
    assert (cfg.group_initial_rebalance_quiet_ms, cfg.group_initial_rebalance_delay_ms) == (
        200, 3000)
    cfg = BrokerConfig.from_mapping({**required, "group.initial.rebalance.quiet.ms": "9000"})
    assert cfg.group_initial_rebalance_quiet_ms == 9000  # accepted; used clamped to the delay
    for bad in ("-1", "x", "99999999999"):
        with pytest.raises(ConfigError) as info:
            BrokerConfig.from_mapping({**required, "group.initial.rebalance.quiet.ms": bad})
        assert info.value.key == "group.initial.rebalance.quiet.ms"
