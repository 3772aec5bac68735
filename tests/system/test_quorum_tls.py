"""The metadata quorum's listener on TLS: three broker processes in quorum mode whose quorum
listener (named ``QUORUM``) is SSL with client certificates required, its files given by the
per-listener keys (``listener.name.quorum.ssl.*``), while the client listener stays plaintext.

- The cluster forms (every voter↔voter, gossip and forwarding connection is TLS, each side
  verifying the other's certificate and host name), acks=all records are produced and
  consumed, and a voter stopped and started again rejoins: it catches up with the leader's
  log over TLS and sees the metadata written while it was down.
- A plaintext client at the quorum port gets no Kafka answer (the TLS layer refuses its bytes),
  and the node logs why; a TLS client presenting no certificate, or one of another CA, is
  refused; one with a certificate of the cluster's CA completes the handshake.
- A fourth broker whose quorum listener is PLAINTEXT (it forgot ``QUORUM:SSL``) cannot join:
  the nodes it asks refuse its plaintext bytes and log the mismatch with the setting to agree
  on; the cluster goes on as before.
- ``sluice quorum describe`` reaches the quorum with ``--command-config`` (SSL and the CA);
  without it nothing answers, and with another CA the handshake is refused at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_core.raft import wire
from broker_core.raft.messages import DescribeQuorumRequest
from consumer_client.connection import BrokerConnection
from consumer_client.security import ClientSecurity
from tests.support.certs import Pki, make_pki
from tests.support.cluster import ROOT, BrokerProcess, cluster_secret_file, free_port
from tests.support.failover_checks import wait_for
from tests.support.procs import ProcessCluster, consume_all

pytestmark = pytest.mark.slow

TOPIC = "over-tls-quorum"


@dataclass
class TlsQuorum:
    cluster: ProcessCluster
    pki: Pki
    base: Path

    @property
    def servers(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.cluster.quorum_ports.values())

    def describe(self) -> object:
        """DescribeQuorum from the leader, found through DiscoverBrokers (as a broker: the
        cluster login) over TLS."""
        from broker_core.security.cluster_secret import ClusterCredential
        from sluice_tools.quorum_admin import QuorumAdminClient

        login = ClusterCredential.from_file(cluster_secret_file(self.base)).login
        with QuorumAdminClient(self.servers, timeout_s=30, credential=login,
                               security=self.security()) as client:
            return client.describe()

    def security(self, ca: Path | None = None, cert: object = None) -> ClientSecurity:
        """SSL to a quorum port: ``ca`` trusted (default the cluster's), ``cert`` presented
        (default: a certificate of the cluster's CA)."""
        cert = cert if cert is not None else self.pki.broker("operator")
        values = {"security.protocol": "SSL", "ssl.ca.location": str(ca or self.pki.cafile)}
        if cert is not False:
            values |= {"ssl.certificate.location": str(cert.certfile),
                       "ssl.key.location": str(cert.keyfile)}
        return ClientSecurity.from_mapping(values)


@pytest.fixture(scope="module")
def tls_quorum(tmp_path_factory):
    base = tmp_path_factory.mktemp("quorum-tls")
    pki = make_pki(base / "pki")
    node = pki.broker("quorum-node")
    cluster = ProcessCluster(None, base / "cluster", size=3, quorum=True, quorum_protocol="SSL",
                             extra={
        "listener.name.quorum.ssl.certfile": str(node.certfile),
        "listener.name.quorum.ssl.keyfile": str(node.keyfile),
        "listener.name.quorum.ssl.cafile": str(pki.cafile),
        "listener.name.quorum.ssl.client.auth": "required",
        "min.insync.replicas": "2", "replica.fetch.wait.max.ms": "50"})
    cluster.start()
    try:
        cluster.wait_registered(timeout=90)
        yield TlsQuorum(cluster, pki, base / "cluster")
    finally:
        cluster.stop()


def sluice(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "sluice_tools.cli", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def describe_at(port: int, security: ClientSecurity) -> object:
    """DescribeQuorum (open to anyone) at one quorum port over ``security``."""
    message = DescribeQuorumRequest()
    key = wire.api_key_of(message)
    with BrokerConnection("127.0.0.1", port, timeout=30, security=security) as c:
        return wire.response_from_body(
            key, c.request(key, wire.request_body(message), version=wire.VERSIONS[key]))


def produce(bootstrap: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        producer.produce(TOPIC, v, on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(60) == 0
    assert errors == []


def create_topic(bootstrap: str, name: str, replicas: int = 3) -> None:
    from sluice_tools.admin import AdminClient

    AdminClient(bootstrap_servers=bootstrap).create_topic(name, 2, replicas)


def test_the_cluster_forms_serves_and_a_voter_rejoins_over_tls(tls_quorum):
    cluster = tls_quorum.cluster
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, TOPIC)
    values = [b"v-%d" % i for i in range(50)]
    produce(bootstrap, values)
    got, done = consume_all(bootstrap, TOPIC, 2, group="reader")
    assert done == {0, 1} and sorted(got.values()) == sorted(values)

    # A voter that does not lead is stopped and started again: it rejoins over TLS.
    leader = tls_quorum.describe().leader_id
    voter = next(i for i in cluster.brokers if i != leader)
    cluster.brokers[voter].stop()
    create_topic(bootstrap, "made-while-a-voter-was-down", replicas=2)
    cluster.brokers[voter].start()
    cluster.brokers[voter].wait_listening()
    cluster.wait_registered(timeout=60)

    # Everything committed by now, the topic made while it was down included.
    committed = tls_quorum.describe().high_watermark

    def caught_up() -> bool:
        d = tls_quorum.describe()
        return next(v.log_end_offset for v in d.current_voters
                    if v.replica_id == voter) >= committed

    wait_for(caught_up, 60, f"voter {voter} caught up with the leader over TLS")

    def sees_topic() -> bool:
        from sluice_tools.admin import AdminClient

        admin = AdminClient(bootstrap_servers=cluster.brokers[voter].address)
        return "made-while-a-voter-was-down" in admin.list_topics()

    wait_for(sees_topic, 60, f"broker {voter} sees the topic made while it was down")
    produce(bootstrap, [b"after-restart"])
    got, done = consume_all(bootstrap, TOPIC, 2, group="reader-2")
    assert done == {0, 1} and b"after-restart" in got.values()


def test_a_plaintext_client_gets_no_answer_and_the_node_says_why(tls_quorum):
    b = tls_quorum.cluster.brokers[1]
    with pytest.raises(OSError):  # the node's TLS layer refuses the ApiVersions bytes
        BrokerConnection("127.0.0.1", tls_quorum.cluster.quorum_ports[1], timeout=30)
    wait_for(lambda: "on listener QUORUM failed" in b.log_text()
             and "a plaintext peer?" in b.log_text(), 30, "the refused handshake logged")


def test_a_client_without_a_trusted_certificate_is_refused(tls_quorum, tmp_path):
    port = tls_quorum.cluster.quorum_ports[2]
    intruder = make_pki(tmp_path / "other").broker("intruder")
    for security in (tls_quorum.security(cert=False), tls_quorum.security(cert=intruder)):
        with pytest.raises(OSError):  # the handshake (TLS 1.3: the first read) fails
            describe_at(port, security)
    # The cluster's CA's certificate passes the handshake (DescribeQuorum is open to anyone).
    assert describe_at(port, tls_quorum.security()).leader_id >= 0


def test_a_broker_on_another_quorum_protocol_is_refused_with_the_reason(tls_quorum):
    cluster = tls_quorum.cluster
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in cluster.quorum_ports.items())
    advice = "a plaintext peer? every quorum node's listener.security.protocol.map"

    def advised() -> int:
        return sum(b.log_text().count(advice) for b in cluster.brokers.values())

    before = advised()
    stray = BrokerProcess(4, "", tls_quorum.base, quorum_voters=voters, extra={
        "quorum.listener": f"127.0.0.1:{free_port()}",
        "quorum.bootstrap.servers": tls_quorum.servers})
    stray.start()
    try:
        wait_for(lambda: advised() > before, 60, "the voters logging the plaintext node")
        assert "registered /brokers/ids/4" not in stray.log_text()
    finally:
        stray.stop()
    d = tls_quorum.describe()
    assert sorted(v.replica_id for v in d.current_voters) == [1, 2, 3]
    assert 4 not in {o.replica_id for o in d.observers}


def test_sluice_quorum_describe_over_tls_with_command_config(tls_quorum, tmp_path):
    secret = str(cluster_secret_file(tls_quorum.base))
    config = tmp_path / "quorum-tls.properties"
    operator = tls_quorum.pki.broker("operator")
    tls = (f"ssl.certificate.location={operator.certfile}\n"
           f"ssl.key.location={operator.keyfile}\n")
    config.write_text(f"security.protocol=SSL\nssl.ca.location={tls_quorum.pki.cafile}\n{tls}")
    done = sluice("quorum", "describe", "--bootstrap-server", tls_quorum.servers, "--json",
                  "--secret-file", secret, "--command-config", str(config))
    assert done.returncode == 0, done.stderr
    described = json.loads(done.stdout)
    voters = sorted(r["replica_id"] for r in described["current_voters"])
    assert voters == [1, 2, 3] and described["leader_id"] in voters

    # Plaintext: no node answers.
    done = sluice("quorum", "describe", "--bootstrap-server", tls_quorum.servers,
                  "--secret-file", secret, "--timeout", "3")
    assert done.returncode == 1 and "no quorum node reachable" in done.stderr, done.stderr
    # Another CA: the node's certificate is refused, at once.
    other = make_pki(tmp_path / "other")
    config.write_text(f"security.protocol=SSL\nssl.ca.location={other.cafile}\n{tls}")
    done = sluice("quorum", "describe", "--bootstrap-server", tls_quorum.servers,
                  "--secret-file", secret, "--command-config", str(config))
    assert done.returncode == 1 and "TLS handshake with" in done.stderr, done.stderr
    # The quorum's one login is the cluster login: a SASL protocol is bad usage.
    config.write_text(f"security.protocol=SASL_SSL\nssl.ca.location={tls_quorum.pki.cafile}\n"
                      "sasl.mechanism=SCRAM-SHA-512\nsasl.username=u\nsasl.password=p\n")
    done = sluice("quorum", "describe", "--bootstrap-server", tls_quorum.servers,
                  "--secret-file", secret, "--command-config", str(config))
    assert done.returncode == 2 and "cluster login" in done.stderr, done.stderr
    # No client certificate where one is required: refused at once too.
    config.write_text(f"security.protocol=SSL\nssl.ca.location={tls_quorum.pki.cafile}\n")
    done = sluice("quorum", "describe", "--bootstrap-server", tls_quorum.servers,
                  "--secret-file", secret, "--command-config", str(config))
    assert done.returncode == 1 and "certificate required" in done.stderr, done.stderr
