"""``sluice quorum describe | reassign``: argument parsing, the table and JSON, and the admin
client's leader discovery (DiscoverBrokers) and retries (docs/raft.md) against scripted
servers, on an injected clock."""

from __future__ import annotations

import io
import json
import os

import pytest

from broker_core.raft import discovery, wire
from broker_core.raft.discovery import Directory, Gossip, NodeEndpoint, QuorumView
from broker_core.raft.messages import (
    NO_LEADER,
    AlterVotersRequest,
    AlterVotersResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ReplicaState,
)
from broker_core.security import cluster_secret
from broker_core.security.sasl import CLUSTER_USER
from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from sluice_tools import cli
from sluice_tools.quorum_admin import (
    QuorumAdminClient,
    QuorumAdminError,
    describe_as_dict,
    format_describe,
    parse_voters,
)
from tests.support.scripted_broker import FakeClock

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


class Scripted:
    """Servers by port, each answering from its list of responses in order: a quorum response,
    or a :class:`Gossip` for DiscoverBrokers. A ConnectionRefusedError is raised at connect,
    any other OSError by the request (a connection lost mid-way). Every request is recorded
    as ``(port, message)``; a DiscoverBrokers request as the :class:`Gossip` it carries."""

    def __init__(self, script: dict[int, list]) -> None:
        self.script = script
        self.requests: list[tuple[int, object]] = []

    def connect(self, host: str, port: int, timeout: float) -> Scripted.Conn:
        if not self.script.get(port):
            raise ConnectionRefusedError(111, "Connection refused")
        if isinstance(self.script[port][0], ConnectionRefusedError):
            raise self.script[port].pop(0)
        return Scripted.Conn(self, port)

    def ports(self) -> list[int]:
        return [p for p, _ in self.requests]

    def discoveries(self) -> list[int]:
        return [p for p, m in self.requests if isinstance(m, Gossip)]

    class Conn:
        def __init__(self, owner: Scripted, port: int) -> None:
            self.owner, self.port = owner, port

        def request(self, key: int, body: dict, *, version: int):
            decoded = _roundtrip_request(key, version, body)
            if key == ApiKey.DISCOVER_BROKERS:
                message = discovery.gossip_from_body(decoded)
            else:
                message = wire.request_from_body(key, decoded)
            self.owner.requests.append((self.port, message))
            answer = self.owner.script[self.port].pop(0)
            if isinstance(answer, OSError):
                raise answer
            if isinstance(answer, Gossip):
                assert key == ApiKey.DISCOVER_BROKERS, f"{answer} answers DiscoverBrokers only"
                frame = b"".join(apis.encode_response(
                    key, version, 1, discovery.gossip_body(answer, response=True)))
            else:
                assert key != ApiKey.DISCOVER_BROKERS, f"DiscoverBrokers answered with {answer}"
                frame = b"".join(wire.encode_response(answer, 1))
            return apis.decode_response(key, version, frame)[1]

        def close(self) -> None:
            pass


def _roundtrip_request(key: int, version: int, body: dict):
    return apis.decode_request(b"".join(apis.encode_request(key, version, 1, "t", body)),
                               defined=True).body


def gossip(responder: int, leader: int, nodes: dict[int, int] | None = None, *,
           epoch: int = 5, cluster: str = "c", host: str = "h") -> Gossip:
    """A DiscoverBrokers answer of node ``responder`` knowing ``leader`` and the nodes
    ``nodes`` (id -> port on ``host``); the responder advertises port ``responder + 10``."""
    return Gossip(NodeEndpoint(responder, host, responder + 10, 1000),
                  tuple(NodeEndpoint(n, host, p, 1000) for n, p in sorted((nodes or {}).items())),
                  QuorumView(cluster, leader, epoch if leader >= 0 else -1, 0, (1, 2, 3)))


def client(script: Scripted, clock: FakeClock, servers: str = "a:1",
           timeout_s: float = 10.0) -> QuorumAdminClient:
    return QuorumAdminClient(servers, timeout_s=timeout_s, connect=script.connect,
                             clock=clock)


