"""The metadata quorum's admin client (``sluice quorum describe | reassign``), blocking.

It speaks to quorum listeners (``sluice-quorum --listen``) with DescribeQuorum (55) and
AlterPartitionReassignments (45) on ``__cluster_metadata``-0, and follows seed 002's retry
rules as :func:`broker_core.raft.admin.next_action` states them: success is returned; a
retriable error or no answer is retried with a doubling backoff; any other error fails; nothing
is retried past the overall timeout. A reassignment is always resent until answered
(resubmitting the same target is idempotent at the leader).

Finding the leader: an answer NOT_LEADER_OR_FOLLOWER names the leader's id, but the quorum
listener does not tell addresses, so the client tries the next of the given servers at once
(list every quorum node in ``--bootstrap-server`` to reach whichever leads); once it has tried
them all since its last backoff it backs off as for an unknown leader.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from broker_core.raft import wire
from broker_core.raft.admin import Step, next_action, retry_backoff
from broker_core.raft.messages import (
    AlterVotersRequest,
    AlterVotersResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ReplicaState,
)
from broker_core.wire.errors import ErrorCode
from consumer_client.connection import BrokerConnection, parse_servers


class QuorumAdminError(Exception):
    """An admin operation on the quorum failed; ``code`` is the Kafka error, if any."""

    def __init__(self, code: ErrorCode | None, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_voters(raw: str) -> tuple[int, ...]:
    """``--voters 4,5,6``: distinct non-negative node ids, at least one. Raises ValueError
    naming what is wrong."""
    items = [x.strip() for x in raw.split(",")]
    if not raw.strip() or any(not x for x in items):
        raise ValueError(f"--voters expects node ids separated by commas, got {raw!r}")
    ids = []
    for x in items:
        if not x.isdigit():
            raise ValueError(f"--voters: {x!r} is not a node id (a non-negative integer)")
        ids.append(int(x))
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"--voters names {', '.join(map(str, dupes))} more than once")
    return tuple(ids)


@dataclass
class _Conn:
    host: str
    port: int
    conn: BrokerConnection | None = None


class QuorumAdminClient:
    """See the module docstring. ``sleep`` and ``monotonic`` are injectable for tests."""

    def __init__(self, servers: str, *, timeout_s: float = 30.0,
                 retry_backoff_ms: float = 100.0, max_backoff_ms: float = 1000.0,
                 connect: Callable[..., BrokerConnection] = BrokerConnection,
                 sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.servers = [_Conn(h, p) for h, p in parse_servers(servers)]
        self.timeout_s = timeout_s
        self.retry_backoff_ms = retry_backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self._connect = connect
        self._sleep = sleep
        self._monotonic = monotonic
        self._next = 0  # the server to try next
        self.leader_id: int | None = None  # the leader of the latest answer, if any

    def close(self) -> None:
        for s in self.servers:
            if s.conn is not None:
                s.conn.close()
                s.conn = None

    def __enter__(self) -> QuorumAdminClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the operations -------------------------------------------------------------------

    def describe(self) -> DescribeQuorumResponse:
        """The leader's DescribeQuorum answer."""
        resp = self._call(DescribeQuorumRequest())
        assert isinstance(resp, DescribeQuorumResponse)
        return resp

    def reassign(self, target: Sequence[int] | None) -> AlterVotersResponse:
        """Ask the leader to move the voters to ``target`` (``None``: cancel); returns once
        the leader has committed the request (the moves follow: see :meth:`wait_for`)."""
        remaining_ms = max(1, int(self.timeout_s * 1000))
        req = AlterVotersRequest(None if target is None else tuple(target), remaining_ms)
        resp = self._call(req)
        assert isinstance(resp, AlterVotersResponse)
        return resp

    def wait_for(self, target: Sequence[int], poll_s: float = 0.2) -> DescribeQuorumResponse:
        """Poll DescribeQuorum until the voters are exactly ``target`` with no reassignment
        running; QuorumAdminError(REQUEST_TIMED_OUT) after the timeout."""
        deadline = self._monotonic() + self.timeout_s
        wanted = sorted(target)
        while True:
            d = self.describe()
            if d.target_voters is None and sorted(r.replica_id for r in d.current_voters) == wanted:
                return d
            if self._monotonic() + poll_s >= deadline:
                voters = ",".join(str(r.replica_id) for r in d.current_voters)
                raise QuorumAdminError(ErrorCode.REQUEST_TIMED_OUT,
                                       f"the voters are still {voters}, not "
                                       f"{','.join(map(str, wanted))}, after {self.timeout_s} s")
            self._sleep(poll_s)

    # -- retries ----------------------------------------------------------------------------

    def _call(self, message: DescribeQuorumRequest | AlterVotersRequest
              ) -> DescribeQuorumResponse | AlterVotersResponse:
        key = wire.api_key_of(message)
        start = self._monotonic()
        attempt = 1
        tried_since_backoff = 0
        failures: dict[str, str] = {}
        while True:
            server = self.servers[self._next % len(self.servers)]
            resp = self._send(server, key, message, failures)
            elapsed_ms = (self._monotonic() - start) * 1000
            action = next_action(resp, attempt=attempt, elapsed_ms=elapsed_ms,
                                 timeout_ms=self.timeout_s * 1000,
                                 retry_backoff_ms=self.retry_backoff_ms,
                                 max_backoff_ms=self.max_backoff_ms)
            if resp is not None and resp.leader_id >= 0:
                self.leader_id = resp.leader_id
            if action.step is Step.DONE:
                assert resp is not None
                return resp
            if action.step is Step.FAIL:
                raise self._failure(action.error, resp, failures)
            attempt += 1
            tried_since_backoff += 1
            self._next += 1  # this one does not lead (or did not answer): try the next
            delay_ms = action.delay_ms
            if action.step is Step.SEND_TO and tried_since_backoff >= len(self.servers):
                # Every server was tried and none leads: back off as for an unknown leader.
                delay_ms = retry_backoff(attempt - 1, self.retry_backoff_ms, self.max_backoff_ms)
            if delay_ms:
                tried_since_backoff = 0
                if elapsed_ms + delay_ms >= self.timeout_s * 1000:
                    raise self._failure(ErrorCode.REQUEST_TIMED_OUT, resp, failures)
                self._sleep(delay_ms / 1000)

    def _send(self, server: _Conn, key: int, message: Any, failures: dict[str, str]
              ) -> DescribeQuorumResponse | AlterVotersResponse | None:
        """One attempt at ``server``; ``None`` when it could not be reached or answered."""
        name = f"{server.host}:{server.port}"
        read_timeout = self.timeout_s + 5.0  # the leader answers a reassignment before this
        try:
            if server.conn is None:
                server.conn = self._connect(server.host, server.port, timeout=read_timeout)
            body = server.conn.request(key, wire.request_body(message),
                                       version=wire.VERSIONS[key])
        except OSError as e:
            failures[name] = str(e) or type(e).__name__
            if server.conn is not None:
                server.conn.close()
                server.conn = None
            return None
        failures.pop(name, None)
        resp = wire.response_from_body(key, body)
        assert isinstance(resp, DescribeQuorumResponse | AlterVotersResponse)
        return resp

    def _failure(self, error: ErrorCode, resp: Any, failures: dict[str, str]
                 ) -> QuorumAdminError:
        if len(failures) == len(self.servers):
            return QuorumAdminError(None, "no quorum node reachable: " + "; ".join(
                f"{k} ({v})" for k, v in failures.items()))
        if error is ErrorCode.REQUEST_TIMED_OUT:
            leader = ("no leader known" if self.leader_id is None
                      else f"leader {self.leader_id} is not among the servers given")
            return QuorumAdminError(error, f"timed out after {self.timeout_s} s ({leader}; "
                                    "list every quorum node in --bootstrap-server)")
        return QuorumAdminError(error, "the quorum refused the request")


