"""Producer ids from blocks in the metadata store: the sans-IO block arithmetic
(:mod:`broker_core.producer_id_blocks`) and :class:`ProducerIdManager` claiming blocks on a real
one-voter metadata quorum (``QuorumMetadataStore`` on ``task.Clock``): never an id twice, across
a restart and between two brokers racing; InitProducerId's refusals and epoch bumps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from twisted.internet import defer, task

from broker_core import metadata_paths as paths
from broker_core.producer_id_blocks import (
    MAX_PRODUCER_ID,
    IdCursor,
    ProducerIdBlock,
    ProducerIdsExhausted,
    next_block,
)
from broker_core.raft.metadata_store import QuorumMetadataStore
from broker_core.security.acl import (
    AccessEntry,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from broker_core.security.principal import plaintext
from broker_core.server.authorization import Access, open_access
from broker_core.server.producer_ids import MAX_EPOCH, InitProducerIdApi, ProducerIdManager
from broker_core.wire.errors import ErrorCode
from tests.support.local_quorum import LocalQuorum, run


@pytest.fixture
def clock():
    return task.Clock()


@pytest.fixture
def quorum(clock):
    q = LocalQuorum(clock)
    yield q
    q.stop()


def store_on(clock, quorum) -> QuorumMetadataStore:
    store = QuorumMetadataStore(quorum, reactor=clock, session_timeout=3.0)
    run(clock, store.start())
    return store


# -- the block arithmetic ----------------------------------------------------------------------


def test_blocks_follow_each_other_and_round_trip_kafkas_value():
    first = next_block(None, broker=1)
    assert (first.start, first.end, first.size) == (0, 999, 1000)
    second = next_block(first, broker=2, size=10)
    assert (second.broker, second.start, second.end) == (2, 1000, 1009)
    assert ProducerIdBlock.from_bytes(second.to_bytes()) == second
    assert second.to_bytes() == (b'{"block_end":"1009","block_start":"1000","broker":2,'
                                 b'"version":1}')


@pytest.mark.parametrize("value", [
    b"", b"not json", b"[]", b'{"broker":1,"block_start":"0"}',
    b'{"broker":1,"block_start":"5","block_end":"4"}',
    b'{"broker":1,"block_start":"-1","block_end":"4"}',
    b'{"broker":-1,"block_start":"0","block_end":"4"}',
    b'{"broker":true,"block_start":"0","block_end":"4"}',
    b'{"broker":1,"block_start":"x","block_end":"4"}',
    b'{"broker":1,"block_start":[0],"block_end":"4"}',
    b'{"broker":1,"block_start":"0","block_end":"9223372036854775807"}',
])
def test_a_bad_store_value_is_refused_never_repaired(value):
    with pytest.raises(ValueError, match="producer id block"):
        ProducerIdBlock.from_bytes(value)


def test_the_id_space_ends_with_an_error_not_a_wrap():
    last = ProducerIdBlock(0, MAX_PRODUCER_ID - 999, MAX_PRODUCER_ID)
    with pytest.raises(ProducerIdsExhausted):
        next_block(last, broker=0)


def test_the_cursor_hands_out_each_id_once_and_refuses_an_overlapping_block():
    cursor = IdCursor()
    assert cursor.take() is None
    cursor.use(ProducerIdBlock(0, 5, 6))
    assert [cursor.take(), cursor.take(), cursor.take()] == [5, 6, None]
    with pytest.raises(ValueError, match="overlaps"):
        cursor.use(ProducerIdBlock(0, 6, 8))


# -- claiming blocks in the store --------------------------------------------------------------


def take(clock, manager, n):
    return [run(clock, manager.next_id()) for _ in range(n)]


def test_a_broker_claims_a_block_and_a_new_one_when_it_is_used_up(clock, quorum):
    store = store_on(clock, quorum)
    manager = ProducerIdManager(store, broker_id=1, block_size=3)
    assert take(clock, manager, 7) == [0, 1, 2, 3, 4, 5, 6]
    value, _ = run(clock, store.get(paths.LATEST_PRODUCER_ID_BLOCK))
    assert ProducerIdBlock.from_bytes(value) == ProducerIdBlock(1, 6, 8)


def test_a_restarted_broker_never_reuses_the_rest_of_its_old_block(clock, quorum):
    store = store_on(clock, quorum)
    assert take(clock, ProducerIdManager(store, 1, block_size=10), 2) == [0, 1]
    # A new manager is the broker after a restart: it knows nothing of ids 2..9.
    assert take(clock, ProducerIdManager(store, 1, block_size=10), 2) == [10, 11]


def test_two_brokers_racing_get_disjoint_ids(clock, quorum):
    a = ProducerIdManager(store_on(clock, quorum), 1, block_size=4)
    b = ProducerIdManager(store_on(clock, quorum), 2, block_size=4)
    # Both start claims at once, many times over: each claim reads the same version and one
    # of the conditional writes loses and retries.
    work = [defer.ensureDeferred(m.next_id()) for _ in range(20) for m in (a, b)]
    ids = run(clock, defer.gatherResults(work))
    assert len(ids) == 40 and len(set(ids)) == 40


def test_concurrent_callers_on_one_broker_share_one_claim(clock, quorum):
    store = store_on(clock, quorum)
    manager = ProducerIdManager(store, 1, block_size=100)
    ids = run(clock, defer.gatherResults(
        [defer.ensureDeferred(manager.next_id()) for _ in range(10)]))
    assert sorted(ids) == list(range(10))
    value, stat = run(clock, store.get(paths.LATEST_PRODUCER_ID_BLOCK))
    assert ProducerIdBlock.from_bytes(value).end == 99  # one block claimed, not ten


def test_a_corrupt_store_value_answers_coordinator_not_available(clock, quorum):
    store = store_on(clock, quorum)
    run(clock, store.create(paths.LATEST_PRODUCER_ID_BLOCK, b'{"broker":1}'))
    api = InitProducerIdApi(ProducerIdManager(store, 1))
    answer = run(clock, api.init_producer_id(None, request(), open_access()))
    assert answer["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    value, _ = run(clock, store.get(paths.LATEST_PRODUCER_ID_BLOCK))
    assert value == b'{"broker":1}'  # nothing changed


# -- InitProducerId ----------------------------------------------------------------------------


def request(transactional_id=None, producer_id=-1, producer_epoch=-1):
    return SimpleNamespace(transactional_id=transactional_id, transaction_timeout_ms=60000,
                           producer_id=producer_id, producer_epoch=producer_epoch)


@pytest.fixture
def api(clock, quorum):
    return InitProducerIdApi(ProducerIdManager(store_on(clock, quorum), 1))


def test_a_new_producer_gets_a_new_id_at_epoch_zero(clock, api):
    first = run(clock, api.init_producer_id(None, request(), open_access()))
    second = run(clock, api.init_producer_id(None, request(), open_access()))
    assert (first["error_code"], first["producer_epoch"]) == (0, 0)
    assert second["producer_id"] == first["producer_id"] + 1


def test_a_producer_naming_itself_gets_its_epoch_bumped(clock, api):
    answer = run(clock, api.init_producer_id(None, request(producer_id=7, producer_epoch=3),
                                             open_access()))
    assert answer == {"error_code": 0, "producer_id": 7, "producer_epoch": 4}


def test_an_epoch_at_its_largest_gets_a_new_id(clock, api):
    answer = run(clock, api.init_producer_id(
        None, request(producer_id=7, producer_epoch=MAX_EPOCH), open_access()))
    assert (answer["error_code"], answer["producer_epoch"]) == (0, 0)
    assert answer["producer_id"] != 7


@pytest.mark.parametrize("body", [request(transactional_id="tx"),
                                  request(transactional_id=""),
                                  request(producer_id=7), request(producer_epoch=2)])
def test_transactions_and_half_named_producers_are_refused(clock, api, body):
    answer = run(clock, api.init_producer_id(None, body, open_access()))
    assert answer == {"error_code": ErrorCode.INVALID_REQUEST, "producer_id": -1,
                      "producer_epoch": -1}


def _authorizer(*bindings):
    authorizer = Authorizer()
    for rtype, ptype, name, op, perm in bindings:
        authorizer.replace_resource(ResourcePattern(rtype, ptype, name), [
            AccessEntry("User:alice", "*", op, perm)])
    return authorizer


T, C, LIT, PRE = ResourceType.TOPIC, ResourceType.CLUSTER, PatternType.LITERAL, \
    PatternType.PREFIXED
W, IW, ALLOW, DENY = AclOperation.WRITE, AclOperation.IDEMPOTENT_WRITE, AclPermission.ALLOW, \
    AclPermission.DENY


@pytest.mark.parametrize("bindings, allowed", [
    ([], False),
    ([(C, LIT, "kafka-cluster", IW, ALLOW)], True),
    ([(T, LIT, "orders", W, ALLOW)], True),
    ([(T, PRE, "ord", AclOperation.ALL, ALLOW)], True),
    ([(T, LIT, "orders", AclOperation.READ, ALLOW)], False),
    ([(T, LIT, "orders", W, ALLOW), (T, PRE, "or", W, DENY)], False),
    ([(T, LIT, "orders", W, ALLOW), (T, LIT, "*", W, DENY)], False),
    ([(T, PRE, "orders", W, ALLOW), (T, LIT, "orders", W, DENY)], True),
])
def test_the_acl_is_idempotent_write_on_the_cluster_or_write_on_any_topic(
        clock, api, bindings, allowed):
    access = Access(_authorizer(*bindings), plaintext())
    access.security = SimpleNamespace(principal="User:alice", peer_host="10.0.0.1",
                                      is_broker=False)
    answer = run(clock, api.init_producer_id(None, request(), access))
    expected = 0 if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert answer["error_code"] == expected
