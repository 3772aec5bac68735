"""KIP-630's FetchSnapshot, both sides, for :class:`~broker_core.raft.node.RaftNode`: the
leader serves chunks of a snapshot it keeps; a follower or observer that a Fetch answer sent
to the leader's snapshot gets it chunk by chunk (:class:`SnapshotFetch`), checks the whole
file and installs it.

Invariants:

- a transfer is part of the fetcher's role state, so a new epoch, leader or role drops it;
  it goes on only while every answer is the next chunk of the same snapshot from the same
  leader in the same epoch, and is dropped on anything else;
- the received bytes are bounded by the size the first chunk announced;
- an installed snapshot is durable before the log below its end goes, and is never older
  than what the node already knows to be committed (else :class:`RaftSafetyError`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker_core.raft.messages import (
    Envelope,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from broker_core.raft.node_errors import RaftSafetyError
from broker_core.raft.roles import Role
from broker_core.raft.snapshots import SnapshotError, SnapshotId, decode_snapshot
from broker_core.raft.voter_set import VoterSetHistory
from broker_core.wire.errors import ErrorCode

if TYPE_CHECKING:
    from broker_core.raft.node import RaftNode
    from broker_core.raft.node_roles.fetcher import Fetching


@dataclass(slots=True)
class SnapshotFetch:
    """A follower's or observer's transfer of the leader's snapshot (KIP-630): the bytes
    received so far, in order. Part of the role state, so a new epoch, leader or role drops
    it; an error answer drops it too, and the next Fetch names the snapshot to get."""

    snapshot_id: SnapshotId
    leader: int
    position: int = 0
    size: int | None = None  # the file's size, from the first chunk
    chunks: list[bytes] = field(default_factory=list)


def serve_chunk(node: RaftNode, env: Envelope, req: FetchSnapshotRequest) -> None:
    """KIP-630's FetchSnapshot on the leader: a chunk of a snapshot it keeps, checked like a
    fetch (cluster id, epoch, leadership). A snapshot it no longer keeps (it made newer
    ones since it named it) is SNAPSHOT_NOT_FOUND: the fetcher fetches again and is told
    the newest. A chunk counts as hearing from the replica (the check-quorum timer), since
    a voter fetching a snapshot fetches nothing else meanwhile."""

    def fail(error: ErrorCode) -> None:
        node._reply(env, FetchSnapshotResponse(error, node._known_leader(), node._epoch,
                                               req.snapshot_id))

    if req.cluster_id != node.cluster_id:
        fail(ErrorCode.INCONSISTENT_CLUSTER_ID)
    elif req.current_leader_epoch < node._epoch:
        fail(ErrorCode.FENCED_LEADER_EPOCH)
    elif req.current_leader_epoch > node._epoch:
        fail(ErrorCode.UNKNOWN_LEADER_EPOCH)
    elif node._role is not Role.LEADER:
        fail(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    elif req.position < 0 or req.max_bytes <= 0 or req.replica_id != env.source:
        fail(ErrorCode.INVALID_REQUEST)
    else:
        size = node.snapshots.size(req.snapshot_id)
        if size is None:
            fail(ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        if req.position >= size:
            fail(ErrorCode.POSITION_OUT_OF_RANGE)
            return
        node._rs.leader.heard_from(req.replica_id, node._now)
        data = node.snapshots.read_chunk(
            req.snapshot_id, req.position,
            min(req.max_bytes, node.config.fetch_snapshot_max_bytes))
        node._reply(env, FetchSnapshotResponse(ErrorCode.NONE, node.node_id, node._epoch,
                                               req.snapshot_id, size, req.position, data))


def chunk_request(node: RaftNode, transfer: SnapshotFetch) -> FetchSnapshotRequest:
    """The request for the transfer's next chunk."""
    return FetchSnapshotRequest(cluster_id=node.cluster_id, replica_id=node.node_id,
                                current_leader_epoch=node._epoch,
                                snapshot_id=transfer.snapshot_id,
                                position=transfer.position,
                                max_bytes=node.config.fetch_snapshot_max_bytes)


