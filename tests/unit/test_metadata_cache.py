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


def test_derived_values_are_kept_until_their_topic_or_the_live_brokers_change():
    cache = MetadataCache()
    b1, b2 = BrokerEndpoint(1, "h", 9092), BrokerEndpoint(2, "h", 9093)
    cache.apply(1, 1, [b1, b2], [("a", 0, state(1)), ("b", 0, state(2))])
    built: list[str] = []

    def get(topic: str, key="k"):
        return cache.derived(topic, key, lambda: built.append(topic) or f"{topic}{len(built)}")

    assert get("a") == "a1" and get("a") == "a1" and get("b") == "b2"
    assert get("a", key="other") == "a3"  # keys are separate
    # A change of topic a drops a's values only.
    cache.apply(1, 1, [b1, b2], [("a", 0, state(2, epoch=1))])
    assert get("a") == "a4" and get("b") == "b2"
    # The same brokers again (every UpdateMetadata names them all) keep everything.
    cache.apply(1, 1, [b2, BrokerEndpoint(1, "h2", 9099)], [])
    assert get("a") == "a4" and get("b") == "b2"
    # A broker leaving changes who is shown as leader and offline: everything is rebuilt.
    cache.apply(1, 1, [b2], [])
    assert get("a") == "a5" and get("b") == "b6"
    # Deleting a topic drops its values too.
    cache.apply(1, 1, [b2], [("a", 0, state(-2))])
    assert get("a") == "a7"
