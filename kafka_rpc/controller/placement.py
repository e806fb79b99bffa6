"""Replica placement for new partitions (Kafka's ``StripedReplicaPlacer``), used by CreateTopics
and CreatePartitions (:mod:`kafka_rpc.controller.replication`) and the creation of
``__diskless-metadata`` (:mod:`kafka_rpc.controller.coordinator_mapping`).

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

**Which brokers may hold a partition** (docs/kafka-brokers.md, 'What works'). A kafka-rpc broker is
known by a feature of ours in its BrokerRegistration
(:func:`~kafka_rpc.controller.cluster.is_kafka_rpc_broker`; it lists
:data:`BATCH_COORDINATOR_FEATURE`); any other broker is taken for an Apache Kafka broker.

* ``__diskless-metadata``: only brokers that run our Batch Coordinator
  (:func:`coordinator_hosts`), whatever their roles: a broker-only node holds replicas as a
  combined one does (the replicas' Raft traffic goes over the inter-broker listener). A Kafka
  broker never gets one.
* A classic topic (not ``diskless.enable=true``): a kafka-rpc broker role serves no classic
  Produce / Fetch, so while any Kafka broker is registered, only Kafka brokers
  (:func:`classic_brokers`). In a cluster of kafka-rpc brokers alone, every broker, as before
  (such topics are metadata: chunks and reassignment work on them).
* A diskless topic: every broker (its data lives in object storage; the Batch Coordinator is
  chosen by the mapping, not by the partition's replicas).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from kafka_rpc.controller.base import ApiError
from kafka_rpc.controller.cluster import is_kafka_rpc_broker
from kafka_rpc.controller.image import MetadataImage
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "BATCH_COORDINATOR_FEATURE",
    "DISKLESS_METADATA_TOPIC",
    "classic_brokers",
    "coordinator_hosts",
    "place_replicas",
    "replica_pool",
    "runs_batch_coordinator",
    "usable_brokers",
]

DISKLESS_METADATA_TOPIC = "__diskless-metadata"
"""The internal topic whose partitions are the Batch Coordinators' logs (KIP-1164)."""
BATCH_COORDINATOR_FEATURE = "kafka_rpc.diskless.version"
"""The feature a kafka-rpc broker lists in its BrokerRegistration (supported up to level 1): it
runs our KIP-1164 Batch Coordinator. The name is under our own prefix, which Kafka's features never
use (docs/features.md, 'The features')."""

runs_batch_coordinator = is_kafka_rpc_broker
"""Whether a registered broker runs our Batch Coordinator: it is a kafka-rpc broker
(:func:`~kafka_rpc.controller.cluster.is_kafka_rpc_broker`); a Kafka broker does not."""


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


def coordinator_hosts(image: MetadataImage) -> list[int]:
    """Unfenced brokers (not in controlled shutdown) that run our Batch Coordinator, whatever
    their roles (controller voters or broker-only nodes). Sorted: where ``__diskless-metadata``
    replicas may go."""
    return [b for b in image.unfenced_brokers() if runs_batch_coordinator(image.brokers[b])]


def replica_pool(
    image: MetadataImage, topic_name: str, diskless: bool
) -> tuple[list[int] | None, str]:
    """``(brokers, what)``: where a new partition of topic ``topic_name`` may go (module
    docstring; ``brokers`` None = every usable broker) and how the messages name them."""
    if topic_name == DISKLESS_METADATA_TOPIC:
        return coordinator_hosts(image), "broker(s) running the Batch Coordinator"
    if not diskless and any(not is_kafka_rpc_broker(r) for r in image.brokers.values()):
        return classic_brokers(image), "Kafka broker(s)"
    return None, "broker(s)"


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
    pool: str = "broker(s)",
) -> list[tuple[int, ...]]:
    """The replica lists (broker ids, leader first) of ``n`` new partitions with ``rf``
    replicas each, from the usable brokers (:func:`usable_brokers`) among ``candidates`` (all
    registered brokers when None; ``pool`` names them in the messages, e.g. ``"broker(s)
    running the Batch Coordinator"``). Raises ApiError INVALID_PARTITIONS (``n <= 0``) or
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
            f"{rf} cannot be reached because only {len(usable)} {pool} are registered.",
        )
    if not any(not image.brokers[b].fenced for b in usable):
        raise ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): All brokers are currently fenced.",
        )
    by_rack: dict[str | None, tuple[list[int], list[int]]] = {}
    for bid in usable:
        reg = image.brokers[bid]
        unfenced, fenced = by_rack.setdefault(reg.rack, ([], []))
        (fenced if reg.fenced else unfenced).append(bid)
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
