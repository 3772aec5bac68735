"""CPU time of a surviving broker's side of a controller kill, in memory: apply and answer.

The broker side of ``bench/failover.py``'s controller kill, without ZooKeeper or sockets: one
broker's request handler (``RequestHandler`` over a real ``ReplicaManager``, ``LogManager``
and ``MetadataCache``, with log directories in a temp dir removed afterwards) is handed
request frames, decoded with the project's codec as the server decodes them, and its answers
are encoded as the server encodes them:

(a) what the old controller (broker 3) sends when it takes office with brokers 1-3 alive:
    ``--partitions`` partitions (RF 3, preferred leaders round-robin, so this broker leads a
    third and follows the rest); not measured;
(b) what the new controller (broker 1) sends in its failover after broker 3 died: the
    LeaderAndIsr making this broker leader of its share of broker 3's partitions, the full
    state (INIT) and the ISR shrinks, with their UpdateMetadata; measured: CPU time of all of
    (b), best of ``--rounds`` (each round a fresh broker given (a) again), and per request;
(c) a Metadata request for every topic, as ``bench/failover.py``'s probe sends every 50 ms:
    the first after (b) and the best of 20 repeats.

The requests of (a) and (b) are the ones the controllers of ``bench/controller_failover.py``
send to this broker (captured from its ``EncodingChannel``). ``--save-requests FILE`` writes
them and ``--requests FILE`` reads them instead of running the controllers, so that another
revision's broker code can be given the very same bytes.

``build_broker`` is the only function that knows how a broker's parts are constructed.
The fetchers' connections to leaders never complete (no fetch traffic is part of the figure).

Prints the figures and, with ``--profile``, the top 40 functions by cumulative time of (b) in
one more round (cProfile). Asserts only that every request was answered without an error.

Usage: python bench/broker_failover_apply.py [--partitions 10000] [--broker 2] [--rounds 5]
       [--profile] [--save-requests FILE | --requests FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from twisted.internet import defer, task  # noqa: E402

from broker_core.wire import apis  # noqa: E402
from broker_core.wire.apis import ApiKey  # noqa: E402

#: One captured request in a requests file: phase (b"a" or b"b"), frame size, frame.
_RECORD = struct.Struct(">cI")


def build_broker(broker_id: int, log_dir: Path, clock: task.Clock) -> tuple[Any, Any]:
    """The broker's request handler and replica manager, wired as ``BrokerService`` wires
    them (the store-backed topic-config callbacks left out: they touch one entry per topic)."""
    from broker_core.config.broker_config import BrokerConfig
    from broker_core.log import LogConfig, LogManager
    from broker_core.metadata_cache import MetadataCache
    from broker_core.metrics import BrokerMetrics
    from broker_core.replica.fetcher import FetcherConfig
    from broker_core.replica.manager import ReplicaManager
    from broker_core.server.handlers import RequestHandler
    from tests.support.inline_pool import InlinePool

    config = BrokerConfig.from_mapping({"broker.id": str(broker_id), "log.dirs": str(log_dir),
                                        "zookeeper.connect": "zk:2181"})
    cache = MetadataCache()
    logs = LogManager([log_dir], LogConfig(), time_ms=lambda: int(clock.seconds() * 1000))
    pool = InlinePool()  # the epoch-file writes run at once on this thread: counted
    replicas = ReplicaManager(
        broker_id, logs, clock=clock, io_pool=pool, reactor=pool,
        topic_log_config=lambda topic: LogConfig(), metadata_cache=cache,
        metrics=BrokerMetrics(), fetcher_config=FetcherConfig(),
        broker_epoch=lambda: 0, connect=lambda host, port: defer.Deferred())
    handler = RequestHandler(broker_id=broker_id, config=config, cache=cache,
                             replicas=replicas, store=None, clock=clock,
                             broker_epoch=lambda: 0, control_plane_closed=True)
    return handler, replicas


class _Connection:
    """What the handler reads of a server connection: its security (a broker's login for the
    control requests, an anonymous client for Metadata)."""

    def __init__(self, is_broker: bool) -> None:
        from broker_core.security.principal import plaintext

        self.security = plaintext()
        if is_broker:
            from broker_core.security.principal import Principal

            self.security.authenticate(Principal("User", "broker"), is_broker=True)


def capture(partitions: int, topics: int, broker: int) -> dict[bytes, list[bytes]]:
    """The request frames the controllers of ``bench/controller_failover.py`` send ``broker``:
    phase a, broker 3 taking office over brokers 1-3; phase b, broker 1's failover after 3
    died."""
    from bench import controller_failover as cf

    def store(alive: tuple[int, ...], epoch: int) -> Any:
        return cf.cluster(partitions, topics, alive, epoch, as_registered=True,
                          spread_followers=True)

    _, before = cf.run_failover(store((1, 2, 3), 5), 3, 5, keep=True)
    _, after = cf.run_failover(store((1, 2), 6), 1, 6, keep=True)
    return {b"a": [f for _, f in before[broker].frames or ()],
            b"b": [f for _, f in after[broker].frames or ()]}


def save(path: Path, frames: dict[bytes, list[bytes]]) -> None:
    with open(path, "wb") as f:
        for phase, fs in frames.items():
            for frame in fs:
                f.write(_RECORD.pack(phase, len(frame)))
                f.write(frame)


def load(path: Path) -> dict[bytes, list[bytes]]:
    data = path.read_bytes()
    frames: dict[bytes, list[bytes]] = {b"a": [], b"b": []}
    pos = 0
    while pos < len(data):
        phase, size = _RECORD.unpack_from(data, pos)
        pos += _RECORD.size
        frames[phase].append(data[pos:pos + size])
        pos += size
    return frames


def serve(handler: Any, clock: task.Clock, frame: bytes, conn: _Connection) -> bytes:
    """One request as ``KafkaServerProtocol`` handles it: decode, dispatch, encode the answer;
    then the end of the reactor turn (what was put off to it runs)."""
    request = apis.decode_request(frame)
    result = handler(request, conn)
    if not isinstance(result, (dict, defer.Deferred)) and result is not None:
        result = defer.Deferred.fromCoroutine(result)
    if isinstance(result, defer.Deferred):
        got: list = []
        result.addBoth(got.append)
        if not got:
            raise RuntimeError(f"api {request.header.api_key} waited for something")
        result = got[0]
        if isinstance(result, Exception) or hasattr(result, "raiseException"):
            result.raiseException()
    h = request.header
    out = b"".join(apis.encode_response(h.api_key, h.api_version, h.correlation_id, result))
    if isinstance(result, dict) and result.get("error_code"):
        raise RuntimeError(f"api {h.api_key} answered error {result['error_code']}")
    clock.advance(0)
    return out


def metadata_frame(topics: int, correlation_id: int) -> bytes:
    """A client's Metadata request for every topic, at the highest version served."""
    version = apis.SUPPORTED[ApiKey.METADATA].max_version
    return b"".join(apis.encode_request(
        ApiKey.METADATA, version, correlation_id, "probe",
        {"topics": [{"name": f"t{t}"} for t in range(topics)],
         "allow_auto_topic_creation": False}))


