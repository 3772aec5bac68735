"""Session liveness on the quorum leader, sans-IO.

A session is opened, closed and expired through the log (``open_session``, ``close_session``,
``expire_session`` commands), so every replica agrees on which sessions exist and which
ephemeral nodes they own. *Liveness* is not in the log: heartbeats go to the leader only, and
writing each one down would cost a commit per client per few seconds for nothing the replicas
need. The leader's :class:`SessionTracker` keeps a deadline per open session, a heartbeat moves
it to ``now + timeout``, and when one passes the leader proposes ``expire_session``.

After a leader change the new leader has no heartbeat history. It grants **every open session
a full timeout from the moment it became leader** (:meth:`SessionTracker.lead`): a client that
kept heartbeating the old leader cannot be blamed for the gap, and one that is really gone
expires one timeout later than it would have. This is what KRaft's controller does with broker
heartbeats after a failover (a new active controller starts every broker's session timer over)
and what a ZooKeeper leader does for the sessions it takes over (their expiry is recomputed
from when it learnt of them).

Times are plain numbers (milliseconds) passed in; nothing here reads a clock.

Invariants: a session is tracked only while open in the applied tree and this node leads; a
session reported by :meth:`expired` is not reported again (the expiry is in flight) and no
longer accepts heartbeats, until :meth:`ended` forgets it or a new :meth:`lead` starts over.
"""

from __future__ import annotations

from collections.abc import Mapping


class SessionTracker:
    """See the module docstring."""

    def __init__(self) -> None:
        self._timeouts: dict[int, int] = {}
        self._deadlines: dict[int, float] = {}
        self._expiring: set[int] = set()

    def lead(self, sessions: Mapping[int, int], now: float) -> None:
        """This node became leader at ``now``; ``sessions`` (id -> timeout ms) are the open
        sessions of its applied tree. Each gets a full timeout from ``now``."""
        self._timeouts = dict(sessions)
        self._deadlines = {sid: now + ms for sid, ms in sessions.items()}
        self._expiring = set()

    def stop_leading(self) -> None:
        self._timeouts.clear()
        self._deadlines.clear()
        self._expiring.clear()

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
