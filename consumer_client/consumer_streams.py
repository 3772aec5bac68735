"""Partition positions and the bounded per-stream queues between fetchers and the application.

:class:`PartitionState` is one assigned partition for one generation: where the fetcher is
(``fetch_offset``, the next offset to ask the leader for) and where the application is
(``consumed``, the offset after the last message *delivered* to it, i.e. the offset the consumer
reports in Ping / StopFetcher / commit: at-least-once). A new assignment makes new objects and
marks the old ones inactive, so a late delivery of an old chunk (from the application's thread
in the blocking API) can never move a position the coordinator sees.

:class:`MessageStream` is one of the design's streams ("consumer threads"): a FIFO of
:class:`Chunk` s (one partition's data from one fetch response, not yet decoded), bounded by
``max_chunks``. While it is full the fetchers leave its partitions out of their requests
(backpressure); taking a chunk wakes them.

Everything here runs on the reactor thread, except :meth:`Chunk.messages` and the position
updates a blocking iterator makes from its own thread (single attribute writes, atomic under
the GIL).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer

from consumer_client.consumer_records import Message, decode_chunk


class PartitionState:
    """One assigned partition. Invariants: ``consumed`` only moves when a message of this
    object's chunks is delivered, or when an out-of-range reset moves the fetch position while
    nothing of the partition is queued; ``active`` turns False once, when the assignment ends.
    ``consumed`` is -1 while the start offset is unknown (StartFetcher said -1 and the
    auto.offset.reset lookup has not answered yet); such a partition is not reported."""

    __slots__ = ("topic", "partition", "stream", "fetch_offset", "consumed", "active",
                 "leader", "failures", "delayed_until", "queued", "max_bytes", "last_error")

    def __init__(self, topic: str, partition: int, stream: MessageStream, offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.stream = stream
        self.fetch_offset = offset
        self.consumed = offset
        self.active = True
        self.leader = -1
        self.failures = 0
        self.delayed_until = 0.0
        self.queued = 0  # chunks of this partition waiting in its stream
        self.max_bytes = 0  # raised above max.partition.fetch.bytes for an oversized batch
        self.last_error = ""

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __repr__(self) -> str:
        return (f"PartitionState({self.topic}-{self.partition}, fetch={self.fetch_offset}, "
                f"consumed={self.consumed}, active={self.active})")


@dataclass(slots=True)
class Chunk:
    """Fetched, undecoded data of one partition: ``data`` holds whole batches starting at or
    before ``fetch_offset``; ``next_offset`` is the offset after its last batch."""

    part: PartitionState
    data: Any
    fetch_offset: int
    next_offset: int
    check_crcs: bool = True

    def messages(self) -> list[Message]:
        p = self.part
        return decode_chunk(p.topic, p.partition, self.data, self.fetch_offset,
                            check_crcs=self.check_crcs)


class StreamClosed(Exception):
    """The consumer closed; no more messages."""


class MessageSource:
    """The Twisted message API over a source of chunks (one stream, or all of a consumer's).

    Subclasses provide ``take_nowait()`` (a chunk or None), ``_waiters`` (Deferreds for the
    next chunk, fired by the subclass when one arrives) and ``_closed``; :meth:`get_chunk`
    fails with :class:`StreamClosed` (or the fatal error) at the end, and with the consumer's
    current problem (see :meth:`report`) while one is set and no chunk is ready. Messages count as delivered,
    and the partition's position moves past them, when :meth:`get` / :meth:`get_many` return
    them or, with :meth:`consume`, when the callback (or the Deferred it returned) is done.
    Reactor thread only.
    """

    # The decoded messages of the chunk being read: _buffer[_buffer_i:] are not delivered yet.
    _buffer: list[Message]
    _buffer_i: int
    _buffer_part: PartitionState | None
    _waiters: deque[defer.Deferred]
    _closed: BaseException | None
    _problem: BaseException | None = None

    def take_nowait(self) -> Chunk | None:
        raise NotImplementedError

    def set_problem(self, problem: BaseException | None) -> None:
        """Set the problem without failing the waiting readers yet (see :meth:`report`)."""
        self._problem = problem

    def report(self, problem: BaseException | None) -> None:
        """Set (``None``: clear) a problem readers must hear about although the stream goes on
        (the consumer could not register, or a subscribed topic does not exist, for
        ``default.api.timeout.ms``): waiting readers fail with it now, and while it is set a
        read that finds no chunk ready fails with it at once instead of waiting."""
        self.set_problem(problem)
        if problem is None or self._closed is not None:
            return
        waiters, self._waiters = self._waiters, deque()
        for d in waiters:
            if not d.called:
                d.errback(problem)

    def get_chunk(self) -> defer.Deferred:
        """The next chunk: at once if one is ready, else when the subclass offers one."""
        c = self.take_nowait()
        if c is not None:
            return defer.succeed(c)
        if self._closed is not None:
            return defer.fail(self._closed)
        if self._problem is not None:
            return defer.fail(self._problem)
        d: defer.Deferred = defer.Deferred(lambda d: self._waiters.remove(d)
                                           if d in self._waiters else None)
        self._waiters.append(d)
        return d

    def _fill(self, c: Chunk) -> None:
        if c.part.active:
            self._buffer = c.messages()
            self._buffer_i = 0
            self._buffer_part = c.part

    def _drop_buffer(self) -> None:
        self._buffer = []
        self._buffer_i = 0
        self._buffer_part = None

    def poll_messages(self, max_messages: int | None = None) -> list[Message]:
        """Messages available now without waiting (possibly none), at most ``max_messages``."""
        out: list[Message] = []
        limit = max_messages or 1 << 62
        while len(out) < limit:
            buf, i = self._buffer, self._buffer_i
            if i >= len(buf):
                c = self.take_nowait()
                if c is None:
                    break
                self._fill(c)
                continue
            part = self._buffer_part
            if part is None or not part.active:
                self._drop_buffer()
                continue
            # Whole runs of one chunk at a time: the position only needs the last one.
            j = min(len(buf), i + limit - len(out))
            out += buf[i:j] if i or j < len(buf) else buf
            self._buffer_i = j
            part.consumed = buf[j - 1].offset + 1
        return out

    async def get_many(self, max_messages: int | None = None) -> list[Message]:
        """At least one message (waiting for it), at most ``max_messages``. Fails with
        :class:`StreamClosed` once the consumer is closed (or with its fatal error)."""
        while True:
            got = self.poll_messages(max_messages)
            if got:
                return got
            self._fill(await self.get_chunk())

    async def get(self) -> Message:
        """The next message (waiting for it)."""
        return (await self.get_many(1))[0]

    def __aiter__(self) -> MessageSource:
        return self

    def __anext__(self) -> defer.Deferred:
        d = defer.Deferred.fromCoroutine(self.get())

        def ended(f: Any) -> Any:
            f.trap(StreamClosed)
            raise StopAsyncIteration

        return d.addErrback(ended)

    async def consume(self, callback: Callable[[Message], Any]) -> None:
        """Call ``callback(message)`` for every message, one at a time, until the consumer
        closes. When it returns a Deferred (or coroutine) the next message waits for it
        (backpressure: fetching stops once the queues are full) and the message counts as
        consumed only when it fires. A callback that raises ends this with its error, the
        message not consumed."""
        while True:
            if self._buffer_i < len(self._buffer):
                part = self._buffer_part
                msgs = self._buffer[self._buffer_i:]
                self._drop_buffer()
            else:
                try:
                    c = await self.get_chunk()
                except StreamClosed:
                    return
                part = c.part
                msgs = c.messages() if part.active else []
            for m in msgs:
                if part is None or not part.active:
                    break
                r = callback(m)
                if isinstance(r, defer.Deferred) or inspect.isawaitable(r):
                    await r
                if part.active:
                    part.consumed = m.offset + 1


class MessageStream(MessageSource):
    """One stream of the consumer; see the module docstring. ``key`` is ``(topic,
    thread_id)`` for a static subscription, ``(None, thread_id)`` for a wildcard one."""

    def __init__(self, key: tuple[str | None, str], max_chunks: int,
                 on_space: Callable[[], None]) -> None:
        self.key = key
        self.max_chunks = max_chunks
        self._on_space = on_space
        self._chunks: deque[Chunk] = deque()
        self._waiters: deque[defer.Deferred] = deque()
        self._closed: BaseException | None = None
        self._drop_buffer()
        #: Set by the consumer: offered each chunk nobody waits for on this stream, returns
        #: True when a reader of all streams took it.
        self.offer: Callable[[Chunk], bool] | None = None

    @property
    def topic(self) -> str | None:
        return self.key[0]

    @property
    def thread_id(self) -> str:
        return self.key[1]

    @property
    def full(self) -> bool:
        return len(self._chunks) >= self.max_chunks

    def __len__(self) -> int:
        return len(self._chunks)

    def __repr__(self) -> str:
        return f"MessageStream({self.key}, queued={len(self._chunks)})"

    # -- producer side (fetchers) ---------------------------------------------------------------

    def put(self, chunk: Chunk) -> None:
        if self._closed is not None or not chunk.part.active:
            return
        while self._waiters:
            d = self._waiters.popleft()
            if not d.called:
                d.callback(chunk)
                return
        if self.offer is not None and self.offer(chunk):
            return
        chunk.part.queued += 1
        self._chunks.append(chunk)

    def clear(self) -> None:
        """Drop every queued chunk and the decoded buffer (StopFetcher: "clean their
        queues"); positions stay where the application got to."""
        for c in self._chunks:
            c.part.queued -= 1
        self._chunks.clear()
        self._drop_buffer()

    def close(self, error: BaseException | None = None) -> None:
        """End the stream: waiters fail with ``error`` or :class:`StreamClosed`."""
        if self._closed is not None:
            return
        self._closed = error or StreamClosed("the consumer is closed")
        self.clear()
        waiters, self._waiters = self._waiters, deque()
        for d in waiters:
            if not d.called:
                d.errback(self._closed)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def error(self) -> BaseException | None:
        return self._closed

    # -- consumer side -------------------------------------------------------------------------

    def take_nowait(self) -> Chunk | None:
        while self._chunks:
            c = self._chunks.popleft()
            c.part.queued -= 1
            if len(self._chunks) == self.max_chunks - 1:
                self._on_space()
            if c.part.active:
                return c
        return None



class AllStreams(MessageSource):
    """Every stream of a consumer as one source (``for message in consumer``), taking chunks
    round robin so one busy partition cannot starve the others."""

    def __init__(self, streams: list[MessageStream]) -> None:
        self.streams = streams
        self._next = 0
        self._waiters: deque[defer.Deferred] = deque()
        self._closed: BaseException | None = None
        self._drop_buffer()
        for s in streams:
            s.offer = self._offer

    def add(self, stream: MessageStream) -> None:
        stream.offer = self._offer
        self.streams.append(stream)

    def _offer(self, chunk: Chunk) -> bool:
        while self._waiters:
            d = self._waiters.popleft()
            if not d.called:
                d.callback(chunk)
                return True
        return False

    def take_nowait(self) -> Chunk | None:
        n = len(self.streams)
        for i in range(n):
            s = self.streams[(self._next + i) % n]
            c = s.take_nowait()
            if c is not None:
                self._next = (self._next + i + 1) % n
                return c
        return None


    def clear(self) -> None:
        self._drop_buffer()

    def close(self, error: BaseException | None = None) -> None:
        if self._closed is not None:
            return
        self._closed = error or StreamClosed("the consumer is closed")
        self.clear()
        waiters, self._waiters = self._waiters, deque()
        for d in waiters:
            if not d.called:
                d.errback(self._closed)


def iter_chunk(chunk: Chunk) -> Iterator[Message]:
    """Deliver ``chunk``'s messages one by one, moving the position past each as it is handed
    out; stops early if the assignment ended meanwhile (StopFetcher)."""
    part = chunk.part
    for m in chunk.messages():
        if not part.active:
            return
        part.consumed = m.offset + 1
        yield m
