"""A private network of Linux network namespaces for system tests that cut brokers off from each
other for real (root only; ``ip`` from iproute2).

Layout: a *hub* namespace and one namespace per broker, each joined to the hub by a veth pair on
its own subnet (broker ``i``: ``10.77.i.2``, the hub's end ``10.77.i.1``, the broker's default
route). The hub forwards between brokers. ZooKeeper, the producers and the consumers of a test
run in the hub (the test's own thread enters it with :meth:`IsolatedNetwork.entered`); each broker
runs in its namespace (:meth:`IsolatedNetwork.prefix`) and reaches the hub's services at its
gateway address.

:meth:`IsolatedNetwork.cut` drops, in the hub, every packet from one broker to the other
brokers' Kafka listeners and from them to its listener (policy-routing ``blackhole`` rules, which
drop silently like a failed link): the broker can still reach everything in the hub (ZooKeeper)
and its other ports (the metadata quorum's listeners), and clients in the hub can still reach it.
:meth:`IsolatedNetwork.heal` removes the rules.

Nothing is created outside the namespaces made here (the veth pairs are created inside them),
and :meth:`IsolatedNetwork.destroy` deletes them all (with them, their links).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import uuid
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


class IsolatedNetwork:
    """See the module docstring. ``brokers`` are the broker ids (1..254)."""

    def __init__(self, brokers: list[int]) -> None:
        self.token = uuid.uuid4().hex[:6]
        self.brokers = list(brokers)
        self.hub = f"sluice-{self.token}-hub"
        self.created: list[str] = []
        self._rules: dict[int, list[int]] = {}

    def ns(self, broker: int) -> str:
        return f"sluice-{self.token}-b{broker}"

    def host(self, broker: int) -> str:
        """The broker's address (it listens and advertises here)."""
        return f"10.77.{broker}.2"

    def gateway(self, broker: int) -> str:
        """The hub's address as the broker sees it (where it finds ZooKeeper)."""
        return f"10.77.{broker}.1"

    def prefix(self, broker: int) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.ns(broker))

    def create(self) -> None:
        try:
            _ip("netns", "add", self.hub)
            self.created.append(self.hub)
            _ip("link", "set", "lo", "up", ns=self.hub)
            subprocess.run(["ip", "netns", "exec", self.hub, "sh", "-c",
                            "echo 1 > /proc/sys/net/ipv4/ip_forward"], check=True, timeout=30)
            for b in self.brokers:
                ns, hub_end = self.ns(b), f"s{self.token}h{b}"
                _ip("netns", "add", ns)
                self.created.append(ns)
                _ip("link", "set", "lo", "up", ns=ns)
                _ip("link", "add", hub_end, "netns", self.hub, "type", "veth", "peer", "name",
                    "eth0", "netns", ns)
                _ip("addr", "add", f"{self.gateway(b)}/24", "dev", hub_end, ns=self.hub)
                _ip("link", "set", hub_end, "up", ns=self.hub)
                _ip("addr", "add", f"{self.host(b)}/24", "dev", "eth0", ns=ns)
                _ip("link", "set", "eth0", "up", ns=ns)
                _ip("route", "add", "default", "via", self.gateway(b), ns=ns)
        except BaseException:
            self.destroy()
            raise

    def destroy(self) -> None:
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self.created.clear()

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run the calling thread (and the threads and processes it starts) in the hub."""
        libc = ctypes.CDLL(None, use_errno=True)
        with open("/proc/thread-self/ns/net") as home, \
                open(f"/run/netns/{self.hub}") as hub:
            if libc.setns(hub.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns into the hub failed")
            try:
                yield
            finally:
                if libc.setns(home.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back failed")

    def cut(self, broker: int, ports: dict[int, int]) -> None:
        """Drop traffic between ``broker`` and the other brokers' listeners (``ports``: broker
        id -> Kafka listener port), both ways."""
        rules = self._rules.setdefault(broker, [])
        for other in self.brokers:
            if other == broker:
                continue
            for src, dst in ((broker, other), (other, broker)):
                prio = 1000 + 256 * src + dst
                _ip("rule", "add", "from", self.host(src), "to", self.host(dst), "ipproto", "tcp",
                    "dport", str(ports[dst]), "blackhole", "priority", str(prio), ns=self.hub)
                rules.append(prio)

    def heal(self, broker: int) -> None:
        for prio in self._rules.pop(broker, []):
            _ip("rule", "del", "priority", str(prio), ns=self.hub)


def available() -> str | None:
    """Why namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        subprocess.run(["ip", "-V"], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "iproute2's ip is not installed"
    return None