def not_leader(leader: int = NO_LEADER) -> DescribeQuorumResponse:
    return DescribeQuorumResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, leader, 5)


def test_one_non_leader_server_is_enough_discover_brokers_names_the_leader():
    # Node 2, reached at port 1, knows leader 3 at port 13: the describe goes straight there.
    clock = FakeClock()
    s = Scripted({1: [gossip(2, 3, {1: 11, 3: 13})], 13: [DESCRIBED]})
    c = client(s, clock)
    assert c.describe() == DESCRIBED
    assert s.ports() == [1, 13] and clock.sleeps == []
    assert s.requests[1][1] == DescribeQuorumRequest()
    # The next operation goes to the leader that answered, without asking again.
    s.script[13].append(DESCRIBED)
    assert c.describe() == DESCRIBED and s.discoveries() == [1]


def test_the_discover_request_tells_the_listener_nothing_it_would_keep():
    clock = FakeClock()
    s = Scripted({1: [gossip(1, 1), DESCRIBED]})
    client(s, clock).describe()
    (sent,) = [m for _, m in s.requests if isinstance(m, Gossip)]
    assert sent.node.node_id == -1 and sent.brokers == ()
    assert sent.view == QuorumView()  # no cluster id, no leader, no epoch, no voters
    # A node's directory, before the quorum is known and after: merging it changes nothing.
    for view in (QuorumView(), QuorumView("c", 1, 5, 0, (1, 2, 3))):
        directory = Directory(NodeEndpoint(1, "h", 11, 1000), view,
                              {2: NodeEndpoint(2, "h", 12, 1000)})
        before = (directory.view, dict(directory.nodes))
        assert directory.merge(sent) == set()
        assert (directory.view, directory.nodes) == before


def test_a_node_is_reached_where_it_answered_not_where_it_says_it_listens():
    # Node 1 leads and advertises 0.0.0.0:11 (bound to every interface); it answered at a:1.
    clock = FakeClock()
    s = Scripted({1: [gossip(1, 1, host="0.0.0.0"), DESCRIBED]})
    assert client(s, clock).describe() == DESCRIBED
    assert s.ports() == [1, 1]


def test_not_leader_naming_a_leader_goes_straight_to_its_endpoint():
    # DiscoverBrokers named leader 3 (stale); 3 names 2, whose endpoint the client knows.
    clock = FakeClock()
    s = Scripted({1: [gossip(1, 3, {2: 12, 3: 13})], 13: [not_leader(2)], 12: [DESCRIBED]})
    assert client(s, clock).describe() == DESCRIBED
    assert s.ports() == [1, 13, 12] and clock.sleeps == []


def test_a_leader_whose_endpoint_is_unknown_is_looked_up_with_discover_brokers_at_once():
    clock = FakeClock()
    # The second answer still holds the old view (same epoch): the leader the refusal named
    # is looked for, not the view's.
    s = Scripted({1: [gossip(1, 3, {3: 13}), gossip(1, 3, {3: 13, 7: 17})],
                  13: [not_leader(7)], 17: [DESCRIBED]})
    assert client(s, clock).describe() == DESCRIBED
    assert s.ports() == [1, 13, 1, 17] and clock.sleeps == []


def test_no_leader_known_backs_off_doubling_and_asks_discover_brokers_again():
    clock = FakeClock()
    s = Scripted({1: [gossip(1, NO_LEADER), gossip(1, NO_LEADER), gossip(1, 2, {2: 12})],
                  12: [DESCRIBED]})
    assert client(s, clock).describe() == DESCRIBED
    assert clock.sleeps == [0.1, 0.2] and s.discoveries() == [1, 1, 1]


