"""Named listeners against real in-process brokers and the real ZooKeeper: each listener's
clients are told that listener's addresses, brokers replicate through the inter-broker one,
and a TLS listener serves kcat and confluent-kafka, with client certificates asked for,
required, and naming the principal."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import subprocess
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer, threads

from broker_core import metadata_paths as paths
from broker_core.wire.apis import ApiKey
from consumer_client.producer import Producer
from tests.support.certs import make_pki
from tests.support.cluster import (
    broker_config,
    call,
    controller_of,
    create_topic,
    eventually,
    free_port,
    leader_of,
    listener_port,
    running_brokers,
    stop_brokers,
)

TWO_LISTENERS = {
    "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    "listener_security_protocol_map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
    "inter_broker_listener_name": "INTERNAL",
}


FAST_FETCH = {"replica_fetch_wait_max_ms": "100", "replica_fetch_backoff_ms": "100"}


async def start_quorum_brokers(base: Path, count: int) -> list:
    """``count`` brokers in quorum mode, each a voter, with the two named listeners; started
    together (none opens its metadata session before a majority of voters runs)."""
    from twisted.internet import defer, reactor

    from broker_core.broker import BrokerService

    voters = ",".join(f"{i}@127.0.0.1:{free_port()}" for i in range(1, count + 1))
    brokers = [BrokerService(broker_config(i, "", base / f"broker-{i}", metadata_store="quorum",
                                           quorum_voters=voters, cluster_id="listeners",
                                           **FAST_FETCH, **TWO_LISTENERS), reactor=reactor)
               for i in range(1, count + 1)]
    results = await defer.DeferredList([defer.maybeDeferred(b.startService) for b in brokers],
                                       consumeErrors=True)
    failed = [r for ok, r in results if not ok]
    if failed:
        await stop_brokers([b for b in brokers if b.running])
        failed[0].raiseException()
    return brokers


@pytest.fixture(params=["zookeeper", "quorum"])
def named(request, tmp_path):
    """Brokers with listeners CLIENT and INTERNAL: two in ZooKeeper mode, three voters in
    quorum mode."""
    if request.param == "zookeeper":
        zk_hosts = request.getfixturevalue("zk_hosts")
        yield from running_brokers(zk_hosts, tmp_path, 2, **FAST_FETCH, **TWO_LISTENERS)
        return
    brokers = pytest_twisted.blockon(defer.Deferred.fromCoroutine(
        start_quorum_brokers(tmp_path, 3)))
    try:
        yield brokers
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(stop_brokers(brokers)))


def ports(brokers, listener: str) -> dict[int, int]:
    return {b.broker_id: listener_port(b, listener) for b in brokers}


async def metadata_brokers(broker, listener: str) -> dict[int, tuple[str, int]]:
    resp = await call(broker, ApiKey.METADATA, 9, {"topics": None,
                                                   "allow_auto_topic_creation": False},
                      listener=listener)
    return {b.node_id: (b.host, b.port) for b in resp.brokers}


@pytest_twisted.ensureDeferred
async def test_each_listener_is_told_its_own_addresses(named):
    await eventually(lambda: controller_of(named), what="controller")
    client, internal = ports(named, "CLIENT"), ports(named, "INTERNAL")
    assert set(client.values()).isdisjoint(internal.values())
    for b in named:
        await eventually(lambda b=b: len(b.cache.brokers) == len(named),
                         what="every broker known")
        assert await metadata_brokers(b, "CLIENT") == {
            i: ("127.0.0.1", p) for i, p in client.items()}
        assert await metadata_brokers(b, "INTERNAL") == {
            i: ("127.0.0.1", p) for i, p in internal.items()}
        answer = await call(b, ApiKey.CLUSTER_METADATA, 0, {}, listener="CLIENT")
        assert {x.node_id: x.port for x in answer.brokers} == client
    # The registration: host/port the inter-broker listener's, every endpoint listed.
    data, _ = await named[0].store.get(paths.broker(1))
    reg = paths.BrokerRegistration.from_bytes(data)
    assert (reg.host, reg.port) == ("127.0.0.1", internal[1])
    assert {(e.listener, e.port) for e in reg.endpoints} == {
        ("CLIENT", client[1]), ("INTERNAL", internal[1])}
    assert dict(reg.protocol_map) == {"CLIENT": "PLAINTEXT", "INTERNAL": "PLAINTEXT"}


@pytest_twisted.ensureDeferred
async def test_replication_goes_through_the_inter_broker_listener(named):
    await eventually(lambda: controller_of(named), what="controller")
    await create_topic(named[0], "rf2", rf=2, configs=[("min.insync.replicas", "2")])
    leader = await eventually(lambda: leader_of(named, "rf2", 0), what="leader")
    # The follower learns of its replica from the controller on its own time: wait for it.
    follower = await eventually(
        lambda: next((b for b in named if b is not leader
                      and b.replicas.get_partition("rf2", 0) is not None), None),
        what="follower replica")
    await eventually(lambda: len(leader.replicas.get_partition("rf2", 0).isr) == 2, what="ISR 2")
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports(named, "CLIENT").values())
    producer = Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    try:
        acked = [await producer.send("rf2", b"value-%d" % i) for i in range(50)]
    finally:
        await producer.close()
    assert [md.offset for md in acked] == list(range(50))
    # acks=all with min.insync.replicas=2: the follower had every record before each ack. It
    # knows the leader at its INTERNAL address, the one its fetcher connects to.
    assert follower.replicas.get_partition("rf2", 0).log.log_end_offset >= 50
    known = follower.cache.brokers[leader.broker_id]
    assert (known.host, known.port) == ("127.0.0.1", listener_port(leader, "INTERNAL"))
    assert leader.factories["INTERNAL"].connections  # the follower's fetcher, at least


# -- TLS -----------------------------------------------------------------------------------------

@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


def tls_keys(pki, client_auth: str) -> dict[str, str]:
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl_certfile": str(pki.server.certfile), "ssl_keyfile": str(pki.server.keyfile),
            "ssl_cafile": str(pki.cafile), "ssl_client_auth": client_auth}


@pytest.fixture
def tls_broker(zk_hosts, tmp_path, pki):
    yield from running_brokers(zk_hosts, tmp_path, 1, **tls_keys(pki, "none"))


@pytest.fixture
def requested_broker(zk_hosts, tmp_path, pki):
    yield from running_brokers(zk_hosts, tmp_path, 1, **tls_keys(pki, "requested"))


@pytest.fixture
def mtls_broker(zk_hosts, tmp_path, pki):
    yield from running_brokers(zk_hosts, tmp_path, 1, **tls_keys(pki, "required"))


def run(argv: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=60)


def kcat_ssl(port: int, pki, *args: str, cert=None) -> list[str]:
    argv = ["kcat", "-b", f"127.0.0.1:{port}", "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={pki.cafile}", *args]
    if cert is not None:
        argv += ["-X", f"ssl.certificate.location={cert.certfile}",
                 "-X", f"ssl.key.location={cert.keyfile}"]
    return argv


async def ready_topic(brokers, name: str) -> None:
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], name)
    await eventually(lambda: leader_of(brokers, name, 0), what="leader")


@pytest_twisted.ensureDeferred
async def test_kcat_produces_and_consumes_over_ssl(tls_broker, pki):
    await ready_topic(tls_broker, "k")
    port = listener_port(tls_broker[0], "SSL")
    lines = b"".join(b"record-%d\n" % i for i in range(20))
    put = await threads.deferToThread(run, kcat_ssl(port, pki, "-P", "-t", "k"), lines)
    assert put.returncode == 0, put.stderr
    got = await threads.deferToThread(run, kcat_ssl(port, pki, "-C", "-t", "k", "-e", "-q"))
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == [b"record-%d" % i for i in range(20)]
    # The metadata kcat was given names the SSL listener's port, not the PLAINTEXT one.
    listed = await threads.deferToThread(run, kcat_ssl(port, pki, "-L", "-J"))
    assert json.loads(listed.stdout)["brokers"] == [{"id": 1, "name": f"127.0.0.1:{port}"}]


def _confluent_round_trip(port: int, pki) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    ssl_conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                "ssl.ca.location": str(pki.cafile)}
    producer = Producer({**ssl_conf, "acks": "all"})
    errors: list = []
    for i in range(30):
        producer.produce("c", b"confluent-%d" % i,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and errors == []
    consumer = Consumer({**ssl_conf, "group.id": "tls-test", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("c", 0, 0)])
        out = []
        while len(out) < 30:
            m = consumer.poll(15)
            assert m is not None, f"read {len(out)} of 30"
            assert m.error() is None, m.error()
            out.append(m.value())
        return out
    finally:
        consumer.close()


@pytest_twisted.ensureDeferred
async def test_confluent_kafka_produces_and_consumes_over_ssl(tls_broker, pki):
    await ready_topic(tls_broker, "c")
    port = listener_port(tls_broker[0], "SSL")
    read = await threads.deferToThread(_confluent_round_trip, port, pki)
    assert read == [b"confluent-%d" % i for i in range(30)]


def _kafka_python_round_trip(port: int, pki) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    ssl_conf = {"bootstrap_servers": f"127.0.0.1:{port}", "security_protocol": "SSL",
                "ssl_cafile": str(pki.cafile)}
    # idempotence needs InitProducerId, which Sluice does not serve yet
    producer = KafkaProducer(acks="all", enable_idempotence=False, **ssl_conf)
    try:
        for i in range(10):
            producer.send("p", b"kafka-python-%d" % i).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=15000, **ssl_conf)
    try:
        consumer.assign([TopicPartition("p", 0)])
        consumer.seek(TopicPartition("p", 0), 0)
        out = []
        for m in consumer:
            out.append(m.value)
            if len(out) == 10:
                break
        return out
    finally:
        consumer.close()


@pytest_twisted.ensureDeferred
async def test_kafka_python_produces_and_consumes_over_ssl(tls_broker, pki):
    await ready_topic(tls_broker, "p")
    port = listener_port(tls_broker[0], "SSL")
    read = await threads.deferToThread(_kafka_python_round_trip, port, pki)
    assert read == [b"kafka-python-%d" % i for i in range(10)]


def _api_versions_frame() -> bytes:
    body = struct.pack(">hhi", int(ApiKey.API_VERSIONS), 0, 7) + struct.pack(">h", 4) + b"test"
    return struct.pack(">i", len(body)) + body


def _plaintext_on(port: int) -> bytes:
    """Send a plaintext ApiVersions request to ``port``; return what came back before the
    broker closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(_api_versions_frame())
        received = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return received
            received += chunk


