"""Real Kafka clients over TLS and SASL against three broker processes, in each metadata mode
(ZooKeeper and the quorum): kcat and confluent-kafka produce and consume over SSL, over
SASL_SSL with SCRAM-SHA-512 and with PLAIN; kafka-python over SASL_PLAINTEXT with
SCRAM-SHA-256. Topics have replication factor 3 and ``min.insync.replicas=2``, written with
acks=all, so every record also crossed the brokers' own (BROKER) listener. A wrong password
is refused with SASL_AUTHENTICATION_FAILED on the first login, and kcat and confluent-kafka
report it then, not at the end of their timeouts.

Each mode's cluster is started once for the module; the user is made with ``sluice users
add`` through the brokers, logged in with the cluster login (its credentials go to the
metadata store like any user's)."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.certs import Pki, make_pki
from tests.support.cli_runs import eventually
from tests.support.procs import ProcessCluster
from tests.support.users import add_user

pytestmark = [pytest.mark.interop, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
#: Every broker's listeners: BROKER (plaintext) is the inter-broker one and the tests' admin.
LISTENERS = [("BROKER", "PLAINTEXT"), ("SSL", "SSL"), ("SASL_SSL", "SASL_SSL"),
             ("SASL_PLAINTEXT", "SASL_PLAINTEXT")]
USER, PASSWORD = "alice", "alice-password-over-tls"
PARTITIONS = 3
PER_PARTITION = 500
#: (listener, SASL mechanism) pairs kcat and confluent-kafka are driven over.
SECURED = [("SSL", None), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN")]


@dataclass
class SecureCluster:
    cluster: ProcessCluster
    pki: Pki

    def settings(self, listener: str, mechanism: str | None = None,
                 password: str = PASSWORD) -> dict[str, str]:
        """librdkafka's settings for ``listener`` (kcat ``-X`` and confluent-kafka alike)."""
        out = {"bootstrap.servers": self.cluster.bootstrap_of(listener),
               "security.protocol": dict(LISTENERS)[listener]}
        if listener in ("SSL", "SASL_SSL"):
            out["ssl.ca.location"] = str(self.pki.cafile)
        if mechanism is not None:
            out.update({"sasl.mechanisms": mechanism, "sasl.username": USER,
                        "sasl.password": password})
        return out


