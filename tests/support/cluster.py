"""Brokers for integration and system tests, against the real ZooKeeper of the test session.

:func:`start_brokers` runs :class:`~broker_core.broker.BrokerService` objects inside the test's
reactor (integration tests); :class:`BrokerProcess` runs a broker as a separate ``twistd``
process that tests can kill -9 or stop with SIGSTOP (system tests). Both listen on free
127.0.0.1 ports and keep their logs under the test's ``tmp_path``. Every broker needs the
cluster secret: the brokers of one cluster (one ``base`` directory) share the file
:func:`cluster_secret_file` makes there, unless the test names another
(``cluster.secret.file``).
"""

from __future__ import annotations

import inspect
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from twisted.internet import defer, task

ROOT = Path(__file__).resolve().parents[2]


#: Small consumer-group timings so failures and rebalances happen within a test's patience
#: (broker_config overrides).
GROUP_TIMINGS = {
    "group_min_session_timeout_ms": "300",
    "group_initial_rebalance_delay_ms": "300",
    "rebalance_backoff_ms": "200",
    "offsets_commit_interval_ms": "200",
}


#: The ports :func:`free_port` handed out last (bounded: a port handed out that long ago has
#: been bound, or given up, since).
_handed_out: deque[int] = deque(maxlen=1024)
_handed_out_lock = threading.Lock()


def free_port() -> int:
    """A port of 127.0.0.1 free now and not among the last ones this function handed out.

    Ports are bound later, when their broker starts: until then the kernel may pick the same
    port again for the next ``bind(0)``, and two brokers of one test (say a quorum port and a
    metrics port, picked before either process runs) would be given the same port, and the
    second to start would fail with EADDRINUSE."""
    with _handed_out_lock:
        while True:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _handed_out:
                _handed_out.append(port)
                return port


def cluster_secret_file(base: Path) -> Path:
    """The cluster secret of the brokers under ``base`` (``base/cluster.secret``, mode 0600),
    made on first use."""
    from broker_core.security import cluster_secret

    path = Path(base) / "cluster.secret"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        cluster_secret.generate(path)
    except FileExistsError:
        pass
    return path


def broker_config(broker_id: int, zk_hosts: str, log_dir: Path, port: int = 0,
                  **overrides: str) -> Any:
    """An in-process broker's config; the cluster secret is the one of ``log_dir``'s parent
    (the cluster's directory) unless ``cluster_secret_file`` is given."""
    from broker_core.config.broker_config import BrokerConfig

    values = {
        "broker.id": str(broker_id),
        "listeners": f"tcp:{port}:interface=127.0.0.1",
        "zookeeper.session.timeout.ms": "6000",
        "log.dirs": str(log_dir),
        "cluster.secret.file": str(cluster_secret_file(Path(log_dir).parent)),
    }
    if zk_hosts:  # empty in quorum mode
        values["zookeeper.connect"] = zk_hosts
    values.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return BrokerConfig.from_mapping(values)


async def start_brokers(zk_hosts: str, base: Path, count: int, **overrides: str) -> list[Any]:
    """Start ``count`` in-process brokers (ids 1..count) and wait until each has started."""
    from twisted.internet import reactor

    from broker_core.broker import BrokerService

    brokers = []
    for i in range(1, count + 1):
        svc = BrokerService(broker_config(i, zk_hosts, base / f"broker-{i}", **overrides),
                            reactor=reactor)
        brokers.append(svc)
        await svc.startService()
    return brokers


async def stop_brokers(brokers: list[Any]) -> None:
    for b in reversed(brokers):
        if b.running:
            await b.stopService()


