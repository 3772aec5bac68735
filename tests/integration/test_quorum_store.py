"""``QuorumMetadataStore`` on a real one-voter metadata quorum (``tests/support/local_quorum.py``)
on the reactor: the same store-neutral contract the ZooKeeper store passes
(``tests/support/metadata_store_contract.py``), which is what lets the controller and the
coordinator run unchanged on either store."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from broker_core.raft.metadata_store import QuorumMetadataStore
from tests.support.local_quorum import LocalQuorum
from tests.support.metadata_store_contract import MetadataStoreContract


@pytest.fixture
def quorum():
    q = LocalQuorum(reactor)
    pytest_twisted.blockon(Deferred.fromCoroutine(q.wait_for_leader()))
    yield q
    q.stop()


class TestQuorumStoreContract(MetadataStoreContract):
    @pytest.fixture
    def store(self, quorum):
        """A started ``QuorumMetadataStore`` on a fresh quorum, stopped afterwards."""
        s = QuorumMetadataStore(quorum, reactor=reactor, session_timeout=6.0)
        pytest_twisted.blockon(Deferred.fromCoroutine(s.start()))
        yield s
        pytest_twisted.blockon(Deferred.fromCoroutine(s.stop()))
