"""The fetching half of :class:`~broker_core.raft.node.RaftNode`, shared by followers and
observers: one Fetch (or FetchSnapshot chunk) in flight at a time, the answers to it, and the
fetch timeout. An observer has no state of its own beyond ``probing`` (its leader went quiet,
so it asks the voters who leads), so it is not a module of its own.

Invariants:

- at most one request in flight, and only the answer to it (same correlation id and peer)
  is taken; a late or duplicated answer changes nothing;
- a follower truncates only above the high watermark (else :class:`RaftSafetyError`), and
  takes the leader's high watermark only for entries the leader matched;
- a :class:`Fetching` is part of the role state, so any transition drops it (and with it an
  unfinished snapshot transfer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_core.raft.messages import (
    NO_LEADER,
    NOT_FOLLOWER,
    DivergingEpoch,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotResponse,
)
from broker_core.raft.node_errors import RaftSafetyError
from broker_core.raft.node_roles import snapshot_transfer
from broker_core.raft.node_roles.snapshot_transfer import SnapshotFetch
from broker_core.raft.roles import Role
from broker_core.wire.errors import ErrorCode

if TYPE_CHECKING:
    from broker_core.raft.node import RaftNode


@dataclass(slots=True)
class InFlightFetch:
    correlation_id: int
    destination: int
    sent_ms: float


@dataclass(slots=True)
class Fetching:
    """A follower's or observer's fetch state (see the module docstring)."""

    fetch_deadline: float | None = None  # followers: stand when it passes; observers: rediscover
    next_fetch_ms: float | None = None  # when to send the next fetch
    in_flight: InFlightFetch | None = None
    snapshot_fetch: SnapshotFetch | None = None  # fetching the leader's snapshot
    probing: bool = False  # observer: the leader went quiet, ask the voters who leads

    def enter(self, node: RaftNode, initial: bool) -> None:
        """Start fetching; ``initial`` (a restart) only arms the timer, due at once."""
        self.fetch_deadline = node._now + node.config.fetch_timeout_ms
        self.next_fetch_ms = node._now
        if not initial:
            maybe_send_fetch(node)

    def deadlines(self, node: RaftNode) -> list[float | None]:
        times = [self.fetch_deadline, self.next_fetch_ms]
        if self.in_flight is not None:
            times.append(self.in_flight.sent_ms + node.config.request_timeout_ms)
        return times

    def tick(self, node: RaftNode) -> None:
        """A follower the leader stopped answering stands; an observer probes the voters;
        a request unanswered for the request timeout is given up and sent again."""
        now = node._now
        if self.fetch_deadline is not None and now >= self.fetch_deadline:
            if node._role is Role.FOLLOWER:
                node._start_election()
                return
            # An observer never stands; it looks for the leader among the voters.
            self.fetch_deadline = now + node.config.fetch_timeout_ms
            self.probing = True
        if self.in_flight is not None and now >= (self.in_flight.sent_ms
                                                  + node.config.request_timeout_ms):
            self.in_flight = None
            self.next_fetch_ms = now
        maybe_send_fetch(node)

    def target(self, node: RaftNode) -> int | None:
        if node._role is Role.FOLLOWER:
            return node._leader_id
        if node._role is Role.OBSERVER:
            if node._leader_id != NO_LEADER and not self.probing:
                return node._leader_id
            # No leader, or it went quiet: ask any voter; its answer names the newest
            # epoch and leader it knows.
            others = sorted(node._voters - {node.node_id})
            return node._rng.choice(others) if others else None
        return None


def maybe_send_fetch(node: RaftNode) -> None:
    """Send the next Fetch (or snapshot chunk request) of the node's current fetcher if it
    is due and none is in flight. Reads the node's role state afresh: callers may have just
    moved the node to another role."""
    rs = node._rs.fetcher
    if rs.in_flight is not None or rs.next_fetch_ms is None or node._now < rs.next_fetch_ms:
        return
    target = rs.target(node)
    if target is None:
        return
    transfer = rs.snapshot_fetch
    if transfer is not None and transfer.leader != target:
        rs.snapshot_fetch = transfer = None  # an observer probing the voters: start over
    if transfer is not None:
        chunk = snapshot_transfer.chunk_request(node, transfer)
        rs.in_flight = InFlightFetch(node._send(target, chunk), target, node._now)
        rs.next_fetch_ms = None
        return
    end = node.log.end_offset()
    request = FetchRequest(cluster_id=node.cluster_id, replica_id=node.node_id,
                           current_leader_epoch=node._epoch, fetch_offset=end,
                           last_fetched_epoch=node.log.epoch_at(end - 1),
                           max_wait_ms=node.config.fetch_max_wait_ms)
    correlation = node._send(target, request)
    rs.in_flight = InFlightFetch(correlation, target, node._now)
    rs.next_fetch_ms = None


def take_answer(node: RaftNode, env: Envelope,
                resp: FetchResponse | FetchSnapshotResponse) -> Fetching | None:
    """The fetcher's state if ``resp`` (a Fetch or FetchSnapshot answer) answers its
    request in flight, after learning a newer epoch or the leader it names; ``None`` when
    it is late or duplicated (the fetcher's position may have moved since) or when what it
    taught us ended the fetcher's role."""
    rs = node._rs.fetcher
    flight = rs.in_flight
    if (flight is None or flight.correlation_id != env.correlation_id
            or flight.destination != env.source):
        return None
    rs.in_flight = None
    if resp.leader_epoch > node._epoch or (
            resp.leader_epoch == node._epoch and node._leader_id == NO_LEADER):
        node._observe_epoch(resp.leader_epoch, resp.leader_id)
        if node._role not in (Role.FOLLOWER, Role.OBSERVER) or node._rs.fetcher is not rs:
            return None
    return rs


def handle_fetch_response(node: RaftNode, env: Envelope, resp: FetchResponse) -> None:
    rs = take_answer(node, env, resp)
    if rs is None:
        return
    if (resp.error_code is NOT_FOLLOWER and resp.leader_id == env.source
            and resp.leader_epoch == node._epoch):
        demoted(node, resp.high_watermark)
        return
    if resp.error_code is not ErrorCode.NONE or resp.leader_id != env.source \
            or resp.leader_epoch != node._epoch:
        if (rs.probing and resp.leader_epoch == node._epoch
                and resp.leader_id == node._leader_id != NO_LEADER):
            # A probed voter names the leader we know, in our epoch: go back to it. Only a
            # newer epoch would otherwise end the probe, and an observer whose leader went
            # quiet during a partition kept asking the voters after it healed (the
            # simulation found one so, never catching up).
            rs.probing = False
        rs.next_fetch_ms = node._now + node.config.retry_backoff_ms
        return
    if resp.snapshot_id is not None:
        # KIP-630: what we need next is only in the leader's snapshot; get it chunk by
        # chunk (the next "fetch" sends FetchSnapshot), then fetch from its end.
        rs.snapshot_fetch = SnapshotFetch(resp.snapshot_id, env.source)
    elif resp.diverging_epoch is not None:
        truncate_diverging(node, resp.diverging_epoch)
    elif resp.records:
        if resp.records[0].offset == node.log.end_offset():
            node._append(resp.records)
    if resp.diverging_epoch is None and resp.snapshot_id is None:
        # The leader matched our log below the fetch offset and sent its own entries
        # after it, so everything we hold is the leader's: its high watermark applies.
        hw = min(resp.high_watermark, node.log.end_offset())
        if hw > node._high_watermark:
            node._set_high_watermark(hw)
    rs.fetch_deadline = node._now + node.config.fetch_timeout_ms
    rs.probing = False
    rs.next_fetch_ms = node._now
    maybe_send_fetch(node)


def handle_fetch_snapshot_response(node: RaftNode, env: Envelope, resp: FetchSnapshotResponse
                                   ) -> None:
    """A chunk of the leader's snapshot for the transfer in progress
    (:func:`.snapshot_transfer.take_chunk`)."""
    rs = take_answer(node, env, resp)
    if rs is None:
        return
    if snapshot_transfer.take_chunk(node, rs, env, resp):
        maybe_send_fetch(node)


def demoted(node: RaftNode, removal_committed_below: int) -> None:
    """The leader says our removal from the voters is committed below
    ``removal_committed_below``: act as an observer until our log gets there (the
    removed voter downgrades at once). Safe even if stale: a voter that observes only
    costs availability, and the log decides again once it reaches that offset."""
    if removal_committed_below <= node.log.end_offset():
        node._rs.fetcher.next_fetch_ms = node._now
        maybe_send_fetch(node)
        return
    node._demoted_below = max(node._demoted_below, removal_committed_below)
    if node._role is Role.FOLLOWER:
        node._transition(Role.OBSERVER, node._epoch, node._leader_id)  # fetches at once
    else:
        node._rs.fetcher.next_fetch_ms = node._now
        maybe_send_fetch(node)


def truncate_diverging(node: RaftNode, diverging: DivergingEpoch) -> None:
    # KIP-595: truncate to the end of the latest epoch both logs share, as far as this
    # answer shows; the next fetch checks again, so several rounds may be needed.
    if diverging.epoch == 0:
        offset = min(diverging.end_offset, node.log.end_offset())
    else:
        local_epoch, local_end = node.log.end_offset_for_epoch(diverging.epoch)
        offset = (min(local_end, diverging.end_offset) if local_epoch == diverging.epoch
                  else local_end)
    if offset < node._high_watermark:
        raise RaftSafetyError(
            f"node {node.node_id}: leader {node._leader_id} of epoch {node._epoch} asks to "
            f"truncate to {offset}, below the high watermark {node._high_watermark}")
    if offset < node.log.end_offset():
        node._truncate(offset)
