"""How many connections a broker accepts, Kafka's ``max.connections``,
``max.connections.per.ip`` and ``max.connections.per.ip.overrides``, sans-IO.

A connection is counted from the moment it is accepted until it is lost. One over a limit is
refused at accept (the listener closes the socket before any byte is read), and refusals are
logged through :class:`RefusalLog`, at most one line per peer per interval, so a flood of
refused connections cannot become a flood of log lines.

Invariants (:class:`ConnectionLimiter`):

- ``total == sum(per_ip.values())``, and both only count connections admitted and not yet
  released; a host's entry disappears when its count drops to zero (the table is as large as
  the set of peers connected now, never as the set of peers ever seen);
- an admitted connection satisfies ``total <= max_connections`` and
  ``per_ip[host] <= limit_for(host)`` at the moment of its admission; a refusal changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_core.config.listener_keys import parse_overrides
from broker_core.security.principal import canonical_host
from broker_core.server.memory_pool import (
    UNAUTHENTICATED_HOST_BYTES,
    UNAUTHENTICATED_POOL_BYTES,
    MemoryPool,
)

#: The reasons a connection is refused at accept (the ``reason`` label of the metric).
MAX_CONNECTIONS = "max_connections"
MAX_CONNECTIONS_PER_IP = "max_connections_per_ip"
REFUSAL_REASONS = (MAX_CONNECTIONS, MAX_CONNECTIONS_PER_IP)


def normalise_host(host: str) -> str:
    """An address in its canonical text form (an IPv4-mapped IPv6 address as its IPv4
    address); a name is left as given (lower case). See
    :func:`~broker_core.security.principal.canonical_host`."""
    return canonical_host(host)


class ConnectionLimiter:
    """Counts a broker's connections by peer host; see the module docstring."""

    def __init__(self, max_connections: int, max_per_ip: int,
                 overrides: Mapping[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = {normalise_host(h): n for h, n in (overrides or {}).items()}
        self.total = 0
        self.per_ip: dict[str, int] = {}

    def limit_for(self, host: str) -> int:
        return self.overrides.get(host, self.max_per_ip)

    def admit(self, host: str) -> str | None:
        """Count a new connection from ``host``; None when admitted, else the refusal reason
        (and nothing is counted)."""
        host = normalise_host(host)
        count = self.per_ip.get(host, 0)
        if count >= self.limit_for(host):
            return MAX_CONNECTIONS_PER_IP
        if self.total >= self.max_connections:
            return MAX_CONNECTIONS
        self.per_ip[host] = count + 1
        self.total += 1
        return None

    def release(self, host: str) -> None:
        """An admitted connection from ``host`` is gone."""
        host = normalise_host(host)
        count = self.per_ip.get(host, 0)
        if count <= 0:
            raise RuntimeError(f"release of a connection from {host} that was never admitted")
        if count == 1:
            del self.per_ip[host]
        else:
            self.per_ip[host] = count - 1
        self.total -= 1


class RefusalLog:
    """Decides which refusals get a log line: the first for a ``(host, reason)``, then at most
    one per ``interval_s``, carrying how many were refused silently since the last line.

    Invariant: the table holds at most ``max_hosts`` entries; entries whose interval has passed
    are dropped first, and when it is still full a new peer's refusals are counted in
    ``unlogged`` instead of getting a line (a flood from many addresses costs bounded memory).
    """

    def __init__(self, interval_s: float = 60.0, max_hosts: int = 4096) -> None:
        self.interval_s = interval_s
        self.max_hosts = max_hosts
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # -> (last line, suppressed)
        self.unlogged = 0

    def refused(self, host: str, reason: str, now: float) -> int | None:
        """A refusal at ``now``: the number refused silently since the last line when this one
        should be logged, else None."""
        key = (host, reason)
        entry = self._last.get(key)
        if entry is not None:
            last, suppressed = entry
            if now - last < self.interval_s:
                self._last[key] = (last, suppressed + 1)
                return None
            self._last[key] = (now, 0)
            return suppressed
        if len(self._last) >= self.max_hosts:
            self._last = {k: v for k, v in self._last.items() if now - v[0] < self.interval_s}
            if len(self._last) >= self.max_hosts:
                self.unlogged += 1
                return None
        self._last[key] = (now, 0)
        return 0


@dataclass
class ServerLimits:
    """The limits one group of listeners shares (the broker's Kafka listeners share one; the
    quorum listener has its own, so that clients filling theirs never lock the brokers out of
    the metadata quorum).

    - ``connections``: counts and refuses at accept (None: no connection limit);
    - ``pool``: the request-memory budget (:mod:`broker_core.server.memory_pool`), with its
      per-host cap;
    - ``unauthenticated_pool``: what a SASL listener's connections reserve from before they
      have logged in (small, capped per host);
    - ``read_timeout_s``: ``socket.request.read.timeout.ms`` in seconds: how long a frame
      whose size has arrived may take to arrive whole (None: no deadline);
    - ``idle_s``: ``connections.max.idle.ms`` in seconds (None: never closed for idleness);
    - ``refusals``: which refusals get a log line.

    The default is no limit at all (what a test's or a tool's listener gets).
    """

    connections: ConnectionLimiter | None = None
    pool: MemoryPool = field(default_factory=lambda: MemoryPool(None))
    unauthenticated_pool: MemoryPool = field(default_factory=lambda: MemoryPool(None))
    read_timeout_s: float | None = None
    idle_s: float | None = None
    refusals: RefusalLog = field(default_factory=RefusalLog)

    @classmethod
    def from_config(cls, cfg: Any) -> ServerLimits:
        """From a :class:`~broker_core.config.broker_config.BrokerConfig`'s keys; a new pool
        and counts (call once per group of listeners)."""
        return cls(
            connections=ConnectionLimiter(
                cfg.max_connections, cfg.max_connections_per_ip,
                parse_overrides(cfg.max_connections_per_ip_overrides)),
            pool=MemoryPool(None if cfg.queued_max_request_bytes < 0
                            else cfg.queued_max_request_bytes,
                            None if cfg.queued_max_request_bytes_per_ip < 0
                            else cfg.queued_max_request_bytes_per_ip),
            unauthenticated_pool=MemoryPool(UNAUTHENTICATED_POOL_BYTES,
                                            UNAUTHENTICATED_HOST_BYTES),
            read_timeout_s=None if cfg.socket_request_read_timeout_ms < 0
            else cfg.socket_request_read_timeout_ms / 1000.0,
            idle_s=None if cfg.connections_max_idle_ms < 0
            else cfg.connections_max_idle_ms / 1000.0)
