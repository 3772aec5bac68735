"""The blocking clients' one connection cache (consumer_client/connection_cache.py): opened on
first use, nothing kept when opening fails, dropped and closed on failure, all closed at the
end. Connections are real BrokerConnections to a scripted server on a real socket."""

from __future__ import annotations

import pytest

from consumer_client.connection import BrokerConnection
from consumer_client.connection_cache import ConnectionCache
from tests.support.scripted_broker import ScriptedBroker


@pytest.fixture
def broker():
    with ScriptedBroker(lambda key, body: None) as b:
        yield b


def test_a_connection_is_opened_on_first_use_and_reused(broker):
    opened = []

    def opener(key: str) -> BrokerConnection:
        opened.append(key)
        return BrokerConnection("127.0.0.1", broker.port, timeout=30)

    cache = ConnectionCache(opener)
    try:
        a = cache.get("a")
        assert cache.get("a") is a and "a" in cache and "b" not in cache
        b = cache.get("b")
        assert opened == ["a", "b"] and cache.keys() == ["a", "b"]
        cache.drop("a")
        assert a.sock.fileno() == -1 and "a" not in cache and cache.get("a") is not a
        assert opened == ["a", "b", "a"]
    finally:
        cache.close()
    assert cache.keys() == [] and b.sock.fileno() == -1


def test_a_failed_open_keeps_nothing(broker):
    def opener(key: int) -> BrokerConnection:
        raise ConnectionRefusedError(f"node {key} refused")

    cache: ConnectionCache[int] = ConnectionCache(opener)
    with pytest.raises(ConnectionRefusedError, match="node 3 refused"):
        cache.get(3)
    assert 3 not in cache and cache.keys() == []
    cache.drop(3)  # dropping what is not there changes nothing
    cache.close()
