"""A consumer's subscription: Kafka's ZooKeeper-consumer "topic count" JSON, parsed and checked.

``{"version": 1, "pattern": "static", "subscription": {"events": 2, "audit": 1}}`` asks for two
streams of ``events`` and one of ``audit``. A wildcard subscription has exactly one entry, a
Java-style regular expression and its stream count (Kafka's ``WildcardTopicCount``):
``white_list`` takes every topic the expression matches *fully*, ``black_list`` every topic it
does not. As in Kafka's ``TopicFilter``, commas in a white list mean "or" (``a,b`` is ``a|b``).

Consumer thread ids are Kafka's ``<consumer_id>-<n>``, ``n`` from 0: a static subscription gives
each topic its own count of threads; a wildcard one gives every matching topic the same threads.

Pure: no I/O, no Twisted. Every problem raises :class:`InvalidTopicCount` with a message a person
can act on (the coordinator answers INVALID_TOPIC_COUNT with it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker_core.metadata_paths import validate_topic_name

STATIC = "static"
WHITE_LIST = "white_list"
BLACK_LIST = "black_list"
PATTERNS = (STATIC, WHITE_LIST, BLACK_LIST)

#: More streams than this for one topic is a typo, not a plan (each stream is a thread id the
#: assignor sorts and the consumer runs).
MAX_STREAMS = 1024

#: A topic count is a short JSON text; refuse anything huge before parsing it.
MAX_TOPIC_COUNT_BYTES = 64 * 1024


class InvalidTopicCount(ValueError):
    """The topic count cannot be used; the message says why."""


@dataclass(frozen=True)
class TopicCount:
    """A validated subscription. Invariants: ``pattern`` is one of :data:`PATTERNS`; static
    subscriptions name valid topics with 1..MAX_STREAMS streams; wildcard ones hold exactly one
    compiled expression."""

    pattern: str
    subscription: dict[str, int]
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @property
    def is_wildcard(self) -> bool:
        return self.pattern != STATIC

    def matches(self, topic: str) -> bool:
        """Does this subscription take ``topic``?"""
        if self.pattern == STATIC:
            return topic in self.subscription
        assert self._regex is not None
        hit = self._regex.fullmatch(topic) is not None
        return hit if self.pattern == WHITE_LIST else not hit

    def streams(self, topic: str) -> int:
        """Streams (consumer threads) for ``topic``; 0 if not subscribed."""
        if self.pattern == STATIC:
            return self.subscription.get(topic, 0)
        return next(iter(self.subscription.values())) if self.matches(topic) else 0

    def topics(self, known: Iterable[str]) -> set[str]:
        """The topics taken: the named ones (static, known or not: a consumer may subscribe
        before the topic exists), or the known topics a wildcard matches."""
        if self.pattern == STATIC:
            return set(self.subscription)
        return {t for t in known if self.matches(t)}

    def thread_ids(self, consumer_id: str, topic: str) -> list[str]:
        """Kafka's consumer thread ids of ``consumer_id`` for ``topic``."""
        return [f"{consumer_id}-{n}" for n in range(self.streams(topic))]


def parse(text: str) -> TopicCount:
    """Parse and check a topic count; raises :class:`InvalidTopicCount`."""
    if len(text.encode("utf-8", "replace")) > MAX_TOPIC_COUNT_BYTES:
        raise InvalidTopicCount(f"topic count is longer than {MAX_TOPIC_COUNT_BYTES} bytes")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise InvalidTopicCount(f"topic count is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise InvalidTopicCount("topic count must be a JSON object with 'pattern' and "
                                "'subscription'")
    version = value.get("version", 1)
    if version != 1:
        raise InvalidTopicCount(f"topic count version {version!r} is not supported (only 1)")
    pattern = value.get("pattern", STATIC)
    if pattern not in PATTERNS:
        raise InvalidTopicCount(f"unknown topic count pattern {pattern!r}; expected one of "
                                f"{', '.join(PATTERNS)}")
    sub = value.get("subscription")
    if not isinstance(sub, dict) or not sub:
        raise InvalidTopicCount("topic count 'subscription' must be a non-empty object of "
                                "topic (or regex) -> stream count")
    for key, count in sub.items():
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_STREAMS:
            raise InvalidTopicCount(f"stream count for {key!r} must be an integer from 1 to "
                                    f"{MAX_STREAMS}, got {count!r}")
    if pattern == STATIC:
        for topic in sub:
            try:
                validate_topic_name(topic)
            except ValueError as e:
                raise InvalidTopicCount(f"subscription: {e}") from None
        return TopicCount(STATIC, dict(sub))
    if len(sub) != 1:
        raise InvalidTopicCount(f"a {pattern} subscription has exactly one regular expression, "
                                f"got {len(sub)}")
    expr = next(iter(sub))
    # Kafka's TopicFilter: commas separate alternatives in a white list; blanks are dropped.
    source = expr.replace(",", "|").replace(" ", "") if pattern == WHITE_LIST else expr
    try:
        regex = re.compile(source)
    except (re.error, RecursionError, OverflowError) as e:
        raise InvalidTopicCount(f"subscription regex {expr!r} does not compile ({e})") from None
    return TopicCount(pattern, dict(sub), regex)