async def eventually(condition: Callable[[], Any], timeout: float = 15.0,
                     interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``condition`` on the reactor until it returns something truthy."""
    from twisted.internet import reactor

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if isinstance(value, defer.Deferred) or inspect.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await task.deferLater(reactor, interval, lambda: None)


# -- talking to in-process brokers -------------------------------------------------------------


def listener_port(broker: Any, listener: str | None = None) -> int:
    """The bound port of an in-process broker's ``listener`` (default: its first)."""
    if listener is None:
        return broker.port.getHost().port
    (bound,) = [b for b in broker.listeners if b.name == listener]
    return bound.port.getHost().port


async def connect(broker: Any, listener: str | None = None, *, as_broker: bool = False) -> Any:
    """A Kafka-protocol client connection to an in-process broker's listener (by default its
    first). ``as_broker``: logged in with the cluster login first (the broker's own cluster
    secret), as another broker of the cluster would, so the control plane is served. On a TLS
    listener that is the inter-broker one the connection is TLS with the broker's own
    certificate, as another broker's would be."""
    from twisted.internet import reactor

    from broker_core.rpc import connect_client

    credential = broker.cluster_credential.login if as_broker else None
    name = listener or broker.listener_configs.listeners[0].name
    tls = broker.peer_tls if name == broker.listener_configs.inter_broker else None
    return await connect_client(reactor, "127.0.0.1", listener_port(broker, listener), "test",
                                credential=credential, tls=tls)


async def call(broker: Any, api_key: int, version: int, body: Any,
               listener: str | None = None, *, as_broker: bool = False) -> Any:
    """One request on a fresh connection; returns the decoded response body."""
    proto = await connect(broker, listener, as_broker=as_broker)
    try:
        return await proto.request(api_key, version, body)
    finally:
        proto.transport.loseConnection()


def controller_of(brokers: list[Any]) -> Any:
    """The one running broker whose controller is active, else None."""
    active = [b for b in brokers if b.running and b.controller.active]
    return active[0] if len(active) == 1 else None


def leader_of(brokers: list[Any], topic: str, partition: int) -> Any:
    """The running broker that leads ``topic``-``partition`` locally, else None."""
    for b in brokers:
        part = b.replicas.get_partition(topic, partition)
        if b.running and part is not None and part.is_leader:
            return b
    return None


def running_brokers(zk_hosts: str, base: Path, count: int, **overrides: str) -> Any:
    """For pytest fixtures: ``yield from running_brokers(...)`` starts ``count`` in-process
    brokers, yields them, and stops them afterwards."""
    import pytest_twisted

    brokers = pytest_twisted.blockon(defer.Deferred.fromCoroutine(
        start_brokers(zk_hosts, base, count, **overrides)))
    try:
        yield brokers
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(stop_brokers(brokers)))


async def restart(broker: Any) -> Any:
    """A new incarnation of ``broker`` on the same config and log directory (new port, new
    ZooKeeper session), started."""
    from twisted.internet import reactor

    from broker_core.broker import BrokerService

    fresh = BrokerService(broker.config, reactor=reactor)
    await fresh.startService()
    return fresh


async def create_topic(broker: Any, name: str, *, partitions: int = 1, rf: int = 1,
                       assignment: dict[int, list[int]] | None = None,
                       configs: Any = ()) -> None:
    """CreateTopics through ``broker``; with ``assignment`` (partition -> replicas) the counts
    are taken from it. Asserts success."""
    from broker_core.wire.apis import ApiKey

    assignments = [{"partition_index": p, "broker_ids": list(r)}
                   for p, r in sorted((assignment or {}).items())]
    resp = await call(broker, ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": name, "num_partitions": -1 if assignment else partitions,
         "replication_factor": -1 if assignment else rf, "assignments": assignments,
         "configs": [{"name": k, "value": v} for k, v in configs]}],
        "timeout_ms": 10000, "validate_only": False})
    assert resp.topics[0].error_code == 0, resp


async def produce(broker: Any, topic: str, partition: int, values: list[bytes], acks: int = -1,
                  timeout_ms: int = 10000) -> Any:
    """One Produce of one batch of ``values``; returns the partition's response."""
    from broker_core.wire.apis import ApiKey
    from broker_core.wire.records import Record, build_batch

    batch = build_batch([Record(b"k", v, [], 1000) for v in values])
    resp = await call(broker, ApiKey.PRODUCE, 8, {"acks": acks, "timeout_ms": timeout_ms,
                                                 "topic_data": [{"name": topic, "partition_data": [
                                                     {"index": partition, "records": batch}]}]})
    return resp.responses[0].partition_responses[0]


def local_batches(broker: Any, topic: str, partition: int) -> list[bytes]:
    """The raw batches of a broker's local replica, in order."""
    from broker_core.wire.records import iter_batches

    data = broker.replicas.get_partition(topic, partition).log.read(0, 1 << 26).records
    return [bytes(data[i.position:i.position + i.size]) for i in iter_batches(data)]


