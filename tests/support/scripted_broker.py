"""A Kafka-speaking server over real sockets whose answers a test scripts, for the blocking
clients' retry, deadline and timeout paths (which a real broker would only reach by chance),
and a test clock for them.

:class:`ScriptedBroker` accepts any number of connections, answers ApiVersions with the codec's
versions, and every other request with ``answer(api_key, body)``: a response body (dict, the
codec fills the fields left out) or ``None`` to close the connection unanswered. Every request
is recorded in ``requests``. :meth:`ScriptedBroker.close` stops the server and joins its threads:
nothing is left behind.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from broker_core.wire import apis, framing
from broker_core.wire.apis import ApiKey


class FakeClock:
    """A blocking client's clock (``monotonic`` and ``sleep``) whose ``sleep`` advances it at
    once and is recorded: no real waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    def monotonic(self) -> float:
        return self.now


Answer = Callable[[int, Any], "dict | None"]


class ScriptedBroker:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[tuple[int, Any]] = []
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.port = self._srv.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def of(self, api_key: int) -> list[Any]:
        """The bodies of the requests of ``api_key`` received so far."""
        with self._lock:
            return [b for k, b in self.requests if k == api_key]

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return  # closed
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            with self._lock:
                self._conns.append(conn)
                self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        dec = framing.FrameDecoder()
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                for frame in dec.feed(data):
                    req = apis.decode_request(frame)
                    key, version = req.header.api_key, req.header.api_version
                    if key == ApiKey.API_VERSIONS:
                        body: dict | None = {"error_code": 0, "throttle_time_ms": 0,
                                             "api_keys": apis.advertised_versions()}
                    else:
                        with self._lock:
                            self.requests.append((key, req.body))
                        body = self.answer(key, req.body)
                    if body is None:
                        return
                    conn.sendall(b"".join(framing.frame(apis.encode_response(
                        key, version, req.header.correlation_id, body))))
        except OSError:
            return  # the client or close() shut the connection
        finally:
            conn.close()

    def close(self) -> None:
        try:
            self._srv.shutdown(socket.SHUT_RDWR)  # wakes the accept
        except OSError:
            pass  # not connected: Linux still wakes it on shutdown, others on close
        self._srv.close()
        self._accepting.join()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its thread
        for t in threads:
            t.join()

    def __enter__(self) -> ScriptedBroker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def metadata(port: int, topics: dict[str, list[tuple[int, int]]], *, node: int = 1,
             topic_errors: dict[str, int] | None = None,
             others: dict[int, int] | None = None) -> dict:
    """A Metadata answer naming broker ``node`` at ``127.0.0.1:port`` (and brokers ``others``,
    node id -> port) and ``topics`` (name -> ``(leader, partition error)`` per partition), plus
    refused topics ``topic_errors``."""
    nodes = {node: port, **(others or {})}
    return {"brokers": [{"node_id": n, "host": "127.0.0.1", "port": p, "rack": None}
                        for n, p in sorted(nodes.items())],
            "cluster_id": "c", "controller_id": node,
            "topics": [{"error_code": 0, "name": t, "partitions": [
                {"error_code": err, "partition_index": i, "leader_id": leader,
                 "leader_epoch": 0, "replica_nodes": [node], "isr_nodes": [node]}
                for i, (leader, err) in enumerate(parts)]} for t, parts in topics.items()]
            + [{"error_code": code, "name": t, "partitions": []}
               for t, code in (topic_errors or {}).items()]}
