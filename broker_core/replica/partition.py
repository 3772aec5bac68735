"""One local replica of a partition: its log, what the controller last told us about it, and, while
we lead it, what we know of the other replicas.

The controller decides leadership; this object applies decisions and keeps the
leader's bookkeeping (Kafka's ``Partition.scala``). Invariants:

- a LeaderAndIsr state is applied only if it is not older than the one held: a lower leader
  epoch, or the same epoch with a lower ZooKeeper version, is stale, so a delayed or duplicated
  command can never undo a later one;
- ``is_leader`` is true exactly when the last applied state names this broker as leader; only then
  does the partition accept produce requests and serve fetches;
- the high watermark never exceeds the log end offset and never moves backwards while leader. It
  is the smallest log end offset over the *maximal* ISR: the committed ISR plus a
  replica whose addition is in flight. A shrink counts only once the controller has applied it,
  so the HW never passes an offset that a replica the controller may still elect lacks;
- at most one ISR change per partition is pending (``pending_isr``, Kafka's
  ``PendingExpandIsr`` / ``PendingShrinkIsr``). It names the ISR proposed and the partition
  epoch (znode version) it was computed from, and it ends only through something that is about
  *this* change: the controller's answer to it (an answer to any other change, e.g. a late one
  to a change a LeaderAndIsr already settled, is ignored), or a LeaderAndIsr that is newer than
  the state it was computed from (a new leader epoch or a higher partition epoch: the controller
  has moved on, so the change was applied or will be refused). A LeaderAndIsr repeating the state
  the change was computed from leaves it pending: the change may still be in flight, and
  dropping it would let the HW pass a replica it is adding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from broker_core.log import Log


@dataclass(frozen=True, slots=True)
class LeaderAndIsrState:
    """The controller's decision for one partition (LeaderAndIsr partition state)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    controller_epoch: int
    zk_version: int


@dataclass(frozen=True, slots=True)
class PendingIsrChange:
    """An ISR change sent to the controller and not settled yet: the ISR proposed, and the leader
    epoch and partition epoch (znode version) of the state it was computed from. Two changes
    are the same change exactly when all three are equal (the AlterPartition request carries
    all three, so an answer names the change it answers)."""

    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int


@dataclass(slots=True)
class RemoteReplica:
    """What the leader knows of one follower (Kafka's ``Replica``): its log end offset as of its
    last fetch (-1 until it fetches from this leader), its log start offset as it last reported
    it (-1 until then), and when it was last caught up."""

    broker_id: int
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_fetch_time_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_caught_up_time_ms: int = 0


