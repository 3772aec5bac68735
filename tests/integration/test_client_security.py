"""Sluice's own clients over TLS and SASL against a real in-process broker (ZooKeeper mode) with
four listeners, PLAINTEXT (inter-broker), SSL, SASL_SSL and SASL_PLAINTEXT, real certificates
and users made with ``sluice users add``.

The blocking producer and the blocking consumer (a group member of the broker's real
coordinator, so its coordinator channel logs in too) round-trip records over SSL, SASL_SSL with
SCRAM-SHA-512 and with PLAIN, and SASL_PLAINTEXT with SCRAM-SHA-256, and the broker sees the
user's principal on that listener. A wrong password fails each client at once with
SASL_AUTHENTICATION_FAILED; a broker certificate from another CA is refused; ``sluice users``
``sluice acls``, ``reassign``, ``elect-leaders`` and ``delete-records`` work over SASL_SSL with
``--command-config``.
"""

from __future__ import annotations

import ssl

import pytest
import pytest_twisted
from twisted.internet import defer, threads

from broker_core.security.acl import AclOperation, ResourceType
from broker_core.security.sasl import SaslAuthenticationError
from broker_core.wire.apis import ApiKey
from consumer_client.blocking_consumer import BlockingConsumer
from consumer_client.blocking_producer import BlockingProducer
from consumer_client.connection import bootstrap
from consumer_client.consumer import AuthenticationFailed as ConsumerAuthenticationFailed
from consumer_client.consumer import State
from consumer_client.producer_errors import AuthenticationFailed
from consumer_client.security import ClientSecurity, TlsHandshakeFailed
from sluice_tools import cli
from tests.support.certs import make_pki
from tests.support.cluster import GROUP_TIMINGS, eventually, listener_port, running_brokers

PASSWORD = "alice-Secret-42"
#: ELSEWHERE: TLS on 127.0.0.2, an address the server certificate (localhost, 127.0.0.1) does
#: not name.
LISTENERS = ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
             "SASL_PLAINTEXT://127.0.0.1:0,ELSEWHERE://127.0.0.2:0")
PROTOCOL_MAP = ("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                "ELSEWHERE:SSL")


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


@pytest.fixture
def broker(zk_hosts, tmp_path, pki, capsys):
    """One broker with the four listeners; ACLs on, ``User:alice`` a super user and everyone
    allowed where no ACL is set (so the PLAINTEXT setup below needs no login); user alice with
    SCRAM-SHA-512 and SCRAM-SHA-256 credentials, made through ``sluice users add``."""
    for brokers in running_brokers(
            zk_hosts, tmp_path, 1, listeners=LISTENERS,
            listener_security_protocol_map=PROTOCOL_MAP, inter_broker_listener_name="PLAINTEXT",
            sasl_enabled_mechanisms=
            "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN", ssl_certfile=str(pki.server.certfile),
            ssl_keyfile=str(pki.server.keyfile), authorizer_enabled="true",
            super_users="User:alice", allow_everyone_if_no_acl_found="true", **GROUP_TIMINGS):
        b = brokers[0]
        secret = tmp_path / "alice.password"
        secret.write_text(PASSWORD + "\n")
        code = pytest_twisted.blockon(threads.deferToThread(cli.main, [
            "users", "add", "alice", "--bootstrap-server", address(b, "PLAINTEXT"),
            "--mechanism", "SCRAM-SHA-512", "--mechanism", "SCRAM-SHA-256",
            "--password-file", str(secret)]))
        assert code == 0, capsys.readouterr()
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(eventually(
            lambda b=b: b.users.check_plain("alice", PASSWORD), what="alice's credential")))
        yield b


def address(broker, listener: str) -> str:
    return f"127.0.0.1:{listener_port(broker, listener)}"


