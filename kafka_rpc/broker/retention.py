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

from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from kafka_rpc.coordinator.api import EnforceRetentionRequest, TopicIdPartition

__all__ = ["retention_requests", "topic_retention"]


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
