"""``quorum.voters`` in Kafka's ``id@host:port`` form: what parses, and the errors that name
the key and the bad entry."""

from __future__ import annotations

import pytest

from broker_core.config.quorum import (
    RaftConfigError,
    VoterAddress,
    parse_configured_voters,
    parse_quorum_voters,
)


def test_kafka_form_parses_into_addresses_by_id():
    voters = parse_quorum_voters("1@a.example:9093, 2@10.0.0.2:9094,3@[::1]:9095")
    assert voters == {1: VoterAddress(1, "a.example", 9093), 2: VoterAddress(2, "10.0.0.2", 9094),
                      3: VoterAddress(3, "::1", 9095)}
    assert [str(v) for v in voters.values()] == ["1@a.example:9093", "2@10.0.0.2:9094",
                                                 "3@[::1]:9095"]


@pytest.mark.parametrize("raw, fragment", [
    ("", "expected id@host:port"),
    ("1@a:9093,", "expected id@host:port"),
    ("a:9093", "non-negative integer id"),
    ("x@a:9093", "non-negative integer id"),
    ("-1@a:9093", "non-negative integer id"),
    ("1@a", "port from 1 to 65535"),
    ("1@:9093", "port from 1 to 65535"),
    ("1@a:0", "port from 1 to 65535"),
    ("1@a:70000", "port from 1 to 65535"),
    ("1@a:90x3", "port from 1 to 65535"),
    ("1@a:9093,1@b:9093", "voter 1 is listed twice"),
])
def test_bad_voter_lists_fail_naming_the_key(raw, fragment):
    with pytest.raises(RaftConfigError, match=fragment) as e:
        parse_quorum_voters(raw)
    assert "'quorum.voters'" in str(e.value)


def test_configured_voters_may_be_bare_ids_whose_addresses_gossip_supplies():
    assert parse_configured_voters("1@a:9093, 2,3") == {1: VoterAddress(1, "a", 9093), 2: None,
                                                         3: None}
    for raw, fragment in (("1,1@a:1", "voter 1 is listed twice"), ("1,x", "invalid entry 'x'"),
                          ("", r"expected id\[@host:port\]")):
        with pytest.raises(RaftConfigError, match=fragment):
            parse_configured_voters(raw, "--quorum-voters")
