"""Building blocks for RaftNode tests: a factory, a fixed random source and envelope helpers.

Tests talk to a node the way a driver does, through envelopes; these keep that short.
"""

from __future__ import annotations

import random

from broker_core.raft import (
    Effects,
    InMemoryRaftLog,
    LogEntry,
    RaftConfig,
    RaftNode,
    Role,
)
from broker_core.raft.messages import (
    BeginQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from broker_core.wire.errors import ErrorCode

CLUSTER = "c1"
CONFIG = RaftConfig(election_timeout_ms=1000, fetch_timeout_ms=2000, election_backoff_max_ms=1000,
                    request_timeout_ms=1000, retry_backoff_ms=20, fetch_max_wait_ms=500,
                    fetch_max_entries=100)


class FixedRandom(random.Random):
    """``random()`` always returns ``value``: election timeouts become exactly
    ``T * (1 + value)``; ``choice`` takes the first element."""

    def __init__(self, value: float = 0.5) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value

    def choice(self, seq):
        return seq[0]


def make_node(node_id: int = 1, voters=(1, 2, 3), entries=(), persisted=None, now=0.0,
              rng_value: float = 0.5) -> RaftNode:
    """A node of cluster ``c1`` whose log holds ``entries`` (``(epoch, payload)`` pairs or
    LogEntry objects) and whose election timeout is ``1000 * (1 + rng_value)`` ms."""
    log = InMemoryRaftLog([e if isinstance(e, LogEntry) else LogEntry(i, e[0], e[1])
                           for i, e in enumerate(entries)])
    return RaftNode(node_id, CLUSTER, frozenset(voters), log, CONFIG, FixedRandom(rng_value),
                    now, persisted)


def env(source: int, destination: int, message, correlation_id: int = 99) -> Envelope:
    return Envelope(source, destination, correlation_id, message)


def sent(effects: Effects, kind: type, to: int | None = None) -> list[Envelope]:
    return [e for e in effects.messages if isinstance(e.message, kind)
            and (to is None or e.destination == to)]


def vote(candidate: int, epoch: int, last_epoch: int = 0, last_offset: int = 0) -> VoteRequest:
    return VoteRequest(CLUSTER, epoch, candidate, last_epoch, last_offset)


def elect(node: RaftNode, now: float = 1500.0) -> Effects:
    """Make ``node`` (voters 1-3) leader: time out, then a granted vote from one peer."""
    node.tick(now)
    assert node.role is Role.CANDIDATE
    peer = sorted(node.voters - {node.node_id})[0]
    return node.receive(env(peer, node.node_id, VoteResponse(ErrorCode.NONE, -1, node.epoch,
                                                            True)), now)


def fetch(replica: int, leader: int, epoch: int, offset: int, last_epoch: int,
          max_wait: int = 0, correlation_id: int = 99) -> Envelope:
    return env(replica, leader, FetchRequest(CLUSTER, replica, epoch, offset, last_epoch,
                                             max_wait), correlation_id)


def follower(entries, leader: int = 2, epoch: int = 5, node_id: int = 1) -> tuple[RaftNode, int]:
    """A follower of ``leader`` in ``epoch``; returns it and its in-flight fetch's id."""
    node = make_node(node_id=node_id, entries=entries)
    fx = node.receive(env(leader, node_id, BeginQuorumEpochRequest(CLUSTER, leader, epoch)), 1.0)
    (request,) = sent(fx, FetchRequest)
    return node, request.correlation_id


def answer(node: RaftNode, correlation_id: int, now: float = 2.0, **fields) -> Effects:
    fields.setdefault("high_watermark", 0)
    response = FetchResponse(ErrorCode.NONE, 2, node.epoch, **fields)
    return node.receive(env(2, node.node_id, response, correlation_id), now)
