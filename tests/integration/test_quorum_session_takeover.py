"""Session deadlines across a quorum leader change, on three real quorum nodes over TCP
(``EmbeddedQuorum``, as brokers in quorum mode run them).

The followers heartbeat one session (``alive``) and so receive the leader's liveness table in
the answers; another session (``silent``) never heartbeats. The leader stops; the node that
takes over keeps ``silent``'s deadline from the table (when it was last heard, before the
stop, plus its timeout) instead of granting it a whole timeout from the takeover, and
``alive``, whose clients run, is heard by the new leader after the takeover."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import defer, reactor

from broker_core.raft.metadata_commands import OpenSession, encode
from tests.support.cluster import eventually
from tests.support.embedded_quorums import embedded_quorums, stop_quorums

TIMEOUT_MS = 60_000  # long: nothing expires while the test runs


def _now_ms() -> float:
    return reactor.seconds() * 1000


@pytest_twisted.ensureDeferred
async def test_a_new_leader_keeps_a_silent_sessions_deadline_from_the_old_leaders_table(
        tmp_path):
    quorums = embedded_quorums(tmp_path)
    try:
        await defer.gatherResults([defer.Deferred.fromCoroutine(q.start()) for q in quorums])
        await eventually(lambda: any(q.client.leading for q in quorums), what="a leader")
        leader = next(q for q in quorums if q.client.leading)
        followers = [q for q in quorums if q is not leader]
        silent = await followers[0].client.submit(encode(OpenSession(TIMEOUT_MS), 1))
        alive = await followers[0].client.submit(encode(OpenSession(TIMEOUT_MS), 2))
        for f in followers:  # each gets the leader's table in the answer
            await f.client.heartbeat(alive)
        before_stop = _now_ms()
        await leader.stop()
        await eventually(lambda: any(q.client.leading for q in followers), timeout=10,
                         what="a new leader")
        new = next(q for q in followers if q.client.leading)

        def heard(sid: int) -> float:
            """When the new leader counts ``sid`` as last heard from (its clock)."""
            now = _now_ms()
            return now - new.client.sessions.ages(now)[sid]

        assert new.client.sessions.is_live(silent)
        # Last heard before the leader stopped, as the old leader's table said; a whole
        # timeout from the takeover would count it as heard at the takeover, after the stop.
        assert heard(silent) <= before_stop
        await eventually(lambda: heard(alive) > before_stop, timeout=10,
                         what="the live session heard by the new leader")
    finally:
        await stop_quorums(quorums)
