"""ZooKeeper values: the leaderAndISR value is formatted directly (a failover writes thousands),
and must be byte for byte what the generic JSON writer makes of it; a committed offset reads
back what was written, old decimal values included, and a damaged one is refused."""

from __future__ import annotations

import pytest

from broker_core.metadata_paths import CommittedOffset, LeaderAndIsr, _dump, parse_offset_value


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


# -- committed offsets ------------------------------------------------------------------------------

@pytest.mark.parametrize("value, data", [
    (CommittedOffset(42), b"42"),  # Kafka's ZooKeeper-consumer format, as before
    (CommittedOffset(-1), b"-1"),
    (CommittedOffset(7, 3), b'{"leader_epoch":3,"metadata":"","offset":7,"version":1}'),
    (CommittedOffset(7, -1, "spark"),
     b'{"leader_epoch":-1,"metadata":"spark","offset":7,"version":1}'),
    (CommittedOffset(2**63 - 1, 2**31 - 1, '{"a": "\u00e9"}'), None),
])
def test_committed_offsets_round_trip(value, data):
    if data is not None:
        assert value.to_bytes() == data
    assert CommittedOffset.from_bytes(value.to_bytes()) == value


def test_an_old_decimal_offset_reads_without_extras():
    assert CommittedOffset.from_bytes(b" 12\n") == CommittedOffset(12, -1, "")
    assert parse_offset_value(b"12") == 12
    # Whatever a client committed reads back as it was written, as before the extras.
    assert parse_offset_value(b"-5") == -5


@pytest.mark.parametrize("data", [
    None, b"", b"abc", b"\xff", str(2**63).encode(), str(-2**63 - 1).encode(), b"1.5",
    b"{", b"[]", b"{}", b'{"version":2,"offset":1}',
    b'{"version":1}', b'{"version":1,"offset":"5"}', b'{"version":1,"offset":true}',
    b'{"version":1,"offset":1.0}', b'{"version":1,"offset":9223372036854775808}',
    b'{"version":1,"offset":1,"leader_epoch":-2}',
    b'{"version":1,"offset":1,"leader_epoch":2147483648}',
    b'{"version":1,"offset":1,"leader_epoch":null}',
    b'{"version":1,"offset":1,"metadata":5}', b'{"version":1,"offset":1,"metadata":null}',
    b'{"version":1,"offset":1,"metadata":"\\ud800"}',  # a lone surrogate: not encodable
    b'{"version":1,"offset":5,"m":' + b"[" * 200_000 + b"]" * 200_000 + b"}",  # past the parser
])
def test_a_damaged_committed_offset_is_refused(data):
    with pytest.raises(ValueError):
        CommittedOffset.from_bytes(data)
    assert parse_offset_value(data) is None
