"""InitProducerId (key 22): producer ids for idempotent producers, from blocks claimed in the
metadata store (:mod:`broker_core.producer_id_blocks`).

What a request gets, in order of checks:

1. a ``transactional_id`` (non-null): INVALID_REQUEST. Sluice serves no transactions
   (docs/producer.md); a transactional producer learns it at its first request instead of
   writing batches no coordinator will ever commit or abort;
2. a v3+ request naming its current producer (KIP-360) with only one of id and epoch set, or
   a negative id with a set epoch: INVALID_REQUEST;
3. naming its current producer id and epoch: the same id with the epoch bumped (a producer
   resetting its sequences), or a new id at epoch 0 when the epoch is at its largest;
4. otherwise a new producer id at epoch 0.

The ACL is Kafka's: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
(:meth:`broker_core.server.authorization.Access.may_write_idempotently`).

:class:`ProducerIdManager` claims blocks one at a time (callers arriving during a claim wait
for it), retrying a claim that lost a race against another broker; a store that cannot be
reached answers COORDINATOR_NOT_AVAILABLE, which clients retry.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import BadVersion, MetadataStoreError, NodeExists, NoNode
from broker_core.producer_id_blocks import (
    BLOCK_SIZE,
    IdCursor,
    ProducerIdBlock,
    ProducerIdsExhausted,
    next_block,
)
from broker_core.server.authorization import Access
from broker_core.wire.errors import ErrorCode

#: The largest producer epoch a bump may reach (Kafka's ``Short.MaxValue - 1``: the last value
#: is kept for markers a coordinator would write).
MAX_EPOCH = 32766
#: Claims tried in a row when other brokers keep winning the race; each lost race means
#: another broker got a block, so this many only under extreme contention.
MAX_CLAIM_ATTEMPTS = 20


class ProducerIdManager:
    """Hands out producer ids, each once in the cluster's life (see the module docstring)."""

    log = Logger(namespace="sluice.producer_ids")

    def __init__(self, store: Any, broker_id: int, block_size: int = BLOCK_SIZE) -> None:
        self.store = store
        self.broker_id = broker_id
        self.block_size = block_size
        self._cursor = IdCursor()
        self._lock = defer.DeferredLock()

    async def next_id(self) -> int:
        """A producer id no one has had; claims a block first when the held one is used up."""
        # One claim at a time: callers arriving during a claim take ids from its block.
        await self._lock.acquire()
        try:
            pid = self._cursor.take()
            if pid is None:
                await self._claim_block()
                pid = self._cursor.take()
            assert pid is not None  # a claimed block holds at least one id
            return pid
        finally:
            self._lock.release()

    async def _claim_block(self) -> None:
        for _ in range(MAX_CLAIM_ATTEMPTS):
            try:
                data, stat = await self.store.get(paths.LATEST_PRODUCER_ID_BLOCK)
            except NoNode:
                block = next_block(None, self.broker_id, self.block_size)
                try:
                    await self.store.create(paths.LATEST_PRODUCER_ID_BLOCK, block.to_bytes())
                except NodeExists:
                    continue
            else:
                block = next_block(ProducerIdBlock.from_bytes(data), self.broker_id,
                                   self.block_size)
                try:
                    await self.store.set(paths.LATEST_PRODUCER_ID_BLOCK, block.to_bytes(),
                                         version=stat.version)
                except BadVersion:
                    continue
            self.log.info("claimed producer ids {s}..{e}", s=block.start, e=block.end)
            self._cursor.use(block)
            return
        raise MetadataStoreError(f"lost {MAX_CLAIM_ATTEMPTS} races for a producer id block")


class InitProducerIdApi:
    """The request handler's InitProducerId (see the module docstring)."""

    log = Logger(namespace="sluice.producer_ids")

    def __init__(self, ids: ProducerIdManager) -> None:
        self.ids = ids

    async def init_producer_id(self, header: Any, body: Any, access: Access) -> dict:
        if not access.may_write_idempotently():
            return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if body.transactional_id is not None:
            return _error(ErrorCode.INVALID_REQUEST)
        pid, epoch = body.producer_id, body.producer_epoch
        if (pid < 0) != (epoch < 0):
            return _error(ErrorCode.INVALID_REQUEST)
        if pid >= 0 and epoch < MAX_EPOCH:
            return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
        try:
            new = await self.ids.next_id()
        except ProducerIdsExhausted:
            self.log.error("every producer id has been handed out")
            return _error(ErrorCode.UNKNOWN_SERVER_ERROR)
        except (MetadataStoreError, ValueError) as e:
            self.log.warn("cannot claim producer ids: {e}", e=e)
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return {"error_code": 0, "producer_id": new, "producer_epoch": 0}


def _error(code: ErrorCode) -> dict:
    return {"error_code": int(code), "producer_id": -1, "producer_epoch": -1}
