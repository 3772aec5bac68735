"""The kazoo→Twisted bridge (``broker_core.zk.store.ZooKeeperStore``) against a real ZooKeeper.

What is checked: the store-neutral contract (``tests/support/metadata_store_contract.py``:
results as Deferreds with typed errors, a failed multi writes nothing and names the operation
that failed, watches on the reactor thread); then what is ZooKeeper's own: the race between a
read and its exists watch, multiRead batches, session-state events on the reactor thread; a hung
server (SIGSTOP) gives SUSPENDED then CONNECTED; a real session expiry gives LOST, drops the
session's ephemerals, and the store comes back on a new session with its watches re-armed; a
broker re-registers after its session expires.
"""

from __future__ import annotations

import threading

import pytest
import pytest_twisted
from kazoo.client import KazooClient
from twisted.internet import reactor, threads
from twisted.internet.defer import Deferred

from broker_core import metadata_paths as paths
from broker_core.metadata import (
    ConnectionLost,
    Create,
    MetadataStoreError,
    NoNode,
    SessionState,
)
from broker_core.zk.store import MAX_MULTI_OPS, ZooKeeperStore
from tests.support.cluster import eventually, free_port, start_brokers, stop_brokers
from tests.support.metadata_store_contract import MetadataStoreContract
from tests.support.zk_sessions import expire_session
from tests.support.zookeeper import ZooKeeperServer

REACTOR_THREAD = threading.current_thread()  # pytest-twisted runs the reactor on this thread


@pytest.fixture
def private_zookeeper():
    """A ZooKeeper of this test's own, for tests that pause or expire sessions."""
    server = ZooKeeperServer(tick_ms=200)
    server.start()
    yield server
    server.stop()




# -- the contract every IMetadataStore meets ------------------------------------------------------


class TestZooKeeperStoreContract(MetadataStoreContract):
    """The store-neutral tests of ``tests/support/metadata_store_contract.py``, on ZooKeeper
    (the ``store`` fixture of ``tests/integration/conftest.py``)."""


# -- requests ------------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_oversized_multi_is_refused_before_reaching_zookeeper(store):
    with pytest.raises(ValueError, match="exceeds the limit"):
        await store.multi([Create(f"/n{i}", b"") for i in range(MAX_MULTI_OPS + 1)])
    assert await store.get_children("/") == []


# -- watches -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["data", "children"])
@pytest_twisted.ensureDeferred
async def test_watch_sees_a_node_created_between_its_read_and_its_exists_watch(store, zk_hosts,
                                                                               kind):
    # The race behind a broker that believed no coordinator was elected: the read says NoNode,
    # another client creates the node, then the exists watch is set (on the existing node, so it
    # fires only at its next change). The watcher must still learn the node is there.
    client = store._client
    real_exists = client.exists_async
    other = KazooClient(hosts=zk_hosts)  # the other broker; its calls complete on its threads
    other.start(timeout=15)

    def create_first(path, watch=None):
        client.exists_async = real_exists
        other.create(path, b"won")
        return real_exists(path, watch=watch)

    client.exists_async = create_first
    seen: list = []
    if kind == "data":
        store.watch_data("/racy", lambda data, stat: seen.append(data))
        await eventually(lambda: seen and seen[-1] == b"won", what="the node's data")
    else:
        store.watch_children("/racy", lambda children: seen.append(children))
        await eventually(lambda: seen and seen[-1] == [], what="the node's (empty) children")
    other.stop()
    other.close()


# -- session states -----------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_hung_server_suspends_then_reconnects(private_zookeeper):
    store = ZooKeeperStore(private_zookeeper.hosts, reactor=reactor, session_timeout=4.0)
    await store.start()
    events: list[tuple[SessionState, bool]] = []
    store.add_state_listener(
        lambda s: events.append((s, threading.current_thread() is REACTOR_THREAD)))
    try:
        private_zookeeper.pause()
        try:
            await eventually(lambda: store.state is SessionState.SUSPENDED, timeout=20,
                             what="SUSPENDED while the server is stopped")
        finally:
            private_zookeeper.resume()
        await eventually(lambda: store.state is SessionState.CONNECTED, timeout=20,
                         what="CONNECTED after the server resumes")
        assert events[0] == (SessionState.SUSPENDED, True)
        assert events[-1] == (SessionState.CONNECTED, True)
        await store.create("/after", b"ok")  # usable again
        assert (await store.get("/after"))[0] == b"ok"
    finally:
        await store.stop()


