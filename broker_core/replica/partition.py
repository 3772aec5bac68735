"""One local replica of a partition: its log and what the controller last told us about it.

The controller decides leadership (seed 000 C); this object only applies decisions, in order:

- a LeaderAndIsr state is applied only if its leader epoch is newer than the one held (or equal, to
  pick up an ISR or replica change at the same epoch), so a delayed or duplicated command can never
  undo a later one;
- ``is_leader`` is true exactly when the last applied state names this broker as leader; only then
  does the partition accept produce requests and serve consumer fetches;
- the high watermark never exceeds the log end offset and never moves backwards while leader.
"""

from __future__ import annotations

from dataclasses import dataclass

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


class Partition:
    """See the module docstring for the invariants."""

    def __init__(self, topic: str, index: int, local_broker_id: int, log: Log) -> None:
        self.topic = topic
        self.index = index
        self.local_broker_id = local_broker_id
        self.log = log
        self.state: LeaderAndIsrState | None = None

    # -- controller decisions ------------------------------------------------------------------

    def is_stale(self, state: LeaderAndIsrState) -> bool:
        """True when ``state`` is older than the one this replica already applied."""
        return self.state is not None and state.leader_epoch < self.state.leader_epoch

    def make_leader(self, state: LeaderAndIsrState) -> bool:
        """Apply a state that names us leader; True if leadership is new (epoch changed)."""
        was = self.is_leader and self.state is not None and self.state.leader_epoch == state.leader_epoch
        self.state = state
        if not was:
            # Seed 003: every batch appended from now on carries this epoch; record where it begins.
            self.log.leader_epochs.assign(state.leader_epoch, self.log.log_end_offset)
        self.maybe_advance_high_watermark()
        return not was

    def make_follower(self, state: LeaderAndIsrState) -> bool:
        """Apply a state that names another broker (or none) leader; True if the leader changed."""
        changed = self.state is None or self.state.leader != state.leader or (
            self.state.leader_epoch != state.leader_epoch)
        self.state = state
        return changed

    # -- queries ---------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.state is not None and self.state.leader == self.local_broker_id

    @property
    def leader_id(self) -> int:
        return -1 if self.state is None else self.state.leader

    @property
    def leader_epoch(self) -> int:
        return -1 if self.state is None else self.state.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def maybe_advance_high_watermark(self) -> bool:
        """Advance the HW to the smallest log end offset known in the ISR.

        Followers do not replicate yet (the replication issue adds fetchers and follower log end
        offsets), so the leader's own log end offset is the only one known and the HW follows it.
        """
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index}, leader={self.leader_id}, epoch={self.leader_epoch})"