def test_not_leader_with_no_leader_known_backs_off_then_rediscovers():
    # The node DiscoverBrokers named lost its leadership (an election is on).
    clock = FakeClock()
    s = Scripted({1: [gossip(1, 2, {2: 12}), gossip(1, 3, {2: 12, 3: 13}, epoch=6)],
                  12: [not_leader()], 13: [DESCRIBED]})
    assert client(s, clock).describe() == DESCRIBED
    assert clock.sleeps == [0.1] and s.ports() == [1, 12, 1, 13]


def test_a_dead_server_is_skipped_and_nodes_learned_of_are_asked_too():
    clock = FakeClock()
    # Port 1 refuses; node 2 (port 2) knows no leader but knows node 3, which does.
    s = Scripted({1: [], 2: [gossip(2, NO_LEADER, {3: 13})], 13: [gossip(3, 3), DESCRIBED]})
    assert client(s, clock, servers="a:1,b:2").describe() == DESCRIBED
    assert s.ports() == [2, 13, 13] and clock.sleeps == []


def test_an_answer_of_another_cluster_is_refused_and_its_leader_never_asked():
    clock = FakeClock()
    s = Scripted({1: [gossip(1, NO_LEADER), gossip(1, 1), DESCRIBED],
                  2: [gossip(5, 9, {9: 19}, cluster="other")] * 2})
    assert client(s, clock, servers="a:1,b:2").describe() == DESCRIBED
    assert 19 not in s.ports() and clock.sleeps == [0.1]


def test_nodes_naming_each_other_back_off_instead_of_spinning():
    clock = FakeClock()
    s = Scripted({1: [gossip(1, 2, {2: 12, 3: 13}), gossip(1, 1, {2: 12, 3: 13}, epoch=6),
                      DESCRIBED],
                  12: [not_leader(3)] * 10, 13: [not_leader(2)] * 10})
    assert client(s, clock).describe() == DESCRIBED
    # One redirect more than the servers and nodes known (1, 2, 3), then a backoff and
    # DiscoverBrokers, which now names leader 1.
    assert s.ports() == [1, 12, 13, 12, 13, 12, 1, 1] and len(clock.sleeps) == 1


def test_a_lost_connection_is_retried_and_a_reassignment_resent_until_answered():
    clock = FakeClock()
    ok = AlterVotersResponse(ErrorCode.NONE, 1, 5)
    s = Scripted({1: [gossip(1, 1), ConnectionResetError("reset"), gossip(1, 1), ok]})
    c = client(s, clock)
    assert c.reassign((1, 2, 3)) == ok
    assert [m for _, m in s.requests if not isinstance(m, Gossip)] == \
        [AlterVotersRequest((1, 2, 3), 10_000)] * 2
    assert clock.sleeps == [0.1]


def test_a_non_retriable_error_fails_at_once_with_its_code():
    clock = FakeClock()
    s = Scripted({1: [gossip(1, 1), AlterVotersResponse(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                                        1, 5)]})
    with pytest.raises(QuorumAdminError) as e:
        client(s, clock).reassign((1,))
    assert e.value.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT and clock.sleeps == []


def test_retries_stop_at_the_timeout_naming_the_leader_it_cannot_reach():
    clock = FakeClock()
    s = Scripted({1: [gossip(1, 7)] * 100})  # leader 7, whose endpoint nobody tells
    with pytest.raises(QuorumAdminError, match="leader 7's endpoint is unknown") as e:
        client(s, clock, timeout_s=2.0).describe()
    assert e.value.code is ErrorCode.REQUEST_TIMED_OUT and 0 < sum(clock.sleeps) < 2.0


def test_wait_for_polls_until_the_target_is_the_voter_set(monkeypatch):
    clock = FakeClock()
    done = DescribeQuorumResponse(ErrorCode.NONE, 4, 6, 200,
                                  current_voters=tuple(ReplicaState(i) for i in (4, 5, 6)))
    s = Scripted({1: [gossip(1, 1), DESCRIBED, DESCRIBED, done]})
    assert client(s, clock).wait_for((6, 5, 4)) == done
    assert clock.sleeps == [0.2, 0.2] and s.discoveries() == [1]


