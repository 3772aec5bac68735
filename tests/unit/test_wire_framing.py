"""FrameDecoder and frame(): any chunking of a stream yields the same frames; oversized and
negative size prefixes fail at once."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.wire.errors import BufferLimitExceeded, FrameTooLarge, MalformedFrame
from broker_core.wire.framing import MAX_FRAME_BYTES, FrameDecoder, frame


def stream(payloads: list[bytes]) -> bytes:
    return b"".join(b"".join(frame([p])) for p in payloads)


def test_default_limit_is_kafkas_socket_request_max_bytes():
    assert MAX_FRAME_BYTES == 104857600


def test_frame_prepends_the_size_without_copying_chunks():
    a, b = b"x" * 3, b"y" * 2
    out = frame([a, b])
    assert out[0] == struct.pack(">i", 5)
    assert out[1] is a and out[2] is b


@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_any_chunking_yields_the_same_frames(payloads, data):
    raw = stream(payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    decoder = FrameDecoder(1000)
    out = []
    start = 0
    for cut in [*cuts, len(raw)]:
        out.extend(decoder.feed(raw[start:cut]))
        start = cut
    assert out == payloads
    assert decoder.buffered == 0


def test_partial_frames_stay_buffered():
    raw = stream([b"hello"])
    d = FrameDecoder()
    assert d.feed(raw[:6]) == []
    assert d.buffered == 6
    assert d.feed(raw[6:]) == [b"hello"]


def test_oversized_prefix_fails_before_the_body_arrives():
    d = FrameDecoder(max_frame_bytes=10)
    with pytest.raises(FrameTooLarge) as e:
        d.feed(struct.pack(">i", 11))  # only the prefix
    assert (e.value.size, e.value.limit) == (11, 10)
    with pytest.raises(FrameTooLarge):  # and the decoder stays failed
        d.feed(b"more")


def test_exactly_the_limit_is_accepted():
    d = FrameDecoder(max_frame_bytes=4)
    assert d.feed(stream([b"abcd"])) == [b"abcd"]


def test_negative_size_is_malformed():
    d = FrameDecoder()
    with pytest.raises(MalformedFrame):
        d.feed(stream([b"ok"]) + struct.pack(">i", -5))
    with pytest.raises(MalformedFrame):
        d.feed(b"")


def test_admit_is_asked_once_per_frame_when_its_size_arrives():
    asked = []
    d = FrameDecoder(admit=lambda size: asked.append(size) or True)
    raw = stream([b"abc", b"defgh"])
    assert d.feed(raw[:4]) == []  # the first size alone
    assert asked == [3]
    assert d.feed(raw[4:]) == [b"abc", b"defgh"]
    assert asked == [3, 5]


def test_a_frame_refused_admission_waits_unparsed_until_admitted():
    answers = [False]
    asked = []

    def admit(size):
        asked.append(size)
        return answers.pop(0) if answers else True

    d = FrameDecoder(admit=admit)
    raw = stream([b"abc", b"de"])
    assert d.feed(raw) == []
    assert d.waiting and asked == [3]
    assert d.feed(b"") == []  # still waiting: admit is not asked again
    assert asked == [3]
    d.admitted()
    assert d.feed(b"") == [b"abc", b"de"]
    assert not d.waiting and asked == [3, 2]


def test_bytes_past_a_waiting_frames_prefix_are_bounded():
    d = FrameDecoder(admit=lambda size: False, max_unadmitted=8)
    assert d.feed(struct.pack(">i", 100) + b"x" * 8) == []
    with pytest.raises(BufferLimitExceeded):
        d.feed(b"x")
    with pytest.raises(BufferLimitExceeded):  # failed for good, like the other errors
        d.feed(b"")


def test_a_frame_over_many_reads_is_kept_unparsed_until_it_is_whole():
    # Once an admitted frame's size is known its reads are only kept: the admission check is
    # not asked again, and the frame comes out whole with the frame after it.
    asked = []
    d = FrameDecoder(admit=lambda size: asked.append(size) or True)
    body = bytes(range(256)) * 40
    raw = stream([body, b"next"])
    pieces = [raw[i:i + 100] for i in range(0, len(raw), 100)]
    out = []
    for i, piece in enumerate(pieces):
        out.extend(d.feed(piece))
        if out == []:
            assert d.reading_frame and d.buffered == min(100 * (i + 1), len(raw))
    assert out == [body, b"next"]
    assert [type(f) for f in out] == [bytes, bytes]  # never a view into the reads
    assert asked == [len(body), 4]
    assert d.buffered == 0 and not d.reading_frame


def test_a_callers_buffer_reused_after_feed_does_not_change_the_frame():
    d = FrameDecoder()
    raw = bytearray(stream([b"abcdef"]))
    assert d.feed(raw[:7]) == []
    reused = bytearray(raw[7:])
    view = memoryview(reused)
    out = d.feed(view)
    reused[:] = b"\0" * len(reused)
    assert out == [b"abcdef"]
    partial = bytearray(raw[:5])
    assert d.feed(partial) == []
    partial[:] = b"\xff" * 5  # would be a negative size if it were still referenced
    assert d.feed(raw[5:]) == [b"abcdef"]


def test_a_waiting_frames_later_reads_still_count_against_the_bound():
    # The frame's size is known but it is not admitted: every read is checked again.
    d = FrameDecoder(admit=lambda size: False, max_unadmitted=8)
    assert d.feed(struct.pack(">i", 100)) == []
    assert d.feed(b"x" * 8) == []
    with pytest.raises(BufferLimitExceeded):
        d.feed(b"x")
