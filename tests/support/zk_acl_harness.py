"""Brokers' ZooKeeper credentials for the ZooKeeper-ACL tests: the auth file, a store logged in
with it, and a walk over every znode.
"""

from __future__ import annotations

import os
from pathlib import Path

from twisted.internet import reactor

from broker_core.zk.acl_policy import AclPolicy
from broker_core.zk.store import ZooKeeperStore
from tests.support.reassignment_checks import zk_state
from tests.support.zookeeper import TEST_SASL_USERS

PASSWORD = TEST_SASL_USERS["sluice"]


#: Not the brokers' password: with SASL a refused login, with ``digest`` another identity.
WRONG_PASSWORD = "another-password-0123456789abcdef"


TOPIC = "secured"


def write_auth_file(directory: Path, username: str = "sluice",
                    password: str = PASSWORD) -> Path:
    p = directory / "zk-auth"
    p.write_text(f"{username}:{password}\n")
    os.chmod(p, 0o600)
    return p


async def started_store(hosts: str, policy: AclPolicy | None = None) -> ZooKeeperStore:
    s = ZooKeeperStore(hosts, reactor=reactor, session_timeout=6.0, acl_policy=policy)
    await s.start()
    return s


async def walk(store: ZooKeeperStore, path: str = "/") -> list[str]:
    """Every node under ``path`` (included), parents first."""
    out = [path]
    for child in sorted(await store.get_children(path)):
        out += await walk(store, f"{path.rstrip('/')}/{child}")
    return out


async def in_isr(store: ZooKeeperStore, broker_id: int) -> bool:
    return broker_id in (await zk_state(store, TOPIC, 0)).isr


