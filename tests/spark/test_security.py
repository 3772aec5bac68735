"""The Spark source and sink over SASL_SSL (SCRAM-SHA-512), with real PySpark (local[2]) against
a broker process that has a PLAINTEXT listener (setup) and a SASL_SSL one (the job): the
security options pass plain (``security.protocol``) or ``kafka.``-prefixed, as Spark's Kafka
source takes them, and reach every task."""

from __future__ import annotations

import pytest

from tests.support.spark_data import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PASSWORD = "spark-Secret-7"


class _Secured:
    """The broker process and how to reach it."""

    def __init__(self, proc, plaintext: str, sasl_ssl: str, cafile: str) -> None:
        self.proc = proc
        self.bootstrap = plaintext  # what create_topic uses
        self.sasl_ssl = sasl_ssl
        self.options = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                        "sasl.username": "sparky", "sasl.password": PASSWORD,
                        "ssl.ca.location": cafile}


@pytest.fixture(scope="module")
def secured(zookeeper_server, tmp_path_factory):
    from tests.conftest import new_chroot
    from tests.support.certs import make_pki
    from tests.support.cluster import BrokerProcess
    from tests.support.users import add_user

    base = tmp_path_factory.mktemp("spark-secured")
    pki = make_pki(base / "pki")
    proc = BrokerProcess(1, new_chroot(zookeeper_server), base,
                         listeners=[("PLAINTEXT", "PLAINTEXT"), ("SASL_SSL", "SASL_SSL")],
                         extra={"ssl.certfile": str(pki.server.certfile),
                                "ssl.keyfile": str(pki.server.keyfile),
                                "sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    proc.start()
    try:
        proc.wait_listening()
        # Over the cluster login: without an authorizer only brokers and super users may
        # manage users.
        add_user(proc.address, base, "sparky", PASSWORD)
        yield _Secured(proc, proc.address, proc.address_of("SASL_SSL"), str(pki.cafile))
    finally:
        proc.stop()


def test_write_then_read_over_sasl_ssl(spark, secured):
    from consumer_client.spark.options import parse_read_options

    create_topic(secured, "secured", 2, replication_factor=1)
    rows = [(b"k%d" % i, b"v%d" % i) for i in range(40)]
    # The sink: options kafka.-prefixed.
    writer = spark.createDataFrame(rows, "key binary, value binary").write.format("sluice") \
        .option("bootstrap.servers", secured.sasl_ssl).option("topic", "secured")
    for k, v in secured.options.items():
        writer = writer.option(f"kafka.{k}", v)
    writer.mode("append").save()
    # The source: options plain.
    reader = spark.read.format("sluice").option("bootstrap.servers", secured.sasl_ssl) \
        .option("subscribe", "secured")
    for k, v in secured.options.items():
        reader = reader.option(k, v)
    got = sorted((bytes(r.key), bytes(r.value)) for r in reader.load().collect())
    assert got == sorted(rows)
    # A wrong password fails the query with the broker's refusal (on the driver, at once).
    bad = spark.read.format("sluice").option("bootstrap.servers", secured.sasl_ssl) \
        .option("subscribe", "secured")
    for k, v in {**secured.options, "sasl.password": "wrong"}.items():
        bad = bad.option(k, v)
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED"):
        bad.load().collect()
    # The options a task receives carry the settings (the password only inside them).
    opts = parse_read_options({"bootstrap.servers": secured.sasl_ssl, "subscribe": "secured",
                               **secured.options}, streaming=False)
    assert opts.security.credential.username == "sparky" and PASSWORD not in repr(opts)
