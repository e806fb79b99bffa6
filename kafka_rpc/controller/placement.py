"""Replica placement for new partitions (a simplified Kafka ``StripedReplicaPlacer``), used by
CreateTopics (:mod:`kafka_rpc.controller.replication`) and the creation of
``__diskless-metadata`` (:mod:`kafka_rpc.controller.coordinator_mapping`)."""

from __future__ import annotations

import random

from kafka_rpc.controller.base import ApiError
from kafka_rpc.controller.image import MetadataImage
from kafka_rpc.protocol.errors import ErrorCode

__all__ = ["place_replicas"]


def place_replicas(
    image: MetadataImage, n: int, rf: int, rng: random.Random
) -> list[tuple[int, ...]]:
    """The replica lists (broker ids) of ``n`` new partitions with ``rf`` replicas each.

    Roughly Kafka's StripedReplicaPlacer without racks: active brokers sorted by id, a random
    start, partition p gets the ``rf`` brokers from ``start + p`` round-robin. Raises ApiError
    INVALID_PARTITIONS (``n <= 0``) or INVALID_REPLICATION_FACTOR (``rf <= 0``, no active
    broker, or fewer active brokers than ``rf``), with Kafka's messages."""
    if n <= 0:
        raise ApiError(
            ErrorCode.INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        )
    if rf <= 0:
        raise ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    usable = image.unfenced_brokers()
    if not usable:
        raise ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): All brokers are currently fenced.",
        )
    if rf > len(usable):
        raise ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): The target replication factor of "
            f"{rf} cannot be reached because only {len(usable)} broker(s) are registered.",
        )
    start = rng.randrange(len(usable))
    return [tuple(usable[(start + p + j) % len(usable)] for j in range(rf)) for p in range(n)]
