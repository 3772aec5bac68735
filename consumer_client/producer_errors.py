"""The producer's exceptions. Every failure a send can end with names what a person needs to act
on: the topic, the partition, the broker, and Kafka's error code with its description."""

from __future__ import annotations

from broker_core.wire.errors import ErrorCode


class ProducerError(Exception):
    """Base class of everything the producer raises or fails a send with."""


class ProduceError(ProducerError):
    """A record (and the batch it travelled in) was not delivered.

    ``error_code`` is the broker's error (an :class:`ErrorCode`), or None when no broker answered
    (connection lost, request timed out); ``broker`` is the node id the batch was last sent to
    (-1 if it never left the client); ``attempts`` counts the Produce requests that carried it.
    """

    def __init__(self, topic: str, partition: int | None, broker: int,
                 error_code: ErrorCode | None, detail: str = "", attempts: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.broker = broker
        self.error_code = error_code
        self.detail = detail
        self.attempts = attempts
        super().__init__(self._message())

    @property
    def retriable(self) -> bool:
        """Whether sending again later might succeed (the error was transient)."""
        return self.error_code is None or self.error_code.retriable

    def _where(self) -> str:
        where = f"topic {self.topic!r}"
        if self.partition is not None:
            where += f" partition {self.partition}"
        if self.broker >= 0:
            where += f" (leader broker {self.broker})"
        return where

    def _message(self) -> str:
        msg = f"produce to {self._where()} failed"
        if self.error_code is not None:
            msg += f": {self.error_code.name} ({self.error_code.description})"
        if self.detail:
            msg += f": {self.detail}"
        if self.attempts > 1:
            msg += f" after {self.attempts} attempts"
        return msg


class DeliveryTimeout(ProduceError):
    """A batch was not acknowledged within ``delivery.timeout.ms``; ``error_code`` and ``detail``
    describe the last failure seen (e.g. NOT_ENOUGH_REPLICAS, or no leader)."""

    def __init__(self, topic: str, partition: int | None, broker: int,
                 error_code: ErrorCode | None, detail: str = "", attempts: int = 0,
                 timeout_ms: int = 0) -> None:
        self.timeout_ms = timeout_ms
        super().__init__(topic, partition, broker, error_code, detail, attempts)

    def _message(self) -> str:
        msg = (f"produce to {self._where()} timed out: not acknowledged within "
               f"delivery.timeout.ms={self.timeout_ms}")
        last = []
        if self.error_code is not None:
            last.append(f"{self.error_code.name} ({self.error_code.description})")
        if self.detail:
            last.append(self.detail)
        if last:
            msg += "; last error: " + ": ".join(last)
        if self.attempts:
            msg += f"; {self.attempts} attempts"
        return msg


class UnknownTopic(ProduceError):
    """The topic did not appear in the cluster metadata within ``max.block.ms``."""

    def _message(self) -> str:
        code = self.error_code or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return (f"topic {self.topic!r} is not in the cluster metadata: {code.name} "
                f"({code.description}){': ' + self.detail if self.detail else ''}")


class MetadataUnavailable(ProduceError):
    """No broker answered a metadata request within ``max.block.ms`` (none reachable, or each
    failed): whether the topic exists is not known. ``detail`` is the last failure, e.g.
    ``could not connect to any of: 127.0.0.1:9092 (Connection refused)``."""

    def _message(self) -> str:
        return (f"no broker answered for topic {self.topic!r}"
                f"{': ' + self.detail if self.detail else ''}")


class AuthenticationFailed(ProducerError):
    """A broker refused the producer's login (SASL_AUTHENTICATION_FAILED, an unsupported
    mechanism) or its TLS handshake (a certificate not signed by ``ssl.ca.location``). Sends
    waiting for metadata fail with it at once: the same settings would be refused again.
    ``cause`` is the underlying error."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"authentication failed: {cause}")
        self.cause = cause


class RecordTooLarge(ProducerError):
    """One record is larger than ``max.request.size`` or ``buffer.memory`` allows."""


class BufferExhausted(ProducerError):
    """``buffer.memory`` stayed full for ``max.block.ms``: the brokers do not keep up (or are
    unreachable) and the application sends faster than records are acknowledged."""


class ProducerClosed(ProducerError):
    """The producer was closed before the record could be sent."""
