"""The wire codec's cost for the smallest produce, in one process: one frame in, one answer out.

A one-topic, one-partition Produce request carrying one 100-byte record (what a ``linger.ms=0``
producer sends per message) is decoded from its frame (``decode_request``: header and body)
and its response (one partition, no error) is encoded (``encode_response``), ``--rounds``
times each. Prints the CPU time per operation in µs (the process's CPU time, the figure to
compare on a machine shared with other work), the best of ``--repeat`` passes, per version
given (default: 9, what confluent-kafka and kcat send, and 8, the last classic one);
``--profile`` prints where one version's time goes (cProfile, sorted by own time).

With ``--fetch`` the same for what carries that record to a follower: its Fetch request (one
partition) encoded and decoded, and the leader's response (one partition, the one batch,
no aborted transactions) encoded and decoded, at Fetch v11 (what Sluice's followers send)
and v12 (the first flexible one).

Usage: python bench/produce_codec.py [--rounds 20000] [--repeat 5] [--versions 9 8] [--profile]
       [--fetch]
Prints figures; asserts only that a decode gives back the request it was built from.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_core.wire.apis import (  # noqa: E402
    ApiKey,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from broker_core.wire.records import Record, build_batch  # noqa: E402


def request_frame(version: int) -> bytes:
    batch = build_batch([Record(None, b"x" * 100, [], 1_700_000_000_000)])
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": "bench-topic",
                            "partition_data": [{"index": 3, "records": batch}]}]}
    return b"".join(encode_request(ApiKey.PRODUCE, version, 17, "rdkafka", body))


def response_body() -> dict:
    # The shape the broker answers with (server/data_apis.py builds this dict).
    return {"responses": [{"name": "bench-topic", "partition_responses": [
        {"index": 3, "error_code": 0, "base_offset": 123456, "log_append_time_ms": -1,
         "log_start_offset": 0}]}], "throttle_time_ms": 0}


def cpu_per_op(fn, rounds: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for _ in range(rounds):
            fn()
        best = min(best, time.process_time() - t)
    return best / rounds * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--versions", type=int, nargs="+", default=[9, 8])
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--fetch", action="store_true")
    args = ap.parse_args()
    if args.fetch:
        fetch_figures(args.rounds, args.repeat)
        return
    for v in args.versions:
        frame = request_frame(v)
        req = decode_request(frame)
        assert req.body.topic_data[0].partition_data[0].index == 3
        body = response_body()

        def decode(frame=frame) -> None:
            decode_request(frame)

        def encode(v=v, body=body) -> None:
            encode_response(ApiKey.PRODUCE, v, 17, body)

        def both(frame=frame, v=v, body=body) -> None:
            decode_request(frame)
            encode_response(ApiKey.PRODUCE, v, 17, body)

        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(lambda: [both() for _ in range(args.rounds)])
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
            continue
        dec = cpu_per_op(decode, args.rounds, args.repeat)
        enc = cpu_per_op(encode, args.rounds, args.repeat)
        print(f"Produce v{v}: decode request {dec:.2f} µs, encode response {enc:.2f} µs, "
              f"together {dec + enc:.2f} µs (CPU per request)")


def fetch_figures(rounds: int, repeat: int) -> None:
    batch = build_batch([Record(None, b"x" * 100, [], 1_700_000_000_000)])
    request = {"replica_id": 2, "max_wait_ms": 500, "min_bytes": 1, "session_id": 0,
               "session_epoch": -1, "topics": [{"topic": "bench-topic", "partitions": [
                   {"partition": 3, "current_leader_epoch": 1, "fetch_offset": 123457,
                    "log_start_offset": 0, "partition_max_bytes": 1048576}]}]}
    response = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "bench-topic", "partitions": [
            {"partition_index": 3, "error_code": 0, "high_watermark": 123456,
             "last_stable_offset": 123456, "log_start_offset": 0,
             "aborted_transactions": None, "records": [batch]}]}]}
    for v in (11, 12):
        frame = b"".join(encode_request(ApiKey.FETCH, v, 17, "broker-2", request))
        answer = b"".join(encode_response(ApiKey.FETCH, v, 17, response))

        def request_both(v=v, frame=frame) -> None:
            encode_request(ApiKey.FETCH, v, 17, "broker-2", request)
            decode_request(frame)

        def response_both(v=v, answer=answer) -> None:
            encode_response(ApiKey.FETCH, v, 17, response)
            decode_response(ApiKey.FETCH, v, answer)

        req = cpu_per_op(request_both, rounds, repeat)
        resp = cpu_per_op(response_both, rounds, repeat)
        print(f"Fetch v{v}: request encode+decode {req:.2f} µs, response encode+decode "
              f"{resp:.2f} µs, together {req + resp:.2f} µs (CPU per fetch)")


if __name__ == "__main__":
    main()
