"""The election of one coordinator shard: the shared recipe (:mod:`broker_core.leader_election`)
for the seat ``/coordinator_shards/seats/[k]`` fenced by ``/coordinator_shards/epochs/[k]``
(docs/design.md#coordinator-failover, docs/coordinator.md#sharding).

The brokers that stand for shard k are those :mod:`coordinator.shard_placement` wants as its
owner (:mod:`coordinator.shards` starts and stops the candidacies). What is the coordinator's
own:

- steps run through a lock (:class:`~broker_core.leader_election.SerialSteps`): the coordinator
  has no event queue; its requests check ``suspended`` and ``active`` themselves;
- SUSPENDED pauses the coordinator (``on_suspended(True)``; it neither pings, rebalances nor
  writes) until CONNECTED; LOST resigns, which clears its state, and ``on_lost`` keeps it from
  acting until that resignation has run;
- a start-up (``on_elected``) that fails resigns and vacates the seat, so that an election runs
  again rather than leaving a coordinator that holds the seat and serves nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.leader_election import LeaderElection, Seat, SerialSteps

log = Logger(namespace="sluice.coordinator.elector")

#: The highest broker id (Kafka's are int32): a seat naming another id is hostile.
MAX_BROKER_ID = (1 << 31) - 1


def owner_of(data: bytes) -> int:
    """The broker id a shard's (or the legacy) seat names: ``ValueError`` when unreadable or
    outside 0..2**31-1, so a hostile value is never reported to clients as a coordinator."""
    broker_id = paths.CoordinatorRegistration.from_bytes(data).broker_id
    if not 0 <= broker_id <= MAX_BROKER_ID:
        raise ValueError(f"consumer coordinator: broker id {broker_id} out of range")
    return broker_id


def shard_seat(shard: int) -> Seat:
    """Shard ``shard``'s seat and epoch."""
    return Seat(title=f"coordinator of shard {shard}", path=paths.coordinator_shard_seat(shard),
                epoch_path=paths.coordinator_shard_epoch(shard),
                registration=paths.CoordinatorRegistration, owner_of=owner_of)


def coordinator_election(broker_id: int, store: Any, shard: int, *,
                         on_elected: Callable[[int, int], Awaitable[None]],
                         on_resigned: Callable[[], Awaitable[None]],
                         on_suspended: Callable[[bool], None] = lambda paused: None,
                         on_lost: Callable[[], None] = lambda: None,
                         clock: IReactorTime | None = None) -> LeaderElection:
    """The candidacy for shard ``shard``; ``on_elected(epoch, epoch_version)`` is its
    start-up."""
    election: LeaderElection

    async def start_up(epoch: int, epoch_version: int) -> None:
        try:
            await on_elected(epoch, epoch_version)
        except Exception:
            log.failure("coordinator start-up failed; resigning")
            await election.resign()
            await election.vacate()

    election = LeaderElection(broker_id, store, shard_seat(shard), SerialSteps(log),
                              on_elected=start_up, on_resigned=on_resigned,
                              on_suspended=on_suspended, on_lost=on_lost, clock=clock, log=log)
    return election
