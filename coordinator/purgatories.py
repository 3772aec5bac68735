"""Expiry watchers for the coordinator's requests (the Ping, StopFetcher and
StartFetcher purgatories), on the broker's shared :mod:`broker_core.purgatory`.

A request sent on a coordinator channel gets an :class:`AwaitedResponse` watched under the
consumer's key. The channel's answer (or its failure: the connection closed) completes it; the
purgatory's timing wheel expires it after the timeout (2/3 of the consumer's session timeout).
Either way the caller's Deferred fires exactly once with an :class:`Outcome`; nothing here
raises into the caller.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from broker_core.purgatory import DelayedOperation, Purgatory

OK = "ok"
EXPIRED = "expired"
LOST = "lost"  # the channel closed (or the send failed)
ERROR = "error"  # the consumer answered with an error code


@dataclass(frozen=True)
class Outcome:
    """How a coordinator request ended: ``kind`` is OK, EXPIRED, LOST or ERROR; ``body`` is the
    decoded response for OK and ERROR; ``detail`` says what went wrong."""

    kind: str
    body: Any = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == OK


class AwaitedResponse(DelayedOperation):
    """One outstanding coordinator request. Invariant: ``done`` fires exactly once, with the
    answer if one arrived before the timeout, else with an EXPIRED outcome."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(timeout_s)
        self.outcome: Outcome | None = None
        self.done: defer.Deferred = defer.Deferred()

    def try_complete(self) -> bool:
        return self.outcome is not None and self.force_complete()

    def on_complete(self) -> None:
        self.done.callback(self.outcome or Outcome(EXPIRED, detail=f"no answer within "
                                                                     f"{self.timeout_s:g}s"))


def watch(purgatory: Purgatory, key: Hashable, timeout_s: float,
          request: defer.Deferred) -> defer.Deferred:
    """Watch ``request`` (a channel request's Deferred) under ``key``; returns a Deferred that
    fires with an :class:`Outcome`. Callbacks the caller added to ``request`` *before* this
    call see the answer (a late one too); ``request`` ends here, its failure consumed."""
    op = AwaitedResponse(timeout_s)

    def answered(body: Any) -> Any:
        code = getattr(body, "error_code", 0)
        op.outcome = Outcome(OK, body) if code == 0 else Outcome(
            ERROR, body, f"consumer answered error code {code}")
        purgatory.check_and_complete(key)
        return body

    def failed(f: Failure) -> None:
        op.outcome = Outcome(LOST, detail=f.getErrorMessage())
        purgatory.check_and_complete(key)

    request.addCallbacks(answered, failed)
    if op.outcome is not None:  # the channel was already closed: answered synchronously
        op.force_complete()
    else:
        purgatory.try_complete_else_watch(op, [key])
    return op.done
