"""``sluice consume``: a console consumer group (kafka-console-consumer, with group members).

Runs ``members`` Sluice consumers of one group on one reactor, prints each message value (or
nothing with ``quiet``), and stops after ``max_messages`` in total or on SIGINT/SIGTERM. Stopping
closes every member properly: with auto-commit, each hands its final positions to the
coordinator as it leaves, so the group's committed offsets say how far it got.

Problems go to ``err`` as they are seen (no broker reachable, the topic does not exist: once per
reason, then as a reminder); one that lasts the consumer's ``default.api.timeout.ms`` (60 s
unless set with ``properties``) stops the group with exit code 1.

Exit status: 0 after ``max_messages``; 128 + the signal number when a signal stopped it (130
for Ctrl-C, 143 for SIGTERM, as shells report a program a signal ended), after the members
left cleanly; 1 when a member failed or a problem outlasted ``default.api.timeout.ms``.
"""

from __future__ import annotations

import signal
import sys
from typing import Any, TextIO

from twisted.internet import defer


class _Enough(Exception):
    """Raised by the message callback once ``max_messages`` were printed: it ends that
    member's consumption with the message not consumed, so that neither the output nor the
    committed positions go past the limit (other messages may already be fetched)."""


async def _consume(reactor: Any, done: defer.Deferred, *, bootstrap: str, topic: str,
                   group: str, members: int, from_beginning: bool, max_messages: int | None,
                   quiet: bool, session_timeout_ms: int, out: TextIO, err: TextIO,
                   properties: dict[str, str] | None = None) -> int:
    from consumer_client.consumer import Consumer, ConsumerConfig

    def config(i: int) -> ConsumerConfig:
        values: dict[str, object] = {
            "bootstrap.servers": bootstrap, "group.id": group, "topics": {topic: 1},
            "consumer.id": f"{group}-console-{i}-{_suffix()}",
            "session.timeout.ms": session_timeout_ms,
            "auto.offset.reset": "smallest" if from_beginning else "largest"}
        values.update(properties or {})
        return ConsumerConfig.from_mapping(values)

    consumers = [Consumer(config(i), reactor=reactor) for i in range(members)]
    counts = [0] * members
    problems: list[BaseException] = []

    def stop(*_: Any) -> None:
        # On the next reactor turn: called from the message callback, the message it printed
        # counts as consumed only once the callback has returned, and the close (which takes
        # the positions at once for the leave) must see it.
        reactor.callLater(0, lambda: None if done.called else done.callback(None))

    def on_message(i: int, m: Any) -> None:
        if max_messages is not None and sum(counts) >= max_messages:
            raise _Enough()
        counts[i] += 1
        if not quiet:
            out.write((m.value or b"").decode("utf-8", "replace") + "\n")
        if max_messages is not None and sum(counts) >= max_messages:
            stop()

    def ended(f: Any) -> None:
        if not f.check(_Enough):
            problems.append(f.value)
            err.write(f"sluice: {f.value}\n")
        stop()

    def warn(c: Any, health: Any) -> None:
        # Before it becomes an error (which ends the consumption, reported by ended()).
        if health.reason is not None and health.error is None:
            err.write(f"sluice: {c.config.consumer_id}: {health.reason}\n")

    for i, c in enumerate(consumers):
        c.on_problem(lambda h, c=c: warn(c, h))
        c.start()
        c.consume(lambda m, i=i: on_message(i, m)).addErrback(ended)
    await done
    await defer.DeferredList([c.close() for c in consumers], consumeErrors=True)
    per = ", ".join(f"{c.config.consumer_id}: {n}" for c, n in zip(consumers, counts,
                                                                   strict=True))
    err.write(f"consumed {sum(counts)} messages ({per})\n")
    failed = [c for c in consumers if c.error is not None]
    for c in failed:
        err.write(f"sluice: {c.config.consumer_id}: {c.error}\n")
    return 1 if failed or problems else 0


def _suffix() -> str:
    import os
    import socket

    return f"{socket.gethostname()}-{os.getpid()}"


def run(*, bootstrap: str, topic: str, group: str, members: int = 1,
        from_beginning: bool = False, max_messages: int | None = None, quiet: bool = False,
        session_timeout_ms: int = 10000, out: TextIO = sys.stdout,
        err: TextIO = sys.stderr, properties: dict[str, str] | None = None) -> int:
    """Run the console group until done; returns the exit code.

    The reactor runs without its own signal handlers: SIGINT/SIGTERM must not stop it at once
    but end the consumption, so that the members can leave properly first."""
    from twisted.internet import reactor

    result: list[int] = []
    signals: list[int] = []
    done: defer.Deferred = defer.Deferred()

    def request_stop(signum: int, _frame: Any) -> None:
        signals.append(signum)
        reactor.callFromThread(lambda: None if done.called else done.callback(None))

    def start() -> None:
        d = defer.Deferred.fromCoroutine(_consume(
            reactor, done, bootstrap=bootstrap, topic=topic, group=group, members=members,
            from_beginning=from_beginning, max_messages=max_messages, quiet=quiet,
            session_timeout_ms=session_timeout_ms, out=out, err=err, properties=properties))
        d.addCallback(result.append)
        d.addErrback(lambda f: err.write(f"sluice: {f.getErrorMessage()}\n"))
        d.addBoth(lambda _: reactor.stop())

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, request_stop)
    reactor.callWhenRunning(start)
    reactor.run(installSignalHandlers=False)
    code = result[0] if result else 1
    if code == 0 and signals:
        return 128 + signals[0]
    return code