def _tls_api_versions(port: int, pki, cert=None) -> bytes:
    """ApiVersions over TLS (the CA checked, TLS 1.2 or later); returns the response frame."""
    context = ssl.create_default_context(cafile=str(pki.cafile))
    if cert is not None:
        context.load_cert_chain(str(cert.certfile), str(cert.keyfile))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as s:
        s.sendall(_api_versions_frame())
        head = s.recv(4)
        if len(head) < 4:
            raise ConnectionError("closed before an answer")
        (size,) = struct.unpack(">i", head)
        data = b""
        while len(data) < size:
            chunk = s.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed mid-answer")
            data += chunk
        return data


def spy_on_requests(broker, listener: str = "SSL") -> list[str]:
    """The principal of every request the broker's ``listener`` handles from now on, in order
    (the broker's own inter-broker requests come on another listener)."""
    seen: list[str] = []

    def spy(request, proto, _inner=broker.handler.__call__):
        seen.append(str(proto.security.principal))
        return _inner(request, proto)

    broker.factories[listener].handler = spy
    return seen


@pytest_twisted.ensureDeferred
async def test_a_plaintext_client_on_the_tls_port_is_closed_without_an_answer(tls_broker, pki):
    broker = tls_broker[0]
    port = listener_port(broker, "SSL")
    seen = spy_on_requests(broker)
    received = await threads.deferToThread(_plaintext_on, port)
    # Nothing a Kafka client could read as a response: at most a TLS alert record (type 21),
    # and no request reached the broker.
    assert received == b"" or received[0] == 21, received[:16]
    assert seen == []
    # The listener still serves TLS clients (anonymous without a certificate), and the
    # PLAINTEXT listener plaintext ones.
    answer = await threads.deferToThread(_tls_api_versions, port, pki)
    assert struct.unpack(">ih", answer[:6]) == (7, 0)
    plain = await call(broker, ApiKey.API_VERSIONS, 0, {})
    assert plain.error_code == 0
    assert seen == ["User:ANONYMOUS"]


