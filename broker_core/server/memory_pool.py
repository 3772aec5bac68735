"""The memory budget for request bytes, Kafka's ``queued.max.request.bytes``, sans-IO.

A connection that has read the 4-byte size of a frame of N bytes asks the pool for N before it
buffers any byte of the body; when the pool cannot give N, the connection stops reading from its
socket until memory is released (Kafka mutes the channel the same way). The bytes are given back
once the frame has been dispatched to its handler, or when the connection closes with the frame
half read. A peer that sends a huge size and then trickles the body therefore holds memory the
pool accounts for, and every such peer together holds at most the pool.

Invariants (:class:`MemoryPool`):

- ``0 <= in_use <= capacity`` at every moment (a bounded pool); the configuration guarantees that
  every frame fits in an empty pool (``queued.max.request.bytes >= socket.request.max.bytes``),
  so every waiter is eventually served once the holders release;
- a waiter is granted at most once; on each release every waiter that now fits is granted,
  oldest first (first fit in arrival order). A small request never waits behind a large one
  that does not fit yet, so ordinary clients keep working while large frames wait; the price,
  accepted, is that a large waiter waits for as long as smaller requests keep the pool too full
  for it;
- a cancelled waiter (its connection closed) is never granted;
- grant callbacks run after the pool's state is consistent, so a callback may reserve or release
  again.

:class:`ConnectionBudget` is one connection's side of it: what it holds and whether it waits.
"""

from __future__ import annotations

from collections.abc import Callable


class MemoryPool:
    """A broker-wide count of reserved request bytes; see the module docstring.

    ``capacity`` None: unbounded (Kafka's ``-1``): every reservation is granted at once, and the
    bytes are still counted (the metric shows what requests hold).
    """

    def __init__(self, capacity: int | None) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError("a bounded pool needs a capacity of at least one byte")
        self.capacity = capacity
        self.in_use = 0
        # Insertion-ordered: the order waiters asked in. callback -> bytes wanted.
        self._waiters: dict[Callable[[], None], int] = {}

    @property
    def waiting(self) -> int:
        """Connections waiting for memory (reading paused)."""
        return len(self._waiters)

    def _fits(self, size: int) -> bool:
        return self.capacity is None or self.in_use + size <= self.capacity

    def try_reserve(self, size: int, on_granted: Callable[[], None]) -> bool:
        """Reserve ``size`` bytes: True when granted now; else ``on_granted`` is queued and
        called once the bytes are reserved for it (unless :meth:`cancel` comes first)."""
        if size < 0:
            raise ValueError("cannot reserve a negative size")
        if on_granted in self._waiters:
            raise RuntimeError("this waiter already waits for memory")
        if self.capacity is not None and size > self.capacity:
            raise ValueError(f"{size} bytes can never fit in a pool of {self.capacity}")
        if self._fits(size):
            self.in_use += size
            return True
        self._waiters[on_granted] = size
        return False

    def release(self, size: int) -> None:
        """Give back ``size`` reserved bytes, then grant every waiter that now fits."""
        if size < 0 or size > self.in_use:
            raise ValueError(f"cannot release {size} bytes with {self.in_use} in use")
        self.in_use -= size
        granted = []
        for callback, wanted in list(self._waiters.items()):
            if self._fits(wanted):
                del self._waiters[callback]
                self.in_use += wanted
                granted.append(callback)
        for callback in granted:
            callback()

    def cancel(self, on_granted: Callable[[], None]) -> None:
        """Forget a waiter (its connection closed); nothing if it is not waiting."""
        self._waiters.pop(on_granted, None)


class ConnectionBudget:
    """One connection's reservations in a :class:`MemoryPool`.

    The frame decoder asks :meth:`admit` once per frame when the frame's size has arrived;
    the connection calls :meth:`done` with a frame's size once the frame is dispatched, and
    :meth:`close` when it closes. ``on_granted`` is called when a frame that had to wait has
    its memory (the connection then resumes reading).

    Invariants: ``held`` is the sum of the admitted frames not yet done; at most one frame waits
    at a time (a connection reads its frames in order); after :meth:`close` nothing is held,
    nothing waits, and ``on_granted`` is never called.
    """

    def __init__(self, pool: MemoryPool, on_granted: Callable[[], None]) -> None:
        self.pool = pool
        self._on_granted = on_granted
        self.held = 0
        self._wanted: int | None = None
        self._closed = False

    @property
    def waiting(self) -> bool:
        """True while a frame waits for memory."""
        return self._wanted is not None

    def admit(self, size: int) -> bool:
        """Reserve ``size`` bytes for the next frame: True if granted now, else it waits."""
        if self._closed:
            return False
        if self._wanted is not None:
            raise RuntimeError("a frame already waits for memory on this connection")
        if self.pool.try_reserve(size, self._granted):
            self.held += size
            return True
        self._wanted = size
        return False

    def _granted(self) -> None:
        assert self._wanted is not None
        self.held += self._wanted
        self._wanted = None
        self._on_granted()

    def done(self, size: int) -> None:
        """A frame of ``size`` bytes was dispatched: give its memory back."""
        if self._closed:
            return
        if size > self.held:
            raise RuntimeError(f"done with {size} bytes while holding {self.held}")
        self.held -= size
        self.pool.release(size)

    def close(self) -> None:
        """Release everything held and stop waiting (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.pool.cancel(self._granted)
        self._wanted = None
        held, self.held = self.held, 0
        if held:
            self.pool.release(held)