def test_cli_reassign_prints_acceptance_and_done(monkeypatch, tmp_path):
    calls = []
    logins = []

    class Fake:
        def __init__(self, servers: str, timeout_s: float, credential=None,
                     security=None) -> None:
            calls.append(("init", servers, timeout_s))
            logins.append(credential)
            assert security is None  # no --command-config: plaintext

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

    monkeypatch.setattr("sluice_tools.quorum_admin.QuorumAdminClient", Fake)
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
    assert logins == [None, None]
    # --secret-file (or $SLUICE_CLUSTER_SECRET_FILE): the cluster login, read from the file.
    secret = tmp_path / "cluster.secret"
    cluster_secret.generate(secret)
    cli.run(cli.build_parser().parse_args(["quorum", "reassign", "--bootstrap-server", "h:1",
                                           "--cancel", "--secret-file", str(secret)]), out)
    monkeypatch.setenv("SLUICE_CLUSTER_SECRET_FILE", str(secret))
    cli.run(cli.build_parser().parse_args(["quorum", "reassign", "--bootstrap-server", "h:1",
                                           "--cancel"]), out)
    assert [(c.username, c.password) for c in logins[2:]] == [
        (CLUSTER_USER, cluster_secret.load(secret))] * 2
    os.chmod(secret, 0o644)  # a secret file others may read is refused, before connecting
    assert cli.main(["quorum", "describe", "--bootstrap-server", "h:1",
                     "--secret-file", str(secret)]) == 2
    assert len(logins) == 4


def test_cli_command_config_gives_the_tls_settings(monkeypatch, tmp_path, capsys):
    """``--command-config``: SSL and the CA reach a TLS quorum listener; a SASL protocol is
    bad usage (the quorum's one login is the cluster login), as is a key that is no client
    security key."""
    from tests.support.certs import make_pki

    pki = make_pki(tmp_path / "pki")
    seen = []

    class Fake:
        def __init__(self, servers: str, timeout_s: float, credential=None,
                     security=None) -> None:
            seen.append(security)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def describe(self):
            return DESCRIBED

    monkeypatch.setattr("sluice_tools.quorum_admin.QuorumAdminClient", Fake)
    config = tmp_path / "tls.properties"
    config.write_text(f"security.protocol=SSL\nssl.ca.location={pki.cafile}\n")
    assert cli.main(["quorum", "describe", "--bootstrap-server", "h:1",
                     "--command-config", str(config)]) == 0
    assert seen[0].protocol.value == "SSL" and seen[0].ca_location == str(pki.cafile)
    for text, why in (
            (f"security.protocol=SASL_SSL\nssl.ca.location={pki.cafile}\n"
             "sasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=p\n",
             "use security.protocol=SSL"),
            ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u\n"
             "sasl.password=p\n", "use security.protocol=PLAINTEXT"),
            ("bootstrap.servers=x:1\n", "unknown security key")):
        config.write_text(text)
        capsys.readouterr()
        assert cli.main(["quorum", "describe", "--bootstrap-server", "h:1",
                         "--command-config", str(config)]) == 2
        err = capsys.readouterr().err
        assert why in err and str(config) in err, err
    assert len(seen) == 1  # nothing connected with a refused configuration


def test_secret_create_writes_a_private_hex_secret_once(tmp_path, capsys):
    path = tmp_path / "cluster.secret"
    assert cli.main(["secret", "create", str(path)]) == 0
    assert os.stat(path).st_mode & 0o777 == 0o600
    secret = cluster_secret.load(path)
    assert len(secret) == 64 and int(secret, 16) >= 0
    assert "cluster.secret.file" in capsys.readouterr().out
    assert cli.main(["secret", "create", str(path)]) == 1  # never overwritten
    assert "never overwritten" in capsys.readouterr().err
    assert cluster_secret.load(path) == secret


def test_describe_request_is_the_core_value():
    assert wire.request_from_body(
        55, _roundtrip_request(55, 1, wire.request_body(DescribeQuorumRequest()))) \
        == DescribeQuorumRequest()
