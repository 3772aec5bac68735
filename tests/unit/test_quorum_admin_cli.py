"""``sluice quorum describe | reassign``: argument parsing, the table and JSON, and the admin
client's retries (seed 002's rules) against scripted servers, on an injected clock."""

from __future__ import annotations

import io
import json

import pytest

from broker_core.raft import wire
from broker_core.raft.messages import (
    NO_LEADER,
    AlterVotersRequest,
    AlterVotersResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ReplicaState,
)
from broker_core.wire import apis
from broker_core.wire.errors import ErrorCode
from consumer_client import cli
from consumer_client.quorum_admin import (
    QuorumAdminClient,
    QuorumAdminError,
    describe_as_dict,
    format_describe,
    parse_voters,
)

DESCRIBED = DescribeQuorumResponse(
    ErrorCode.NONE, 1, 5, 120,
    current_voters=(ReplicaState(1, 130, 10_000, 10_000), ReplicaState(2, 130, 9_990, 9_990),
                    ReplicaState(3, 100, 9_500, 8_000)),
    target_voters=(ReplicaState(1, 130, 10_000, 10_000), ReplicaState(2, 130, 9_990, 9_990),
                   ReplicaState(4, 125, 9_900, 9_000)),
    observers=(ReplicaState(4, 125, 9_900, 9_000),))


# -- parsing ----------------------------------------------------------------------------------


def test_parse_voters_accepts_distinct_ids_and_names_what_is_wrong():
    assert parse_voters("4,5,6") == (4, 5, 6)
    assert parse_voters(" 7 ") == (7,)
    for raw, why in (("", "separated by commas"), ("4,,5", "separated by commas"),
                     ("4,x", "'x' is not a node id"), ("-1", "not a node id"),
                     ("4,5,4", "names 4 more than once")):
        with pytest.raises(ValueError, match=why):
            parse_voters(raw)


def test_cli_usage_errors_exit_2(capsys):
    assert cli.main(["quorum", "reassign", "--bootstrap-server", "h:1"]) == 2
    assert cli.main(["quorum", "reassign", "--bootstrap-server", "h:1", "--voters", "1,1"]) == 2
    assert "names 1 more than once" in capsys.readouterr().err
    assert cli.main(["quorum", "reassign", "--bootstrap-server", "h:1", "--cancel",
                     "--wait"]) == 2
    assert "--wait goes with --voters" in capsys.readouterr().err
    assert cli.main(["quorum", "describe", "--bootstrap-server", "nonsense"]) == 2
    assert "bad bootstrap server" in capsys.readouterr().err


