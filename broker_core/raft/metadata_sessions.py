"""Session liveness on the quorum leader, sans-IO.

A session is opened, closed and expired through the log (``open_session``, ``close_session``,
``expire_session`` commands), so every replica agrees on which sessions exist and which
ephemeral nodes they own. *Liveness* is not in the log: heartbeats go to the leader only, and
writing each one down would cost a commit per client per few seconds for nothing the replicas
need. The leader's :class:`SessionTracker` keeps a deadline per open session, a heartbeat moves
it to ``now + timeout``, and when one passes the leader proposes ``expire_session``.

After a leader change the new leader has no heartbeat history of its own, and the time a
client had no leader to heartbeat must not be held against it. KRaft's controller and a
ZooKeeper leader simply start every session's timer over (a full timeout from the takeover);
stacked on the election that follows the death of a leader whose broker also dies, that made
the dead broker's session last fetch timeout + election + a whole session timeout (it
expired 8-9 s after a kill with a 6 s timeout, where ZooKeeper took 5-6.5 s). Here the new
leader uses what it last knew:

- every node keeps a **view** of the leader's liveness table, the time each session was last
  heard from (:meth:`SessionTracker.remember`: the leader sends each session's age with every
  heartbeat answer, so a follower's view is at most a heartbeat interval old; a session opened
  since the last answer counts as heard when the follower applied its opening,
  :meth:`SessionTracker.saw_opened`; a leader that steps down keeps its own table as its view,
  :meth:`SessionTracker.stop_leading`);
- on taking over (:meth:`SessionTracker.lead`) a session in the view gets the deadline
  ``max(heard + timeout, now + grace)``: what the old leader would have given it, but never
  less than ``grace`` (half its timeout, :data:`LEADER_CHANGE_GRACE`) from the takeover, so a
  client that is alive has that long to find the new leader and heartbeat it, which it does at
  once when its node learns of the new leader (the store's heartbeat on a new leader), and
  within a heartbeat interval (a third of the timeout) even without it. A session not in the
  view (opened after it, or no view at all) gets a full timeout from the takeover, as before.

A view is never trusted to *shorten* a live session below the grace: a stale view (this node
was cut off from the old leader) only makes deadlines earlier than the old leader's, down to
``now + grace``, which a live client meets. Ages, not times, travel between nodes, so the
nodes' clocks need not agree; a heard time is the receiver's clock at receipt minus the age
(never earlier than the truth: the network delay only adds grace).

Times are plain numbers (milliseconds) passed in; nothing here reads a clock.

Invariants: a session is tracked only while open in the applied tree and this node leads; a
session reported by :meth:`expired` is not reported again (the expiry is in flight) and no
longer accepts heartbeats, until :meth:`ended` forgets it or a new :meth:`lead` starts over; a
new leader never sets a deadline earlier than ``grace`` after its takeover.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The least a new leader leaves a session it knows of, as a fraction of the session's timeout,
#: counted from its takeover: time for a live client to find it and heartbeat it.
LEADER_CHANGE_GRACE = 0.5


class SessionTracker:
    """See the module docstring."""

    def __init__(self) -> None:
        self._timeouts: dict[int, int] = {}
        self._deadlines: dict[int, float] = {}
        self._expiring: set[int] = set()
        self._heard: dict[int, float] = {}  # the view: session -> last heard, this node's clock
        self._leading = False

    def lead(self, sessions: Mapping[int, int], now: float) -> int:
        """This node became leader at ``now``; ``sessions`` (id -> timeout ms) are the open
        sessions of its applied tree. A session in the view keeps the deadline it had (last
        heard + timeout) but no less than the grace from ``now``; any other gets a full timeout
        from ``now``. Returns how many were in the view."""
        heard, self._heard = self._heard, {}
        self._leading = True
        self._timeouts = dict(sessions)
        self._deadlines = {}
        for sid, ms in sessions.items():
            last = heard.get(sid)
            self._deadlines[sid] = now + ms if last is None else \
                max(last + ms, now + ms * LEADER_CHANGE_GRACE)
        self._expiring = set()
        return sum(1 for sid in sessions if sid in heard)

    @property
    def leading(self) -> bool:
        """Between :meth:`lead` and :meth:`stop_leading`: the deadlines are this node's."""
        return self._leading

    def stop_leading(self) -> None:
        """This node no longer leads: its table becomes its view (a session's last heartbeat
        is its deadline minus its timeout), for when it leads again before a newer view."""
        self._leading = False
        self._heard = {sid: deadline - self._timeouts[sid]
                       for sid, deadline in self._deadlines.items() if sid not in self._expiring}
        self._timeouts.clear()
        self._deadlines.clear()
        self._expiring.clear()

    def ages(self, now: float) -> dict[int, float]:
        """The leader's liveness table as ages (ms since each live session was last heard
        from; a session granted time at a takeover counts as heard then), for the followers'
        views."""
        return {sid: max(0.0, now - (deadline - self._timeouts[sid]))
                for sid, deadline in self._deadlines.items() if sid not in self._expiring}

    def remember(self, ages: Mapping[int, float], now: float) -> None:
        """A follower got the leader's table (:meth:`ages`) at ``now``: it becomes the view.
        Ignored while leading (the own table is fresher)."""
        if self._leading:
            return
        self._heard = {sid: now - max(0.0, age) for sid, age in ages.items()}

    def saw_opened(self, session_id: int, now: float) -> None:
        """A follower applied an ``open_session`` entry at ``now``: its client was alive then
        (later than when the leader opened it: never earlier than the truth), so the view
        has it before the next table does. Ignored while leading (:meth:`opened` is)."""
        if not self._leading:
            self._heard.setdefault(session_id, now)

    def opened(self, session_id: int, timeout_ms: int, now: float) -> None:
        """An ``open_session`` entry was applied: its first deadline is a timeout from now."""
        self._timeouts[session_id] = timeout_ms
        self._deadlines[session_id] = now + timeout_ms

    def ended(self, session_id: int) -> None:
        """A ``close_session`` or ``expire_session`` entry was applied."""
        self._timeouts.pop(session_id, None)
        self._deadlines.pop(session_id, None)
        self._expiring.discard(session_id)

    def heartbeat(self, session_id: int, now: float) -> bool:
        """Refresh ``session_id``; ``False`` when this leader does not know it as live (never
        opened, ended, or already being expired): the client must open a new session."""
        if session_id not in self._deadlines or session_id in self._expiring:
            return False
        self._deadlines[session_id] = max(self._deadlines[session_id],
                                          now + self._timeouts[session_id])
        return True

    def expired(self, now: float) -> list[int]:
        """Sessions whose deadline has passed and whose expiry is not yet proposed, in id
        order; they are marked as expiring."""
        due = sorted(sid for sid, deadline in self._deadlines.items()
                     if deadline <= now and sid not in self._expiring)
        self._expiring.update(due)
        return due

    def next_deadline(self) -> float | None:
        """When :meth:`expired` may next have something to report."""
        pending = [d for sid, d in self._deadlines.items() if sid not in self._expiring]
        return min(pending) if pending else None

    def is_live(self, session_id: int) -> bool:
        return session_id in self._deadlines and session_id not in self._expiring
