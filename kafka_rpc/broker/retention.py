"""Which retention each diskless partition gets (per-topic configs from the
metadata log drive the retention task).

Kafka's ``LogConfig``: a topic's ``retention.ms`` / ``retention.bytes`` (ConfigRecords of the
topic, resource type 2, in the metadata image) override the broker's ``log.retention.ms`` /
``log.retention.bytes``; -1 (any negative value) means no limit. A partition whose topic is not in
the image (a topic created through InitDisklessTopics, which has no metadata-log topic) gets the
broker defaults. Retention deletes batches, a write, so a node applies it only to the partitions
whose Batch Coordinator it leads (``owns``, see ``kafka_rpc.coordinator.ownership.owner_check``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from kafka_rpc.coordinator.api import EnforceRetentionRequest, TopicIdPartition
from kafka_rpc.coordinator.errors import error_code_of

__all__ = ["NO_COORDINATOR_HERE", "RetentionFailures", "retention_requests", "topic_retention"]

#: Kafka codes that mean "no Batch Coordinator replica here can do it" rather than a failure:
#: COORDINATOR_LOAD_IN_PROGRESS (14), COORDINATOR_NOT_AVAILABLE (15), NOT_COORDINATOR (16).
NO_COORDINATOR_HERE = frozenset((14, 15, 16))


def _int_or(value: str | None, default: int) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:  # CreateTopics validates it; never trust a config blindly
        return default


def topic_retention(
    image: Any, topic_id: UUID, default_ms: int, default_bytes: int
) -> tuple[int, int]:
    """``(retention.ms, retention.bytes)`` of ``topic_id`` (ms, bytes; negative = no limit):
    the topic's configs in ``image`` where set, else the defaults."""
    t = None if image is None else image.topics.get(topic_id)
    if t is None:
        return default_ms, default_bytes
    cfg = image.topic_configs(t.name)
    return (
        _int_or(cfg.get("retention.ms"), default_ms),
        _int_or(cfg.get("retention.bytes"), default_bytes),
    )


def retention_requests(
    image: Any,
    partitions: Iterable[TopicIdPartition],
    default_ms: int,
    default_bytes: int,
    owns: Callable[[UUID, int], bool] | None = None,
) -> list[EnforceRetentionRequest]:
    """One ``EnforceRetentionRequest(tp, retention_bytes, retention_ms)`` per partition that has
    a limit (ms or bytes >= 0) and that ``owns`` accepts (all when None), in input order."""
    out = []
    per_topic: dict[UUID, tuple[int, int]] = {}
    for tp in partitions:
        if owns is not None and not owns(tp.topic_id, tp.partition):
            continue
        lim = per_topic.get(tp.topic_id)
        if lim is None:
            lim = per_topic[tp.topic_id] = topic_retention(
                image, tp.topic_id, default_ms, default_bytes
            )
        ms, nbytes = lim
        if ms < 0 and nbytes < 0:
            continue
        out.append(EnforceRetentionRequest(tp, nbytes, ms))
    return out


class RetentionFailures:
    """How the retention task (``Node._retention_loop``, every
    ``log.retention.check.interval.ms``) reports a pass that raised, on ``logger``:

    * no coordinator replica here to do it -- an exception whose code
      (:func:`~kafka_rpc.coordinator.errors.error_code_of`) is in :data:`NO_COORDINATOR_HERE`,
      e.g. ``CoordinatorNotAvailableError`` on a broker-only node, which runs no
      ``__diskless-metadata`` replica: at DEBUG, every time (retention is the coordinator
      leaders' work);
    * any other failure: at ERROR with its traceback the first time it occurs (the same type
      and message is the same failure), at DEBUG while it repeats, so a lasting fault is one
      traceback, not one per interval. A pass that succeeds after failures is logged at INFO
      and forgets them (a later failure is reported again).
    """

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._seen: set[tuple[str, str]] = set()
        #: passes that raised (either kind), for tests and the logs
        self.failures = 0

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        if error_code_of(exc) in NO_COORDINATOR_HERE:
            self._log.debug("retention: skipped, no coordinator replica here can apply it: %r",
                            exc)  # fmt: skip
            return
        key = (type(exc).__qualname__, str(exc))
        if key in self._seen:
            self._log.debug("retention: failed again: %r", exc)
            return
        self._seen.add(key)
        self._log.error("retention task failed; retrying every interval (the same failure "
                        "is not logged again until a pass succeeds)", exc_info=exc)  # fmt: skip

    def succeeded(self) -> None:
        if self._seen:
            self._log.info("retention: a pass succeeded after %d failure(s)", len(self._seen))
            self._seen.clear()
