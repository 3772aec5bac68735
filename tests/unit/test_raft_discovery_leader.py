"""The DiscoverBrokers view learns an epoch's leader after learning the epoch: a node's view
taken during an election (epoch known, no leader yet) is replaced by the same epoch's view
that names the leader, and never the other way round. Without this, every node that went
through an election answered DiscoverBrokers with no leader for the rest of the epoch, and
``sluice quorum`` could not find the leader after a failover."""

from __future__ import annotations

from broker_core.raft.discovery import Directory, Gossip, NodeEndpoint, QuorumView

ME = NodeEndpoint(1, "h", 11, 100)


def test_the_epochs_leader_replaces_no_leader_in_the_same_epoch_and_is_never_undone():
    d = Directory(ME, QuorumView("c", 1, 3, 10, (1, 2, 3)))
    assert d.learn_view(QuorumView("c", -1, 4, 10, (1, 2, 3)))  # an election: epoch 4
    assert d.learn_view(QuorumView("c", 2, 4, 10, (1, 2, 3)))  # its leader
    assert d.view.leader_id == 2
    assert not d.learn_view(QuorumView("c", -1, 4, 10, (1, 2, 3)))  # old news of epoch 4
    assert d.view.leader_id == 2
    # A later assignment or epoch still wins, leader known or not.
    assert d.learn_view(QuorumView("c", -1, 5, 10, (1, 2, 3)))
    assert d.view == QuorumView("c", -1, 5, 10, (1, 2, 3))


def test_a_gossip_answer_naming_the_leader_is_merged_by_a_node_that_knew_none():
    d = Directory(ME, QuorumView("c", -1, 4, 10, (1, 2, 3)))
    d.merge(Gossip(NodeEndpoint(2, "h", 12, 100), (), QuorumView("c", 2, 4, 10, (1, 2, 3))))
    assert d.view.leader_id == 2 and d.endpoint(2) == NodeEndpoint(2, "h", 12, 100)
