"""One log segment: ``%020d.log`` (whole record batches back to back, named by the base offset of
its first batch) with its offset index and time index (:mod:`.index`).

Open files: the active segment (the one appended to) holds its ``.log`` descriptor. A rolled
(inactive) segment opens its ``.log`` when a read needs it and hands the descriptor to the
shared :class:`~broker_core.log.open_segments.OpenSegments` LRU, which closes the least recently
used. The index files are never held open: their entries live in memory and are written in
batches (:meth:`Segment.persist_indexes`) at a roll, a truncation, a flush and a clean close.

Threading contract (Kafka's ``LogSegment`` split): :meth:`Segment.append`,
:meth:`Segment.truncate_to`, :meth:`Segment.recover`, the reads and the (de)activation run on the
owning thread (the reactor). :meth:`Segment.sync_fds` is safe from any thread: under the
segment's lock it writes the pending index entries and hands out descriptors of the three files
(a duplicate of the open ``.log``, or a fresh one), so a flush thread can fsync them while
appends go on and even after the segment is closed, evicted or deleted.

Verification of served bytes: every batch a read returns has passed its checks (framing, CRC,
offsets continuing, epochs not going backwards) at least once since the segment was opened —
when it was appended (the log validated it), recovered, or, for bytes the open trusted without
reading them (a clean shutdown, or below the recovery point), the first time a read returns it
(:meth:`Segment.read`; :class:`CorruptBatch` if it fails). The trusted bytes form one
``unverified`` byte range that shrinks from either end as reads cover it, so a sequential reader
checks each old batch once and reads of new data check nothing.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.log.index import OffsetIndex, TimeIndex, pwrite_all
from broker_core.log.open_segments import OpenSegments
from broker_core.wire.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchInfo,
    InvalidRecordBatch,
    batch_size_at,
    decode_batch,
    parse_batch,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
INT32_MAX = (1 << 31) - 1

# Recovery and scans read the file in chunks of this size, so a 1 GiB segment never needs 1 GiB
# of memory.
SCAN_CHUNK_BYTES = 4 << 20

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp: everything read/skip decisions need, without the CRC check.
_head = struct.Struct(">qiibIhiqq")
_HEAD = _head.size


class CorruptBatch(Exception):
    """A stored batch failed its check when read: the log turns it into a
    :class:`~broker_core.log.errors.CorruptLogError` naming the partition."""

    def __init__(self, segment: str, offset: int, position: int, reason: str) -> None:
        super().__init__(f"batch at offset {offset} (byte {position} of {segment}): {reason}")
        self.segment = segment
        self.offset = offset
        self.position = position
        self.reason = reason


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class BatchScan:
    """Walk the whole batches of ``[start, end)`` of a file through a bounded buffer.

    ``pread(length, position)`` reads the file; it is called again for every chunk, so a
    segment whose descriptor the LRU closed between two chunks reopens it.

    Iterating yields ``(absolute_position, info)`` (``info.position`` is relative to an internal
    buffer). When iteration ends by itself, ``valid_end`` is where the valid batches end and
    ``error`` says why the walk stopped early (None if it reached ``end``).
    """

    def __init__(self, pread: Callable[[int, int], bytes], start: int, end: int, *,
                 verify_crc: bool, chunk_bytes: int = SCAN_CHUNK_BYTES) -> None:
        self.pread = pread
        self.start = start
        self.end = end
        self.verify_crc = verify_crc
        self.chunk_bytes = chunk_bytes
        self.valid_end = start
        self.error: InvalidRecordBatch | None = None

    def __iter__(self) -> Iterator[tuple[int, BatchInfo]]:
        pos = self.start
        buf = b""
        buf_start = pos
        while pos < self.end:
            rel = pos - buf_start
            size = batch_size_at(buf, rel)
            if size is None or rel + max(size, HEADER_SIZE) > len(buf):
                # Refill from this batch on. A garbage length is capped by the region's end,
                # so the parse below reports the batch as torn instead of reading gigabytes.
                want = min(self.end - pos, max(self.chunk_bytes, size or 0))
                buf = self.pread(want, pos)
                buf_start = pos
                rel = 0
            try:
                info = parse_batch(buf, rel, verify_crc=self.verify_crc)
            except InvalidRecordBatch as e:
                self.error = e
                break
            yield pos, info
            pos += info.size
        self.valid_end = pos


@dataclass
class RecoveredSegment:
    """What :meth:`Segment.recover` found."""

    batches_checked: int = 0
    bytes_truncated: int = 0
    # (epoch, base offset) wherever the batches' partitionLeaderEpoch changes
    epoch_starts: list[tuple[int, int]] = field(default_factory=list)
    #: Why the walk stopped before the end of the file (None if every byte was valid).
    error: str | None = None


class Segment:
    """See the module docstring.

    Invariants (after :meth:`load` or :meth:`recover` and after every method returns): the file
    holds exactly ``size`` bytes of whole batches; their offsets run contiguously from
    ``base_offset`` to ``next_offset - 1``; the offset index has an entry for the first batch and
    then at least one every ``index_interval_bytes``; the time index has one entry per offset
    index entry; ``max_timestamp`` is the largest batch max timestamp (-1 when empty).

    Files: an active segment holds its ``.log`` descriptor; an inactive one holds it only while
    it is in the shared LRU. The index files hold a prefix of the in-memory entries, and all of
    them once the segment is inactive (written at the roll) or closed cleanly.
    """

    def __init__(self, directory: Path, base_offset: int, *, now_ms: int,
                 open_segments: OpenSegments, fd: int | None = None) -> None:
        self.base_offset = base_offset
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.index_path = directory / segment_file_name(base_offset, INDEX_SUFFIX)
        self.time_index_path = directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX)
        self.index = OffsetIndex(self.index_path, base_offset)
        self.time_index = TimeIndex(self.time_index_path, base_offset)
        st = os.fstat(fd) if fd is not None else os.stat(self.log_path)
        self.size = st.st_size
        self.next_offset = base_offset  # one past the last offset held
        self.max_timestamp = -1
        self.bytes_since_index = 0
        # Broker time of the first append (segment.ms counts from it); None while empty.
        self.roll_base_ms: int | None = None
        # Last append (or file mtime when opened): time retention's fallback when the batches
        # carry no timestamps.
        self.last_modified_ms = int(st.st_mtime * 1000) if self.size else now_ms
        self._open_segments = open_segments
        # Guards _fd, closed and the index files' pending entries against a flush thread.
        self._lock = threading.Lock()
        self._fd = fd
        self._active = False
        self.closed = False
        #: Leader epoch of the last batch, as :meth:`load` or :meth:`recover` found it (-1 if
        #: none): recovery checks the next segment's epochs do not go back below it.
        self.last_epoch = -1
        # Byte range [start, end) of batches never checked since open (see the module
        # docstring); a new segment has none.
        self._unverified = (0, 0)

    @classmethod
    def create(cls, directory: Path, base_offset: int, *, now_ms: int,
               open_segments: OpenSegments) -> Segment:
        """A new, empty, active segment, with empty index files. Refuses to reuse a non-empty
        file of the same name."""
        fd = os.open(directory / segment_file_name(base_offset, LOG_SUFFIX),
                     os.O_RDWR | os.O_CREAT, 0o644)
        try:
            seg = cls(directory, base_offset, now_ms=now_ms, open_segments=open_segments, fd=fd)
        except BaseException:
            os.close(fd)
            raise
        seg._active = True
        if seg.size:
            seg.close(persist=False)
            raise FileExistsError(f"segment {seg.log_path.name} already holds {seg.size} bytes")
        try:
            seg.persist_indexes()  # creates them empty (or empties files left by an older one)
        except BaseException:
            seg.close(persist=False)
            raise
        return seg

    # -- descriptors -----------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def has_open_fd(self) -> bool:
        return self._fd is not None

    def _file(self) -> int:
        """The ``.log`` descriptor, reopened if the LRU closed it. Valid until another segment
        of the same LRU is opened (owner thread only)."""
        fd = self._fd
        if fd is None:
            return self._open()
        if not self._active:
            self._open_segments.touch(self)
        return fd

    def _open(self) -> int:
        with self._lock:
            if self.closed:
                raise OSError(errno.EBADF, f"segment {self.log_path.name} is closed")
            if self._fd is None:
                self._fd = os.open(self.log_path, os.O_RDWR)
            fd = self._fd
        if not self._active:
            self._open_segments.add(self)
        return fd

    def _pread(self, length: int, position: int) -> bytes:
        return os.pread(self._file(), length, position)

    def release_fd(self) -> None:
        """Close the ``.log`` descriptor of an inactive segment (the LRU evicted it); the next
        read reopens it."""
        with self._lock:
            if self._active or self._fd is None:
                return
            fd, self._fd = self._fd, None
            os.close(fd)

    def activate(self) -> None:
        """Become the segment appended to (the log's last): hold the descriptor for good."""
        if self._active:
            return
        self._open_segments.discard(self)
        self._active = True
        if self._fd is None:
            self._open()

    def deactivate(self) -> None:
        """The log rolled past this segment: write its index files out (the last time they
        change) and put its descriptor in the LRU. On a write error it stays active."""
        if not self._active:
            return
        self.persist_indexes()
        self._active = False
        if self._fd is not None:
            self._open_segments.add(self)

    def persist_indexes(self) -> None:
        """Write the index entries the files lack (no fsync: :meth:`sync_fds` is for that)."""
        with self._lock:
            self.index.file.persist()
            self.time_index.file.persist()

    # -- loading and recovery --------------------------------------------------------------------

    def batches(self, start: int = 0, *, verify_crc: bool = False) -> BatchScan:
        """Scan of the batches from byte ``start`` to the end."""
        return BatchScan(self._pread, start, self.size, verify_crc=verify_crc)

    def load(self, now_ms: int, index_interval_bytes: int | None = None, *,
             verify_tail: bool = False) -> bool:
        """Fast open (a clean shutdown, or a segment below the recovery point): trust the
        indexes and walk only the batches after the last index entry — with their CRCs when
        ``verify_tail`` (the active segment after a clean shutdown). False if anything is
        inconsistent (an index entry past the end, a walk that does not end exactly at the
        file's end, offsets that do not continue, a tail batch failing its CRC); then call
        :meth:`recover`.

        An index file that is a correct prefix (it lags behind the segment: its last entries
        were never written) is accepted, and with ``index_interval_bytes`` the entries the walk
        passes are added back and written. The bytes before the walk stay unverified until
        a read returns them (see the module docstring)."""
        if not self.index.load(self.size) or not self.time_index.load(self.index.offsets):
            return False
        if not self._rescan_tail(index_interval_bytes, verify_crc=verify_tail):
            return False
        if not self._active:
            self.persist_indexes()  # an inactive segment's files hold every entry
        checked_from = self.index.positions[-1] if verify_tail and len(self.index) else \
            self.size
        self._unverified = (0, checked_from) if checked_from else (0, 0)
        self._init_roll_base(now_ms)
        return True

    def recover(self, now_ms: int, index_interval_bytes: int, *,
                min_epoch: int = -1) -> RecoveredSegment:
        """Re-validate every batch (magic, lengths, CRC, offsets contiguous from the base
        offset, leader epochs never below ``min_epoch`` nor below the batch before), cut the
        file at the first invalid or torn one, and rebuild both indexes (written to their
        files at once). ``error`` of the result says what stopped the walk."""
        result = RecoveredSegment()
        scan = self.batches(verify_crc=True)
        expected = self.base_offset
        valid_end = 0
        off_entries: list[tuple[int, int]] = []
        ts_entries: list[int] = []
        since = 0
        max_ts = -1
        epoch = None
        floor = min_epoch
        for pos, info in scan:
            # A batch that parses but does not continue the offsets is garbage that happens to
            # carry a valid CRC (e.g. an old, overwritten region): the log ends before it. The
            # base offset and the epoch lie outside the CRC, so they are checked here.
            if info.base_offset != expected or info.last_offset - self.base_offset > INT32_MAX:
                result.error = (f"batch at byte {pos} has offsets {info.base_offset}.."
                                f"{info.last_offset}, expected a batch at offset {expected}")
                break
            if info.partition_leader_epoch < floor:
                result.error = (f"batch at offset {info.base_offset} (byte {pos}) has leader "
                                f"epoch {info.partition_leader_epoch}, below the epoch {floor} "
                                "of the batch before it")
                break
            floor = info.partition_leader_epoch
            if not off_entries or since >= index_interval_bytes:
                off_entries.append((info.base_offset, pos))
                ts_entries.append(max_ts)
                since = 0
            since += info.size
            max_ts = max(max_ts, info.max_timestamp)
            if info.partition_leader_epoch != epoch:
                epoch = info.partition_leader_epoch
                result.epoch_starts.append((epoch, info.base_offset))
            expected = info.last_offset + 1
            valid_end = pos + info.size
            result.batches_checked += 1
        if result.error is None and scan.error is not None:
            result.error = f"at offset {expected}: {scan.error}"
        if valid_end < self.size:
            os.ftruncate(self._file(), valid_end)
            result.bytes_truncated = self.size - valid_end
            self.size = valid_end
            if result.error is None:  # a read cut short by the file shrinking meanwhile
                result.error = f"at offset {expected}: the file ends inside a batch"
        self.last_epoch = floor
        self._unverified = (0, 0)
        with self._lock:
            self.index.reset()
            self.time_index.reset()
            self._add_entries(off_entries, ts_entries)
        self.persist_indexes()
        self.next_offset = expected
        self.max_timestamp = max_ts
        self.bytes_since_index = since
        self._init_roll_base(now_ms)
        return result

    def _add_entries(self, off_entries: list[tuple[int, int]], ts_entries: list[int]) -> None:
        # caller holds self._lock
        if off_entries:
            self.index.add(off_entries, b"".join(self.index.encode(o, p) for o, p in off_entries))
            self.time_index.add(ts_entries, b"".join(
                self.time_index.encode(t, o) for t, (o, _) in zip(ts_entries, off_entries,
                                                                  strict=True)))

    def _rescan_tail(self, index_interval_bytes: int | None = None, *,
                     verify_crc: bool = False) -> bool:
        """Recompute ``next_offset``, ``max_timestamp``, ``bytes_since_index`` and
        ``last_epoch`` from the last index entry to the end of the file (CRCs checked only with
        ``verify_crc``); with ``index_interval_bytes``, also add the index entries that region
        lacks. False if that region is not whole, contiguous batches with epochs that never
        go back."""
        if not len(self.index):
            if self.size:
                return False
            self.next_offset = self.base_offset
            self.max_timestamp = -1
            self.bytes_since_index = 0
            return True
        start = self.index.positions[-1]
        expected = self.index.offsets[-1]
        max_ts = self.time_index.timestamps[-1]
        off_entries: list[tuple[int, int]] = []
        ts_entries: list[int] = []
        since = 0
        epoch = -1
        scan = self.batches(start, verify_crc=verify_crc)
        for pos, info in scan:
            if info.base_offset != expected or info.partition_leader_epoch < epoch:
                return False
            epoch = info.partition_leader_epoch
            if index_interval_bytes is not None and since >= index_interval_bytes:
                off_entries.append((info.base_offset, pos))
                ts_entries.append(max_ts)
                since = 0
            since += info.size
            expected = info.last_offset + 1
            max_ts = max(max_ts, info.max_timestamp)
        if scan.valid_end != self.size:
            return False
        with self._lock:
            self._add_entries(off_entries, ts_entries)
        self.next_offset = expected
        self.max_timestamp = max_ts
        self.bytes_since_index = since
        self.last_epoch = epoch
        return True

    def _init_roll_base(self, now_ms: int) -> None:
        # After a restart the broker time of the first append is unknown; the first batch's
        # timestamp stands in for it (as Kafka does), never later than now.
        if not self.size:
            self.roll_base_ms = None
            return
        head = self._pread(_HEAD, 0)
        first_ts = _head.unpack_from(head, 0)[8] if len(head) == _HEAD else -1
        self.roll_base_ms = first_ts if 0 <= first_ts <= now_ms else now_ms

    # -- writing ---------------------------------------------------------------------------------

    def append(self, data: bytes | bytearray, infos: list[BatchInfo], *, now_ms: int,
               index_interval_bytes: int) -> None:
        """Append whole batches; ``infos`` describe them with positions relative to ``data``.

        On a write error the file is cut back to where it was, so a failed append leaves no
        partial batch behind. New index entries are kept in memory until the next
        :meth:`persist_indexes` / :meth:`sync_fds`.
        """
        fd = self._file()
        start = self.size
        try:
            pwrite_all(fd, data, start)
        except OSError:
            os.ftruncate(fd, start)
            raise
        off_entries: list[tuple[int, int]] = []
        ts_entries: list[int] = []
        off_raw = bytearray()
        ts_raw = bytearray()
        since = self.bytes_since_index
        max_ts = self.max_timestamp
        have_entries = len(self.index) > 0
        for info in infos:
            if not have_entries or since >= index_interval_bytes:
                pos = start + info.position
                off_entries.append((info.base_offset, pos))
                ts_entries.append(max_ts)
                off_raw += self.index.encode(info.base_offset, pos)
                ts_raw += self.time_index.encode(max_ts, info.base_offset)
                since = 0
                have_entries = True
            since += info.size
            if info.max_timestamp > max_ts:
                max_ts = info.max_timestamp
        if off_entries:
            with self._lock:
                self.index.add(off_entries, off_raw)
                self.time_index.add(ts_entries, ts_raw)
        self.size = start + len(data)
        self.next_offset = infos[-1].last_offset + 1
        self.max_timestamp = max_ts
        self.bytes_since_index = since
        self.last_modified_ms = now_ms
        if self.roll_base_ms is None:
            self.roll_base_ms = now_ms

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset`` (a batch containing ``offset`` goes
        whole); return the bytes removed. The index files are cut first, so at every moment
        they hold a prefix of the index of what the ``.log`` holds."""
        if offset >= self.next_offset:
            return 0
        cut = 0 if offset <= self.base_offset else self.locate(offset)
        removed = self.size - cut
        kept = self.index.entries_below(cut)
        with self._lock:
            self.index.truncate_entries(kept)
            self.time_index.truncate_entries(kept)
            self.index.file.persist()
            self.time_index.file.persist()
        os.ftruncate(self._file(), cut)
        self.size = cut
        lo, hi = self._unverified
        self._unverified = (lo, min(hi, cut)) if lo < min(hi, cut) else (0, 0)
        if not self._rescan_tail():  # cannot happen to a segment that was loaded or recovered
            raise RuntimeError(f"segment {self.log_path.name} is inconsistent after truncation")
        if not self.size:
            self.roll_base_ms = None
        return removed

    # -- reading ---------------------------------------------------------------------------------

    def _read_region(self, offset: int, extra: int) -> tuple[int, bytes]:
        """Read from the index entry at or below ``offset`` far enough to hold the header of the
        batch containing ``offset`` plus ``extra`` bytes: ``(file position, bytes)``."""
        entry, start = self.index.lookup(offset)
        bound = self.index.position_after(entry)
        if bound is None:
            bound = self.size
        length = min(self.size - start, (bound - start) + max(extra, HEADER_SIZE))
        return start, os.pread(self._file(), length, start)

    def locate(self, offset: int) -> int:
        """Position of the batch containing ``offset`` (or the first batch after it; ``size`` if
        there is none). One read."""
        start, buf = self._read_region(offset, 0)
        pos = 0
        while pos + _HEAD <= len(buf):
            base, length, _e, _m, _c, _a, last_delta, _bt, _mt = _head.unpack_from(buf, pos)
            if base + last_delta >= offset:
                return start + pos
            if length + LOG_OVERHEAD < HEADER_SIZE:
                raise self._bad_length(start + pos, base, length)
            pos += length + LOG_OVERHEAD
        return self.size

    def read(self, offset: int, max_bytes: int, max_offset: int | None,
             min_one: bool) -> tuple[bytes, bool]:
        """Whole batches from the one containing ``offset`` (which must be below
        ``next_offset``), within ``max_bytes`` — or one batch over it when ``min_one`` — and none
        whose last offset reaches ``max_offset``.

        Returns ``(data, exhausted)``: ``exhausted`` is True when the segment's end was reached
        with budget left, so the caller may go on into the next segment. Reads the file once
        (twice only for a first batch larger than ``max_bytes``); no per-record work. Batches
        in the unverified range are checked before they are returned, and a batch whose length
        cannot be right (shorter than a header, past the segment's end) is refused:
        :class:`CorruptBatch` either way.
        """
        budget = max(max_bytes, 0)
        start, buf = self._read_region(offset, budget)
        n = len(buf)
        pos = 0
        while True:  # skip the batches before the one holding `offset`
            if pos + _HEAD > n:
                return b"", pos + start >= self.size
            base, length, _e, _m, _c, _a, last_delta, _bt, _mt = _head.unpack_from(buf, pos)
            if base + last_delta >= offset:
                break
            if length + LOG_OVERHEAD < HEADER_SIZE:  # only ever seen in damaged bytes
                raise self._bad_length(start + pos, base, length)
            pos += length + LOG_OVERHEAD
        first = end = pos
        stopped = False
        while end < n:
            if end + _HEAD > n:
                stopped = True  # the next batch lies past the budget
                break
            base, length, _e, _m, _c, _a, last_delta, _bt, _mt = _head.unpack_from(buf, end)
            size = length + LOG_OVERHEAD
            if size < HEADER_SIZE or start + end + size > self.size:
                raise self._bad_length(start + end, base, length)
            if max_offset is not None and base + last_delta >= max_offset:
                stopped = True
                break
            if end + size - first > budget:
                stopped = True
                if end == first and min_one:
                    # KIP-74: a batch larger than the limit is still returned whole, so a
                    # consumer can always make progress.
                    if end + size <= n:
                        end += size
                    else:
                        big = self._pread(size, start + first)
                        self._verify_served(big, 0, size, start + first)
                        return big, False
                break
            end += size
        exhausted = not stopped and start + end >= self.size
        self._verify_served(buf, first, end, start + first)
        if first == 0 and end == n:
            return buf, exhausted
        return buf[first:end], exhausted

    def _verify_served(self, buf: bytes, first: int, end: int, position: int) -> None:
        """Check the batches of ``buf[first:end]`` (whole batches, at file ``position``) that
        lie in the unverified range, then shrink the range by what was covered. Raises
        :class:`CorruptBatch` for the first that fails. Outside that range (every batch
        appended or recovered since open) this is one comparison."""
        lo, hi = self._unverified
        stop = position + end - first
        if stop <= lo or position >= hi or end <= first:
            return
        rel = first
        expected = -1
        epoch = -1
        while rel < end:
            pos = position + rel - first
            if end - rel < _HEAD:
                raise CorruptBatch(self.log_path.name, expected, pos, "torn batch header")
            base, length, leader_epoch, _m, _c, _a, last_delta, _bt, _mt = \
                _head.unpack_from(buf, rel)
            size = length + LOG_OVERHEAD
            if pos + size > lo and pos < hi:
                try:
                    parse_batch(buf, rel, verify_crc=True)
                except InvalidRecordBatch as e:
                    raise CorruptBatch(self.log_path.name, base, pos, str(e)) from None
                if expected >= 0 and base != expected:
                    raise CorruptBatch(self.log_path.name, base, pos,
                                       f"offsets do not continue: expected offset {expected}")
                if leader_epoch < epoch:
                    raise CorruptBatch(self.log_path.name, base, pos,
                                       f"leader epoch {leader_epoch} is below {epoch}, the "
                                       "epoch of the batch before it")
            expected = base + last_delta + 1
            epoch = leader_epoch
            rel += size
        # Batch boundaries line up (the range's ends are batch starts), so a read covering an
        # end of the range verified everything from there to its own end.
        if position <= lo < stop:
            lo = min(stop, hi)
        if position < hi <= stop:
            hi = max(position, lo)
        self._unverified = (lo, hi) if lo < hi else (0, 0)

    def _bad_length(self, position: int, base: int, length: int) -> CorruptBatch:
        return CorruptBatch(self.log_path.name, base, position,
                            f"impossible batch length {length}")

    def find_timestamp(self, target_ms: int, min_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``min_offset`` whose
        timestamp is >= ``target_ms``, or None if this segment has none."""
        if not self.size or self.max_timestamp < target_ms:
            return None
        k = self.time_index.first_candidate(target_ms)
        start = self.index.positions[k] if len(self.index) else 0
        for pos, info in self.batches(start):
            if info.last_offset < min_offset or info.max_timestamp < target_ms:
                continue
            found = self._first_record(pos, info, min_offset,
                                       lambda ts: ts >= target_ms)
            if found is not None:
                return found
        return None

    def max_timestamp_record(self, min_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record holding this segment's largest
        timestamp (at or after ``min_offset``). Scans the segment: ListOffsets(MAX_TIMESTAMP)
        is rare."""
        best: tuple[int, BatchInfo] | None = None
        for pos, info in self.batches():
            if info.last_offset < min_offset:
                continue
            if best is None or info.max_timestamp > best[1].max_timestamp:
                best = (pos, info)
        if best is None:
            return None
        pos, info = best
        return self._first_record(pos, info, min_offset, lambda ts: ts >= info.max_timestamp)

    def _first_record(self, pos: int, info: BatchInfo, min_offset: int,
                      wanted: Callable[[int], bool]) -> tuple[int, int] | None:
        # Looking inside one batch (decompressing it) is fine here: this serves ListOffsets,
        # never the produce or fetch path.
        raw = self._pread(info.size, pos)
        try:
            records = decode_batch(raw)
        except InvalidRecordBatch:
            return max(info.base_offset, min_offset), info.max_timestamp
        for r in records:
            if r.offset >= min_offset and wanted(r.timestamp):
                return r.offset, r.timestamp
        return None

    # -- durability and lifecycle ----------------------------------------------------------------

    def sync_fds(self) -> list[int] | None:
        """Descriptors of the ``.log``, ``.index`` and ``.timeindex`` for an fsync on another
        thread (the caller closes them), after writing the pending index entries; None once the
        segment is closed. The ``.log`` one is a duplicate of the open descriptor, or a fresh one
        if the LRU closed it. They keep the files open, so closing, evicting or deleting the
        segment meanwhile is harmless."""
        with self._lock:
            if self.closed:
                return None
            fds: list[int] = []
            try:
                fds.append(os.dup(self._fd) if self._fd is not None
                           else os.open(self.log_path, os.O_RDONLY))
                for index_file in (self.index.file, self.time_index.file):
                    fd = index_file.persist(keep_open=True)
                    assert fd is not None
                    fds.append(fd)
            except OSError:
                for fd in fds:
                    os.close(fd)
                raise
            return fds

    def close(self, *, persist: bool = True) -> None:
        """Close the ``.log`` descriptor (idempotent); with ``persist`` first write the index
        entries the files lack (a clean close; errors are ignored: a lagging index file is a
        correct prefix, accepted or rebuilt at the next start)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if persist:
                for index_file in (self.index.file, self.time_index.file):
                    try:
                        index_file.persist()
                    except OSError:
                        pass
            fd, self._fd = self._fd, None
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._open_segments.discard(self)

    def delete(self) -> None:
        self.close(persist=False)
        for p in (self.log_path, self.index_path, self.time_index_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
