"""TLS between brokers: three in-process brokers (real ZooKeeper) whose only listener is SSL or
SASL_SSL with ``ssl.client.auth=required``, so every connection one broker opens to another
(follower fetchers, the controller's channels, AlterPartition, heartbeats, controlled shutdown)
must complete a TLS handshake with a certificate from the cluster's CA, and still log in with
the cluster login; a client without a certificate, and a broker presenting a certificate for
another host, are refused."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import threads

from broker_core.rpc import connect_client
from broker_core.security.peer_tls import PeerTlsRefused
from broker_core.wire.apis import ApiKey
from broker_core.wire.records import Record, build_batch
from tests.support.certs import make_pki
from tests.support.cluster import (
    call,
    controller_of,
    eventually,
    leader_of,
    listener_port,
    running_brokers,
    stop_brokers,
)

FAST_FETCH = {"replica_fetch_wait_max_ms": "100", "replica_fetch_backoff_ms": "100"}


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


def tls_only(pki, protocol: str, cert=None) -> dict[str, str]:
    """One listener, ``protocol`` (SSL or SASL_SSL), requiring client certificates."""
    cert = cert or pki.broker("broker")
    return {"listeners": f"{protocol}://127.0.0.1:0", "ssl_certfile": str(cert.certfile),
            "ssl_keyfile": str(cert.keyfile), "ssl_cafile": str(pki.cafile),
            "ssl_client_auth": "required", **FAST_FETCH}


@pytest.fixture(params=["SSL", "SASL_SSL"])
def tls_cluster(request, zk_hosts, tmp_path, pki):
    yield from running_brokers(zk_hosts, tmp_path, 3, **tls_only(pki, request.param))


async def produce_all(broker, topic: str, values: list[bytes]):
    """One acks=all Produce (as the test's only client: the cluster login on SASL_SSL)."""
    batch = build_batch([Record(b"k", v, [], 1000) for v in values])
    resp = await call(broker, ApiKey.PRODUCE, 8, {
        "acks": -1, "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]},
        as_broker=True)
    return resp.responses[0].partition_responses[0]


async def in_sync(brokers, topic: str, size: int):
    leader = await eventually(lambda: leader_of(brokers, topic, 0), what="leader")
    await eventually(lambda: len(leader.replicas.get_partition(topic, 0).isr) == size,
                     what=f"ISR of {size}")
    return leader


@pytest_twisted.ensureDeferred
async def test_brokers_replicate_and_move_leaders_over_tls(tls_cluster):
    brokers = tls_cluster
    assert all(b.peer_tls is not None for b in brokers)
    await eventually(lambda: controller_of(brokers), what="controller")
    created = await call(brokers[0], ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": "secure", "num_partitions": 1, "replication_factor": 3, "assignments": [],
         "configs": [{"name": "min.insync.replicas", "value": "2"}]}],
        "timeout_ms": 10000, "validate_only": False}, as_broker=True)
    assert created.topics[0].error_code == 0, created
    # The ISR grows to 3 only through the followers' fetchers, which connect over TLS.
    leader = await in_sync(brokers, "secure", 3)
    first = await produce_all(leader, "secure", [b"a", b"b"])
    assert (first.error_code, first.base_offset) == (0, 0)

    # The leader stops (its controlled shutdown asks the controller over TLS, unless it is the
    # controller); the controller's LeaderAndIsr over its TLS channels makes another leader.
    await stop_brokers([leader])
    rest = [b for b in brokers if b is not leader]
    new_leader = await in_sync(rest, "secure", 2)
    assert new_leader is not leader
    second = await produce_all(new_leader, "secure", [b"c"])
    assert (second.error_code, second.base_offset) == (0, 2)
    follower = next(b for b in rest if b is not new_leader)
    await eventually(
        lambda: follower.replicas.get_partition("secure", 0).log.log_end_offset == 3,
        what="the follower has every record")


def _tls_handshake(port: int, cafile: Path) -> None:
    """A TLS client that trusts the cluster's CA but has no certificate: raises when refused."""
    context = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
        if not s.recv(4):  # with TLS 1.3 the refusal arrives after the client's Finished
            raise ConnectionError("closed without an answer")


@pytest_twisted.ensureDeferred
async def test_a_client_without_a_certificate_cannot_complete_the_handshake(tls_cluster, pki):
    port = listener_port(tls_cluster[0])
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        await threads.deferToThread(_tls_handshake, port, pki.cafile)


@pytest.fixture
def misnamed_broker(zk_hosts, tmp_path, pki):
    """A broker whose certificate (from the cluster's CA) names another host only."""
    cert = pki.broker("elsewhere", hosts=("elsewhere.example",))
    yield from running_brokers(zk_hosts, tmp_path, 1, **tls_only(pki, "SSL", cert))


@pytest_twisted.ensureDeferred
async def test_a_broker_presenting_a_certificate_for_another_host_is_refused(misnamed_broker,
                                                                             tmp_path, pki):
    from twisted.internet import reactor

    broker = misnamed_broker[0]
    port = listener_port(broker)
    # A broker of the cluster (its certificate is good, from the same CA) reaching it at
    # 127.0.0.1 refuses the handshake: the certificate does not name that address.
    with pytest.raises(PeerTlsRefused) as info:
        await connect_client(reactor, "127.0.0.1", port, "test",
                             credential=broker.cluster_credential.login, tls=broker.peer_tls)
    # The reason names the check that failed: the certificate does not match the address.
    assert "IPAddressMismatch" in str(info.value), info.value
