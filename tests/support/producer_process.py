"""A Sluice producer in its own process, for system tests (the test process's reactor belongs to
pytest-twisted, which drives it only inside Twisted tests, so blocking clients there would
wait forever).

``python -m tests.support.producer_process SPEC_JSON`` sends keyed messages ``m-<n>`` to
``spec["topic"]`` with acks=all, in rounds of 50, until SIGTERM, and appends one JSON line per
outcome to ``spec["out"]`` (unbuffered): ``{"ok": [partition, offset], "v": value}`` or
``{"err": "..."}``. It exits after the round in progress when told to stop.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def main(argv: list[str]) -> int:
    from consumer_client.blocking_producer import BlockingProducer

    spec = json.loads(argv[1])
    fd = os.open(spec["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with BlockingProducer({"bootstrap.servers": spec["bootstrap"], "acks": "all",
                           "linger.ms": 5, "request.timeout.ms": 5000,
                           "delivery.timeout.ms": 30000}) as producer:
        i = 0
        while not stopping:
            values = [b"m-%07d" % (i + k) for k in range(50)]
            futures = [producer.send(spec["topic"], v, key=v) for v in values]
            i += 50
            lines = []
            for v, f in zip(values, futures, strict=True):
                try:
                    md = f.get(timeout=60)  # past delivery.timeout.ms: it has an outcome
                    lines.append({"ok": [md.partition, md.offset], "v": v.decode()})
                except Exception as e:  # noqa: BLE001 - a failed send is an outcome to record
                    lines.append({"err": repr(e)})
            os.write(fd, b"".join(json.dumps(line).encode() + b"\n" for line in lines))
            time.sleep(spec.get("pause_s", 0.05))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
