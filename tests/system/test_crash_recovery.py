"""kill -9 a broker in the middle of an acks=1 produce, restart it: every acknowledged message
is read back, no torn batch is served, and the recovery is logged."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.support.procs import consume_all

pytestmark = pytest.mark.slow


def test_kill_minus_nine_mid_produce_keeps_acknowledged_messages(make_cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = make_cluster(size=1)
    cluster.start()
    cluster.wait_registered()
    broker = cluster.brokers[1]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("crash", 2, 1)])["crash"].result(timeout=30)

    acked: dict[tuple[int, int], bytes] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            with lock:
                acked[(msg.partition(), msg.offset())] = msg.value()

    def produce():
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1, "linger.ms": 2,
                      "message.timeout.ms": 5000, "retries": 0,
                      "batch.num.messages": 500})
        i = 0
        while not stop.is_set():
            try:
                p.produce("crash", value=b"m-%09d-" % i + b"z" * (i % 200),
                          partition=i % 2, on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.01)
            if i % 200 == 0:
                p.poll(0)
        p.flush(10)

    t = threading.Thread(target=produce)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(acked) >= 20_000, "producer made no progress"
    broker.kill(signal.SIGKILL)  # mid-produce: the producer is still sending
    time.sleep(0.5)
    stop.set()
    t.join(30)
    with lock:
        snapshot = dict(acked)

    broker.start()
    broker.wait_listening()
    cluster.wait_registered(timeout=60)

    got, _ = consume_all(cluster.bootstrap, "crash", 2, group="crash-check")

    missing = [k for k, v in snapshot.items() if got.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    for p in range(2):
        offsets = sorted(o for (q, o) in got if q == p)
        assert offsets == list(range(len(offsets))), "offsets must stay contiguous"
    log = broker.log_text()
    assert "was not shut down cleanly" in log and "recovered crash-" in log
