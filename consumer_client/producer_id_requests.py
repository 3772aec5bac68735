"""Getting the idempotent producer its id and epoch: InitProducerId, one at a time.

:class:`ProducerIdRequester` is the producer's collaborator that asks a broker for a producer id
(or, after a sequence error, an epoch bump, KIP-360) and hands the grant to the producer's
:class:`~consumer_client.producer_idempotence.ProducerIdentity` (the sans-IO part).

Invariants: at most one InitProducerId is out; a bump is asked only once no Produce is in
flight (their batches carry the old epoch); after a bump, batches sent under the old epoch and
not acknowledged fail (resending them could write them twice); a refusal or no answer is asked
again after ``retry.backoff.ms``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet import defer

from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client.producer_errors import ProduceError

if TYPE_CHECKING:
    from consumer_client.producer import Producer


class ProducerIdRequester:
    """Asks for ``producer``'s id and epoch (see the module docstring)."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self._asked = False

    def maybe_request(self) -> None:
        """Ask for a producer id (or an epoch bump) unless a request is out; a bump waits until
        no Produce is in flight (their batches still carry the old epoch)."""
        p = self._producer
        if self._asked or p._stopped or any(p._in_flight.values()):
            return
        self._asked = True
        d = defer.Deferred.fromCoroutine(self._request())
        d.addErrback(lambda f: p.log.failure("InitProducerId failed", f))

    async def _request(self) -> None:
        p = self._producer
        assert p._identity is not None
        try:
            resp = await p._cluster.request_any(ApiKey.INIT_PRODUCER_ID,
                                                p._identity.init_request())
            code = ErrorCode(resp.error_code)
        except Exception as e:  # noqa: BLE001 - no answer: ask again after the backoff
            p.log.info("InitProducerId got no answer: {error}", error=repr(e))
            code = None
        self._asked = False
        if p._stopped:
            return
        if code is not ErrorCode.NONE:
            if code is not None:
                p.log.warn("InitProducerId refused: {code}", code=code.name)
            p._schedule(p._backoff_s)
            return
        bumped = p._identity.producer_id >= 0
        p._identity.granted(resp.producer_id, resp.producer_epoch)
        if bumped:
            # Retries sent under the old epoch may have been written: resending them under the
            # new one would write them twice, so they fail.
            with p._lock:
                stale = p._acc.take_sent()
            for b in stale:
                p._finish(b, -1, ProduceError(
                    b.topic, b.partition, b.last_broker, b.last_error,
                    "the producer epoch was bumped after a sequence error; this batch, sent "
                    "under the old epoch, may or may not have been written", b.attempts))
        p._schedule(0)