def settings(pki, listener: str, mechanism: str | None, password: str = PASSWORD,
             cafile=None) -> dict[str, str]:
    values = {"security.protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        values["ssl.ca.location"] = str(cafile or pki.cafile)
    if mechanism is not None:
        values.update({"sasl.mechanism": mechanism, "sasl.username": "alice",
                       "sasl.password": password})
    return values


def spy_on_principals(broker, listener: str) -> list[str]:
    """The principal of every request but ApiVersions that ``listener`` hands to the broker's
    handler from now on (SASL's own requests are answered before the handler; ApiVersions is
    served before the login, where a client sends it first as Kafka's clients do)."""
    seen: list[str] = []

    def spy(request, proto, _inner=broker.factories[listener].handler):
        if request.header.api_key != ApiKey.API_VERSIONS:
            seen.append(str(proto.security.principal))
        return _inner(request, proto)

    broker.factories[listener].handler = spy
    return seen


def round_trip(servers: str, security: dict[str, str], topic: str, n: int) -> list[bytes]:
    """Produce ``n`` records with the blocking producer, then read them back with a blocking
    consumer in a group (the broker's coordinator assigns the partition over its channel)."""
    producer = BlockingProducer({"bootstrap.servers": servers, "linger.ms": 0, **security})
    try:
        futures = [producer.send(topic, b"%s-%d" % (topic.encode(), i)) for i in range(n)]
        assert [f.get(timeout=30).offset for f in futures] == list(range(n))
    finally:
        producer.close(10)
    consumer = BlockingConsumer({
        "bootstrap.servers": servers, "group.id": f"{topic}-group", "topics": {topic: 1},
        "auto.offset.reset": "smallest", "session.timeout.ms": 6000,
        "fetch.max.wait.ms": 100, "retry.backoff.ms": 50, **security})
    try:
        out = []
        while len(out) < n:
            m = consumer.poll(30)
            assert m is not None, f"read {len(out)} of {n}"
            out.append(m.value)
        assert consumer.member.state is State.FETCHING
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("listener,mechanism", [
    ("SSL", None),
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
])
@pytest_twisted.ensureDeferred
async def test_producer_and_group_consumer_round_trip(broker, pki, listener, mechanism):
    topic = f"{listener.lower()}-{(mechanism or 'tls').lower()}"
    seen = spy_on_principals(broker, listener)
    got = await threads.deferToThread(round_trip, address(broker, listener),
                                      settings(pki, listener, mechanism), topic, 20)
    assert got == [b"%s-%d" % (topic.encode(), i) for i in range(20)]
    # Every request on that listener came from the logged-in user (a TLS client without a
    # certificate is ANONYMOUS); the consumer's RegisterConsumer among them, so its channel
    # was authenticated before it was turned around.
    expected = "User:alice" if mechanism else "User:ANONYMOUS"
    assert seen and set(seen) == {expected}


def send_error(servers: str, security: dict[str, str]) -> BaseException | None:
    """What one send raises with ``max.block.ms`` at ten minutes: the blocking producer's
    send waits that long for the topic's metadata, so a client that retried would hang."""
    producer = BlockingProducer({"bootstrap.servers": servers, "max.block.ms": 600000,
                                 **security})
    try:
        producer.send("never", b"x")
    except Exception as e:  # noqa: BLE001 - the test looks at it
        return e
    finally:
        producer.close(5)
    return None


def _blocking_metadata(servers: str, security: ClientSecurity) -> list[str]:
    with bootstrap(servers, security=security) as conn:
        return [t.name for t in conn.request(ApiKey.METADATA, {"topics": None}).topics]


@pytest.mark.parametrize("listener,mechanism", [("SASL_SSL", "SCRAM-SHA-512"),
                                                ("SASL_SSL", "PLAIN"),
                                                ("SASL_PLAINTEXT", "SCRAM-SHA-256")])
@pytest_twisted.ensureDeferred
async def test_a_wrong_password_fails_every_client_at_once(broker, pki, listener, mechanism):
    servers = address(broker, listener)
    wrong = settings(pki, listener, mechanism, password="not-the-password")
    # The blocking connection (admin tools, Spark): the broker's refusal, not a retry.
    with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED") as e:
        await threads.deferToThread(_blocking_metadata, servers, ClientSecurity.from_mapping(wrong))
    assert e.value.error_code == 58 and "not-the-password" not in str(e.value)

    # The producer: a send waiting for metadata fails with the refusal long before
    # max.block.ms (ten minutes here: a retry loop would hang the test instead).
    error = await threads.deferToThread(send_error, servers, wrong)
    assert isinstance(error, AuthenticationFailed), error
    assert "SASL_AUTHENTICATION_FAILED" in str(error) and "not-the-password" not in str(error)

    # The consumer: FAILED with the refusal, well within default.api.timeout.ms (ten minutes).
    def consume() -> BaseException | None:
        consumer = BlockingConsumer({"bootstrap.servers": servers, "group.id": "g",
                                     "topics": "never", "default.api.timeout.ms": 600000,
                                     **wrong})
        try:
            consumer.wait_for(State.FETCHING, timeout=600)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            return e
        finally:
            consumer.close()
        return None

    error = await threads.deferToThread(consume)
    assert isinstance(error, ConsumerAuthenticationFailed), error
    assert "SASL_AUTHENTICATION_FAILED" in str(error)


@pytest_twisted.ensureDeferred
async def test_a_broker_certificate_from_another_ca_is_refused(broker, pki, tmp_path):
    other = make_pki(tmp_path / "other-pki")
    for listener, mechanism in (("SSL", None), ("SASL_SSL", "SCRAM-SHA-512")):
        servers = address(broker, listener)
        untrusting = settings(pki, listener, mechanism, cafile=other.cafile)
        seen = spy_on_principals(broker, listener)
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            await threads.deferToThread(_blocking_metadata, servers,
                                        ClientSecurity.from_mapping(untrusting))
        error = await threads.deferToThread(send_error, servers, untrusting)
        assert isinstance(error, AuthenticationFailed), error
        assert isinstance(error.cause, TlsHandshakeFailed)
        assert "certificate verify failed" in str(error)
        assert seen == []  # nothing reached the broker's handler


@pytest_twisted.ensureDeferred
async def test_a_host_name_the_certificate_does_not_name_is_refused_unless_told(broker, pki):
    servers = f"127.0.0.2:{listener_port(broker, 'ELSEWHERE')}"
    checked = settings(pki, "SSL", None)
    with pytest.raises(ssl.SSLCertVerificationError, match="127.0.0.2"):
        await threads.deferToThread(_blocking_metadata, servers,
                                    ClientSecurity.from_mapping(checked))
    error = await threads.deferToThread(send_error, servers, checked)
    assert isinstance(error, AuthenticationFailed) and isinstance(error.cause, TlsHandshakeFailed)
    # Identification off: the CA still checks the chain, the name is not compared.
    lenient = {**checked, "ssl.endpoint.identification.algorithm": "none"}
    got = await threads.deferToThread(round_trip, servers, lenient, "lenient", 3)
    assert got == [b"lenient-%d" % i for i in range(3)]


@pytest_twisted.ensureDeferred
async def test_sluice_users_and_acls_over_sasl_ssl_with_command_config(broker, pki, tmp_path,
                                                                        capsys):
    props = tmp_path / "admin.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in
                             settings(pki, "SASL_SSL", "SCRAM-SHA-512").items()))
    server = ["--bootstrap-server", address(broker, "SASL_SSL"), "--command-config", str(props)]
    seen = spy_on_principals(broker, "SASL_SSL")
    capsys.readouterr()  # the fixture's "sluice users add" lines

    def sluice(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, *server])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = await threads.deferToThread(sluice, "users", "list")
    assert code == 0, err
    assert [line.split()[:2] for line in out.strip().split("\n")[1:]] == [
        ["alice", "SCRAM-SHA-256"], ["alice", "SCRAM-SHA-512"]]
    code, out, err = await threads.deferToThread(
        sluice, "acls", "add", "--allow-principal", "User:bob", "--operation", "Read",
        "--topic", "reports")
    assert code == 0, err
    # DescribeAcls answers from the broker's ACL cache, which follows the store through
    # watches (docs/security.md); the authorize() check below cannot tell (everyone is
    # allowed where no ACL is set): list once the cache has the binding.
    await eventually(lambda: any(b.entry.principal == "User:bob"
                                 for b in broker.authorizer.bindings()),
                     what="the ACL in the broker's cache")
    code, out, err = await threads.deferToThread(sluice, "acls", "list")
    assert code == 0, err
    assert "User:bob" in out and "reports" in out
    await eventually(lambda: broker.authorizer.authorize("User:bob", "10.0.0.1",
                                                         AclOperation.READ, ResourceType.TOPIC,
                                                         "reports"), what="the ACL")
    # reassign, elect-leaders and delete-records go through the same login.
    code, out, err = await threads.deferToThread(sluice, "topics", "create", "--topic", "moved")
    assert code == 0, err
    await eventually(lambda: broker.replicas.get_partition("moved", 0) is not None
                     and broker.replicas.get_partition("moved", 0).is_leader,
                     what="moved-0 led")
    code, out, err = await threads.deferToThread(sluice, "elect-leaders", "--topic", "moved",
                                                 "--partition", "0")
    assert code == 0, err
    assert out.strip() == "Valid replica already elected for partitions moved-0"
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"moved","partition":0,"replicas":[1]}]}')
    code, out, err = await threads.deferToThread(sluice, "reassign", "--reassignment-json-file",
                                                 str(plan), "--execute")
    assert code == 0, err
    assert "Successfully started partition reassignment for moved-0" in out
    offsets = tmp_path / "offsets.json"
    offsets.write_text('{"partitions":[{"topic":"moved","partition":0,"offset":-1}]}')
    code, out, err = await threads.deferToThread(sluice, "delete-records", "--offset-json-file",
                                                 str(offsets))
    assert code == 0, err
    assert "partition: moved-0\tlow_watermark: 0" in out
    assert seen and set(seen) == {"User:alice"}
    # The same file with a wrong password: one line, exit 1, the password not in it.
    props.write_text(props.read_text().replace(PASSWORD, "wrong-password"))
    code, out, err = await threads.deferToThread(sluice, "users", "list")
    assert code == 1 and "SASL_AUTHENTICATION_FAILED" in err and "wrong-password" not in err


@pytest_twisted.ensureDeferred
async def test_loadtest_workers_log_in_with_the_command_config(broker, pki, tmp_path):
    from sluice_tools.loadtest.driver import LoadTestConfig, run

    props = tmp_path / "loadtest.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in
                             settings(pki, "SASL_SSL", "SCRAM-SHA-256").items()))
    seen = spy_on_principals(broker, "SASL_SSL")
    cfg = LoadTestConfig(bootstrap_servers=address(broker, "SASL_SSL"), topic="lt", consumers=2,
                         processes=1, partitions=2, session_timeout_ms=3000, duration_s=4,
                         out_dir=tmp_path / "out", progress=False, command_config=str(props))
    # The driver blocks (a command-line tool); the broker needs this reactor meanwhile.
    result = await threads.deferToThread(run, cfg)
    assert result["consumers_joined"] == 2, result["errors"] or result["worker_stderr"]
    assert seen and set(seen) == {"User:alice"}
