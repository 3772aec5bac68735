"""The reassignment step planner: from the current voters to the target voters, one member at
a time (docs/design.md#voter-reassignment), as pure functions.

A leader that finds a ``TargetVoters`` in its latest *committed* assignment asks
:func:`next_step` what to append next, and appends it only once the previous assignment is
committed (Raft's single-member changes stay safe only one at a time). The rules:

1. ``NewVoters`` = target - current, ``RemovingVoters`` = current - target.
2. Both empty: :class:`Done` (the leader appends the target with ``TargetVoters`` cleared).
3. ``len(NewVoters) >= len(RemovingVoters)``: :class:`Add` a new voter, but only one that is
   caught up (observer promotion; the lowest such id, so a run is reproducible); when none is
   caught up yet, :class:`Wait`.
4. Otherwise remove one: a voter other than the leader (the highest such id, which gives the
   docs/raft.md example's order); when the leader is the only one left to remove,
   :class:`ResignThenRemove`: the leader resigns (EndQuorumEpoch) and the next leader, for
   which the old leader is an ordinary removing voter, removes it.

Invariant: every :class:`Add` / :class:`Remove` changes exactly one voter, never removes the
leader, and never empties the voter set; a sequence of steps reaches the target after
``len(NewVoters) + len(RemovingVoters)`` changes (plus a resignation when the leader leaves).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Add:
    """Append ``current + {voter_id}``."""

    voter_id: int


@dataclass(frozen=True, slots=True)
class Remove:
    """Append ``current - {voter_id}`` (never the leader)."""

    voter_id: int


@dataclass(frozen=True, slots=True)
class ResignThenRemove:
    """The leader is the last voter to remove: it resigns; the next leader removes it."""


@dataclass(frozen=True, slots=True)
class Wait:
    """A voter must be added next, but no new voter has caught up yet."""


@dataclass(frozen=True, slots=True)
class Done:
    """Current equals target: append it with ``TargetVoters`` cleared."""


Step = Add | Remove | ResignThenRemove | Wait | Done


def next_step(current: Collection[int], target: Collection[int], leader_id: int,
              caught_up: Collection[int]) -> Step:
    """The next single-member change from ``current`` towards ``target`` for leader
    ``leader_id``; ``caught_up`` holds the replicas close enough to the leader's log end to
    become voters (only its members of ``target - current`` matter)."""
    cur, tgt = frozenset(current), frozenset(target)
    if not tgt:
        raise ValueError("a reassignment target needs at least one voter")
    if leader_id not in cur:
        raise ValueError(f"leader {leader_id} is not among the current voters {sorted(cur)}")
    new, removing = tgt - cur, cur - tgt
    if not new and not removing:
        return Done()
    if len(new) >= len(removing):
        ready = sorted(new & frozenset(caught_up))
        return Add(ready[0]) if ready else Wait()
    others = sorted(removing - {leader_id})
    if others:
        return Remove(others[-1])
    return ResignThenRemove()


def plan(current: Collection[int], target: Collection[int], leader_id: int,
         successor_id: int | None = None) -> list[tuple[int, ...]]:
    """The voter sets a reassignment passes through when every replica is caught up: ``current``
    first, then one set per step, ending at ``target``. When the leader must resign,
    ``successor_id`` (default: the lowest remaining voter) leads the rest. For documentation and
    tests; the leader itself plans one step at a time with the live catch-up state."""
    sets = [tuple(sorted(current))]
    cur, leader = set(current), leader_id
    everyone = set(current) | set(target)
    while True:
        step = next_step(cur, target, leader, everyone)
        if isinstance(step, Done):
            return sets
        if isinstance(step, Add):
            cur.add(step.voter_id)
        elif isinstance(step, Remove):
            cur.discard(step.voter_id)
        elif isinstance(step, ResignThenRemove):
            candidates = sorted(cur - {leader})
            leader = successor_id if successor_id in candidates else candidates[0]
            continue
        else:  # Wait: impossible, everyone is caught up
            raise AssertionError(step)
        sets.append(tuple(sorted(cur)))
