# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The consumer's per-record decode loop compiled with Cython: the optional fast path of
:func:`consumer_client.consumer_records.decode_chunk`, built by ``pip install`` when Cython and a
C compiler are at hand (see ``setup.py``); without it the pure-Python loop runs and gives the
same messages.

Invariants:

- it decodes only what it is sure of and declines the rest: for any record data it either
  appends every message of the batch at or after the fetch offset and returns True, or appends
  nothing (whatever it had appended is removed) and returns False, and the caller then decodes
  the batch with the pure-Python loop, which raises the precise error for a corrupt batch or
  decodes an unusual one (varints longer than 9 bytes, offset deltas that do not increase,
  offsets or timestamps beyond 64 bits, header keys that are not UTF-8). So both paths give
  identical messages and identical errors;
- every read is checked against the end of the record data and of the record (the length
  prefix), before it is made: no byte outside ``raw`` is ever read, whatever a peer sent;
- it allocates the messages, their fields and nothing proportional to an untrusted count.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.list cimport PyList_Append
from cpython.long cimport PyLong_FromLongLong
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport uint64_t


cdef extern from "Python.h":
    # Allocates a (GC-tracked) instance of a tuple subclass with room for n items, all NULL:
    # Message tuples are made in place, without the temporary tuple tuple.__new__ needs.
    object PyType_GenericAlloc(type tp, Py_ssize_t n)


cdef extern from *:
    """
    static inline int sluice_add_overflows(long long a, long long b, long long *r) {
        return __builtin_add_overflow(a, b, r);
    }
    static inline int sluice_sub_overflows(long long a, long long b, long long *r) {
        return __builtin_sub_overflow(a, b, r);
    }
    """
    bint sluice_add_overflows(long long a, long long b, long long *r)
    bint sluice_sub_overflows(long long a, long long b, long long *r)


cdef inline Py_ssize_t _varint(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                               long long *out) noexcept nogil:
    # The zig-zag varint at pos, of at most 9 bytes (63 bits, so it fits a long long); the
    # position after it, or -1 when it is longer or runs past end (the caller declines).
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef unsigned char b
    while pos < end and shift < 63:
        b = p[pos]
        pos += 1
        v |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            out[0] = <long long>(v >> 1) ^ -(<long long>(v & 1))
            return pos
        shift += 7
    return -1


cdef inline void _put(object tup, Py_ssize_t i, object item):
    Py_INCREF(item)
    PyTuple_SET_ITEM(tup, i, item)


cdef Py_ssize_t _headers(const unsigned char *p, Py_ssize_t q, Py_ssize_t rend, long long n,
                         list out) except -2:
    # Appends n (key, value) header pairs read from q to out; the position after them, or -1
    # for anything the pure-Python loop should judge (a null key, a key that is not UTF-8).
    cdef long long kn, vn
    cdef object key, value
    for _ in range(n):
        q = _varint(p, q, rend, &kn)
        if q < 0 or kn < 0 or kn > rend - q:
            return -1
        try:
            key = PyUnicode_DecodeUTF8(<const char *>p + q, kn, NULL)
        except UnicodeDecodeError:
            return -1
        q += kn
        q = _varint(p, q, rend, &vn)
        if q < 0 or vn > rend - q:
            return -1
        if vn < 0:
            value = None
        else:
            value = PyBytes_FromStringAndSize(<const char *>p + q, vn)
            q += vn
        out.append((key, value))
    return q


def decode_records(const unsigned char[::1] raw, Py_ssize_t count, long long base,
                   long long base_ts, object append_ts, object topic, object partition,
                   long long start, list out, type message, tuple no_headers) -> bool:
    """Append to ``out`` a ``message`` (a tuple subclass of eight fields, as
    :class:`~consumer_client.consumer_records.Message`) for each of the ``count`` records in
    ``raw`` (one batch's record data) whose offset is at least ``start``; True when done,
    False (``out`` as it was) when the batch is left to the pure-Python loop."""
    cdef Py_ssize_t end = raw.shape[0]
    cdef const unsigned char *p = &raw[0] if end else NULL
    cdef Py_ssize_t n0 = len(out)
    cdef Py_ssize_t pos = 0, rend, q
    cdef long long length, ts_delta, delta, kn, vn, nh, off, ts
    cdef long long last = -1, last_ts_delta = 0
    cdef long long skip = 0
    cdef object key, value, headers, msg, stamp = None
    cdef list pairs
    cdef bint create = append_ts is None
    cdef object ttype = 0 if create else 1
    cdef bint ok = count >= 0 and not sluice_sub_overflows(start, base, &skip)
    if not create:
        stamp = append_ts
    for _ in range(count if ok else 0):
        ok = False
        q = _varint(p, pos, end, &length)
        if q < 0 or length < 1 or length > end - q:
            break
        rend = q + length
        q = _varint(p, q + 1, rend, &ts_delta)  # after the attributes byte (unused in v2)
        if q < 0:
            break
        q = _varint(p, q, rend, &delta)
        # Increasing deltas make "at or after the fetch offset" a plain filter; the pure-Python
        # loop defines what other orders give.
        if q < 0 or delta <= last:
            break
        last = delta
        q = _varint(p, q, rend, &kn)
        if q < 0 or kn > rend - q:
            break
        if kn < 0:
            key = None
        else:
            key = PyBytes_FromStringAndSize(<const char *>p + q, kn)
            q += kn
        q = _varint(p, q, rend, &vn)
        if q < 0 or vn > rend - q:
            break
        if vn < 0:
            value = None
        else:
            value = PyBytes_FromStringAndSize(<const char *>p + q, vn)
            q += vn
        q = _varint(p, q, rend, &nh)
        if q < 0 or nh < 0:
            break
        if nh == 0:
            headers = no_headers
        else:
            pairs = []
            q = _headers(p, q, rend, nh, pairs)
            if q < 0:
                break
            headers = tuple(pairs)
        if q != rend:
            break  # fields that disagree with the record's length
        pos = rend
        ok = True
        if delta < skip:
            continue
        if sluice_add_overflows(base, delta, &off):
            ok = False
            break
        if create and (stamp is None or ts_delta != last_ts_delta):
            # one timestamp object for a run of records of the same millisecond
            if sluice_add_overflows(base_ts, ts_delta, &ts):
                ok = False
                break
            stamp = PyLong_FromLongLong(ts)
            last_ts_delta = ts_delta
        msg = PyType_GenericAlloc(message, 8)
        _put(msg, 0, topic)
        _put(msg, 1, partition)
        _put(msg, 2, PyLong_FromLongLong(off))
        _put(msg, 3, key)
        _put(msg, 4, value)
        _put(msg, 5, stamp)
        _put(msg, 6, ttype)
        _put(msg, 7, headers)
        PyList_Append(out, msg)
    if not ok or pos != end:
        del out[n0:]
        return False
    return True
