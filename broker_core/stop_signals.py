"""SIGTERM and SIGINT handlers that do no work inside the signal handler.

Twisted's own handlers write a log line inside the handler. Python runs a signal handler in the
main thread between two bytecodes, and Twisted's log observers serialise writes with a lock
written in Python (``twisted.python.threadable.XLock``, a pure-Python ``RLock``): a signal that
lands while the main thread is inside that lock's ``acquire`` (it is logging) makes the
handler's own acquire wait for ever, and the process never stops; its peers then wait for it
too (seen with three brokers stopped at once). These handlers only queue the stop on the
reactor (``callFromThread`` appends to a list and writes a byte to the reactor's waker pipe,
taking no lock); the log line is written from the reactor, as an ordinary call.

Installed by the processes Sluice runs on their own reactor (``twistd broker`` and the
standalone quorum node) once the reactor runs, so that they replace Twisted's.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

from twisted.logger import Logger

log = Logger(namespace="sluice.signals")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def handler(reactor: Any) -> Any:
    """The signal handler: queue :func:`stop_for_signal` on ``reactor``, nothing else."""
    def on_signal(number: int, frame: FrameType | None) -> None:
        reactor.callFromThread(stop_for_signal, reactor, number)
    return on_signal


def stop_for_signal(reactor: Any, number: int) -> None:
    """On the reactor: say which signal came and stop (once; a second signal only logs).
    ``_exitSignal`` is what twistd reads to end the process by that signal, as after Twisted's
    own handler."""
    log.info("received {signal}, shutting down", signal=signal.Signals(number).name)
    reactor._exitSignal = number
    if reactor.running:
        reactor.stop()


def install(reactor: Any) -> None:
    """Replace the reactor's SIGTERM and SIGINT handlers (call once the reactor runs: it
    installs its own at start-up)."""
    on_signal = handler(reactor)
    for number in SIGNALS:
        signal.signal(number, on_signal)
