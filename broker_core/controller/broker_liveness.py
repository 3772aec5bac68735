"""Broker liveness over the network, as the active controller sees it (KRaft's broker heartbeats,
KIP-631), sans-IO on an injected clock.

A broker's metadata-store session says it can reach the store; it says nothing of whether the
controller and the other brokers can reach it. A leader cut off from its followers and the
controller but not from the store would otherwise keep its partitions for the whole cut: its
followers cannot fetch, its acks=all writes cannot commit, and nobody moves its leadership.
So every broker heartbeats the controller (BrokerHeartbeat) every
``broker.heartbeat.interval.ms``, and :class:`BrokerLiveness` tells the controller whom to
*fence*: a broker not heard from for ``broker.session.timeout.ms``. The controller treats a
fenced broker as it treats a dead one (new leaders from the ISR without it, dropped from ISRs,
no leadership or ISR place given to it) until a heartbeat comes back (*unfenced*: it rejoins as a
follower and catches up).

The rules (docs/replication.md, "Fencing"):

- **Fence only a minority.** The controller fences only while the brokers it hears from (itself
  included) are a strict majority of the registered brokers. When it hears from fewer, either it
  is the one cut off or the whole cluster is slow; fencing the silent brokers would take every
  partition offline in the first case and solve nothing in the second. It is then *isolated*.
- **Resign only when cut off.** An isolated controller resigns only when, in addition, a strict
  majority of the other registered brokers have recorded in the metadata store that they cannot
  reach it (:func:`should_resign`): the others can reach the store and have stopped hearing from
  it, so another broker can serve them. With fewer than three registered brokers neither side
  of a cut can tell which one is cut off, so nobody resigns (and, no side being a majority,
  nobody is fenced). A merely slow cluster records no such majority (its
  heartbeats are answered late, not lost for a whole session), and a controller that hears its
  brokers' heartbeats is never isolated.
- **No ISR shrink while isolated.** An isolated controller refuses ISR shrinks: it cannot tell
  the followers that stopped fetching are gone from it being cut off, and a cut-off controller
  that shrank the ISRs of the partitions it leads to itself would leave them no other leader
  once it is replaced. (``replica.lag.time.max.ms`` longer than ``broker.session.timeout.ms``, as
  the defaults are, lets the isolation be noticed before a leader asks.)
- **A successor inherits the verdict.** A broker that takes over from a controller most brokers
  recorded they could not reach counts that controller as silent for a whole session already
  (:func:`unreachable_predecessor`): it fences it at once instead of a session later.
- **A stalled controller blames nobody.** Time the controller's own process did not run (its
  periodic check came late) is credited to every broker: the heartbeats it could not read meanwhile
  are not theirs to answer for. The broker's lease does the same.
- **A fresh start for everyone.** A new controller, or a broker that (re)registers, starts with
  a full session: the controller cannot know when a broker last heard from its predecessor.

Invariants: the controller itself is never silent nor fenced; ``fenced`` holds only registered
brokers; a broker is fenced only by :meth:`BrokerLiveness.evaluate` while not isolated, and
unfenced only after a heartbeat newer than its fencing.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class LivenessVerdict:
    """What :meth:`BrokerLiveness.evaluate` decided: brokers newly fenced and newly unfenced,
    and whether the controller hears from too few brokers to fence anyone (``isolated``)."""

    fence: frozenset[int]
    unfence: frozenset[int]
    isolated: bool

    @property
    def changed(self) -> bool:
        return bool(self.fence or self.unfence)


class BrokerLiveness:
    """The controller's heartbeat bookkeeping; see the module docstring.

    ``clock`` is anything with ``seconds()`` (the reactor, or ``task.Clock`` in tests).
    """

    def __init__(self, controller_id: int, session_timeout_s: float, clock: Any) -> None:
        if session_timeout_s <= 0:
            raise ValueError("session timeout must be positive")
        self.controller_id = controller_id
        self.session_timeout_s = session_timeout_s
        self.clock = clock
        self._last_heard: dict[int, float] = {}
        self._fenced_at: dict[int, float] = {}
        #: Fenced brokers heard from since they were fenced (unfenced by the next evaluate).
        self._returned: set[int] = set()

    @property
    def fenced(self) -> frozenset[int]:
        return frozenset(self._fenced_at)

    def is_fenced(self, broker_id: int) -> bool:
        return broker_id in self._fenced_at

    def reset(self, registered: Iterable[int]) -> None:
        """This broker just became controller: every registered broker gets a full session from
        now, and nobody is fenced."""
        now = self.clock.seconds()
        self._last_heard = {b: now for b in registered}
        self._fenced_at = {}
        self._returned = set()

    def registered(self, now_registered: Mapping[int, Any] | Collection[int],
                   restarted: Collection[int] = ()) -> None:
        """The registered brokers changed: new ones (and ``restarted`` ones, a new incarnation)
        get a full session from now and are not fenced; brokers gone are forgotten (their death
        is the broker-change procedure's business, not fencing's)."""
        now = self.clock.seconds()
        ids = set(now_registered)
        for b in list(self._last_heard):
            if b not in ids:
                del self._last_heard[b]
                self._fenced_at.pop(b, None)
                self._returned.discard(b)
        for b in ids:
            if b not in self._last_heard or b in restarted:
                self._last_heard[b] = now
                self._fenced_at.pop(b, None)
                self._returned.discard(b)

    def credit(self, seconds: float) -> None:
        """The controller itself did not run for ``seconds`` (a stalled process, a long GC): the
        heartbeats that could not be read meanwhile do not count against the brokers."""
        if seconds > 0:
            self._last_heard = {b: t + seconds for b, t in self._last_heard.items()}

    def presume_silent(self, broker_id: int) -> None:
        """Count ``broker_id`` as not heard from for a whole session already (most brokers
        recorded that they could not reach it as controller: see :func:`unreachable_predecessor`);
        it is fenced at the next :meth:`evaluate` unless a heartbeat comes first."""
        if broker_id in self._last_heard and broker_id != self.controller_id:
            self._last_heard[broker_id] = self.clock.seconds() - self.session_timeout_s

    def heartbeat(self, broker_id: int) -> bool:
        """Record a heartbeat from a registered broker; returns whether it is still fenced (it
        is unfenced by the next :meth:`evaluate`, which the controller runs at once when this
        returns True). Heartbeats from unregistered brokers are ignored (False)."""
        if broker_id not in self._last_heard:
            return False
        self._last_heard[broker_id] = self.clock.seconds()
        if broker_id in self._fenced_at:
            self._returned.add(broker_id)
            return True
        return False

    def silent(self) -> set[int]:
        """Registered brokers not heard from for a whole session (never the controller)."""
        now = self.clock.seconds()
        return {b for b, t in self._last_heard.items()
                if b != self.controller_id and now - t >= self.session_timeout_s}

    def hears_majority(self) -> bool:
        """Whether the brokers heard from within a session, the controller included, are a strict
        majority of the registered brokers (the controller counts as registered)."""
        registered = set(self._last_heard) | {self.controller_id}
        heard = registered - self.silent()
        return 2 * len(heard) > len(registered)

    def evaluate(self) -> LivenessVerdict:
        """Fence the silent brokers (only while :meth:`hears_majority`) and unfence the fenced
        ones heard from since they were fenced; returns what changed."""
        silent = self.silent()
        isolated = not self.hears_majority()
        unfence = frozenset(b for b in self._returned if b not in silent)
        for b in unfence:
            del self._fenced_at[b]
        self._returned -= unfence
        fence: frozenset[int] = frozenset()
        if not isolated:
            now = self.clock.seconds()
            fence = frozenset(b for b in silent if b not in self._fenced_at)
            for b in fence:
                self._fenced_at[b] = now
        return LivenessVerdict(fence, unfence, isolated)


# -- "I cannot reach the controller" records (the metadata store side) ---------------------------


@dataclass(frozen=True, slots=True)
class UnreachableVote:
    """A broker's record that it has not reached controller ``controller_id`` at
    ``controller_epoch`` for a whole session while its metadata-store session was alive."""

    broker_id: int
    controller_id: int
    controller_epoch: int

    def to_bytes(self) -> bytes:
        return json.dumps({"version": 1, "controller_id": self.controller_id,
                           "controller_epoch": self.controller_epoch}).encode()

    @classmethod
    def from_bytes(cls, broker_id: int, data: bytes) -> UnreachableVote:
        """Parse a record; raises ValueError on anything malformed (a record is another
        broker's word: it is checked, never trusted)."""
        try:
            value = json.loads(data.decode())
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"unreadable controller-unreachable record: {e}") from None
        if not isinstance(value, dict):
            raise ValueError("controller-unreachable record is not an object")
        cid, epoch = value.get("controller_id"), value.get("controller_epoch")
        if (type(cid) is not int or type(epoch) is not int or cid < 0 or epoch < 0
                or cid > 0x7FFFFFFF or epoch > 0x7FFFFFFF):
            raise ValueError("controller-unreachable record has no valid controller id/epoch")
        return cls(broker_id, cid, epoch)