@pytest_twisted.ensureDeferred
async def test_required_client_auth_refuses_no_certificate_and_names_the_principal(
        mtls_broker, pki):
    broker = mtls_broker[0]
    port = listener_port(broker, "SSL")
    # Without a certificate the handshake fails (with TLS 1.3 the client learns it on read).
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        await threads.deferToThread(_tls_api_versions, port, pki)
    # A certificate from another CA is refused the same way.
    stranger = make_pki(Path(pki.directory) / "other").client("mallory")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        await threads.deferToThread(_tls_api_versions, port, pki, stranger)
    # With one the client is served, and its principal is its subject's DN as Kafka writes it.
    alice = pki.client("alice", ou="eng", org="Sluice")
    seen = spy_on_requests(broker)
    answer = await threads.deferToThread(_tls_api_versions, port, pki, alice)
    assert struct.unpack(">ih", answer[:6]) == (7, 0)
    assert seen == ["User:CN=alice,OU=eng,O=Sluice"]


@pytest_twisted.ensureDeferred
async def test_requested_client_auth_serves_both_and_names_only_the_certificate_holder(
        requested_broker, pki):
    broker = requested_broker[0]
    port = listener_port(broker, "SSL")
    seen = spy_on_requests(broker)
    await threads.deferToThread(_tls_api_versions, port, pki)
    await threads.deferToThread(_tls_api_versions, port, pki, pki.client("bob", ou="ops"))
    assert seen == ["User:ANONYMOUS", "User:CN=bob,OU=ops"]
    # A certificate is still checked against ssl.cafile when one is presented.
    stranger = make_pki(Path(pki.directory) / "other").client("mallory")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        await threads.deferToThread(_tls_api_versions, port, pki, stranger)
    assert len(seen) == 2


