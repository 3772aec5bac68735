"""One leader election over the metadata store, with epoch fencing and session handling: the
recipe the controller (``/controller``) and the consumer coordinator (``/consumers/coordinator``)
both run. It works over ``IMetadataStore`` only, so it runs on ZooKeeper and on the Raft quorum.

The recipe (the controller's, KAFKA-6082; the coordinator's is the same):

- **Seat and epoch.** The seat is an ephemeral node whose value names its holder (a
  registration with the broker id); beside it an epoch node holds a counter. Standing is one
  ``multi``: create the seat, and set the epoch to the next value conditionally on the version
  just read. A broker that wins the seat therefore always holds a fresh epoch, and the epoch
  node's version after that write is what every write of its term checks
  (:mod:`broker_core.fenced_writer`).
- **Standing.** A data watch on the seat. While it is vacant, the session not suspended and
  this broker standing, it stands. A ``BadVersion`` on the epoch (someone stood between our read
  and our write) re-reads and tries again, up to :data:`ELECTION_ATTEMPTS` times; ``NodeExists``
  on the seat means another broker won, and the watch tells us who. A missing epoch node is
  created at 0 first, a missing parent of the seat before standing again. A user may decline
  to stand (``may_stand``: the controller's isolation abstention).
- **Deposed.** The watch shows the seat naming another broker while we lead: resign.
- **Held but not led.** The watch shows the seat naming this broker while it does not lead (a
  claim the store applied whose answer was lost, or a crashed incarnation's seat): vacate it,
  so an election runs now rather than when that session ends.
- **Session.** SUSPENDED: the user pauses (``on_suspended(True)``) and nothing stands.
  CONNECTED again: the user resumes (``on_suspended(False)``) and, unless leading, stands if
  the seat is vacant. LOST: the ephemeral seat went with the session: ``on_lost()`` (what the
  user drops at once), resume, and resign.
- **Fenced off.** A fenced write found the epoch moved on: :meth:`LeaderElection.resign_soon`
  resigns and vacates the seat if it still names us (whoever moved the epoch without taking
  the seat left it held by a broker that no longer leads, and nobody else would stand).
- **Stop.** Stop watching, resign, and vacate the seat if it still names us.

State machine: ``standing`` (between :meth:`~LeaderElection.start` and
:meth:`~LeaderElection.stop`) × ``role`` × ``suspended`` (the session). Transitions of
``role``: FOLLOWER → LEADER only by winning the multi in :meth:`~LeaderElection.elect`
(``epoch``/``epoch_version`` set first); LEADER → FOLLOWER only in
:meth:`~LeaderElection.resign`, which then calls ``on_resigned``. Invariants: ``epoch_version``
is the epoch node's version this broker's winning multi left (meaningful while LEADER); the
election and resignation steps run one at a time, in order, through the user's :class:`Steps`
(the controller's event queue, the coordinator's lock), so they never interleave.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from broker_core.metadata import (
    BadVersion,
    Create,
    MetadataStoreError,
    NodeExists,
    NoNode,
    SessionState,
    SetData,
    TransactionFailed,
)

#: Reads and conditional writes of the epoch before a standing broker gives up for now (each
#: retry follows someone else's epoch bump; the watch makes it stand again if the seat is
#: still vacant).
ELECTION_ATTEMPTS = 5

Step = Callable[[], Awaitable[None]]


class Steps(Protocol):
    """Runs election steps one at a time, in order, with the user's other serial work."""

    def submit(self, name: str, step: Step) -> None:
        """Queue ``step`` (named ``name`` in logs); its failure is the runner's to report."""

    def run(self, step: Step) -> defer.Deferred:
        """Run ``step`` now or after the step running; fires with its outcome."""


class SerialSteps:
    """:class:`Steps` through a ``DeferredLock``. A failed step is logged: a metadata-store
    error as a warning (the store took nothing; the watch or the session brings the next
    step), anything else as a failure."""

    def __init__(self, log: Logger) -> None:
        self.log = log
        self._lock = defer.DeferredLock()

    def submit(self, name: str, step: Step) -> None:
        self.run(step).addErrback(self._failed, name)

    def run(self, step: Step) -> defer.Deferred:
        return self._lock.run(lambda: defer.Deferred.fromCoroutine(step()))

    def _failed(self, failure: Any, name: str) -> None:
        if failure.check(MetadataStoreError):
            self.log.warn("election step {step} failed: {e}", step=name, e=failure.value)
        else:
            self.log.failure("election step {step} failed", failure, step=name)


