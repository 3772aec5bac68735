"""The consumer coordinator's election: the shared recipe (:mod:`broker_core.leader_election`)
for the seat ``/consumers/coordinator`` fenced by ``/consumers/coordinator_epoch``
(docs/design.md#coordinator-failover).

Every broker stands. What is the coordinator's own:

- steps run through a lock (:class:`~broker_core.leader_election.SerialSteps`): the coordinator
  has no event queue; its requests check ``suspended`` and ``active`` themselves;
- SUSPENDED pauses the coordinator (``on_suspended(True)``; it neither pings, rebalances nor
  writes) until CONNECTED; LOST resigns, which clears its state;
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

#: The coordinator's seat and epoch.
COORDINATOR_SEAT = Seat(
    title="consumer coordinator", path=paths.CONSUMERS_COORDINATOR,
    epoch_path=paths.CONSUMERS_COORDINATOR_EPOCH, registration=paths.CoordinatorRegistration,
    owner_of=lambda data: paths.CoordinatorRegistration.from_bytes(data).broker_id)


def coordinator_election(broker_id: int, store: Any, *,
                         on_elected: Callable[[int, int], Awaitable[None]],
                         on_resigned: Callable[[], Awaitable[None]],
                         on_suspended: Callable[[bool], None] = lambda paused: None,
                         clock: IReactorTime | None = None) -> LeaderElection:
    """The coordinator's candidacy; ``on_elected(epoch, epoch_version)`` is its start-up."""
    election: LeaderElection

    async def start_up(epoch: int, epoch_version: int) -> None:
        try:
            await on_elected(epoch, epoch_version)
        except Exception:
            log.failure("coordinator start-up failed; resigning")
            await election.resign()
            await election.vacate()

    election = LeaderElection(broker_id, store, COORDINATOR_SEAT, SerialSteps(log),
                              on_elected=start_up, on_resigned=on_resigned,
                              on_suspended=on_suspended, clock=clock, log=log)
    return election
