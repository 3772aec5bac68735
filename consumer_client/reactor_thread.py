"""The Twisted reactor for blocking callers: started once, in a daemon thread, on first use.

The blocking client APIs (:class:`~consumer_client.blocking_producer.BlockingProducer`, and any
other blocking wrapper in ``consumer_client``) run their Twisted core on this reactor and call
into it with :meth:`ReactorThread.call` (wait for a result) or :meth:`ReactorThread.call_soon`
(fire and forget).

Invariants:

- at most one reactor thread per process, named ``sluice-reactor``, daemon: a program that
  forgets ``close()`` still exits;
- if the reactor is already running (a Twisted program, or the tests' reactor), it is used as
  is and never stopped by this module;
- the reactor's own thread pool (name resolution) runs daemon threads too, and the reactor is
  stopped at interpreter exit before non-daemon threads are joined, so exit never hangs on it;
- :meth:`call` from the reactor thread raises instead of deadlocking.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from twisted.internet import threads
from twisted.python import threadable


def _daemon_thread(*args: Any, **kwargs: Any) -> threading.Thread:
    return threading.Thread(*args, daemon=True, **kwargs)


class ReactorThread:
    """See the module docstring. Get the process's instance with :meth:`get`."""

    _instance: ReactorThread | None = None
    _instance_lock = threading.Lock()

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.thread: threading.Thread | None = None

    @classmethod
    def get(cls) -> ReactorThread:
        """The process's reactor, running (started in a daemon thread if it was not)."""
        with cls._instance_lock:
            if cls._instance is None:
                from twisted.internet import reactor

                rt = cls(reactor)
                if not reactor.running:
                    rt._start()
                cls._instance = rt
            return cls._instance

    def _start(self) -> None:
        reactor = self.reactor
        # Name resolution runs in the reactor's pool; daemon threads there keep an exit from
        # waiting on a pool the (daemon) reactor thread will never get to stop.
        reactor.getThreadPool().threadFactory = _daemon_thread
        started = threading.Event()
        reactor.callWhenRunning(started.set)
        self.thread = threading.Thread(target=reactor.run,
                                       kwargs={"installSignalHandlers": False},
                                       name="sluice-reactor", daemon=True)
        self.thread.start()
        if not started.wait(30):
            raise RuntimeError("the Twisted reactor did not start within 30 s")
        # Stop the reactor (its shutdown triggers close connections and the pool) when the
        # interpreter exits; this hook runs before non-daemon threads are joined.
        register = getattr(threading, "_register_atexit", None)
        if register is not None:
            register(self._stop_at_exit)

    def _stop_at_exit(self) -> None:
        if self.reactor.running:
            self.reactor.callFromThread(self.reactor.stop)
            if self.thread is not None:
                self.thread.join(5)

    def in_reactor_thread(self) -> bool:
        return threadable.isInIOThread()

    def call(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``f(*args, **kwargs)`` on the reactor thread and wait for its result (a Deferred
        or coroutine result is waited for too); its exception is raised here."""
        if self.in_reactor_thread():
            raise RuntimeError("a blocking client call was made on the reactor thread; it would "
                               "deadlock (use the Twisted API there)")
        return threads.blockingCallFromThread(self.reactor, f, *args, **kwargs)

    def call_soon(self, f: Callable[..., Any], *args: Any) -> None:
        """Schedule ``f(*args)`` on the reactor thread without waiting."""
        self.reactor.callFromThread(f, *args)
