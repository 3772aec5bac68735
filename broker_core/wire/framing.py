"""Kafka framing, sans-IO: every message is a 4-byte big-endian signed size, then the message.

:class:`FrameDecoder` turns a byte stream (in whatever pieces the transport delivers) into whole
frames; :func:`frame` prefixes an encoded message with its size for the transport.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from broker_core.wire.errors import BufferLimitExceeded, FrameTooLarge, MalformedFrame

MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka socket.request.max.bytes default

SIZE_PREFIX_BYTES = 4
_SIZE = struct.Struct(">i")

#: While a frame waits for admission the peer's reading is paused, so at most what one read
#: delivered past its size prefix is buffered (64 KiB for Twisted's TCP transport; a TLS
#: transport hands over what it decrypted from one read). More means the peer's bytes keep
#: coming in spite of the pause: the decoder fails rather than buffer them.
MAX_UNADMITTED_BYTES = 1024 * 1024


class FrameDecoder:
    """Splits a byte stream into frames (returned without their size prefix).

    Invariants:

    - after ``feed`` returns, the internal buffer holds less than one complete frame, or one
      frame that waits for admission (below);
    - a size prefix above ``max_frame_bytes`` raises :class:`FrameTooLarge` as soon as the prefix
      itself has arrived, before any of the body is buffered; a negative size raises
      :class:`MalformedFrame`; frames completed by the same ``feed`` call are dropped with it;
    - after either error the decoder stays failed (the stream has lost its framing, so nothing
      after it can be trusted): every later ``feed`` raises the same error again;
    - with ``admit`` (a server's memory budget), ``admit(size)`` is asked once per frame as soon
      as its size prefix has arrived, before the frame is returned; False leaves the frame
      waiting (:attr:`waiting`): its bytes stay buffered, unparsed, until :meth:`admitted`
      says the memory is there, and while it waits more than ``max_unadmitted`` buffered bytes
      past its prefix raise :class:`BufferLimitExceeded` (the peer ignores the pause);
    - ``frames_admitted`` counts the frames admitted so far; :attr:`reading_frame` is true
      while an admitted frame is incomplete (the server's read deadline runs for it).
    """

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES,
                 admit: Callable[[int], bool] | None = None,
                 max_unadmitted: int = MAX_UNADMITTED_BYTES) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must not be negative")
        self.max_frame_bytes = max_frame_bytes
        self._admit = admit
        self.max_unadmitted = max_unadmitted
        self._head_admitted = False
        self.waiting = False
        self.frames_admitted = 0
        #: Received bytes not yet part of a returned frame, in arrival order: at most the
        #: rest of one read once a feed has parsed what it could, then whole reads appended.
        self._chunks: list[bytes | memoryview] = []
        self._have = 0
        #: Bytes ``_chunks`` must hold before parsing can return a frame: the whole of an
        #: admitted frame whose size is known (0: parse at every feed).
        self._need = 0
        self._failed: Exception | None = None

    def admitted(self) -> None:
        """The frame that waits for admission has its memory; the next ``feed`` (``b""`` will
        do) goes on from it."""
        if not self.waiting:
            raise RuntimeError("no frame waits for admission")
        self.waiting = False
        self._head_admitted = True
        self.frames_admitted += 1

    @property
    def reading_frame(self) -> bool:
        """An admitted frame has not arrived whole yet (after ``feed`` returned)."""
        return self._head_admitted

    @property
    def buffered(self) -> int:
        """Bytes received that are not yet part of a returned frame."""
        return self._have

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame they complete, in order.

        Each frame is copied once, into its own ``bytes``: out of the read that carries it, or,
        for a frame over several reads, by joining them. While an admitted frame is
        incomplete its reads are only kept, not parsed or joined, so a frame of many reads
        costs one join instead of one growth of a buffer per read. (A frame whose size prefix
        came split over reads, or one that waited for admission, is joined with its reads
        and then copied out: twice.)
        """
        if self._failed is not None:
            raise self._failed
        # A caller's buffer may be reused after this returns: keep a copy of anything that
        # is not immutable.
        if type(data) is not bytes:
            data = bytes(data)
        chunks = self._chunks
        frames: list[bytes] = []
        stream: bytes | memoryview
        if chunks:
            if data:
                chunks.append(data)
                self._have += len(data)
            if self._have < self._need:
                return []
            if self._need and len(chunks) > 1:
                # The reads of an admitted frame, whole at last: joined straight into the
                # frame's bytes (its one copy), then what came after it is parsed as usual.
                frame, stream = _split_pending(chunks, self._need)
                frames.append(frame)
                self._head_admitted = False
            else:
                stream = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        elif data:
            stream = data  # the common case: nothing pending, parse the read itself
        else:
            return []
        pos = 0
        n = len(stream)
        need = 0
        limit = self.max_frame_bytes
        with memoryview(stream) as view:
            while n - pos >= SIZE_PREFIX_BYTES:
                size = _SIZE.unpack_from(view, pos)[0]
                if size < 0 or size > limit:
                    self._failed = (MalformedFrame(f"negative frame size {size}") if size < 0
                                    else FrameTooLarge(size, limit))
                    break
                start = pos + SIZE_PREFIX_BYTES
                if self._admit is not None and not self._head_admitted:
                    if self.waiting or not self._admit(size):
                        self.waiting = True
                        if n - start > self.max_unadmitted:
                            self._failed = BufferLimitExceeded(n - start, self.max_unadmitted)
                        break
                    self._head_admitted = True
                    self.frames_admitted += 1
                if n - start < size:
                    need = start + size - pos  # the rest of this frame, prefix included
                    break
                # The one copy a frame costs out of the stream: into its own bytes.
                frames.append(bytes(view[start:start + size]))
                self._head_admitted = False
                pos = start + size
        if self._failed is not None:
            # Raise now rather than after handing out earlier frames: the peer may send nothing
            # more, and the connection is going to be closed anyway.
            self._chunks = []
            self._have = self._need = 0
            raise self._failed
        if pos == n:
            if chunks:
                self._chunks = []
            self._have = 0
        else:
            # A view, not a copy: the rest of the read waits for the reads after it.
            self._chunks = [memoryview(stream)[pos:] if pos else stream]
            self._have = n - pos
        self._need = need
        return frames


def _split_pending(chunks: list[bytes | memoryview], need: int
                   ) -> tuple[bytes, memoryview]:
    """``chunks`` start with a frame's size prefix and end with the read that completed its
    ``need`` bytes (prefix included; a feed parses as soon as a read completes the frame, so
    every read before the last lies wholly inside it): the frame's body as one ``bytes``, and
    a view of what follows it in the last read."""
    *inside, last = chunks
    left = need - sum(len(c) for c in inside)  # 1 to len(last): the last read completed it
    view = memoryview(last)
    return (b"".join([memoryview(inside[0])[SIZE_PREFIX_BYTES:], *inside[1:], view[:left]]),
            view[left:])


def frame(payload_chunks: Sequence[bytes]) -> list[bytes]:
    """Prepend the 4-byte size to an encoded message given as chunks (nothing is joined)."""
    size = sum(len(c) for c in payload_chunks)
    if size > 0x7FFFFFFF:
        raise FrameTooLarge(size, 0x7FFFFFFF)
    return [_SIZE.pack(size), *payload_chunks]
