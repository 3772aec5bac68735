"""ZooKeeper values: the leaderAndISR value is formatted directly (a failover writes thousands),
and must be byte for byte what the generic JSON writer makes of it."""

from __future__ import annotations

import pytest

from broker_core.metadata_paths import LeaderAndIsr, _dump


@pytest.mark.parametrize("value", [
    LeaderAndIsr(1, 0, [1, 2, 3], 1, 4294967345),
    LeaderAndIsr(-1, 17, [], 12),
    LeaderAndIsr(3, 2**31 - 1, [3], 0, -1),
    LeaderAndIsr(2, 5, (2, 1), 7, 99),  # a tuple ISR (the controller's decisions hold tuples)
])
def test_leader_and_isr_bytes_are_the_generic_json(value):
    generic = _dump({"version": 1, "leader": value.leader, "leader_epoch": value.leader_epoch,
                     "isr": list(value.isr), "controller_epoch": value.controller_epoch,
                     "leader_broker_epoch": value.leader_broker_epoch})
    assert value.to_bytes() == generic
    back = LeaderAndIsr.from_bytes(value.to_bytes())
    assert (back.leader, back.leader_epoch, back.isr, back.controller_epoch,
            back.leader_broker_epoch) == (value.leader, value.leader_epoch, list(value.isr),
                                          value.controller_epoch, value.leader_broker_epoch)