class Partition:
    """See the module docstring for the invariants."""

    def __init__(self, topic: str, index: int, local_broker_id: int, log: Log) -> None:
        self.topic = topic
        self.index = index
        self.local_broker_id = local_broker_id
        self.log = log
        self.state: LeaderAndIsrState | None = None
        self.remotes: dict[int, RemoteReplica] = {}
        self.pending_isr: PendingIsrChange | None = None
        #: First offset of the current leadership (where our leader epoch starts in the log).
        self.leader_epoch_start_offset = -1

    # -- controller decisions ------------------------------------------------------------------

    def is_stale(self, state: LeaderAndIsrState) -> bool:
        """True when ``state`` is older than the one this replica already applied."""
        if self.state is None:
            return False
        if state.leader_epoch != self.state.leader_epoch:
            return state.leader_epoch < self.state.leader_epoch
        return state.zk_version < self.state.zk_version

    def make_leader(self, state: LeaderAndIsrState, now_ms: int) -> bool:
        """Apply a state that names us leader; True if leadership is new (epoch changed).

        A new leadership starts a new epoch in the log and forgets what an earlier
        leadership knew about followers: their offsets are unknown until they fetch again, and
        ISR members count as caught up now, so none is dropped before it had the chance to fetch.
        """
        new = not (self.is_leader and self.state is not None
                   and self.state.leader_epoch == state.leader_epoch)
        self.state = state
        pending = self.pending_isr
        if new or (pending is not None and state.zk_version > pending.partition_epoch):
            self.pending_isr = None
        if new:
            self.log.leader_epochs.assign(state.leader_epoch, self.log.log_end_offset)
            self.leader_epoch_start_offset = self.log.log_end_offset
            self.remotes = {}
        for r in state.replicas:
            if r != self.local_broker_id and r not in self.remotes:
                self.remotes[r] = RemoteReplica(
                    r, last_caught_up_time_ms=now_ms if r in state.isr else 0)
        for r in list(self.remotes):
            if r not in state.replicas:
                del self.remotes[r]
        self.maybe_advance_high_watermark()
        return new

    def make_follower(self, state: LeaderAndIsrState) -> bool:
        """Apply a state that names another broker (or none) leader; True if the leader or its
        epoch changed (the follower must then find its truncation point again)."""
        changed = self.state is None or self.state.leader != state.leader or (
            self.state.leader_epoch != state.leader_epoch)
        self.state = state
        self.remotes = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = -1
        return changed

    def propose_isr(self, isr: tuple[int, ...]) -> PendingIsrChange:
        """Record ``isr`` as the pending ISR change (computed from the state held now) and return
        it, for the caller to send to the controller. Only a leader without a pending change may
        propose one."""
        st = self.state
        if st is None or not self.is_leader or self.pending_isr is not None:
            raise ValueError(f"{self!r}: cannot propose an ISR change now "
                             f"(pending: {self.pending_isr})")
        self.pending_isr = PendingIsrChange(tuple(isr), st.leader_epoch, st.zk_version)
        return self.pending_isr

    def apply_isr_update(self, answered: PendingIsrChange, leader_epoch: int,
                         isr: tuple[int, ...], zk_version: int) -> bool:
        """The controller accepted the change ``answered``, leaving ``isr`` at ``zk_version``.

        Only an answer to the pending change counts: for any other change (one a LeaderAndIsr
        already settled, say, while a newer change is pending) nothing happens and the result
        is False. A matching answer ends the pending change; its ISR and version are adopted
        (True) unless our leadership has moved on or a newer state already arrived."""
        if answered != self.pending_isr or not self.is_leader:
            return False
        self.pending_isr = None
        st = self.state
        if st is None or st.leader_epoch != leader_epoch or zk_version < st.zk_version:
            return False
        self.state = replace(st, isr=tuple(isr), zk_version=zk_version)
        return True

    def refuse_isr_change(self, answered: PendingIsrChange) -> bool:
        """The controller refused the change ``answered``: end it if it is the pending one (True);
        an answer to any other change changes nothing (False)."""
        if answered != self.pending_isr:
            return False
        self.pending_isr = None
        return True

    # -- queries ---------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.state is not None and self.state.leader == self.local_broker_id

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def leader_id(self) -> int:
        return -1 if self.state is None else self.state.leader

    @property
    def leader_epoch(self) -> int:
        return -1 if self.state is None else self.state.leader_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        return () if self.state is None else self.state.isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus the replicas a pending change adds (assume the largest ISR
        that may be in force); a pending shrink removes nothing until it is committed."""
        isr = self.isr
        if self.pending_isr is not None:
            isr += tuple(r for r in self.pending_isr.isr if r not in isr)
        return isr

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    # -- the leader's view of its followers --------------------------------------------------------

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from ``fetch_offset`` (so its log ends there). Returns whether the
        HW advanced. Kafka's caught-up rule: caught up now if it asked for our log end, or, if
        it reached the log end we had at its previous fetch, caught up as of that fetch."""
        r = self.remotes.get(replica_id)
        if r is None:
            return False
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            r.last_caught_up_time_ms = max(r.last_caught_up_time_ms, now_ms)
        elif r.last_fetch_leader_leo >= 0 and fetch_offset >= r.last_fetch_leader_leo:
            r.last_caught_up_time_ms = max(r.last_caught_up_time_ms, r.last_fetch_time_ms)
        moved = fetch_offset > r.log_end_offset
        r.log_end_offset = fetch_offset
        r.last_fetch_leader_leo = leo
        r.last_fetch_time_ms = now_ms
        # The HW is a minimum over log end offsets: only this follower's moving up can raise it
        # here (every other input re-checks it where it changes). A follower fetch names each
        # partition it follows, mostly at the same offset as last time.
        return moved and self.maybe_advance_high_watermark()

    def record_follower_log_start(self, replica_id: int, log_start_offset: int) -> bool:
        """A follower reported its log start offset; True if that changed what we knew."""
        r = self.remotes.get(replica_id)
        if r is None or r.log_start_offset == log_start_offset:
            return False
        r.log_start_offset = log_start_offset
        return True

    def low_watermark(self, alive: Callable[[int], bool]) -> int:
        """Kafka's low watermark (DeleteRecords): the lowest log start offset of this leader
        and of every follower whose broker is ``alive`` (-1 for one that has not reported
        it yet)."""
        low = self.log.log_start_offset
        for r in self.remotes.values():
            if r.log_start_offset < low and alive(r.broker_id):
                low = r.log_start_offset
        return low

    def isr_expansion(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR to propose if ``replica_id`` has caught up and is outside it, else None.

        Caught up means its log reaches both the HW and the start of our leadership, so that
        it holds everything committed and has truncated any stale tail (Kafka's
        ``isFollowerInSync``)."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        r = self.remotes.get(replica_id)
        if r is None or replica_id in self.isr:
            return None
        if r.log_end_offset >= self.high_watermark and (
                r.log_end_offset >= self.leader_epoch_start_offset):
            return self.isr + (replica_id,)
        return None

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR followers that have not caught up for longer than ``max_lag_ms`` (Kafka's
        time-only lag rule). A follower whose log end equals ours is in sync: there is nothing
        to catch up with."""
        if not self.is_leader:
            return []
        leo = self.log.log_end_offset
        out = []
        for b in self.isr:
            if b == self.local_broker_id:
                continue
            r = self.remotes.get(b)
            if r is None:
                continue
            if r.log_end_offset != leo and now_ms - r.last_caught_up_time_ms > max_lag_ms:
                out.append(b)
        return out

    def maybe_advance_high_watermark(self) -> bool:
        """Advance the HW to the smallest log end offset over the maximal ISR; True if it moved.
        A member whose offset is not known yet (it has not fetched since we became leader)
        holds the HW where it is."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        for b in self.maximal_isr:
            if b == self.local_broker_id:
                continue
            r = self.remotes.get(b)
            if r is None or r.log_end_offset < 0:
                return False
            new_hw = min(new_hw, r.log_end_offset)
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

    # -- follower side -----------------------------------------------------------------------------

    def follower_update_high_watermark(self, leader_hw: int) -> None:
        """A follower's HW is the leader's, capped by its own log end."""
        hw = min(leader_hw, self.log.log_end_offset)
        if hw > self.log.high_watermark:
            self.log.high_watermark = hw

    def __repr__(self) -> str:
        return (f"Partition({self.topic}-{self.index}, leader={self.leader_id}, "
                f"epoch={self.leader_epoch}, isr={list(self.isr)})")
