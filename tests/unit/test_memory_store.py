"""The in-memory store unit tests run on passes the same contract as the real stores."""

from __future__ import annotations

import pytest

from tests.support.memory_store import MemoryStore
from tests.support.metadata_store_contract import MetadataStoreContract


class TestMemoryStore(MetadataStoreContract):
    @pytest.fixture
    def store(self):
        return MemoryStore()