def test_an_unreachable_quorum_is_one_clear_line_and_exit_1(capsys):
    # A port nothing listens on: connection refused on every attempt until the timeout.
    from tests.support.cluster import free_port

    port = free_port()
    code = cli.main(["quorum", "describe", "--bootstrap-server", f"127.0.0.1:{port}",
                     "--timeout", "0.5"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("sluice: no quorum node reachable: ") and f"127.0.0.1:{port}" in err


# -- formatting ------------------------------------------------------------------------------


def test_the_table_shows_status_target_voters_and_lag_relative_to_the_leader():
    text = format_describe(DESCRIBED)
    lines = text.splitlines()
    assert lines[:6] == ["LeaderId:       1", "LeaderEpoch:    5", "HighWatermark:  120",
                         "CurrentVoters:  [1,2,3]",
                         "TargetVoters:   [1,2,4] (reassignment in progress)",
                         "Observers:      [4]"]
    rows = [line.split() for line in lines[7:]]
    assert rows[0] == ["NodeId", "Status", "LogEndOffset", "Lag", "LastFetch", "LastCaughtUp"]
    assert rows[1] == ["1", "Leader", "130", "0", "0", "ms", "ago", "0", "ms", "ago"]
    assert rows[3] == ["3", "Voter", "100", "30", "500", "ms", "ago", "2000", "ms", "ago"]
    assert rows[4][:5] == ["4", "Observer", "(target)", "125", "5"]


def test_no_target_line_without_a_reassignment_and_unknowns_as_dashes():
    d = DescribeQuorumResponse(ErrorCode.NONE, 1, 2, 3,
                               current_voters=(ReplicaState(1, 3, 50, 50), ReplicaState(2)))
    text = format_describe(d)
    assert "TargetVoters" not in text
    assert text.splitlines()[-1].split() == ["2", "Voter", "-", "-", "-", "-"]


def test_json_keeps_every_field():
    d = describe_as_dict(DESCRIBED)
    assert d["leader_id"] == 1 and d["high_watermark"] == 120
    assert [r["replica_id"] for r in d["target_voters"]] == [1, 2, 4]
    assert d["observers"] == [{"replica_id": 4, "log_end_offset": 125,
                               "last_fetch_timestamp": 9_900,
                               "last_caught_up_timestamp": 9_000}]
    assert describe_as_dict(DescribeQuorumResponse(ErrorCode.NONE, 1, 1))["target_voters"] is None
    json.dumps(d)


# -- the client's retries, against scripted servers ------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    def monotonic(self) -> float:
        return self.now


class Scripted:
    """Servers by port, each answering from its list of responses. A ConnectionRefusedError
    is raised at connect, any other OSError by the request (a connection lost mid-way)."""

    def __init__(self, script: dict[int, list]) -> None:
        self.script = script
        self.requests: list[tuple[int, object]] = []

    def connect(self, host: str, port: int, timeout: float) -> Scripted.Conn:
        if not self.script[port]:
            raise ConnectionRefusedError(111, "Connection refused")
        if isinstance(self.script[port][0], ConnectionRefusedError):
            raise self.script[port].pop(0)
        return Scripted.Conn(self, port)

    class Conn:
        def __init__(self, owner: Scripted, port: int) -> None:
            self.owner, self.port = owner, port

        def request(self, key: int, body: dict, *, version: int):
            message = wire.request_from_body(key, _roundtrip_request(key, version, body))
            self.owner.requests.append((self.port, message))
            answer = self.owner.script[self.port].pop(0)
            if isinstance(answer, OSError):
                raise answer
            frame = b"".join(wire.encode_response(answer, 1))
            return apis.decode_response(key, version, frame)[1]

        def close(self) -> None:
            pass


def _roundtrip_request(key: int, version: int, body: dict):
    return apis.decode_request(b"".join(apis.encode_request(key, version, 1, "t", body)),
                               defined=True).body


def client(script: Scripted, clock: FakeClock, servers: str = "a:1,b:2,c:3",
           timeout_s: float = 10.0) -> QuorumAdminClient:
    return QuorumAdminClient(servers, timeout_s=timeout_s, connect=script.connect,
                             sleep=clock.sleep, monotonic=clock.monotonic)


def not_leader(leader: int = NO_LEADER) -> DescribeQuorumResponse:
    return DescribeQuorumResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, leader, 5)


def test_not_leader_moves_to_the_next_server_at_once():
    clock = FakeClock()
    s = Scripted({1: [not_leader(3)], 2: [not_leader(3)], 3: [DESCRIBED]})
    assert client(s, clock).describe() == DESCRIBED
    assert [p for p, _ in s.requests] == [1, 2, 3] and clock.sleeps == []


def test_no_leader_known_backs_off_doubling_then_succeeds():
    clock = FakeClock()
    s = Scripted({1: [not_leader(), not_leader(), DESCRIBED]})
    assert client(s, clock, servers="a:1").describe() == DESCRIBED
    assert clock.sleeps == [0.1, 0.2]


def test_every_server_refusing_as_non_leader_backs_off_before_trying_them_again():
    clock = FakeClock()
    s = Scripted({1: [not_leader(9), DESCRIBED], 2: [not_leader(9)]})
    assert client(s, clock, servers="a:1,b:2").describe() == DESCRIBED
    assert len(clock.sleeps) == 1 and [p for p, _ in s.requests] == [1, 2, 1]


def test_a_lost_connection_is_retried_and_a_reassignment_resent_until_answered():
    clock = FakeClock()
    ok = AlterVotersResponse(ErrorCode.NONE, 1, 5)
    s = Scripted({1: [ConnectionResetError("reset"), ok]})
    c = client(s, clock, servers="a:1")
    assert c.reassign((1, 2, 3)) == ok
    assert [m for _, m in s.requests] == [AlterVotersRequest((1, 2, 3), 10_000)] * 2


def test_a_non_retriable_error_fails_at_once_with_its_code():
    clock = FakeClock()
    s = Scripted({1: [AlterVotersResponse(ErrorCode.INVALID_REPLICA_ASSIGNMENT, 1, 5)]})
    with pytest.raises(QuorumAdminError) as e:
        client(s, clock, servers="a:1").reassign((1,))
    assert e.value.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT and clock.sleeps == []


def test_retries_stop_at_the_timeout_naming_the_leader_not_given():
    clock = FakeClock()
    s = Scripted({1: [not_leader(7)] * 100})
    with pytest.raises(QuorumAdminError, match="leader 7 is not among the servers given") as e:
        client(s, clock, servers="a:1", timeout_s=2.0).describe()
    assert e.value.code is ErrorCode.REQUEST_TIMED_OUT and sum(clock.sleeps) < 2.0


def test_wait_for_polls_until_the_target_is_the_voter_set(monkeypatch):
    clock = FakeClock()
    done = DescribeQuorumResponse(ErrorCode.NONE, 4, 6, 200,
                                  current_voters=tuple(ReplicaState(i) for i in (4, 5, 6)))
    s = Scripted({1: [DESCRIBED, DESCRIBED, done]})
    assert client(s, clock, servers="a:1").wait_for((6, 5, 4)) == done
    assert clock.sleeps == [0.2, 0.2]


def test_cli_reassign_prints_acceptance_and_done(monkeypatch):
    calls = []

    class Fake:
        def __init__(self, servers: str, timeout_s: float) -> None:
            calls.append(("init", servers, timeout_s))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def reassign(self, target):
            calls.append(("reassign", target))
            return AlterVotersResponse(ErrorCode.NONE, 1, 5)

        def wait_for(self, target):
            calls.append(("wait", target))
            return DescribeQuorumResponse(ErrorCode.NONE, 4, 6)

    monkeypatch.setattr("consumer_client.quorum_admin.QuorumAdminClient", Fake)
    out = io.StringIO()
    args = cli.build_parser().parse_args(["quorum", "reassign", "--bootstrap-server", "h:1",
                                          "--voters", "4,5,6", "--wait", "--timeout", "9"])
    cli.run(args, out)
    assert calls == [("init", "h:1", 9.0), ("reassign", (4, 5, 6)), ("wait", (4, 5, 6))]
    assert out.getvalue().splitlines() == [
        "Accepted: the quorum moves to voters 4,5,6 one member at a time (leader 1, epoch 5).",
        "Done: the voters are 4,5,6 (leader 4, epoch 6)."]
    calls.clear()
    out = io.StringIO()
    cli.run(cli.build_parser().parse_args(["quorum", "reassign", "--bootstrap-server", "h:1",
                                           "--cancel"]), out)
    assert calls[1] == ("reassign", None) and out.getvalue().startswith("Cancelled")


def test_describe_request_is_the_core_value():
    assert wire.request_from_body(
        55, _roundtrip_request(55, 1, wire.request_body(DescribeQuorumRequest()))) \
        == DescribeQuorumRequest()