def take_chunk(node: RaftNode, rs: Fetching, env: Envelope, resp: FetchSnapshotResponse
               ) -> bool:
    """A chunk of the leader's snapshot, answering the request in flight of the fetcher
    ``rs``. The transfer goes on while every answer is the next chunk of the same snapshot
    from the same leader in the same epoch; anything else (an error such as
    SNAPSHOT_NOT_FOUND, a new epoch, a chunk that does not fit) drops it, and the next Fetch
    starts again from the snapshot the leader names then. A lost chunk is asked for again
    after the request timeout. True when the fetcher should send its next request now."""
    transfer = rs.snapshot_fetch
    data = resp.data
    if (transfer is None or resp.error_code is not ErrorCode.NONE
            or resp.leader_id != env.source or resp.leader_epoch != node._epoch
            or resp.snapshot_id != transfer.snapshot_id
            or resp.position != transfer.position or not data
            or transfer.size not in (None, resp.size)
            or resp.position + len(data) > resp.size):
        rs.snapshot_fetch = None
        rs.next_fetch_ms = node._now + node.config.retry_backoff_ms
        return False
    transfer.size = resp.size
    transfer.chunks.append(bytes(data))
    transfer.position += len(data)
    rs.fetch_deadline = node._now + node.config.fetch_timeout_ms
    rs.probing = False
    rs.next_fetch_ms = node._now
    if transfer.position == transfer.size:
        rs.snapshot_fetch = None
        if not install(node, transfer):
            rs.next_fetch_ms = node._now + node.config.retry_backoff_ms
            return False
        if node._rs.fetcher is not rs:
            return False  # the snapshot's voters moved us to another role, which fetches
    return True


def install(node: RaftNode, transfer: SnapshotFetch) -> bool:
    """Install a fetched snapshot (KIP-630): check it, keep it durably, reset the log to
    start empty at its end, take its voters as the committed ones and its end as the high
    watermark; the driver gives it to the state machine (``Effects.installed_snapshot``).
    False (and why, in ``snapshot_problems``) for bytes that are not the snapshot asked
    for; the fetcher then starts over.

    Only the leader's committed state is in a snapshot, and the leader named it because
    our log does not reach its log start, so the snapshot is ahead of everything we know
    to be committed; anything in our log is replaced, as the leader's log would replace
    it entry by entry."""
    what = f"snapshot {transfer.snapshot_id} from node {transfer.leader}"
    try:
        snapshot = decode_snapshot(b"".join(transfer.chunks), what)
        if snapshot.snapshot_id != transfer.snapshot_id:
            raise SnapshotError(f"{what}: holds snapshot {snapshot.snapshot_id}")
        node._check_snapshot(snapshot)
    except (SnapshotError, ValueError) as e:
        node.snapshot_problems.append(str(e))
        return False
    latest = node._snapshot
    if snapshot.end_offset < node._high_watermark or (
            latest is not None and latest.snapshot_id >= snapshot.snapshot_id):
        raise RaftSafetyError(
            f"node {node.node_id}: leader {transfer.leader} sent {what}, but this node "
            f"already has committed entries to {node._high_watermark} and snapshot "
            f"{None if latest is None else latest.snapshot_id}")
    node.snapshots.save(snapshot)  # durable before the log below it goes
    node._snapshot = snapshot
    node.log.reset(snapshot.end_offset, snapshot.epoch)
    voters = snapshot.voters
    node._history = VoterSetHistory.recover(snapshot.voters_offset, voters.current_voters,
                                            voters.target_voters, node.log)
    node._history.committed(snapshot.end_offset)
    if node._demoted_below and snapshot.end_offset >= node._demoted_below:
        node._demoted_below = 0
    node.snapshots_installed += 1
    node._fx.installed_snapshot = snapshot
    if snapshot.end_offset > node._high_watermark:
        node._set_high_watermark(snapshot.end_offset)
    node._voters_changed()  # the snapshot's voters may make us a voter, or no longer one
    return True