class Role(Enum):
    FOLLOWER = "follower"
    LEADER = "leader"


@dataclass(frozen=True)
class Seat:
    """What one election is about. ``registration(broker_id, timestamp_ms)`` is the seat's value
    (``to_bytes()``); ``owner_of(data)`` reads the broker id back (``ValueError`` when
    unreadable). ``title`` names the role in logs ("controller")."""

    title: str
    path: str
    epoch_path: str
    registration: Callable[[int, int], Any]
    owner_of: Callable[[bytes], int]


class LeaderElection:
    """One broker's candidacy for one seat; see the module docstring.

    ``on_elected(epoch, epoch_version)`` is awaited inside the winning step; ``on_resigned()``
    inside the resigning one. ``on_suspended(paused)`` and ``on_lost()`` are called from the
    session listener, synchronously. ``clock`` stamps the seat's registration."""

    def __init__(self, broker_id: int, store: Any, seat: Seat, steps: Steps, *,
                 on_elected: Callable[[int, int], Awaitable[None]],
                 on_resigned: Callable[[], Awaitable[None]],
                 on_suspended: Callable[[bool], None] = lambda paused: None,
                 on_lost: Callable[[], None] = lambda: None,
                 may_stand: Callable[[], bool] = lambda: True,
                 clock: IReactorTime | None = None, log: Logger | None = None) -> None:
        self.broker_id = broker_id
        self.store = store
        self.seat = seat
        self.steps = steps
        self.on_elected = on_elected
        self.on_resigned = on_resigned
        self.on_suspended = on_suspended
        self.on_lost = on_lost
        self.may_stand = may_stand
        #: Stamps the seat's registration (the reactor; wall time when None).
        self.clock = clock
        self.log = log or Logger(namespace="sluice.leader_election")
        self.role = Role.FOLLOWER
        self.standing = False
        self.suspended = False
        self.epoch = -1
        self.epoch_version = -1
        #: The seat's holder as last seen (-1: vacant or not seen yet).
        self.leader_id = -1
        self._watch: Any = None

    @property
    def active(self) -> bool:
        """Whether this broker holds the seat (and the epoch it bumped)."""
        return self.role is Role.LEADER

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Stand: follow the session and watch the seat (a vacant seat is stood for at once)."""
        self.standing = True
        self.store.add_state_listener(self.on_session_state)
        self._watch = self.store.watch_data(self.seat.path, self._on_seat)

    async def stop(self) -> None:
        """Stop standing, resign, and vacate the seat if it still names this broker."""
        self.standing = False
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self.store.remove_state_listener(self.on_session_state)
        # Whether we lead is read inside the step, not here: an election step queued or under
        # way before this one can still win the seat, and must be vacated too.
        await self.steps.run(self._step_down)

    def resign_soon(self) -> None:
        """Step down because a fenced write failed (the epoch moved on), and vacate the seat
        if it still names this broker so that an election runs."""
        self.steps.submit("resign (fenced off)", self._step_down)

    async def _step_down(self) -> None:
        """Resign, and vacate the seat if we held it (a step)."""
        was_active = self.active
        await self.resign()
        if was_active:
            await self.vacate()

    def elect_soon(self) -> None:
        """Stand if the seat is vacant (a step, queued)."""
        self.steps.submit("elect", self.elect_if_vacant)

    # -- the watch and the session ---------------------------------------------------------------

    def _on_seat(self, data: bytes | None, stat: Any) -> None:
        if data is None:
            self.leader_id = -1
            if self.standing and not self.suspended:
                self.steps.submit("elect", self.elect)
            return
        try:
            owner = self.seat.owner_of(data)
        except ValueError:
            self.log.error("unreadable {path} value {v!r}", path=self.seat.path, v=data)
            return
        self.leader_id = owner
        if owner != self.broker_id and self.active:
            self.steps.submit("resign", self.resign)
        elif owner == self.broker_id and not self.active:
            # The seat names this broker but it does not lead: a claim the store applied whose
            # answer was lost (or a crashed incarnation's seat, not yet expired). Nobody would
            # lead until the session ends; give the seat up so an election runs now. A step,
            # so a claim still being answered settles first (then this broker leads, and the
            # step does nothing).
            self.steps.submit("vacate a seat this broker does not hold", self._vacate_unheld)

    def on_session_state(self, state: SessionState) -> None:
        """The store's session listener (see the module docstring)."""
        if state is SessionState.SUSPENDED:
            if not self.suspended:
                self.log.warn("metadata-store connection suspended: the {title} pauses",
                              title=self.seat.title)
            self.suspended = True
            self.on_suspended(True)
        elif state is SessionState.LOST:
            self.log.warn("metadata-store session lost: the {title} resigns",
                          title=self.seat.title)
            self.on_lost()
            self.suspended = False
            self.on_suspended(False)
            self.steps.submit("resign", self.resign)
        elif state is SessionState.CONNECTED:
            if self.suspended:
                self.suspended = False
                self.on_suspended(False)
            if self.standing and not self.active:
                self.elect_soon()

    # -- steps -----------------------------------------------------------------------------------

    async def elect_if_vacant(self) -> None:
        """Stand if the seat is vacant; a held seat's watch tells us when it goes."""
        try:
            await self.store.get(self.seat.path)
        except NoNode:
            await self.elect()

    async def elect(self) -> None:
        """Stand once (up to :data:`ELECTION_ATTEMPTS` epoch reads); on winning, become LEADER
        and await ``on_elected``."""
        if self.active or not self.standing or not self.may_stand():
            return
        seat = self.seat
        for _ in range(ELECTION_ATTEMPTS):
            try:
                data, stat = await self.store.get(seat.epoch_path)
                epoch, version = int(data.decode() or 0), stat.version
            except NoNode:
                try:
                    await self.store.create(seat.epoch_path, b"0", makepath=True)
                except NodeExists:
                    pass
                continue
            now = self.clock.seconds() if self.clock is not None else time.time()
            reg = seat.registration(self.broker_id, int(now * 1000))
            try:
                # Claiming the seat and bumping the epoch is one atomic step: a broker that
                # wins the seat always holds a fresh epoch.
                await self.store.multi([
                    Create(seat.path, reg.to_bytes(), ephemeral=True),
                    SetData(seat.epoch_path, str(epoch + 1).encode(), version),
                ])
            except TransactionFailed as e:
                if isinstance(e.first_error, BadVersion):
                    continue  # someone bumped the epoch between our read and write; re-read
                if isinstance(e.first_error, NoNode):
                    # The seat's parent is missing (never created, or deleted by hand): the
                    # ephemeral seat cannot be created without it.
                    await self.store.ensure_path(seat.path.rsplit("/", 1)[0] or "/")
                    continue
                return  # NodeExists: another broker holds the seat; its watch tells us
            self.epoch, self.epoch_version = epoch + 1, version + 1
            break
        else:
            return
        self.role = Role.LEADER
        self.leader_id = self.broker_id
        self.log.info("broker {b} is now the {title} (epoch {e})", b=self.broker_id,
                      title=seat.title, e=self.epoch)
        await self.on_elected(self.epoch, self.epoch_version)

    async def _vacate_unheld(self) -> None:
        if not self.active:
            await self.vacate()

    async def resign(self) -> None:
        """LEADER → FOLLOWER, then await ``on_resigned`` (nothing when not leading)."""
        if not self.active:
            return
        self.log.info("broker {b} resigns as {title} (epoch {e})", b=self.broker_id,
                      title=self.seat.title, e=self.epoch)
        self.role = Role.FOLLOWER
        await self.on_resigned()

    async def vacate(self) -> None:
        """Delete the seat if it names this broker (conditionally on the version read: a seat
        someone else took meanwhile is left alone). Failures are ignored: the session's end
        removes the ephemeral seat anyway."""
        try:
            data, stat = await self.store.get(self.seat.path)
            if self.seat.owner_of(data) == self.broker_id:
                await self.store.delete(self.seat.path, stat.version)
        except (MetadataStoreError, ValueError):
            pass