def kcat(settings: dict[str, str], *args: str, stdin: bytes | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess:
    argv = ["kcat", "-b", settings["bootstrap.servers"]]
    for k, v in settings.items():
        if k != "bootstrap.servers":
            argv += ["-X", f"{k}={v}"]
    return subprocess.run([*argv, *args], input=stdin, capture_output=True, timeout=timeout)


def logs_in(settings: dict[str, str]) -> bool:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({**settings, "log_level": 0}).list_topics(timeout=3)
        return True
    except KafkaException:
        return False


def wait_known_everywhere(secure: SecureCluster, timeout: float = 60.0) -> None:
    """Until every broker accepts alice with both SCRAM mechanisms: each broker's user cache
    is filled by a watch on the store, so the last broker may learn of her a moment later."""
    for b in secure.cluster.brokers.values():
        for listener, mechanism in (("SASL_SSL", "SCRAM-SHA-512"),
                                    ("SASL_PLAINTEXT", "SCRAM-SHA-256")):
            one = {**secure.settings(listener, mechanism),
                   "bootstrap.servers": b.address_of(listener)}
            eventually(lambda one=one: logs_in(one), timeout,
                       f"broker {b.broker_id} to know {USER} ({listener})")


@pytest.fixture(scope="module", params=["zookeeper", "quorum"])
def secure(request, zookeeper_server, tmp_path_factory):
    quorum = request.param == "quorum"
    base = tmp_path_factory.mktemp(f"secure-{request.param}")
    pki = make_pki(base / "pki")
    cluster = ProcessCluster(
        None if quorum else zookeeper_server.hosts, base, size=3, quorum=quorum,
        listeners=LISTENERS, extra={
            "inter.broker.listener.name": "BROKER",
            "ssl.certfile": str(pki.server.certfile), "ssl.keyfile": str(pki.server.keyfile),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"})
    cluster.start()
    try:
        cluster.wait_registered()
        add_user(cluster.bootstrap_of("BROKER"), base, USER, PASSWORD,
                 ("SCRAM-SHA-256", "SCRAM-SHA-512"))
        out = SecureCluster(cluster, pki)
        wait_known_everywhere(out)
        yield out
    finally:
        cluster.stop()


def create_topic(secure: SecureCluster) -> str:
    """A topic of PARTITIONS partitions, RF 3, ``min.insync.replicas=2``, every partition with a
    leader and a full ISR."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": secure.cluster.bootstrap_of("BROKER")})
    admin.create_topics([NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                        request_timeout=30)[name].result(timeout=30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        t = admin.list_topics(name, timeout=10).topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == PARTITIONS and all(
                p.leader >= 0 and len(p.isrs) == 3 for p in t.partitions.values()):
            return name
        time.sleep(0.2)
    raise AssertionError(f"topic {name} not fully replicated")


def end_offsets(secure: SecureCluster, topic: str) -> list[int]:
    """Each partition's high watermark, read over the BROKER listener."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": secure.cluster.bootstrap_of("BROKER"),
                  "group.id": "end-offsets"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)]
    finally:
        c.close()


def values(p: int) -> list[str]:
    return [f"p{p}-{i:04d}-" + "v" * (i % 50) for i in range(PER_PARTITION)]


def ids(param) -> str:
    listener, mechanism = param
    return listener if mechanism is None else f"{listener}-{mechanism}"


# -- kcat --------------------------------------------------------------------------------------

@pytest.mark.parametrize("listener, mechanism", SECURED, ids=[ids(s) for s in SECURED])
def test_kcat_produces_and_consumes(secure, listener, mechanism):
    settings = secure.settings(listener, mechanism)
    topic = create_topic(secure)
    listed = kcat(settings, "-L", "-t", topic)
    assert listed.returncode == 0, listed.stderr
    # The brokers kcat is told of are the same listener's addresses.
    for b in secure.cluster.brokers.values():
        assert f"at {b.address_of(listener)}" in listed.stdout.decode()
    for p in range(PARTITIONS):
        put = kcat(settings, "-P", "-t", topic, "-p", str(p), "-X", "acks=all",
                   stdin="".join(v + "\n" for v in values(p)).encode())
        assert put.returncode == 0, put.stderr
    for p in range(PARTITIONS):
        got = kcat(settings, "-C", "-t", topic, "-p", str(p), "-o", "beginning", "-e", "-q",
                   "-f", "%o|%s\n")
        assert got.returncode == 0, got.stderr
        lines = got.stdout.decode().splitlines()
        assert [int(line.split("|")[0]) for line in lines] == list(range(PER_PARTITION))
        assert [line.split("|", 1)[1] for line in lines] == values(p)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kcat_with_a_wrong_password_fails_on_its_first_login(secure, mechanism):
    """kcat's producer stops on the brokers' refusal (error 58, with their message) once every
    broker refused it, long before its messages' timeout (300 s) or this call's (120 s) would
    end it; nothing reaches the topic."""
    topic = create_topic(secure)
    settings = secure.settings("SASL_SSL", mechanism, password="not-alices-password")
    done = kcat(settings, "-P", "-t", topic, "-X", "message.timeout.ms=300000", stdin=b"x\n")
    err = done.stderr.decode()
    assert done.returncode != 0
    assert "Authentication failure" in err, err
    assert f"invalid credentials with SASL mechanism {mechanism}" in err, err
    assert end_offsets(secure, topic) == [0] * PARTITIONS


# -- confluent-kafka ---------------------------------------------------------------------------

@pytest.mark.parametrize("listener, mechanism", SECURED, ids=[ids(s) for s in SECURED])
def test_confluent_kafka_produces_and_consumes(secure, listener, mechanism):
    from confluent_kafka import Consumer, Producer, TopicPartition

    settings = secure.settings(listener, mechanism)
    topic = create_topic(secure)
    producer = Producer({**settings, "acks": "all", "linger.ms": 5})
    errors: list = []
    for p in range(PARTITIONS):
        for v in values(p):
            producer.produce(topic, v.encode(), partition=p,
                             on_delivery=lambda err, msg: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []

    consumer = Consumer({**settings, "group.id": f"g-{topic}", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1):
                if msg.error():
                    assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                    eof.add(msg.partition())
                    continue
                got[msg.partition()].append((msg.offset(), msg.value().decode()))
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        assert [o for o, _ in got[p]] == list(range(PER_PARTITION))
        assert [v for _, v in got[p]] == values(p)


def test_confluent_kafka_with_a_wrong_password_reports_authentication_at_once(secure):
    """librdkafka's error callback gets _AUTHENTICATION with the broker's message from the
    first login; nothing is delivered."""
    from confluent_kafka import KafkaError, Producer

    reported: list = []
    first = threading.Event()

    def on_error(err):
        reported.append(err)
        first.set()

    topic = create_topic(secure)
    producer = Producer({**secure.settings("SASL_SSL", "SCRAM-SHA-512", "not-alices-password"),
                         "error_cb": on_error, "message.timeout.ms": 300000})
    delivered: list = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(err))
    deadline = time.monotonic() + 120
    while not first.is_set() and time.monotonic() < deadline:
        producer.poll(0.2)
    assert reported, "no error reported"
    err = reported[0]
    assert err.code() == KafkaError._AUTHENTICATION, err
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in err.str(), err
    assert delivered == []
    producer.purge()
    producer.flush(0)
    assert end_offsets(secure, topic) == [0] * PARTITIONS


# -- kafka-python ------------------------------------------------------------------------------

def kafka_python_settings(secure: SecureCluster, password: str = PASSWORD) -> dict:
    return {"bootstrap_servers": secure.cluster.bootstrap_of("SASL_PLAINTEXT"),
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": USER, "sasl_plain_password": password}


def test_kafka_python_over_sasl_plaintext_with_scram_sha_256(secure):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = create_topic(secure)
    producer = KafkaProducer(**kafka_python_settings(secure), acks="all", linger_ms=5,
                             # idempotence needs InitProducerId, which Sluice does not serve yet
                             enable_idempotence=False)
    try:
        futures = [producer.send(topic, v.encode(), partition=p)
                   for p in range(PARTITIONS) for v in values(p)]
        producer.flush(60)
        assert all(f.get(timeout=30).offset >= 0 for f in futures)
    finally:
        producer.close()

    consumer = KafkaConsumer(**kafka_python_settings(secure), enable_auto_commit=False,
                             group_id=None)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, got.values())) < PARTITIONS * PER_PARTITION and \
                time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=1000, max_records=2000).items():
                got[tp.partition].extend((r.offset, r.value.decode()) for r in records)
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        assert [o for o, _ in got[p]] == list(range(PER_PARTITION))
        assert [v for _, v in got[p]] == values(p)


def test_kafka_python_with_a_wrong_password_gets_error_58(secure, caplog):
    """kafka-python's first login is refused with error 58 and the broker's message; the
    client's own policy then retries its bootstrap until ``bootstrap_timeout_ms`` and raises."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    with pytest.raises(KafkaError):
        KafkaConsumer(**kafka_python_settings(secure, "not-alices-password"),
                      request_timeout_ms=3000, bootstrap_timeout_ms=3000)
    assert "[Error 58] SaslAuthenticationFailedError" in caplog.text
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in caplog.text