# -- formatting ---------------------------------------------------------------------------------


def describe_as_dict(d: DescribeQuorumResponse) -> dict[str, Any]:
    """DescribeQuorum as plain data (``--json``): Kafka's field names in snake case."""
    def replicas(states: Sequence[ReplicaState] | None) -> list[dict[str, int]] | None:
        if states is None:
            return None
        return [{"replica_id": r.replica_id, "log_end_offset": r.log_end_offset,
                 "last_fetch_timestamp": r.last_fetch_ms,
                 "last_caught_up_timestamp": r.last_caught_up_ms} for r in states]

    return {"leader_id": d.leader_id, "leader_epoch": d.leader_epoch,
            "high_watermark": d.high_watermark, "current_voters": replicas(d.current_voters),
            "target_voters": replicas(d.target_voters), "observers": replicas(d.observers)}


def format_describe(d: DescribeQuorumResponse) -> str:
    """The quorum's status then one row per replica (as ``kafka-metadata-quorum describe
    --status`` and ``--replication`` show them). Times are relative to the leader's clock:
    the leader reports itself as fetched now."""
    leader = next((r for r in d.current_voters if r.replica_id == d.leader_id), None)
    now = leader.last_fetch_ms if leader is not None else -1
    leader_end = leader.log_end_offset if leader is not None else -1

    def ids(states: Sequence[ReplicaState]) -> str:
        return "[" + ",".join(str(r.replica_id) for r in states) + "]"

    lines = [f"LeaderId:       {d.leader_id}",
             f"LeaderEpoch:    {d.leader_epoch}",
             f"HighWatermark:  {d.high_watermark}",
             f"CurrentVoters:  {ids(d.current_voters)}"]
    if d.target_voters is not None:
        lines.append(f"TargetVoters:   {ids(d.target_voters)} (reassignment in progress)")
    lines.append(f"Observers:      {ids(d.observers)}")
    lines.append("")

    def ago(ts: int) -> str:
        return "-" if ts < 0 or now < 0 else f"{max(0, now - ts)} ms ago"

    header = ("NodeId", "Status", "LogEndOffset", "Lag", "LastFetch", "LastCaughtUp")
    rows = [header]
    target_ids = {r.replica_id for r in d.target_voters or ()}
    seen = set()
    for status, states in (("Voter", d.current_voters), ("Observer", d.observers)):
        for r in states:
            seen.add(r.replica_id)
            s = "Leader" if r.replica_id == d.leader_id else status
            if r.replica_id in target_ids and status == "Observer":
                s = "Observer (target)"
            lag = "-" if r.log_end_offset < 0 or leader_end < 0 else str(
                max(0, leader_end - r.log_end_offset))
            rows.append((str(r.replica_id), s,
                         "-" if r.log_end_offset < 0 else str(r.log_end_offset), lag,
                         ago(r.last_fetch_ms), ago(r.last_caught_up_ms)))
    for r in d.target_voters or ():
        if r.replica_id not in seen:  # a target that has not fetched yet
            rows.append((str(r.replica_id), "Target (not fetching)", "-", "-", "-", "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    return "\n".join(lines)