class BrokerProcess:
    """A broker run as ``python -m twisted broker ...`` (``twist``) in its own process.

    ``host`` is the address it listens on and advertises (127.0.0.1 unless the test built a
    network of its own); ``prefix`` goes before the command (e.g. ``ip netns exec NAME``).

    ``listeners`` (``(name, security protocol)`` pairs) gives the broker Kafka's named
    listeners instead of one ``--listen`` endpoint, each on a free port (``ports[name]``,
    ``address_of(name)``); the first must be a plaintext one: ``port`` and ``address`` are its,
    and it is the inter-broker listener unless ``extra`` names another. TLS and SASL keys go in
    ``extra``."""

    #: ``twist --log-format``: ``text`` (whole-second timestamps) or ``json`` (each event's
    #: ``log_time`` in full; a benchmark reading phases from the logs sets it).
    log_format = "text"

    def __init__(self, broker_id: int, zk_hosts: str, base: Path, *, port: int | None = None,
                 extra: dict[str, str] | None = None, metrics: bool = False,
                 quorum_voters: str | None = None, host: str = "127.0.0.1",
                 prefix: tuple[str, ...] = (),
                 listeners: Sequence[tuple[str, str]] | None = None,
                 quorum_protocol: str | None = None) -> None:
        self.broker_id = broker_id
        self.quorum_protocol = quorum_protocol
        self.host = host
        self.prefix = tuple(prefix)
        self.zk_hosts = zk_hosts
        #: Quorum mode (``--metadata quorum``) when set; ``zk_hosts`` is then unused.
        self.quorum_voters = quorum_voters
        self.port = port or free_port()
        #: Listener name -> port (named listeners only; the first is ``port``).
        self.ports: dict[str, int] = {}
        self.protocols: dict[str, str] = {}
        for i, (name, protocol) in enumerate(listeners or ()):
            self.ports[name] = self.port if i == 0 else free_port()
            self.protocols[name] = protocol
        self.log_dir = base / f"broker-{broker_id}"
        self.log_file = base / f"broker-{broker_id}.log"
        base.mkdir(parents=True, exist_ok=True)
        self.extra = {"zookeeper.session.timeout.ms": "6000",
                      "cluster.secret.file": str(cluster_secret_file(base)), **(extra or {})}
        # With ``metrics``, the broker serves /metrics on its own port (read with metric()).
        self.metrics_port = free_port() if metrics else None
        if self.metrics_port is not None:
            self.extra["metrics.listener"] = f"tcp:{self.metrics_port}:interface={host}"
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def address_of(self, listener: str) -> str:
        """``host:port`` of a named listener."""
        return f"{self.host}:{self.ports[listener]}"

    def _listen_args(self) -> list[str]:
        quorum = ([f"QUORUM:{self.quorum_protocol}"] if self.quorum_protocol is not None
                  else [])
        if not self.ports:
            listen = ["--listen", f"tcp:{self.port}:interface={self.host}"]
            if quorum:
                listen += ["--set", f"listener.security.protocol.map={quorum[0]}"]
            return listen
        named = ",".join(f"{n}://{self.host}:{p}" for n, p in self.ports.items())
        protocols = ",".join([*(f"{n}:{p}" for n, p in self.protocols.items()), *quorum])
        return ["--set", f"listeners={named}",
                "--set", f"listener.security.protocol.map={protocols}"]

    def start(self) -> None:
        # ``python -m twisted`` is ``twist``: foreground, no pid file.
        args = [*self.prefix, sys.executable, "-m", "twisted", "--log-format", self.log_format,
                "--log-file", str(self.log_file), "broker",
                "--broker-id", str(self.broker_id), *self._listen_args(),
                "--log-dir", str(self.log_dir)]
        if self.quorum_voters is not None:
            args += ["--metadata", "quorum", "--quorum-voters", self.quorum_voters]
        else:
            args += ["--zookeeper", self.zk_hosts]
        for k, v in self.extra.items():
            args += ["--set", f"{k}={v}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        err = open(self.log_file.with_suffix(".stderr"), "ab")
        self.proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=err, stderr=err)
        err.close()

    def wait_listening(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.broker_id} exited: {self.log_tail()}")
            try:
                socket.create_connection((self.host, self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"broker {self.broker_id} did not listen in {timeout}s: "
                           f"{self.log_tail()}")

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 30) -> str:
        try:
            err = self.log_file.with_suffix(".stderr").read_text(errors="replace")
        except OSError:
            err = ""
        return "\n".join((self.log_text() + err).splitlines()[-n:])

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels``, scraped from
        the broker's /metrics endpoint (0.0 when there is none yet)."""
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        if self.metrics_port is None:
            raise RuntimeError(f"broker {self.broker_id} was started without metrics=True")
        url = f"http://{self.host}:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        return sum(sample.value for family in text_string_to_metric_families(text)
                   for sample in family.samples
                   if sample.name == name and labels.items() <= sample.labels.items())

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.proc.wait(timeout=60)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def shard_service(broker: Any, group: str = "g") -> Any:
    """``broker``'s coordinator service of ``group``'s shard (None: it does not stand for it)."""
    return broker.coordinator.for_group(group)


def coordinates(broker: Any, group: str = "g") -> bool:
    """Whether ``broker`` is the active coordinator of ``group``'s shard."""
    svc = shard_service(broker, group)
    return svc is not None and svc.active


def known_coordinator(broker: Any, group: str = "g") -> int:
    """The coordinator of ``group``'s shard as ``broker`` knows it (-1: none)."""
    shards = broker.coordinator
    return -1 if shards.count is None else shards.owner(shards.shard_of(group))
