"""The blocking clients' one connection cache: one open connection per key, opened on first use.

Used by the Spark data source's :class:`~consumer_client.spark.reader.Cluster` (keyed by node
id) and the quorum admin client (keyed by address). How a connection is opened (address, TLS,
a login before the first request) is the owner's ``opener``; the cache only decides when.

Invariants:

- a key maps to at most one connection, and only to one that opened completely: when ``opener``
  raises, nothing is stored (``opener`` closes what it half opened);
- a connection that failed is dropped and closed by its owner (:meth:`ConnectionCache.drop`),
  so the next use of its key opens a new one and never reads a late answer on the old one;
- :meth:`ConnectionCache.close` closes every connection and leaves the cache empty (usable).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from consumer_client.connection import BrokerConnection

K = TypeVar("K", bound=Hashable)


class ConnectionCache(Generic[K]):
    """See the module docstring. ``opener(key)`` returns a ready connection or raises."""

    def __init__(self, opener: Callable[[K], BrokerConnection]) -> None:
        self._open = opener
        self._conns: dict[K, BrokerConnection] = {}

    def get(self, key: K) -> BrokerConnection:
        """The connection for ``key``, opened now when there is none."""
        conn = self._conns.get(key)
        if conn is None:
            conn = self._open(key)
            self._conns[key] = conn
        return conn

    def __contains__(self, key: object) -> bool:
        return key in self._conns

    def keys(self) -> list[K]:
        """The keys with an open connection, oldest first."""
        return list(self._conns)

    def drop(self, key: K) -> None:
        """Forget and close ``key``'s connection, if any."""
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for key in self.keys():
            self.drop(key)
