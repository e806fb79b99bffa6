"""Which Batch Coordinator owns a diskless partition, and whether this node serves it (KIP-1164
"Topic-partitions are assigned to one specific Batch Coordinator"; docs/batch-coordinator.md).

The one place that decides it, for the wire handlers (``kafka_rpc.handlers.diskless``: refuse
the entries this node does not serve), the node's retention task and the routing coordinator
(``kafka_rpc.coordinator.assigned``: send each entry to its owner's replica):

* the owner of a topic-partition is the ``__diskless-metadata`` partition the committed metadata
  image maps it to (the last TopicPartitionToBatchCoordinatorMapping record,
  :func:`kafka_rpc.controller.coordinator_mapping.coordinator_partition`), and
  :data:`DEFAULT_PARTITION` (0) for an unmapped one or a topic the image does not have;
* a topic-level write (InitDisklessTopics, DeleteDisklessTopics) belongs to the owner of the
  topic's partition 0 (the coordinator ``FindCoordinator write:<id>:0`` names);
* a node serves the coordinator partitions its coordinator says it does
  (``served_partitions(write)``: for writes those it leads, for reads those it has a replica
  of); any other coordinator (SQLite, PostgreSQL, memory) is coordinator partition 0;
* an entry this node does not serve answers COORDINATOR_LOAD_IN_PROGRESS (14, retriable) when
  its coordinator partition is one this node will serve once loaded
  (``loading_partitions(write)``, as Kafka's group coordinator answers while it loads), else
  NOT_COORDINATOR (16).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kafka_rpc.controller.coordinator_mapping import DEFAULT_COORDINATOR_PARTITION

from .errors import NOT_COORDINATOR

__all__ = [
    "COORDINATOR_LOAD_IN_PROGRESS",
    "DEFAULT_PARTITION",
    "NOT_COORDINATOR",
    "Owns",
    "coordinator_of",
    "loading_partitions",
    "owner_check",
    "owner_map",
    "served_partitions",
]

#: The coordinator partition of every unmapped topic-partition.
DEFAULT_PARTITION = DEFAULT_COORDINATOR_PARTITION
#: Kafka ``Errors.COORDINATOR_LOAD_IN_PROGRESS``.
COORDINATOR_LOAD_IN_PROGRESS = 14

_ZERO: frozenset[int] = frozenset((DEFAULT_PARTITION,))
_NONE: frozenset[int] = frozenset()

#: [image, {topic id: {partition: coordinator partition}}] of the last image asked about, as
#: plain dicts (a PMap lookup is Python code: this is on the CommitBatches path). Images are
#: immutable, so one cache serves every caller.
_cache: list[Any] = [None, {}]


def owner_map(image: Any) -> dict[uuid.UUID, dict[int, int]]:
    """``{topic id: {partition: coordinator partition}}`` of the topics of the metadata image
    ``image`` that have a mapping record (the others are coordinator partition 0's); ``{}`` for
    None. Cached for the last image: do not change the result."""
    if image is None:
        return {}
    cache = _cache
    if cache[0] is not image:  # the image changed: the mappings again
        cache[1] = {
            t.topic_id: dict(t.batch_coordinators)
            for t in image.topics.values()
            if t.batch_coordinators
        }
        cache[0] = image
    return cache[1]


def coordinator_of(owners: dict[uuid.UUID, dict[int, int]], topic_id: uuid.UUID,
                   partition: int) -> int:  # fmt: skip
    """The coordinator partition owning ``topic_id``'s ``partition`` in ``owners`` (an
    :func:`owner_map`): its mapping, else :data:`DEFAULT_PARTITION`."""
    m = owners.get(topic_id)
    return DEFAULT_PARTITION if m is None else m.get(partition, DEFAULT_PARTITION)


def served_partitions(coordinator: Any, write: bool) -> frozenset[int]:
    """The ``__diskless-metadata`` partitions this node's ``coordinator`` serves: with ``write``
    those whose writes it may decide (it leads them), else those it can answer reads for (it
    has a replica). A coordinator that knows its partitions says so
    (``served_partitions(write)``: the topic-based one); any other is coordinator partition 0."""
    served = getattr(coordinator, "served_partitions", None)
    if served is not None:
        return served(write)
    return _ZERO


def loading_partitions(coordinator: Any, write: bool) -> frozenset[int]:
    """The ``__diskless-metadata`` partitions ``coordinator`` has a replica of that cannot
    answer yet (``loading_partitions(write)`` of the topic-based coordinator: starting, or led
    here and still replaying or importing); empty for any other coordinator."""
    loading = getattr(coordinator, "loading_partitions", None)
    return loading(write) if loading is not None else _NONE


class Owns:
    """``owns(topic id, partition)``: whether this node's Batch Coordinator serves the
    partition (the coordinator partition it maps to is one this node serves); for one it does
    not, ``owns.refusal(topic id, partition)`` is the entry's error code:
    COORDINATOR_LOAD_IN_PROGRESS (14, retriable: this node has that coordinator's replica and
    it is starting, or it leads it and is still replaying or importing, as Kafka's group
    coordinator answers while it loads) or NOT_COORDINATOR (16: another node's coordinator).

    ``mapped``: an :func:`owner_map`; ``served`` / ``loading``: coordinator partitions
    (:func:`served_partitions`, :func:`loading_partitions`)."""

    __slots__ = ("_loading", "_mapped", "_served")

    def __init__(self, mapped: dict[uuid.UUID, dict[int, int]], served: frozenset[int],
                 loading: frozenset[int]) -> None:  # fmt: skip
        self._mapped = mapped
        self._served = served
        self._loading = loading

    def __call__(self, topic_id: uuid.UUID, partition: int) -> bool:
        return coordinator_of(self._mapped, topic_id, partition) in self._served

    def owns_topic(self, topic_id: uuid.UUID) -> bool:
        """A topic-level write belongs to the owner of the topic's partition 0."""
        return self(topic_id, 0)

    def refusal(self, topic_id: uuid.UUID, partition: int) -> int:
        if coordinator_of(self._mapped, topic_id, partition) in self._loading:
            return COORDINATOR_LOAD_IN_PROGRESS
        return NOT_COORDINATOR


def owner_check(
    image: Any, served: frozenset[int], loading: Callable[[], frozenset[int]]
) -> Owns | None:
    """The owner check of the entries of one kind of call (reads or writes) on this node: the
    mapping of the committed metadata image ``image`` against ``served``, the coordinator
    partitions this node serves for that kind (:func:`served_partitions`), and ``loading()``,
    those it will serve once loaded (:func:`loading_partitions`; called only when a check
    applies). None when no check applies -- no image, or every partition is coordinator 0's and
    this node serves 0 -- so every entry goes to the local coordinator."""
    if image is None:
        return None
    mapped = owner_map(image)
    if DEFAULT_PARTITION in served and not mapped:
        return None  # every partition is coordinator 0's, which this node serves
    return Owns(mapped, served, loading())
