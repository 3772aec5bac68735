"""Three embedded quorum nodes on real sockets in this process, with short timers (:data:`FAST`).
"""

from __future__ import annotations

from twisted.internet import reactor

from broker_core.config.quorum import VoterAddress
from broker_core.raft import RaftConfig
from broker_core.raft.embedded import EmbeddedQuorum
from tests.support.cluster import free_port

#: Short timers: an election in 0.2-0.4 s.
FAST = RaftConfig(election_timeout_ms=200, fetch_timeout_ms=1000, election_backoff_max_ms=200,
                  request_timeout_ms=1000, retry_backoff_ms=20, fetch_max_wait_ms=200)


def embedded_quorums(base, ids=(1, 2, 3)) -> list[EmbeddedQuorum]:
    voters = {i: VoterAddress(i, "127.0.0.1", free_port()) for i in (1, 2, 3)}
    return [EmbeddedQuorum(i, "client-test", voters, ("127.0.0.1", voters[i].port),
                           base / f"q{i}", reactor, FAST) for i in ids]


async def stop_quorums(quorums: list[EmbeddedQuorum]) -> None:
    for q in quorums:
        await q.stop()


