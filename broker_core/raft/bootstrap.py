"""The six-step start procedure (docs/design.md#bootstrapping) as a sans-IO state machine.

A node starting up must find the quorum before it can take part: which cluster it belongs
to, who votes, where they are. :class:`BootstrapMachine` decides, from what it is told
(the persisted state, DiscoverBrokers answers, the time), when the node may start its Raft
node and how (voter or observer, with which voters). It sends nothing and reads no clock:
the caller feeds it inputs and carries out the :class:`Action` values it returns.

The steps and where each lives:

1. *Read the quorum-state file and scan the log*: the caller's, passed to the constructor as
   ``persisted`` (the view they give). Phase ``RESTORING`` only lasts the constructor.
2. *Known quorum state with a leader/epoch*: start at once (a voter iff this node is among
   the persisted voters), fetching from the leader it knows — if every voter's endpoint is
   known; otherwise discover them first (``DISCOVERING``).
3. *Otherwise DiscoverBrokers to bootstrap.servers, periodically while some voter's
   connection is unknown*: phase ``DISCOVERING``, one :class:`AskServers` every
   ``interval_ms``.
4. *Metadata to find the leader*: Sluice's Raft observer finds the leader itself (it asks the
   voters with Fetch), so knowing the voters and their endpoints is enough to start.
5. *Nothing found within* ``discovery_timeout_ms`` *(no other node, a partition)*: fall back
   to ``quorum.voters``. A node listed there becomes a voter-to-be (``WAITING_FOR_VOTERS``)
   and names itself a voter in its DiscoverBrokers answers. Any other node is an observer,
   which never makes a quorum up: it starts observing the configured voters if it knows the
   cluster id and every one of their endpoints, else stays ``DISCOVERING``, asking on. A node
   that knows a quorum with an epoch (persisted or discovered) never falls back: it waits for
   that quorum's endpoints.
6. *A voter begins the vote once it knows a majority of the expected voters' endpoints*
   (itself included): :class:`StartNode` as a voter.

A DiscoverBrokers answer that shows an existing quorum (a known epoch) wins in every phase
before ``STARTED``: the node joins it as step 2 says, never bootstraps a second one.

Cluster id: a discovered one is taken; a node that falls back with none generates one only
if it is the sole configured voter (the bootstrapping example), and otherwise waits for
a peer that knows it (``cluster_id.py`` states why).

A configured voter may come without an endpoint (``None``: an id-only ``quorum.voters``
entry); its endpoint is then learned through DiscoverBrokers like any other.

Invariants: ``STARTED`` is entered at most once and :class:`StartNode` is returned exactly
once, on that transition; ``FAILED`` and ``STARTED`` are final; every transition is listed in
:data:`TRANSITIONS` and checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from broker_core.raft.cluster_id import generate_cluster_id
from broker_core.raft.commit import majority_size
from broker_core.raft.discovery import (
    ClusterMismatch,
    Directory,
    Gossip,
    NodeEndpoint,
    QuorumView,
)


class Phase(Enum):
    RESTORING = "restoring"  # step 1: reading what this node persisted
    DISCOVERING = "discovering"  # steps 3-4: asking bootstrap.servers
    WAITING_FOR_VOTERS = "waiting for voters"  # steps 5-6: a configured voter gathering a majority
    STARTED = "started"  # the Raft node runs (final)
    FAILED = "failed"  # cannot start; see ``failure`` (final)


#: Allowed transitions; anything else is a bug (:class:`IllegalBootstrapTransition`).
TRANSITIONS: frozenset[tuple[Phase, Phase]] = frozenset({
    (Phase.RESTORING, Phase.STARTED),  # step 2, endpoints known
    (Phase.RESTORING, Phase.DISCOVERING),  # steps 2 without endpoints, or 3
    (Phase.RESTORING, Phase.WAITING_FOR_VOTERS),  # no bootstrap servers: step 5 at once
    (Phase.RESTORING, Phase.FAILED),
    (Phase.DISCOVERING, Phase.STARTED),  # an existing quorum found
    (Phase.DISCOVERING, Phase.WAITING_FOR_VOTERS),  # step 5, a configured voter
    (Phase.DISCOVERING, Phase.FAILED),
    (Phase.WAITING_FOR_VOTERS, Phase.STARTED),  # step 6, or an existing quorum found
    (Phase.WAITING_FOR_VOTERS, Phase.FAILED),
})


#: How long a node with bootstrap servers looks for an existing quorum before it falls back to
#: ``quorum.voters`` (step 5).
DEFAULT_DISCOVERY_TIMEOUT_MS = 5000.0


class IllegalBootstrapTransition(Exception):
    pass


@dataclass(frozen=True, slots=True)
class AskServers:
    """Send DiscoverBrokers (with :meth:`BootstrapMachine.gossip`) to these servers."""

    servers: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class StartNode:
    """Start the Raft node with the voter set ``voter_ids``, as a voter or an observer.

    ``voters`` holds the endpoints known of them: all of them, except on step 6, where a
    majority suffices and the others' endpoints come later through DiscoverBrokers."""

    cluster_id: str
    voters: Mapping[int, NodeEndpoint]
    as_voter: bool
    leader_id: int  # -1: not known; the node finds it
    voter_ids: tuple[int, ...]