def one_round(frames: dict[bytes, list[bytes]], broker: int, topics: int,
              profile: cProfile.Profile | None = None) -> dict[str, Any]:
    """A fresh broker given (a), then (b) measured, then (c)."""
    tmp = Path(tempfile.mkdtemp(prefix="broker-failover-apply-"))
    clock = task.Clock()
    handler, replicas = build_broker(broker, tmp, clock)
    control, client = _Connection(True), _Connection(False)
    try:
        for frame in frames[b"a"]:
            serve(handler, clock, frame, control)
        serve(handler, clock, metadata_frame(topics, 1), client)
        leading_before = sum(1 for p in replicas.partitions.values() if p.is_leader)
        gc.collect()
        per_request = []
        if profile is not None:
            profile.enable()
        t0 = time.process_time()
        for frame in frames[b"b"]:
            t = time.process_time()
            serve(handler, clock, frame, control)
            per_request.append((ApiKey(apis.decode_request(frame).header.api_key).name,
                                len(frame), time.process_time() - t))
        apply_cpu = time.process_time() - t0
        if profile is not None:
            profile.disable()
        t = time.process_time()
        size = len(serve(handler, clock, metadata_frame(topics, 2), client))
        first_metadata = time.process_time() - t
        repeats = []
        for i in range(20):
            t = time.process_time()
            serve(handler, clock, metadata_frame(topics, 3 + i), client)
            repeats.append(time.process_time() - t)
        leading_after = sum(1 for p in replicas.partitions.values() if p.is_leader)
        return {"apply": apply_cpu, "per_request": per_request, "metadata_first": first_metadata,
                "metadata_best": min(repeats), "metadata_bytes": size,
                "leading": (leading_before, leading_after)}
    finally:
        defer.Deferred.fromCoroutine(replicas.stop()).addErrback(lambda f: None)
        clock.advance(0)
        replicas.log_manager.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=0,
                    help="number of topics (default: one per 1,000 partitions)")
    ap.add_argument("--broker", type=int, default=2, choices=(1, 2),
                    help="the surviving broker measured (1 is also the new controller)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--save-requests", type=Path, help="write the captured requests here")
    ap.add_argument("--requests", type=Path, help="read the requests from here")
    args = ap.parse_args()
    topics = args.topics or max(1, (args.partitions + 999) // 1000)
    from broker_core.tap import BROKER_GC_THRESHOLDS

    gc.set_threshold(*BROKER_GC_THRESHOLDS)  # as in a broker process
    frames = (load(args.requests) if args.requests
              else capture(args.partitions, topics, args.broker))
    if args.save_requests:
        save(args.save_requests, frames)
    runs = [one_round(frames, args.broker, topics) for _ in range(args.rounds)]
    best = min(runs, key=lambda r: r["apply"])
    all_ms = ", ".join(f"{r['apply'] * 1000:.0f}" for r in runs)
    print(f"broker {args.broker} applying the new controller's failover requests "
          f"({len(frames[b'b'])} requests, {sum(map(len, frames[b'b'])):,} bytes; "
          f"leader of {best['leading'][0]:,} then {best['leading'][1]:,} partitions): "
          f"CPU best {best['apply'] * 1000:.0f} ms of {args.rounds} "
          f"(all: {all_ms})")
    for name, size, cpu in best["per_request"]:
        print(f"  {name:<16} {size:>10,} bytes  {cpu * 1000:7.1f} ms")
    print(f"Metadata of {topics} topics ({best['metadata_bytes']:,} bytes): first after the "
          f"update best {min(r['metadata_first'] for r in runs) * 1000:.1f} ms, repeated "
          f"best {min(r['metadata_best'] for r in runs) * 1000:.1f} ms")
    if args.profile:
        prof = cProfile.Profile()
        one_round(frames, args.broker, topics, prof)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
