"""The behaviour every ``IMetadataStore`` shares, as one set of tests run against each store.

A test module subclasses :class:`MetadataStoreContract` and provides a ``store`` fixture (a
started store on an empty tree, stopped afterwards); pytest then runs every test below on it.
The ZooKeeper store runs them on a real ZooKeeper (``tests/integration/test_zk_store.py``), the
quorum store on a real one-voter quorum (``tests/integration/test_quorum_store.py``): the same
assertions passing on both is what lets the controller and the coordinator run on either.

Covered: CRUD with stats, typed errors, a failed multi writes nothing and names the failing
operation, data watches (create, change, delete, cancel; on the reactor thread), children
watches, and ``get_many`` in order with absent nodes as ``None``.
"""

from __future__ import annotations

import threading

import pytest
import pytest_twisted

from broker_core.metadata import (
    BadVersion,
    Check,
    Create,
    Delete,
    NodeExists,
    NoNode,
    NotEmpty,
    SetData,
    TransactionFailed,
)
from tests.support.cluster import eventually

REACTOR_THREAD = threading.current_thread()  # pytest-twisted runs the reactor on this thread


class MetadataStoreContract:
    """Not collected by itself (no ``Test`` prefix); subclass it with a ``store`` fixture."""

    # -- requests --------------------------------------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_crud_returns_values_and_stats(self, store):
        await store.create("/a", b"one")
        data, stat = await store.get("/a")
        assert data == b"one" and stat.version == 0
        stat = await store.set("/a", b"two", version=0)
        assert stat.version == 1
        assert (await store.get("/a"))[0] == b"two"
        await store.create("/a/b/c", b"", makepath=True)
        assert await store.get_children("/a") == ["b"]
        await store.delete("/a", recursive=True)
        assert await store.exists("/a") is None

    @pytest_twisted.ensureDeferred
    async def test_stats_count_versions_children_and_creations(self, store):
        await store.create("/s", b"")
        first = await store.exists("/s")
        await store.create("/s/x", b"")
        await store.create("/s/y", b"", ephemeral=True)
        await store.delete("/s/x")
        stat = await store.exists("/s")
        assert stat.version == 0 and stat.num_children == 1 and stat.cversion == 3
        assert stat.czxid == first.czxid and stat.ephemeral_owner == 0
        eph = await store.exists("/s/y")
        assert eph.ephemeral_owner == store.session_id and eph.czxid > first.czxid
        # The suffix counts the children created (x, y): the delete moved cversion, not it.
        assert await store.create("/s/n-", b"", sequence=True) == "/s/n-0000000002"
        assert await store.create("/s/n-", b"", sequence=True) == "/s/n-0000000003"

    @pytest_twisted.ensureDeferred
    async def test_errors_are_typed(self, store):
        with pytest.raises(NoNode):
            await store.get("/missing")
        with pytest.raises(NoNode):
            await store.get_children("/missing")
        with pytest.raises(NoNode):
            await store.create("/missing/child", b"")
        await store.create("/x", b"")
        with pytest.raises(NodeExists):
            await store.create("/x", b"")
        with pytest.raises(BadVersion):
            await store.set("/x", b"v", version=7)
        await store.create("/x/child", b"")
        with pytest.raises(NotEmpty):
            await store.delete("/x")
        with pytest.raises(BadVersion):
            await store.delete("/x/child", version=3)
        assert (await store.get("/x"))[0] == b""  # nothing changed by the failed calls

    @pytest_twisted.ensureDeferred
    async def test_failed_multi_writes_nothing_and_names_the_failing_operation(self, store):
        await store.create("/epoch", b"1")
        await store.set("/epoch", b"2")  # version 1
        ops = [Check("/epoch", 0), Create("/t", b"new"), SetData("/epoch", b"3", 1)]
        with pytest.raises(TransactionFailed) as info:
            await store.multi(ops)
        assert isinstance(info.value.first_error, BadVersion)
        assert info.value.failed_index == 0
        assert await store.exists("/t") is None
        assert (await store.get("/epoch"))[0] == b"2"

        results = await store.multi([Check("/epoch", 1), Create("/t", b"new"),
                                     Delete("/epoch", 1)])
        assert len(results) == 3
        assert (await store.get("/t"))[0] == b"new" and await store.exists("/epoch") is None

    @pytest_twisted.ensureDeferred
    async def test_get_many_reads_in_order_with_absent_nodes_as_none(self, store):
        await store.create("/m/a", b"1", makepath=True)
        await store.create("/m/c", b"3")
        got = await store.get_many(["/m/a", "/m/b", "/m/c"])
        assert [g if g is None else g[0] for g in got] == [b"1", None, b"3"]
        assert got[0][1].version == 0
        assert await store.get_many([]) == []

    # -- watches ---------------------------------------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_data_watch_sees_create_change_delete_on_the_reactor_thread(self, store):
        seen: list[tuple[bytes | None, int | None, bool]] = []

        def on_data(data, stat):
            seen.append((data, stat.version if stat else None,
                         threading.current_thread() is REACTOR_THREAD))

        watch = store.watch_data("/w", on_data)
        await eventually(lambda: seen == [(None, None, True)], what="initial absence")
        await store.create("/w", b"a")
        await eventually(lambda: seen[-1][0] == b"a", what="created")
        await store.set("/w", b"b")
        await eventually(lambda: seen[-1][0] == b"b", what="changed")
        await store.delete("/w")
        await eventually(lambda: seen[-1][0] is None and len(seen) >= 4, what="deleted")
        assert all(on_reactor for _, _, on_reactor in seen)
        assert [d for d, _, _ in seen] == [None, b"a", b"b", None]

        watch.cancel()
        await store.create("/w", b"after cancel")
        await store.get("/w")  # a round trip after the create: a live watch would have fired
        assert seen[-1][0] is None

    @pytest_twisted.ensureDeferred
    async def test_children_watch_follows_the_child_list(self, store):
        seen: list[list[str] | None] = []
        store.watch_children("/ids", lambda children: seen.append(children))
        await eventually(lambda: seen == [None], what="absent parent")
        await store.create("/ids", b"")
        await store.create("/ids/2", b"", ephemeral=True)
        await store.create("/ids/1", b"", ephemeral=True)
        await eventually(lambda: seen and seen[-1] == ["1", "2"], what="both children")
        await store.delete("/ids/2")
        await eventually(lambda: seen[-1] == ["1"], what="one child")
        await store.delete("/ids", recursive=True)
        await eventually(lambda: seen[-1] is None, what="the parent gone")
