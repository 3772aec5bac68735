"""Expiring a ZooKeeper session from outside, as the server does when a client goes quiet.
"""

from __future__ import annotations

from kazoo.client import KazooClient


def expire_session(hosts: str, session_id: int, password: bytes) -> None:
    """Expire a live session for real: a second client joins it and closes it (ZooKeeper's own
    test trick). Blocking; run off the reactor thread."""
    twin = KazooClient(hosts=hosts, client_id=(session_id, password))
    twin.start(timeout=15)
    twin.stop()  # closes the session on the server, for the original client too
    twin.close()


