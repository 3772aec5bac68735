"""Kafka's own admin clients manage Sluice's ACLs on the wire: confluent-kafka creates, describes
and deletes them, kafka-python creates and describes them, against a broker process with
``authorizer.enabled=true`` in each metadata mode (ZooKeeper and the quorum). The clients
connect without credentials, so ``User:ANONYMOUS`` is the super user here; enforcement is the
ACL matrix's job (``tests/integration/test_acl_matrix.py``)."""

from __future__ import annotations

import time

import pytest

from tests.support.procs import ProcessCluster


@pytest.fixture(scope="module", params=["zookeeper", "quorum"])
def acl_cluster(request, zookeeper_server, tmp_path_factory):
    quorum = request.param == "quorum"
    c = ProcessCluster(None if quorum else zookeeper_server.hosts,
                       tmp_path_factory.mktemp(f"acl-{request.param}"), size=1, quorum=quorum,
                       extra={"authorizer.enabled": "true", "super.users": "User:ANONYMOUS"})
    c.start()
    try:
        c.wait_registered()
        yield c
    finally:
        c.stop()


def test_confluent_kafka_creates_describes_and_deletes_acls(acl_cluster):
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": acl_cluster.bootstrap})
    bindings = [
        AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "fin-", ResourcePatternType.PREFIXED, "User:bob",
                   "10.0.0.1", AclOperation.ALL, AclPermissionType.DENY),
    ]
    for f in admin.create_acls(bindings, request_timeout=30).values():
        f.result(timeout=30)
    any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    deadline = time.monotonic() + 30
    while True:  # the broker answers from its cache, filled by a watch
        found = admin.describe_acls(any_filter, request_timeout=30).result(timeout=30)
        if len(found) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sorted(found, key=str) == sorted(bindings, key=str)

    bob = AclBindingFilter(ResourceType.GROUP, "fin-", ResourcePatternType.PREFIXED, "User:bob",
                           None, AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([bob], request_timeout=30)[bob].result(timeout=30)
    assert deleted == [bindings[1]]
    # A binding Sluice cannot store is refused with the reason, and nothing is stored.
    bad = AclBinding(ResourceType.TRANSACTIONAL_ID, "tx", ResourcePatternType.LITERAL,
                     "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    with pytest.raises(Exception, match="only TOPIC, GROUP and CLUSTER"):
        admin.create_acls([bad], request_timeout=30)[bad].result(timeout=30)


def test_kafka_python_describes_acls(acl_cluster):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    admin = KafkaAdminClient(bootstrap_servers=acl_cluster.bootstrap, request_timeout_ms=30000)
    try:
        acl = ACL("User:carol", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                  ResourcePattern(ResourceType.TOPIC, "carol-topic",
                                  ACLResourcePatternType.LITERAL))
        result = admin.create_acls([acl])
        assert result["failed"] == [], result
        flt = ACLFilter("User:carol", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(ResourceType.TOPIC, None,
                                              ACLResourcePatternType.ANY))
        deadline = time.monotonic() + 30
        while True:
            acls, error = admin.describe_acls(flt)
            if acls or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in acls] == [
            ("User:carol", ACLOperation.WRITE, "carol-topic")]
    finally:
        admin.close()
