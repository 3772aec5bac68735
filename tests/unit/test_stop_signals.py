"""The broker's SIGTERM/SIGINT handlers (broker_core/stop_signals.py): nothing but a queued call
runs inside the handler, so a signal landing while the main thread holds the log observers'
lock cannot block the stop; the queued call logs and stops the reactor once."""

from __future__ import annotations

import signal

from twisted.logger import globalLogPublisher

from broker_core import stop_signals


class FakeReactor:
    """What the handlers use of a reactor (test-only: ``queued``, ``stops``)."""

    def __init__(self) -> None:
        self.queued: list = []
        self.running = True
        self.stops = 0
        self._exitSignal = None

    def callFromThread(self, f, *args):  # noqa: N802 (Twisted API)
        self.queued.append((f, args))

    def stop(self) -> None:
        self.stops += 1
        self.running = False

    def run_queued(self) -> None:
        queued, self.queued = self.queued, []
        for f, args in queued:
            f(*args)


def test_the_handler_only_queues_the_stop_and_logs_nothing_itself():
    reactor = FakeReactor()
    events: list = []
    globalLogPublisher.addObserver(events.append)
    try:
        stop_signals.handler(reactor)(signal.SIGTERM, None)
        assert len(reactor.queued) == 1 and reactor.stops == 0
        assert not [e for e in events if e.get("log_namespace") == "sluice.signals"]
        reactor.run_queued()
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert reactor.stops == 1 and reactor._exitSignal == signal.SIGTERM
    assert [e["signal"] for e in events if e.get("log_namespace") == "sluice.signals"] == [
        "SIGTERM"]


def test_a_second_signal_does_not_stop_a_stopped_reactor_again():
    reactor = FakeReactor()
    on_signal = stop_signals.handler(reactor)
    on_signal(signal.SIGTERM, None)
    on_signal(signal.SIGINT, None)
    reactor.run_queued()
    assert reactor.stops == 1 and reactor._exitSignal == signal.SIGINT


def test_install_replaces_the_handlers_of_both_signals():
    before = {n: signal.getsignal(n) for n in stop_signals.SIGNALS}
    try:
        reactor = FakeReactor()
        stop_signals.install(reactor)
        for number in stop_signals.SIGNALS:
            signal.getsignal(number)(number, None)
        assert [args[1] for _, args in reactor.queued] == list(stop_signals.SIGNALS)
    finally:
        for number, h in before.items():
            signal.signal(number, h)