Action = AskServers | StartNode


class BootstrapMachine:
    """See the module docstring.

    :param me: this node's endpoint and boot time.
    :param configured_voters: ``quorum.voters`` (endpoints with boot time 0, ``None`` for an
        id given without one), may be empty.
    :param bootstrap_servers: ``bootstrap.servers``.
    :param cluster_id: given by the operator or persisted; ``None`` when neither.
    :param persisted: the quorum view the node's quorum-state file and log give (step 1),
        ``None`` for a fresh node.
    :param now: the time in milliseconds.
    """

    def __init__(self, me: NodeEndpoint, configured_voters: Mapping[int, NodeEndpoint | None],
                 bootstrap_servers: list[tuple[str, int]], cluster_id: str | None,
                 persisted: QuorumView | None, now: float, *,
                 interval_ms: float = 1000.0,
                 discovery_timeout_ms: float = DEFAULT_DISCOVERY_TIMEOUT_MS,
                 new_cluster_id: Callable[[], str] = generate_cluster_id) -> None:
        self.configured = dict(configured_voters)
        self.servers = tuple(bootstrap_servers)
        self.interval_ms = interval_ms
        self.discovery_timeout_ms = discovery_timeout_ms
        self._new_cluster_id = new_cluster_id
        self.phase = Phase.RESTORING
        self.history: list[Phase] = [Phase.RESTORING]  # every phase entered, in order
        self.failure: str | None = None  # why the phase is FAILED
        self.warning: str | None = None  # the latest peer of another cluster
        self.started: StartNode | None = None
        self.cluster_id_generated = False  # the sole configured voter made the id up
        self.directory = Directory(me, persisted or QuorumView(cluster_id))
        if cluster_id is not None:
            self.directory.learn_view(QuorumView(cluster_id))  # raises if persisted differs
        for e in self.configured.values():
            if e is not None:
                self.directory.learn_node(e)
        self._next_ask: float | None = None
        self._fallback_at: float | None = None
        self._pending: list[Action] = []
        self._restore(now)

    # -- inputs -----------------------------------------------------------------------------

    def take_actions(self) -> list[Action]:
        """The actions of the constructor (step 1's outcome); then each input returns its own."""
        actions, self._pending = self._pending, []
        return actions

    def tick(self, now: float) -> list[Action]:
        """The time is ``now`` (call at :meth:`next_deadline`; earlier is harmless)."""
        actions: list[Action] = []
        if self.phase is Phase.DISCOVERING and self._fallback_at is not None \
                and now >= self._fallback_at:
            self._fallback_at = None
            self._fall_back(now, actions)
        if self.phase in (Phase.DISCOVERING, Phase.WAITING_FOR_VOTERS) and self.servers \
                and self._next_ask is not None and now >= self._next_ask:
            actions.append(AskServers(self.servers))
            self._next_ask = now + self.interval_ms
        return actions

    def gossip_received(self, gossip: Gossip, now: float) -> list[Action]:
        """A DiscoverBrokers answer (or request) from a peer."""
        actions: list[Action] = []
        if self.phase in (Phase.STARTED, Phase.FAILED):
            return actions
        try:
            self.directory.merge(gossip)
        except ClusterMismatch as e:
            self.warning = str(e)  # not fatal: other peers may be of our cluster
            return actions
        self._maybe_start(actions)
        return actions

    def gossip(self) -> Gossip:
        """What this node tells in DiscoverBrokers now."""
        return self.directory.gossip()

    def next_deadline(self) -> float | None:
        if self.phase not in (Phase.DISCOVERING, Phase.WAITING_FOR_VOTERS):
            return None
        times = [t for t in (self._next_ask if self.servers else None, self._fallback_at)
                 if t is not None]
        return min(times) if times else None

    # -- the steps --------------------------------------------------------------------------

    def _move(self, to: Phase) -> None:
        if (self.phase, to) not in TRANSITIONS:
            raise IllegalBootstrapTransition(f"{self.phase.value} -> {to.value}")
        self.phase = to
        self.history.append(to)

    def _restore(self, now: float) -> None:
        view = self.directory.view
        if view.leader_epoch >= 0 and view.voter_ids:  # step 2
            if self._start_if_known(self._pending):
                return
        if self.servers:  # step 3
            self._move(Phase.DISCOVERING)
            self._pending.append(AskServers(self.servers))
            self._next_ask = now + self.interval_ms
            if view.leader_epoch < 0:  # a node that knows its quorum never falls back
                self._fallback_at = now + self.discovery_timeout_ms
            return
        self._fall_back(now, self._pending)  # nobody to ask: step 5 at once

    def _fall_back(self, now: float, actions: list[Action]) -> None:
        """Step 5: no quorum found; ``quorum.voters`` decides."""
        me = self.directory.me.node_id
        view = self.directory.view
        if view.leader_epoch >= 0:
            # A quorum is known (persisted or discovered): quorum.voters is for a first start
            # only; wait for that quorum's endpoints.
            if self.phase is Phase.RESTORING and not self.servers:
                self._fail(f"the voters {list(view.voter_ids)} of the persisted quorum have "
                           "no known endpoints and there are no bootstrap servers to ask")
            return
        if me not in self.configured:
            if self._observe_configured(actions):
                return
            if self.phase is Phase.RESTORING:
                self._fail("no bootstrap servers to discover the quorum through, and this node "
                           "is not in quorum.voters (or does not know every voter's endpoint "
                           "and the cluster id)")
            return  # an observer keeps discovering
        cluster_id = view.cluster_id
        if cluster_id is None and set(self.configured) == {me}:
            cluster_id = self._new_cluster_id()
            self.cluster_id_generated = True
        self._move(Phase.WAITING_FOR_VOTERS)
        # Name ourselves a voter of the configured set in what we gossip (step 5.1).
        self.directory.view = QuorumView(cluster_id, view.leader_id, view.leader_epoch,
                                         view.voters_offset, tuple(sorted(self.configured)))
        if self._next_ask is None:
            self._next_ask = now + self.interval_ms
        self._maybe_start(actions)

    def _maybe_start(self, actions: list[Action]) -> None:
        view = self.directory.view
        if view.leader_epoch >= 0 and view.voter_ids:  # an existing quorum (step 2 rules)
            self._start_if_known(actions)
            return
        if self.phase is not Phase.WAITING_FOR_VOTERS or view.cluster_id is None:
            return
        expected = sorted(self.configured)
        known = [v for v in expected if self.directory.endpoint(v) is not None]
        if len(known) >= majority_size(len(expected)):  # step 6
            self._start(StartNode(view.cluster_id, {v: self._endpoint(v) for v in known},
                                  as_voter=True, leader_id=-1, voter_ids=tuple(expected)),
                        actions)

    def _start_if_known(self, actions: list[Action]) -> bool:
        view = self.directory.view
        if view.cluster_id is None or self.directory.missing_voters():
            return False
        me = self.directory.me.node_id
        self._start(StartNode(view.cluster_id, {v: self._endpoint(v) for v in view.voter_ids},
                              as_voter=me in view.voter_ids, leader_id=view.leader_id,
                              voter_ids=tuple(view.voter_ids)), actions)
        return True

    def _observe_configured(self, actions: list[Action]) -> bool:
        """Step 5 for a node outside ``quorum.voters``: observe the configured voters when
        their endpoints and the cluster id are known (it fetches from them; it never votes)."""
        view = self.directory.view
        expected = tuple(sorted(self.configured))
        if not expected or view.cluster_id is None \
                or any(self.directory.endpoint(v) is None for v in expected):
            return False
        self._start(StartNode(view.cluster_id, {v: self._endpoint(v) for v in expected},
                              as_voter=False, leader_id=-1, voter_ids=expected), actions)
        return True

    def _endpoint(self, node_id: int) -> NodeEndpoint:
        e = self.directory.endpoint(node_id)
        assert e is not None
        return e

    def _start(self, start: StartNode, actions: list[Action]) -> None:
        self._move(Phase.STARTED)
        self.started = start
        self._next_ask = self._fallback_at = None
        actions.append(start)

    def _fail(self, why: str) -> None:
        self._move(Phase.FAILED)
        self.failure = why