def should_resign(controller_id: int, controller_epoch: int, registered: Collection[int],
                  votes: Iterable[UnreachableVote], isolated: bool) -> bool:
    """Whether the active controller should resign: it is isolated (hears from too few brokers)
    and a strict majority of the *other* registered brokers recorded that they cannot reach it at
    this epoch, and there are at least two others. Records of unregistered brokers, or naming
    another controller or epoch, do not count."""
    if not isolated:
        return False
    others = {b for b in registered if b != controller_id}
    if len(others) < 2:
        # Two brokers that cannot reach each other cannot tell which one is cut off: handing
        # the controllership to the other would only start a see-saw.
        return False
    against = {v.broker_id for v in votes
               if v.broker_id in others and v.controller_id == controller_id
               and v.controller_epoch == controller_epoch}
    return 2 * len(against) > len(others)


def unreachable_predecessor(controller_id: int, controller_epoch: int,
                            registered: Collection[int],
                            votes: Iterable[UnreachableVote]) -> set[int]:
    """Earlier controllers (registered, not ``controller_id``, at an epoch below
    ``controller_epoch``) that a strict majority of the other registered brokers recorded they
    could not reach: the new controller need not give them a fresh session."""
    found = set()
    named = {v.controller_id for v in votes}
    for old in named:
        if old == controller_id or old not in registered:
            continue
        others = {b for b in registered if b != old}
        against = {v.broker_id for v in votes if v.controller_id == old
                   and v.controller_epoch < controller_epoch and v.broker_id in others}
        if len(others) >= 2 and 2 * len(against) > len(others):
            found.add(old)
    return found
