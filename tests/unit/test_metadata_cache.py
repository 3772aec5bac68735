"""The metadata cache applies UpdateMetadata as Kafka does (-2 leader deletes)."""

from broker_core.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState


def state(leader, epoch=0, replicas=(1,)):
    return PartitionState(leader, epoch, replicas, replicas)


def test_apply_replaces_brokers_and_merges_partitions():
    cache = MetadataCache()
    changed = cache.apply(1, 3, [BrokerEndpoint(1, "h", 9092)],
                          [("a", 0, state(1)), ("a", 1, state(1))])
    assert changed == {"a"}
    assert cache.controller_id == 1 and cache.controller_epoch == 3
    cache.apply(2, 4, [BrokerEndpoint(2, "h", 9093)], [("a", 1, state(2, epoch=1))])
    assert set(cache.brokers) == {2}
    assert cache.partition("a", 0) == state(1)
    assert cache.partition("a", 1).leader == 2
    assert cache.leader_endpoint("a", 1) == BrokerEndpoint(2, "h", 9093)
    assert cache.leader_endpoint("a", 0) is None  # broker 1 is no longer live


def test_leader_during_delete_removes_partition_and_empty_topic():
    cache = MetadataCache()
    cache.apply(1, 1, [], [("a", 0, state(1)), ("a", 1, state(1))])
    cache.apply(1, 1, [], [("a", 0, state(-2))])
    assert cache.has_topic("a") and cache.partition("a", 0) is None
    cache.apply(1, 1, [], [("a", 1, state(-2))])
    assert not cache.has_topic("a")
