"""One Sluice consumer in its own process, for system tests that kill -9 or SIGSTOP consumers.

``python -m tests.support.consumer_process SPEC_JSON`` runs a Twisted-native consumer and
appends one JSON line per event to ``spec["out"]``, written unbuffered (one ``write`` each), so
a line is on disk before the consumer reports the position it stands for: whatever the
coordinator was told was consumed, the test can see.

Events: ``{"ev": "state", "state": ..., "gen": ..., "parts": [[topic, p], ...], "t": ...}`` on
every state change, ``{"ev": "msg", "topic", "p", "o", "v", "t"}`` per message delivered.
SIGTERM closes the consumer (handing over its final positions) and exits.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any


def main(argv: list[str]) -> int:
    from twisted.internet import reactor

    from consumer_client.consumer import Consumer, ConsumerConfig

    spec = json.loads(argv[1])
    fd = os.open(spec["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(**ev: Any) -> None:
        ev["t"] = time.time()
        os.write(fd, json.dumps(ev).encode() + b"\n")

    config = ConsumerConfig.from_mapping({
        "bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
        "consumer.id": spec["consumer_id"], "topics": spec["topics"],
        "topic.pattern": spec.get("pattern", "static"),
        "session.timeout.ms": spec.get("session_timeout_ms", 6000),
        "auto.offset.reset": "smallest", "fetch.max.wait.ms": 200})
    consumer = Consumer(config, reactor=reactor)

    def changed(member: Any) -> None:
        emit(ev="state", state=member.state.value, gen=member.generation,
             parts=sorted([t, p] for t, p in member.assignment))

    def delivered(m: Any) -> None:
        emit(ev="msg", topic=m.topic, p=m.partition, o=m.offset,
             v=m.value.decode(errors="replace") if m.value is not None else None)

    def stop(*_: Any) -> None:
        d = consumer.close()
        d.addBoth(lambda _: reactor.stop())

    consumer.on_state_change(changed)
    consumer.start()
    consumer.consume(delivered).addErrback(lambda f: emit(ev="error", why=str(f.value)))
    signal.signal(signal.SIGTERM, lambda *_: reactor.callFromThread(stop))
    reactor.run(installSignalHandlers=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
