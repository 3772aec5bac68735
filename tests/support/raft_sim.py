"""A deterministic simulation of a Raft quorum: N :class:`RaftNode` s, simulated time, a
network that drops, delays, duplicates, reorders and partitions messages (symmetric splits,
one-way cuts, flapping links), crashes and restarts (some in the middle of a step's fsyncs,
losing what was only written), disks lost for good (the node comes back empty, through the
reassignment procedure), a client that proposes entries, and an admin client that asks for voter
reassignments (:meth:`Simulation.alter_voters`). The :class:`InvariantChecker` runs after every
step.

Everything random comes from one ``random.Random(seed)``, so a failing seed replays exactly.

The driver here is the reference for the real one: after each step it persists the quorum
state, then flushes the log, then sends (``Effects`` order), and only then does anything of the
step count (the checker looks at the node once the step is durable). Each node's log is a
:class:`SimDiskLog`, which knows which of its writes were flushed. A crash between steps keeps
exactly what a real node keeps: the persisted quorum state and the flushed log; messages
addressed to the old incarnation are lost with its connections. A power cut during a step's
writes (:attr:`Faults.power_cuts_per_s`) keeps the quorum state or not, and a random prefix of
the step's unflushed log writes (a torn entry at the cut is dropped by recovery, so it counts as
not written); none of the step's messages leave.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core.raft import (
    Effects,
    InMemoryRaftLog,
    LogEntry,
    NotLeaderError,
    QuorumState,
    RaftConfig,
    RaftNode,
    Role,
    VoterAssignment,
)
from broker_core.raft.log import IRaftLog
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
    # One-way cuts: a random group of nodes stops being heard by the others, while it still
    # hears them (A hears B, B does not hear A); each heals after ``partition_ms``.
    one_way_per_s: float = 0.0
    # Flapping links: one link (both ways, or one way) goes down and up ``flap_toggles`` times,
    # each state lasting ``flap_ms``.
    flaps_per_s: float = 0.0
    flap_ms: tuple[float, float] = (2.0, 40.0)
    flap_toggles: tuple[int, int] = (4, 20)
    # Power cuts: the next step of a random live node that writes something crashes in the
    # middle of its writes (the quorum state written or not, a random prefix of the log's
    # unflushed writes kept); the node restarts after ``downtime_ms``.
    power_cuts_per_s: float = 0.0
    # Lost disks: a random node crashes and its disk is gone; it comes back empty, the same id,
    # a new replica (see :meth:`Simulation.lose_disk`).
    disk_losses_per_s: float = 0.0

    @classmethod
    def random(cls, rng: random.Random) -> Faults:
        """A hostile mix drawn from ``rng``."""
        return cls(drop=rng.choice([0.0, 0.02, 0.1, 0.25]),
                   duplicate=rng.choice([0.0, 0.05, 0.2]),
                   min_delay_ms=rng.choice([0.5, 1.0]),
                   max_delay_ms=rng.choice([3.0, 20.0, 80.0]),
                   partitions_per_s=rng.choice([0.0, 1.0, 3.0]),
                   crashes_per_s=rng.choice([0.0, 0.5, 2.0]))

    def with_disk_and_link_faults(self, rng: random.Random) -> Faults:
        """These faults plus one-way cuts, flapping links, power cuts and lost disks drawn from
        ``rng`` (a separate draw, so the draws of :meth:`random` stay what they were)."""
        return dataclasses.replace(self, one_way_per_s=rng.choice([0.0, 1.0, 3.0]),
                                   flaps_per_s=rng.choice([0.0, 1.0, 3.0]),
                                   power_cuts_per_s=rng.choice([0.0, 1.0, 4.0]),
                                   disk_losses_per_s=rng.choice([0.0, 0.0, 0.5, 1.5]))


class SimDiskLog(InMemoryRaftLog):
    """An in-memory log that knows which of its writes reached the disk: appends and
    truncations since the last :meth:`flush` are kept in order, and :meth:`power_cut` keeps
    only a prefix of them. (``delete_prefix`` and ``reset`` are durable when they return, as
    :class:`~broker_core.raft.storage.DiskRaftLog`'s are.)"""

    def __init__(self) -> None:
        super().__init__()
        # ("append", entries) or ("truncate", entries removed), oldest first.
        self._unflushed: list[tuple[str, tuple[LogEntry, ...]]] = []
        self.power_cuts = 0
        self.lost_entries = 0  # appended entries a power cut lost

    def append(self, entries) -> None:
        super().append(entries)
        if entries:
            self._unflushed.append(("append", tuple(entries)))

    def truncate_to(self, offset: int) -> None:
        removed = self.read(offset, self.end_offset() - offset) if (
            self.start_offset() <= offset < self.end_offset()) else ()
        super().truncate_to(offset)
        if removed:
            self._unflushed.append(("truncate", removed))

    def flush(self) -> None:
        super().flush()
        self._unflushed.clear()

    def delete_prefix(self, offset: int) -> None:
        assert not self._unflushed, "the driver flushes every step before the next one"
        super().delete_prefix(offset)

    def reset(self, offset: int, epoch: int) -> None:
        super().reset(offset, epoch)
        self._unflushed.clear()  # the log's files are replaced and synced

    def power_cut(self, rng: random.Random) -> None:
        """What the disk holds after power is cut now: the flushed log, then the writes since
        in order up to a random point (half the time none of them). An append's entries land
        one by one; an entry torn at the cut is dropped by recovery, which leaves the same log
        as a cut just before it (the disk simulation tears real bytes)."""
        ops, self._unflushed = self._unflushed, []
        units = [(op, e) for op, entries in ops
                 for e in (entries if op == "append" else (entries,))]
        keep = 0 if rng.random() < 0.5 else rng.randint(0, len(units))
        for op, entries in reversed(ops):  # back to what the last flush left
            if op == "append":
                InMemoryRaftLog.truncate_to(self, entries[0].offset)
            else:
                InMemoryRaftLog.append(self, entries)
        for op, unit in units[:keep]:
            if op == "append":
                InMemoryRaftLog.append(self, (unit,))
            else:
                InMemoryRaftLog.truncate_to(self, unit[0].offset)
        self.power_cuts += 1
        self.lost_entries += sum(op == "append" for op, _ in units[keep:])


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
    :param flush_after_send: drive the effects in another wrong order: the quorum state, then
        the messages, then the log flush, with a one-in-ten chance of a power cut before the
        flush; only for proving that a node must not acknowledge what is not flushed.
    :param remove_lost_disks: replace a node whose disk was lost through the reassignment
        procedure (:meth:`lose_disk`); ``False`` restarts it at once, empty, with its first
        start's voters, as a naive restart would: only for showing that this is unsafe.
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
                 start_at: dict[int, float] | None = None,
                 remove_lost_disks: bool = True, flush_after_send: bool = False) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.voters = voters
        self.ids = tuple(voters) + tuple(observers)
        self.faults = faults or Faults()
        self.config = config
        self.node_factory = node_factory
        self.send_before_persist = send_before_persist
        self.remove_lost_disks = remove_lost_disks
        self.flush_after_send = flush_after_send
        self.check_persist_order = check_persist_order
        self.now = 0.0
        self.checker = InvariantChecker()
        self.logs: dict[int, IRaftLog] = {n: SimDiskLog() for n in self.ids}
        # Snapshot stores survive crashes, as files do. Each node runs a state machine (a
        # digest chain over the committed entries it applied: ``applied[n] = (end, digest)``),
        # started from its latest snapshot at every start.
        self.snapshot_stores = {n: InMemorySnapshotStore() for n in self.ids}
        self.applied: dict[int, tuple[int, bytes]] = {}
        self.installs: dict[int, int] = {}  # node -> snapshots it installed from a leader
        self._prefix_digests: list[bytes] = [b""]
        self._snapshot_every = snapshot_every_ms
        self.persisted: dict[int, QuorumState | None] = {n: None for n in self.ids}
        # What each node is started with as ``quorum.voters``. A node back from a lost disk is
        # started as any new node joining the running quorum is: with its current voters.
        self.bootstrap_voters = {n: frozenset(voters) for n in self.ids}
        self.disk_generation = {n: 0 for n in self.ids}
        self.nodes: dict[int, RaftNode | None] = {}
        self.incarnation = {n: 0 for n in self.ids}
        self.groups: dict[int, int] = {n: 0 for n in self.ids}  # partition group by node
        # Directed links cut by one-way and flapping faults, (source, destination) -> how
        # many faults cut it now; a message crosses a link only when no fault cuts it.
        self.cut_links: Counter[tuple[int, int]] = Counter()
        self._fault_era = 0  # bumped by heal(): later events of earlier faults do nothing
        self._power_cut: set[int] = set()  # nodes whose next write crashes half-way
        # Lost disks: node -> the step of its replacement it is at ("removing": down, waiting
        # for its removal from the voters to commit; "adding": up again as a new replica).
        self.replacing: dict[int, str] = {}
        self.disks_lost: list[tuple[float, int]] = []
        self._rejoin_as_voter: dict[int, bool] = {}
        self._replace_loop = False  # a "replace" event is scheduled
        self.power_cuts: list[tuple[float, int]] = []
        self.fault_counts: Counter[str] = Counter()  # one-way cuts and flaps that happened
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
        node = self.node_factory(n, CLUSTER_ID, self.bootstrap_voters[n], self.logs[n],
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
        if n in self._power_cut and (effects.quorum_state is not None or effects.flush_log):
            self._cut_power(n, effects)
            return
        if effects.quorum_state is not None:
            # Through the file format, so the runs exercise what a restart really reads.
            self.persisted[n] = QuorumState.from_json(effects.quorum_state.to_json())
        if self.flush_after_send and effects.flush_log:
            for env in effects.messages:
                self._send(env)
            self.checker.check(node, effects, self.now)  # what it sent was seen
            if self.rng.random() < 0.1:
                log = self.logs[n]
                if hasattr(log, "power_cut"):
                    log.power_cut(self.rng)
                self._crash(n)
                self._schedule(self.rng.uniform(*self.faults.downtime_ms), "restart", n)
                return
            effects.messages = []
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

    def _cut_power(self, n: int, effects: Effects) -> None:
        """Power goes in the middle of writing a step's effects: the quorum state is written
        (it goes first) or not, the log keeps a random prefix of its unflushed writes, and no
        message of the step leaves. Nothing of the step is checked: nothing of it was seen."""
        self._power_cut.discard(n)
        if effects.quorum_state is not None and self.rng.random() < 0.5:
            self.persisted[n] = QuorumState.from_json(effects.quorum_state.to_json())
        log = self.logs[n]
        if hasattr(log, "power_cut"):
            log.power_cut(self.rng)
        self.power_cuts.append((self.now, n))
        self._crash(n)
        self._schedule(self.rng.uniform(*self.faults.downtime_ms), "restart", n)

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
        """Whether a message from ``a`` reaches ``b`` now."""
        return ADMIN_ID in (a, b) or (self.groups[a] == self.groups[b]
                                      and not self.cut_links[(a, b)])

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
        for rate, kind in ((f.one_way_per_s, "one_way"), (f.flaps_per_s, "flap"),
                           (f.power_cuts_per_s, "power_cut"),
                           (f.disk_losses_per_s, "lose_disk")):
            if rate > 0:
                self._schedule(self.rng.expovariate(rate) * 1000, kind, self._fault_era)

    def _cut(self, links: tuple[tuple[int, int], ...], by: int) -> None:
        """Add (``by`` 1) or take back (-1) one fault's cut of ``links``."""
        for link in links:
            self.cut_links[link] += by
            if self.cut_links[link] <= 0:
                del self.cut_links[link]

    def _rate(self, kind: str) -> float:
        f = self.faults
        return {"one_way": f.one_way_per_s, "flap": f.flaps_per_s,
                "power_cut": f.power_cuts_per_s, "lose_disk": f.disk_losses_per_s}[kind]

    def _fault_event(self, kind: str, data: tuple) -> None:
        """One-way cuts, flaps, power cuts, lost disks and the replacement procedure."""
        era = data[0]
        if era != self._fault_era:
            return  # heal() ended the faults this event belongs to
        if kind == "cut":
            self._cut(data[1], data[2])
            return
        if kind == "replace":
            self._replace_step()
            self._replace_loop = bool(self.replacing)
            if self._replace_loop:
                self._schedule(50.0, "replace", era)
            return
        ids = list(self.ids)
        if kind == "one_way" and len(ids) > 1:
            self.rng.shuffle(ids)
            muted = ids[:self.rng.randrange(1, len(ids))]  # heard by nobody outside
            links = tuple((a, b) for a in muted for b in self.ids if b not in muted)
            self._cut(links, 1)
            self._schedule(self.rng.uniform(*self.faults.partition_ms), "cut", era, links, -1)
            self.fault_counts[kind] += 1
        elif kind == "flap" and len(ids) > 1:
            a, b = self.rng.sample(ids, 2)
            links = ((a, b),) if self.rng.random() < 0.5 else ((a, b), (b, a))
            at = 0.0
            for i in range(2 * self.rng.randint(*self.faults.flap_toggles)):
                self._schedule(at, "cut", era, links, 1 if i % 2 == 0 else -1)
                at += self.rng.uniform(*self.faults.flap_ms)
            self.fault_counts[kind] += 1
        elif kind == "power_cut":
            live = [n for n in self.ids if self.nodes[n] is not None]
            if live:
                self._power_cut.add(self.rng.choice(live))
        elif kind == "lose_disk":
            self.lose_disk(self.rng.choice(ids))
        self._schedule(self.rng.expovariate(self._rate(kind)) * 1000, kind, era)

    # ------------------------------------------------------------------ lost disks

    def committed_assignment(self) -> VoterAssignment | None:
        """The latest voter assignment of the committed log."""
        for entry in reversed(self.checker.committed):
            if isinstance(entry.payload, VoterAssignment):
                return entry.payload
        return None

    def lose_disk(self, n: int) -> bool:
        """Node ``n`` crashes and loses its disk: log, quorum state and snapshots. It comes back
        as a new replica with the same id, but only through the reassignment procedure an
        operator follows (:meth:`_replace_step`): while it is down, its removal from the voters
        is asked for and must commit; then it starts, empty, and is added back. Without the
        removal its vote and its fetch offsets would count as if it still held what its old
        disk acknowledged. Refused (False) while another replacement is under way, or when the
        committed voters are fewer than three (then no majority would be left to remove it)."""
        if self.replacing:
            return False
        assignment = self.committed_assignment()
        if assignment is None or not all(
                a is not None and len(a.current_voters) >= 3 and a.target_voters is None
                for a in [assignment] + [self._latest_assignment(m) for m in self.ids]):
            # Every log's voters must keep a majority without n, and no reassignment be under
            # way (the operator replaces a disk alone): else the quorum may wait for n forever.
            return False
        if self.nodes[n] is not None:
            self._crash(n)
        self._power_cut.discard(n)
        self.disk_generation[n] += 1
        self.logs[n] = self._new_log(n)
        self.persisted[n] = None
        self.snapshot_stores[n] = InMemorySnapshotStore()
        self.checker.disk_lost(n)
        if not self.remove_lost_disks:
            self.disks_lost.append((self.now, n))
            self._schedule(self.rng.uniform(*self.faults.downtime_ms), "restart", n)
            return True
        self.replacing[n] = "removing"
        self._rejoin_as_voter[n] = n in assignment.current_voters
        if not self._replace_loop:
            self._replace_loop = True
            self._schedule(50.0, "replace", self._fault_era)
        self.disks_lost.append((self.now, n))
        return True

    def _latest_assignment(self, n: int) -> VoterAssignment | None:
        """The latest voter assignment in node ``n``'s log (None: none there)."""
        log = self.logs[n]
        for entry in reversed(log.read(log.start_offset(), log.end_offset())):
            if isinstance(entry.payload, VoterAssignment):
                return entry.payload
        snapshot = self.snapshot_stores[n].latest()  # the log's prefix went with a snapshot
        return None if snapshot is None else snapshot.voters

    def _new_log(self, n: int) -> IRaftLog:
        """An empty log for node ``n`` on a new disk (``disk_generation[n]`` says which)."""
        return SimDiskLog()

    def _replace_step(self) -> None:
        """The operator's side of replacing a lost disk, looked at every 50 ms: ask for the
        node's removal (and keep asking) until the committed voters and target leave it out;
        then start it, empty; then ask for it to be added back until the committed voters
        hold it."""
        for n, phase in list(self.replacing.items()):
            assignment = self.committed_assignment()
            if assignment is None:
                continue
            current = set(assignment.current_voters)
            target = assignment.target_voters
            if phase == "removing":
                if n not in current and (target is None or n not in target):
                    self.replacing[n] = "adding"
                    if not self._rejoin_as_voter[n]:
                        del self.replacing[n]  # it was an observer: nothing to add back
                    # Not the first start's voters: a lone bootstrap voter with an empty log
                    # would elect itself and start a second history of the same cluster.
                    self.bootstrap_voters[n] = frozenset(current)
                    if self.nodes[n] is None:
                        self._start_node(n)
                elif self.rng.random() < 0.25:
                    self.alter_voters(tuple(sorted(current - {n})))
            elif n in current:
                del self.replacing[n]
            elif self.rng.random() < 0.25:
                self.alter_voters(tuple(sorted(current | {n})))

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
            if self._reassign_every is not None and "removing" not in self.replacing.values():
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
            if self.nodes[n] is None and self.replacing.get(n) != "removing":
                self._start_node(n)
        elif kind in ("one_way", "flap", "cut", "power_cut", "lose_disk", "replace"):
            self._fault_event(kind, ev.data)
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
        # A node whose disk is lost is added back only by its replacement procedure, once its
        # removal committed (the operator's rule; see lose_disk).
        down = {n for n, phase in self.replacing.items() if phase == "removing"}
        previous = [t for t in self.alter_requests.values()
                    if t is not None and not down & set(t)]
        if roll < 0.15 and leader is not None:
            target: tuple[int, ...] | None = tuple(sorted(leader.voters))
        elif roll < 0.2:
            target = None
        elif roll < 0.35 and previous:
            target = previous[-1]
        else:
            size = self.rng.randint(1, min(5, len(self.ids)))
            target = tuple(sorted(self.rng.sample(self.ids, size)))
        if target is not None and down & set(target):
            return
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
        addable = sorted(set(self.ids) - current
                         - {n for n, phase in self.replacing.items() if phase == "removing"})
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
        self.cut_links.clear()
        self._power_cut.clear()
        self._fault_era += 1
        self._replace_loop = bool(self.replacing)
        if self._replace_loop:
            # The replacement goes on (a lost disk does not come back by healing).
            self._schedule(50.0, "replace", self._fault_era)
        for n in self.ids:
            if self.nodes[n] is None and self.replacing.get(n) != "removing":
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
