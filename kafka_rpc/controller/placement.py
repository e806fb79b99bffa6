"""Replica placement for new partitions (Kafka's ``StripedReplicaPlacer``), used by CreateTopics
(:mod:`kafka_rpc.controller.replication`) and the creation of ``__diskless-metadata``
(:mod:`kafka_rpc.controller.coordinator_mapping`).

The rules of ``StripedReplicaPlacer`` (its class javadoc and ``RackList.place``):

* the usable brokers are the registered ones that are not in controlled shutdown
  (``BrokerHeartbeatManager.usableBrokers``), **fenced ones included**: only the leader must be
  unfenced, so RF=3 works with one of three brokers down (its replica starts out of the ISR);
* brokers are grouped by rack (brokers without a rack form one group); the racks and, within
  each rack, the unfenced and the fenced brokers are shuffled once per placement;
* partition p's first replica (its leader) is the next unfenced broker of the first rack, from
  rack ``p``, that has one; its other replicas come one per rack from the following racks in
  turn, each rack giving its next unfenced broker, then its next fenced one, never a broker
  the partition already has; so the replicas spread over racks, and leaders over racks and
  brokers;
* too few usable brokers, or none unfenced: INVALID_REPLICATION_FACTOR with Kafka's messages.

Simplification: Kafka reshuffles every time as many partitions as there are unfenced brokers
have been placed; here one shuffle serves the whole request.

**Classic topics and kafka-rpc brokers** (DESIGN section 11, Placement): a kafka-rpc broker role
serves no classic Produce / Fetch, so while any other broker (an Apache Kafka broker) is
registered, classic topics are placed only on those (:func:`classic_brokers`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from kafka_rpc.controller.base import ApiError
from kafka_rpc.controller.cluster import is_kafka_rpc_broker
from kafka_rpc.controller.image import MetadataImage
from kafka_rpc.protocol.errors import ErrorCode

__all__ = ["classic_brokers", "place_replicas", "usable_brokers"]


def usable_brokers(image: MetadataImage) -> list[int]:
    """Registered brokers not in controlled shutdown (fenced or not), by id."""
    return sorted(b for b, reg in image.brokers.items() if not reg.in_controlled_shutdown)


def classic_brokers(image: MetadataImage) -> list[int]:
    """The brokers classic (non-diskless) partitions may go to: every registered broker, but
    kafka-rpc brokers (:func:`~kafka_rpc.controller.cluster.is_kafka_rpc_broker`) only while no
    other broker is registered (in a cluster of kafka-rpc nodes alone, classic topics stay
    metadata, as before)."""
    kafka = [b for b, reg in image.brokers.items() if not is_kafka_rpc_broker(reg)]
    return sorted(kafka) if kafka else sorted(image.brokers)


class _Brokers:
    """One shuffled broker list of a rack (Kafka's ``BrokerList``): within a partition it hands
    out its brokers in order; each new partition starts one further along."""

    def __init__(self, brokers: list[int]) -> None:
        self.brokers = brokers
        self.start = 0
        self.index = 0
        self.epoch = -1

    def next(self, epoch: int, taken: set) -> int | None:
        if not self.brokers:
            return None
        if epoch != self.epoch:
            self.epoch = epoch
            self.index = self.start
            self.start = (self.start + 1) % len(self.brokers)
        for _ in range(len(self.brokers)):
            b = self.brokers[self.index]
            self.index = (self.index + 1) % len(self.brokers)
            if b not in taken:
                return b
        return None


class _Rack:
    def __init__(self, unfenced: list[int], fenced: list[int]) -> None:
        self.unfenced = _Brokers(unfenced)
        self.fenced = _Brokers(fenced)

    def next_unfenced(self, epoch: int, taken: set) -> int | None:
        return self.unfenced.next(epoch, taken)

    def next_any(self, epoch: int, taken: set) -> int | None:
        b = self.unfenced.next(epoch, taken)
        return b if b is not None else self.fenced.next(epoch, taken)


def place_replicas(
    image: MetadataImage,
    n: int,
    rf: int,
    rng: random.Random,
    candidates: Iterable[int] | None = None,
) -> list[tuple[int, ...]]:
    """The replica lists (broker ids, leader first) of ``n`` new partitions with ``rf``
    replicas each, from the usable brokers (:func:`usable_brokers`) among ``candidates`` (all
    registered brokers when None). Raises ApiError INVALID_PARTITIONS (``n <= 0``) or
    INVALID_REPLICATION_FACTOR (``rf <= 0``, no unfenced broker, fewer usable brokers than
    ``rf``), with Kafka's messages."""
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
    allowed = None if candidates is None else set(candidates)
    usable = [b for b in usable_brokers(image) if allowed is None or b in allowed]
    if rf > len(usable):
        raise ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): The target replication factor of "
            f"{rf} cannot be reached because only {len(usable)} broker(s) are registered.",
        )
    if not any(not image.brokers[b].fenced for b in usable):
        raise ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): All brokers are currently fenced.",
        )
    by_rack: dict[str | None, tuple[list[int], list[int]]] = {}
    for b in usable:
        reg = image.brokers[b]
        unfenced, fenced = by_rack.setdefault(reg.rack, ([], []))
        (fenced if reg.fenced else unfenced).append(b)
    names = sorted(by_rack, key=lambda r: (r is None, r or ""))
    rng.shuffle(names)
    racks = []
    for name in names:
        unfenced, fenced = by_rack[name]
        rng.shuffle(unfenced)
        rng.shuffle(fenced)
        racks.append(_Rack(unfenced, fenced))
    out = []
    offset = rng.randrange(len(racks))
    for p in range(n):
        taken: set[int] = set()
        replicas: list[int] = []
        first = offset
        for i in range(len(racks)):  # the leader: an unfenced broker, from rack `offset` on
            b = racks[(offset + i) % len(racks)].next_unfenced(p, taken)
            if b is not None:
                first = (offset + i) % len(racks)
                replicas.append(b)
                taken.add(b)
                break
        idx = first
        while len(replicas) < rf:
            idx = (idx + 1) % len(racks)
            b = racks[idx].next_any(p, taken)
            if b is not None:
                replicas.append(b)
                taken.add(b)
        out.append(tuple(replicas))
        offset = (offset + 1) % len(racks)
    return out