@pytest_twisted.ensureDeferred
async def test_kcat_with_a_client_certificate_on_a_required_listener(mtls_broker, pki):
    await ready_topic(mtls_broker, "m")
    port = listener_port(mtls_broker[0], "SSL")
    alice = pki.client("alice")
    put = await threads.deferToThread(
        run, kcat_ssl(port, pki, "-P", "-t", "m", cert=alice), b"hello\n")
    assert put.returncode == 0, put.stderr
    got = await threads.deferToThread(
        run, kcat_ssl(port, pki, "-C", "-t", "m", "-e", "-q", cert=alice))
    assert got.stdout.splitlines() == [b"hello"], got.stderr
    refused = await threads.deferToThread(
        run, kcat_ssl(port, pki, "-L", "-m", "5"))
    assert refused.returncode != 0


@pytest_twisted.ensureDeferred
async def test_a_tls_listener_with_a_bad_key_does_not_start(zk_hosts, tmp_path, pki):
    from twisted.internet import reactor

    from broker_core.broker import BrokerService, StartupError

    pki.server.keyfile.write_bytes(pki.client("x").keyfile.read_bytes())
    svc = BrokerService(broker_config(1, zk_hosts, tmp_path / "b", **tls_keys(pki, "none")),
                        reactor=reactor)
    with pytest.raises(StartupError, match=r"a TLS listener cannot start: ssl\.keyfile: the "
                                           r"key in '.*' does not belong to the certificate"):
        await svc.startService()
    assert svc.listeners == [] and not (tmp_path / "b").exists()  # nothing was opened