@pytest_twisted.ensureDeferred
async def test_expired_session_is_lost_then_renewed_with_watches_rearmed(private_zookeeper):
    store = ZooKeeperStore(private_zookeeper.hosts, reactor=reactor, session_timeout=4.0)
    await store.start()
    states: list[SessionState] = []
    store.add_state_listener(states.append)
    seen: list[bytes | None] = []
    try:
        await store.create("/data", b"v0")
        store.watch_data("/data", lambda data, stat: seen.append(data))
        await eventually(lambda: seen == [b"v0"], what="watch armed")
        await store.create("/mine", b"", ephemeral=True)
        old_session = store.session_id

        await threads.deferToThread(expire_session, private_zookeeper.hosts,
                                    *store._client.client_id)
        await eventually(lambda: SessionState.LOST in states, timeout=20, what="LOST")
        await eventually(lambda: store.state is SessionState.CONNECTED, timeout=20,
                         what="a new session")
        assert store.session_id != old_session
        assert await store.exists("/mine") is None  # the old session's ephemeral is gone

        # ZooKeeper forgot the old session's watches; the store re-armed ours on the new one.
        await store.set("/data", b"v1")
        await eventually(lambda: seen[-1] == b"v1", what="re-armed watch fires")
    finally:
        await store.stop()


@pytest_twisted.ensureDeferred
async def test_unreachable_zookeeper_fails_start_with_a_clear_error():
    store = ZooKeeperStore(f"127.0.0.1:{free_port()}", reactor=reactor, connect_timeout=1.0)
    with pytest.raises(ConnectionLost, match="could not reach ZooKeeper"):
        await store.start()
    # A failed start leaves no thread behind (the test session checks for leftover threads too).
    assert not [t for t in threading.enumerate() if t.name.startswith("PoolThread-sluice-zookeeper")
                and t.is_alive()]
    # And stopping it after the failed start returns (a broker whose start failed is still
    # stopped, and its process must exit): it used to wait forever on the stopped pool.
    stopped = Deferred.fromCoroutine(store.stop())
    assert stopped.called


@pytest_twisted.ensureDeferred
async def test_a_store_never_started_stops_at_once():
    store = ZooKeeperStore(f"127.0.0.1:{free_port()}", reactor=reactor)
    assert Deferred.fromCoroutine(store.stop()).called


@pytest_twisted.ensureDeferred
async def test_broker_re_registers_after_its_session_expires(zk_hosts, tmp_path):
    (broker,) = await start_brokers(zk_hosts, tmp_path, 1)
    try:
        await eventually(lambda: broker.controller.active, what="controller")
        data, stat = await broker.store.get(paths.broker(1))
        old_owner = stat.ephemeral_owner
        hosts = zk_hosts.split("/", 1)[0]
        await threads.deferToThread(expire_session, hosts, *broker.store._client.client_id)

        async def registered_again():
            try:
                _, st = await broker.store.get(paths.broker(1))
            except MetadataStoreError:  # NoNode, or the old session's errors while it ends
                return False
            return st.ephemeral_owner not in (0, old_owner)

        await eventually(lambda: Deferred.fromCoroutine(registered_again()), timeout=30,
                         what="/brokers/ids/1 re-created by the new session")
        await eventually(lambda: broker.controller.active, timeout=30,
                         what="controller re-elected")
    finally:
        await stop_brokers([broker])


@pytest_twisted.ensureDeferred
async def test_get_many_reads_in_multi_read_batches(store, monkeypatch):
    """More paths than one multiRead holds: every batch answers, in order, with the same
    values and stats as single reads, and no read goes one by one."""
    from broker_core.zk import store as store_module

    monkeypatch.setattr(store_module, "MULTI_READ_BATCH", 7)
    await store.ensure_path("/mr")
    ops = [Create(f"/mr/{i}", str(i).encode()) for i in range(40) if i % 5]
    await store.multi(ops)
    await store.set("/mr/1", b"again")
    monkeypatch.setattr(store, "_get_each", lambda paths: pytest.fail("fell back"))
    names = [f"/mr/{i}" for i in range(40)]
    got = await store.get_many(names)
    singles = []
    for n in names:
        try:
            singles.append(await store.get(n))
        except NoNode:
            singles.append(None)
    assert got == singles
    assert got[0] is None and got[1][0] == b"again" and got[1][1].version == 1


@pytest_twisted.ensureDeferred
async def test_get_many_falls_back_to_single_reads_without_multi_read(store, monkeypatch):
    from kazoo.exceptions import UnimplementedError
    from twisted.internet import defer

    await store.create("/fb/a", b"1", makepath=True)
    monkeypatch.setattr(store, "_get_batched",
                        lambda paths: defer.fail(UnimplementedError()))
    got = await store.get_many(["/fb/a", "/fb/b"])
    assert got[0][0] == b"1" and got[1] is None
