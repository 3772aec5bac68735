"""Rounds of conditional leader/ISR writes that decide again after a conflict.

The controller writes a partition's new leader and ISR with a ``setData`` conditional on the
version of its ``leaderAndISR`` znode, in fenced multis of up to 500 partitions, several in
flight at once. When a multi fails, the partitions of the round are re-read. Some of them may
have been written after all: a multi sent before the failing one commits, and ZooKeeper then
holds exactly what was meant. The rest are *decided again*, by the same rule, from what was
re-read: the earlier decision was taken from a state that is no longer the partition's, and
reusing it could elect a replica that has left the ISR meanwhile, or bump a leader epoch a
second time.

:class:`DecisionRounds` is the sans-IO core of that loop; the controller does the reads and
writes. Invariants:

- a decision is always computed by ``decide`` from the state it is written over (the write is
  conditional on that state's version), never carried over from another state;
- a partition whose re-read state is exactly the decision planned for it counts as written,
  and is not decided again (an epoch bump is applied once);
- ``decide`` answering ``None`` means the partition needs nothing (any more); it is neither
  written nor dropped;
- after ``rounds`` rounds the partitions still conflicting are dropped with a reason, as is a
  partition whose state is gone; nothing is dropped silently (``dropped`` says why, and the
  caller logs it and retries what can still be carried out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from broker_core.controller.batch import PartitionDecision
from broker_core.controller.election import Election
from broker_core.wire.topic_partition import TopicPartition

#: ``decide(tp, state)``: the election a partition needs given its current state, or None.
Decide = Callable[[TopicPartition, PartitionDecision], Election | None]

#: ``make(state, election)``: the state to write for ``election`` over ``state``.
MakeDecision = Callable[[PartitionDecision, Election], PartitionDecision]

#: Rounds of "write, and on a conflict re-read and decide again".
DECISION_ROUNDS = 3

#: Why a partition was dropped: its state vanished (the topic or partition was deleted).
GONE = "its state is gone (the partition was deleted)"


def conflicting(rounds: int) -> str:
    """Why a partition was dropped: its state changed under every one of ``rounds`` writes."""
    return f"its state changed under each of {rounds} conditional writes"


@dataclass(frozen=True, slots=True)
class Planned:
    """One partition's write in a round: the election, the state it was decided from, and the
    state to write."""

    election: Election
    base: PartitionDecision
    decision: PartitionDecision


class DecisionRounds:
    """The decide / write / re-read loop for one set of partitions; see the module docstring.

    Use: ``writes = r.next_writes(states)``; while ``writes``: write them (each conditional on
    ``r.planned[tp].base.zk_version``), then call ``r.succeeded()`` or, after re-reading the
    round's partitions, ``r.conflicted(fresh)``; ask ``next_writes`` again.
    """

    def __init__(self, tps: Iterable[TopicPartition], decide: Decide, make: MakeDecision, *,
                 rounds: int = DECISION_ROUNDS) -> None:
        self.decide = decide
        self.make = make
        self.rounds = rounds
        self._waiting: list[TopicPartition] = list(dict.fromkeys(tps))
        self._round = 0
        #: The writes of the round in progress.
        self.planned: dict[TopicPartition, Planned] = {}
        #: Partitions written (by this loop), with what was written.
        self.written: dict[TopicPartition, Planned] = {}
        #: Partitions left out, with the reason.
        self.dropped: dict[TopicPartition, str] = {}

    def next_writes(self, states: Mapping[TopicPartition, PartitionDecision]
                    ) -> dict[TopicPartition, PartitionDecision]:
        """Decide every waiting partition from ``states`` (the controller's view, refreshed
        after a conflict) and return the states to write in the next round; empty when done."""
        if self.planned:
            raise RuntimeError("the previous round has not been settled")
        if not self._waiting:
            return {}
        if self._round == self.rounds:
            for tp in self._waiting:
                self.dropped[tp] = conflicting(self.rounds)
            self._waiting = []
            return {}
        self._round += 1
        waiting, self._waiting = self._waiting, []
        for tp in waiting:
            cur = states.get(tp)
            if cur is None:
                self.dropped[tp] = GONE
                continue
            el = self.decide(tp, cur)
            if el is not None:
                self.planned[tp] = Planned(el, cur, self.make(cur, el))
        return {tp: p.decision for tp, p in self.planned.items()}

    def succeeded(self) -> None:
        """Every write of the round committed."""
        self.written.update(self.planned)
        self.planned = {}

    def conflicted(self, fresh: Mapping[TopicPartition, PartitionDecision | None]) -> None:
        """The round's writes failed somewhere; ``fresh`` is what the store now holds for each
        partition of the round (None: gone). A partition holding exactly what was planned for it
        was written by a multi that committed before the failure; a gone one is dropped; the
        others are decided again in the next round."""
        for tp, p in self.planned.items():
            st = fresh.get(tp)
            if st is None:
                self.dropped[tp] = GONE
            elif st == p.decision:
                self.written[tp] = p
            else:
                self._waiting.append(tp)
        self.planned = {}
