"""A deterministic simulation of a Raft quorum: N :class:`RaftNode` s, simulated time, a
network that drops, delays, duplicates, reorders and partitions messages, crashes and
restarts, a client that proposes entries, and an admin client that asks for voter reassignments
(:meth:`Simulation.alter_voters`). The :class:`InvariantChecker` runs after every step.

Everything random comes from one ``random.Random(seed)``, so a failing seed replays exactly.

The driver here is the reference for the real one: after each step it persists the quorum
state, then flushes the log, then sends (``Effects`` order). A crash keeps exactly what a
real node keeps: the persisted quorum state and the log; messages addressed to the old
incarnation are lost with its connections.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core.raft import (
    Effects,
    InMemoryRaftLog,
    NotLeaderError,
    QuorumState,
    RaftConfig,
    RaftNode,
    Role,
    VoterAssignment,
)
from broker_core.raft.messages import AlterVotersRequest, AlterVotersResponse, Envelope
from broker_core.raft.snapshots import InMemorySnapshotStore
from broker_core.raft.voter_set import VoterChangeRejected
from tests.support.raft_invariants import InvariantChecker

CLUSTER_ID = "sim-cluster"

#: The admin client's id in envelopes: not a node; always reachable, answers recorded at once.
ADMIN_ID = 1000

#: Snapshots keep the last 20 entries below the log end and come in chunks of 40 bytes, so a
#: node a little behind fetches entries, one further behind a snapshot in several chunks.
SIM_CONFIG = RaftConfig(election_timeout_ms=150, fetch_timeout_ms=300,
                        election_backoff_max_ms=150, request_timeout_ms=200,
                        retry_backoff_ms=10, fetch_max_wait_ms=100, fetch_max_entries=50,
                        snapshot_retain_entries=20, fetch_snapshot_max_bytes=40)


@dataclass
class Faults:
    """How hostile the network and the machines are. Rates are per simulated second."""

    drop: float = 0.0  # probability a message is lost
    duplicate: float = 0.0  # probability a message is delivered twice
    min_delay_ms: float = 1.0
    max_delay_ms: float = 5.0  # delays are uniform in [min, max]: messages reorder
    partitions_per_s: float = 0.0  # rate of new random partitions (each heals after a while)
    partition_ms: tuple[float, float] = (100.0, 800.0)
    crashes_per_s: float = 0.0
    downtime_ms: tuple[float, float] = (50.0, 600.0)

    @classmethod
    def random(cls, rng: random.Random) -> Faults:
        """A hostile mix drawn from ``rng``."""
        return cls(drop=rng.choice([0.0, 0.02, 0.1, 0.25]),
                   duplicate=rng.choice([0.0, 0.05, 0.2]),
                   min_delay_ms=rng.choice([0.5, 1.0]),
                   max_delay_ms=rng.choice([3.0, 20.0, 80.0]),
                   partitions_per_s=rng.choice([0.0, 1.0, 3.0]),
                   crashes_per_s=rng.choice([0.0, 0.5, 2.0]))


@dataclass
class Proposal:
    payload: bytes
    node_id: int
    offset: int
    epoch: int
    at: float


@dataclass
class AlterReply:
    """An answer the admin client got: to the request for ``target`` (``None``: cancel)."""

    target: tuple[int, ...] | None
    response: AlterVotersResponse
    at: float


@dataclass(order=True)
class _Event:
    time: float
    seq: int
    kind: str = field(compare=False)
    data: tuple = field(compare=False, default=())


class Simulation:
    """Run a quorum under :class:`Faults` with the invariant checker after every step.

    :param seed: the only source of randomness.
    :param voters: voter ids; ``observers`` are extra non-voting nodes.
    :param node_factory: builds a node (tests pass a deliberately broken one).
    :param snapshot_every_ms: mean time between snapshots, each of a random live node's
        state machine (with the config's retention, the log's prefix goes after each).
    :param start_at: nodes that start only at the given time (a node added late).
    :param send_before_persist: drive the effects in the wrong order (sending first, then
        persisting), with a chance of crashing in between; only for proving that the order
        matters. ``check_persist_order=False`` lets such a run go on to show what the crash
        does instead of failing at the first early message.
    """

    def __init__(self, seed: int, voters: tuple[int, ...] = (1, 2, 3),
                 observers: tuple[int, ...] = (), faults: Faults | None = None,
                 config: RaftConfig = SIM_CONFIG, propose_every_ms: float | None = 20.0,
                 node_factory: Callable[..., RaftNode] = RaftNode,
                 send_before_persist: bool = False,
                 reassign_every_ms: float | None = None,
                 check_persist_order: bool = True,
                 snapshot_every_ms: float | None = None,
                 start_at: dict[int, float] | None = None) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.voters = voters
        self.ids = tuple(voters) + tuple(observers)
        self.faults = faults or Faults()
        self.config = config
        self.node_factory = node_factory
        self.send_before_persist = send_before_persist
        self.check_persist_order = check_persist_order
        self.now = 0.0
        self.checker = InvariantChecker()
        self.logs = {n: InMemoryRaftLog() for n in self.ids}
        # Snapshot stores survive crashes, as files do. Each node runs a state machine (a
        # digest chain over the committed entries it applied: ``applied[n] = (end, digest)``),
        # started from its latest snapshot at every start.
        self.snapshot_stores = {n: InMemorySnapshotStore() for n in self.ids}
        self.applied: dict[int, tuple[int, bytes]] = {}
        self.installs: dict[int, int] = {}  # node -> snapshots it installed from a leader
        self._prefix_digests: list[bytes] = [b""]
        self._snapshot_every = snapshot_every_ms
        self.persisted: dict[int, QuorumState | None] = {n: None for n in self.ids}
        self.nodes: dict[int, RaftNode | None] = {}
        self.incarnation = {n: 0 for n in self.ids}
        self.groups: dict[int, int] = {n: 0 for n in self.ids}  # partition group by node
        self.proposals: list[Proposal] = []
        self.messages_sent = 0
        self._events: list[_Event] = []
        self._seq = 0
        self._wake: dict[int, float] = {}
        self._propose_every = propose_every_ms
        self._payloads = 0
        start_at = start_at or {}
        for n in self.ids:
            if n in start_at:
                self.nodes[n] = None  # a node added late: it starts with an empty log
                self._schedule(start_at[n], "restart", n)
            else:
                self._start_node(n)
        if propose_every_ms is not None:
            self._schedule(propose_every_ms, "propose")
        self._reassign_every = reassign_every_ms
        self.reassignments: list[Proposal] = []
        self.alter_requests: dict[int, tuple[int, ...] | None] = {}  # correlation id -> target
        self.alter_replies: list[AlterReply] = []
        self._admin_inbox: list[Envelope] = []
        self._admin_correlation = 0
        if reassign_every_ms is not None:
            self._schedule(self.rng.expovariate(1 / reassign_every_ms), "reassign")
        if snapshot_every_ms is not None:
            self._schedule(self.rng.expovariate(1 / snapshot_every_ms), "snapshot")
        self._schedule_faults()

    # ------------------------------------------------------------------ plumbing

    def _schedule(self, delay: float, kind: str, *data) -> None:
        self._seq += 1
        heapq.heappush(self._events, _Event(self.now + delay, self._seq, kind, data))

    def _start_node(self, n: int) -> None:
        node = self.node_factory(n, CLUSTER_ID, frozenset(self.voters), self.logs[n],
                                 self.config, random.Random(self.rng.random()), self.now,
                                 self.persisted[n], snapshots=self.snapshot_stores[n])
        self.nodes[n] = node
        snapshot = node.latest_snapshot
        if snapshot is None:
            self.applied[n] = (0, b"")
        else:
            self._load(n, snapshot)
        self.checker.check(node, None, self.now)
        self._apply_committed(n)
        self._arm(n)

    # ------------------------------------------------------------------ the state machine

    def _load(self, n: int, snapshot) -> None:
        end, _, digest = snapshot.state.partition(b":")
        self.applied[n] = (int(end), bytes.fromhex(digest.decode()))
        assert self.applied[n][0] == snapshot.end_offset

    @staticmethod
    def _fold(digest: bytes, entry) -> bytes:
        return hashlib.blake2b(digest + repr(entry).encode(), digest_size=16).digest()

    def _apply_committed(self, n: int) -> None:
        """Apply node ``n``'s newly committed entries to its state machine, then check the
        invariant: its state equals the committed log applied from scratch."""
        node = self.nodes[n]
        assert node is not None
        end, digest = self.applied[n]
        hw = node.high_watermark
        while end < hw:
            for entry in node.log.read(end, hw - end):
                digest = self._fold(digest, entry)
                end += 1
        self.applied[n] = (end, digest)
        committed = self.checker.committed
        prefix = self._prefix_digests
        while len(prefix) <= min(end, len(committed)):
            prefix.append(self._fold(prefix[-1], committed[len(prefix) - 1]))
        if end > len(committed) or prefix[end] != digest:
            self.checker.state_machine_diverged(n, end, self.now)

    def snapshot(self, n: int) -> None:
        """Node ``n``'s state machine owner asks for a snapshot of what it applied."""
        node = self.nodes[n]
        if node is None:
            return
        end, digest = self.applied[n]
        if end == 0:
            return
        self._apply(n, node.create_snapshot(end, b"%d:%s" % (end, digest.hex().encode()),
                                            self.now))

    def _arm(self, n: int) -> None:
        node = self.nodes[n]
        if node is None:
            return
        deadline = node.next_deadline()
        if deadline is None:
            return
        deadline = max(deadline, self.now)
        scheduled = self._wake.get(n)
        if scheduled is None or scheduled <= self.now or deadline < scheduled:
            self._wake[n] = deadline
            self._schedule(deadline - self.now, "wake", n, self.incarnation[n])

    def _apply(self, n: int, effects: Effects) -> None:
        node = self.nodes[n]
        assert node is not None
        if self.send_before_persist:
            if self.check_persist_order:
                self.checker.check_sent(n, self.persisted[n], effects.messages, self.now)
            for env in effects.messages:
                self._send(env)
            if effects.messages and self.rng.random() < 0.05:
                self.checker.check(node, effects, self.now)
                self._crash(n)  # crashed after sending, before persisting
                self._schedule(self.rng.uniform(*self.faults.downtime_ms), "restart", n)
                return
        if effects.quorum_state is not None:
            # Through the file format, so the runs exercise what a restart really reads.
            self.persisted[n] = QuorumState.from_json(effects.quorum_state.to_json())
        if effects.flush_log:
            self.logs[n].flush()
        if not self.send_before_persist:
            if self.check_persist_order:
                self.checker.check_sent(n, self.persisted[n], effects.messages, self.now)
            for env in effects.messages:
                self._send(env)
        self.checker.check(node, effects, self.now)
        if effects.installed_snapshot is not None:
            # The state machine loads the snapshot fetched from the leader (as the quorum
            # client replaces its tree), then goes on from its end.
            self._load(n, effects.installed_snapshot)
            self.installs[n] = self.installs.get(n, 0) + 1
        self._apply_committed(n)
        self._admin_replies()
        self._arm(n)

    def _admin_replies(self) -> None:
        """Record the admin client's answers, checked against what is committed once the step
        that sent them has been checked (and its commits learned)."""
        inbox, self._admin_inbox = self._admin_inbox, []
        for env in inbox:
            response = env.message
            assert isinstance(response, AlterVotersResponse)
            target = self.alter_requests[env.correlation_id]
            self.checker.check_alter_reply(env.source, target, response, self.now)
            self.alter_replies.append(AlterReply(target, response, self.now))

    def _connected(self, a: int, b: int) -> bool:
        return ADMIN_ID in (a, b) or self.groups[a] == self.groups[b]

    def _send(self, env: Envelope) -> None:
        self.messages_sent += 1
        if env.destination == ADMIN_ID:
            self._admin_inbox.append(env)
            return
        f = self.faults
        if not self._connected(env.source, env.destination) or self.rng.random() < f.drop:
            return
        copies = 2 if self.rng.random() < f.duplicate else 1
        for _ in range(copies):
            delay = self.rng.uniform(f.min_delay_ms, f.max_delay_ms)
            self._schedule(delay, "deliver", env, self.incarnation[env.destination])

    def _schedule_faults(self) -> None:
        f = self.faults
        if f.partitions_per_s > 0:
            self._schedule(self.rng.expovariate(f.partitions_per_s) * 1000, "partition")
        if f.crashes_per_s > 0:
            self._schedule(self.rng.expovariate(f.crashes_per_s) * 1000, "crash")

    def _crash(self, n: int) -> None:
        self.nodes[n] = None
        self.incarnation[n] += 1
        self._wake.pop(n, None)
        self.checker.node_restarted(n)

    # ------------------------------------------------------------------ events

    def _handle(self, ev: _Event) -> None:
        kind = ev.kind
        if kind == "deliver":
            env, incarnation = ev.data
            node = self.nodes[env.destination]
            if (node is None or incarnation != self.incarnation[env.destination]
                    or not self._connected(env.source, env.destination)):
                return
            self._apply(env.destination, node.receive(env, self.now))
        elif kind == "wake":
            n, incarnation = ev.data
            node = self.nodes[n]
            if node is None or incarnation != self.incarnation[n]:
                return
            if self._wake.get(n) == ev.time:
                self._wake.pop(n)
            deadline = node.next_deadline()
            if deadline is not None and deadline <= self.now:
                self._apply(n, node.tick(self.now))
            else:
                self._arm(n)
        elif kind == "propose":
            self._propose()
            if self._propose_every is not None:
                self._schedule(self._propose_every, "propose")
        elif kind == "reassign":
            if self._reassign_every is not None:
                self._reassign()
                self._schedule(self.rng.expovariate(1 / self._reassign_every), "reassign")
        elif kind == "snapshot":
            if self._snapshot_every is not None:
                live = [n for n in self.ids if self.nodes[n] is not None]
                if live:
                    self.snapshot(self.rng.choice(live))
                self._schedule(self.rng.expovariate(1 / self._snapshot_every), "snapshot")
        elif kind == "partition":
            if self.faults.partitions_per_s > 0 and len(self.ids) > 1:
                ids = list(self.ids)
                self.rng.shuffle(ids)
                cut = self.rng.randrange(1, len(ids))
                self.groups = {n: (0 if i < cut else 1) for i, n in enumerate(ids)}
                self._schedule(self.rng.uniform(*self.faults.partition_ms), "heal")
                self._schedule(self.rng.expovariate(self.faults.partitions_per_s) * 1000,
                               "partition")
        elif kind == "heal":
            self.groups = {n: 0 for n in self.ids}
        elif kind == "crash":
            if self.faults.crashes_per_s > 0:
                live = [n for n in self.ids if self.nodes[n] is not None]
                if live:
                    n = self.rng.choice(live)
                    self._crash(n)
                    self._schedule(self.rng.uniform(*self.faults.downtime_ms), "restart", n)
                self._schedule(self.rng.expovariate(self.faults.crashes_per_s) * 1000, "crash")
        elif kind == "restart":
            (n,) = ev.data
            if self.nodes[n] is None:
                self._start_node(n)
        else:
            raise AssertionError(kind)

    def _propose(self) -> None:
        leaders = [node for node in self.nodes.values()
                   if node is not None and node.role is Role.LEADER]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        self._payloads += 1
        payload = b"p%d" % self._payloads
        try:
            effects = node.propose(payload, self.now)
        except NotLeaderError:
            return
        entry = effects.proposed
        assert entry is not None
        self.proposals.append(Proposal(payload, node.node_id, entry.offset, entry.epoch,
                                       self.now))
        self._apply(node.node_id, effects)

    def alter_voters(self, target: tuple[int, ...] | None, node_id: int | None = None) -> int:
        """The admin client sends AlterVotersRequest(``target``) over the network to
        ``node_id`` (default: the current leader, or any node); returns its correlation id.
        Answers land in :attr:`alter_replies`."""
        if node_id is None:
            leader = self.leader()
            node_id = leader.node_id if leader is not None else self.rng.choice(self.ids)
        self._admin_correlation += 1
        cid = self._admin_correlation
        self.alter_requests[cid] = target
        self._send(Envelope(ADMIN_ID, node_id, cid, AlterVotersRequest(target, 1000)))
        return cid

    def _random_alter(self) -> None:
        """A random reassignment: a new target, a cancellation (the current voters or null),
        or a resubmission of the previous target."""
        leader = self.leader()
        roll = self.rng.random()
        previous = [t for t in self.alter_requests.values() if t is not None]
        if roll < 0.15 and leader is not None:
            target: tuple[int, ...] | None = tuple(sorted(leader.voters))
        elif roll < 0.2:
            target = None
        elif roll < 0.35 and previous:
            target = previous[-1]
        else:
            size = self.rng.randint(1, min(5, len(self.ids)))
            target = tuple(sorted(self.rng.sample(self.ids, size)))
        self.alter_voters(target, None if self.rng.random() < 0.8 else self.rng.choice(self.ids))

    def _reassign(self) -> None:
        """A random reassignment request (mostly), or a random single-member change proposed
        directly to a leader."""
        if self.rng.random() < 0.6:
            self._random_alter()
            return
        leaders = [node for node in self.nodes.values()
                   if node is not None and node.role is Role.LEADER]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        current = set(node.voters)
        addable = sorted(set(self.ids) - current)
        removable = sorted(current - {node.node_id})
        if addable and (not removable or self.rng.random() < 0.5):
            current.add(self.rng.choice(addable))
        elif removable:
            current.discard(self.rng.choice(removable))
        else:
            return
        assignment = VoterAssignment(CLUSTER_ID, tuple(sorted(current)))
        try:
            effects = node.propose(assignment, self.now)
        except (NotLeaderError, VoterChangeRejected):
            return
        assert effects.proposed is not None
        self.reassignments.append(Proposal(b"", node.node_id, effects.proposed.offset,
                                           effects.proposed.epoch, self.now))
        self._apply(node.node_id, effects)

    # ------------------------------------------------------------------ running

    def run_for(self, duration_ms: float) -> None:
        self.run_until(lambda: False, duration_ms)

    def run_until(self, done: Callable[[], bool], within_ms: float) -> bool:
        """Run events until ``done()`` or ``within_ms`` of simulated time pass; returns
        whether ``done()`` held."""
        end = self.now + within_ms
        while not done():
            if not self._events or self._events[0].time > end:
                self.now = end
                return done()
            ev = heapq.heappop(self._events)
            self.now = ev.time
            self._handle(ev)
        return True

    def heal(self) -> None:
        """End every fault: no loss, no partitions, every node up, and no new faults."""
        self.faults = Faults(min_delay_ms=self.faults.min_delay_ms,
                             max_delay_ms=min(self.faults.max_delay_ms, 5.0))
        self.groups = {n: 0 for n in self.ids}
        for n in self.ids:
            if self.nodes[n] is None:
                self._start_node(n)

    # ------------------------------------------------------------------ views

    def live_nodes(self) -> list[RaftNode]:
        return [node for node in self.nodes.values() if node is not None]

    def leader(self) -> RaftNode | None:
        """The leader of the highest epoch any live node is in, if that node leads it."""
        live = self.live_nodes()
        if not live:
            return None
        top = max(node.epoch for node in live)
        leaders = [node for node in live if node.role is Role.LEADER and node.epoch == top]
        return leaders[0] if leaders else None

    def propose_to_leader(self, payload: bytes) -> Proposal | None:
        node = self.leader()
        if node is None:
            return None
        effects = node.propose(payload, self.now)
        assert effects.proposed is not None
        proposal = Proposal(payload, node.node_id, effects.proposed.offset,
                            effects.proposed.epoch, self.now)
        self.proposals.append(proposal)
        self._apply(node.node_id, effects)
        return proposal

    def committed_everywhere(self, offset: int) -> bool:
        """Every node is up and its high watermark is past ``offset``."""
        return all(node is not None and node.high_watermark > offset
                   for node in self.nodes.values())
