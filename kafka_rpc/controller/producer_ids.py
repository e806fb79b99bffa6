"""Producer id blocks (Kafka's ``ProducerIdControlManager``, KIP-730).

* Command: :func:`allocate_producer_ids` (AllocateProducerIds), rate-limited per broker on the
  active controller by :class:`AllocationThrottle` (``producer.ids.allocation.max.per.second``).
* Replay: ProducerIdsRecord (:data:`REPLAY`).
* Snapshot part: :func:`producer_ids_records` (``ProducerIdsImage.write``). One deviation from
  Kafka: the record keeps the broker id and epoch of the last block (Kafka writes -1 / -1);
  replay treats them identically and the image round-trips exactly.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from kafka_rpc.controller.base import ControllerContext, ControllerResult, ReplayError
from kafka_rpc.controller.image import MetadataImage, ProducerIdsImage, evolve
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "PRODUCER_ID_BLOCK_SIZE",
    "REPLAY",
    "SNAPSHOT",
    "AllocationThrottle",
    "allocate_producer_ids",
    "producer_ids_records",
]

PRODUCER_ID_BLOCK_SIZE = 1000
"""Ids per AllocateProducerIds block (Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``)."""
_LONG_MAX = (1 << 63) - 1

_R = codec.message_class


def allocate_producer_ids(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """AllocateProducerIds (ProducerIdControlManager.generateNextProducerId).

    - BrokerId not registered, or BrokerEpoch != its registration epoch: STALE_BROKER_EPOCH
      (fencing is not checked: a fenced broker with the right epoch gets a block).
    - First id = the image's next producer id (0 for a new cluster); if it is above
      ``Long.MAX - 1000``: UNKNOWN_SERVER_ERROR (exhausted).
    - Otherwise the block [first, first + 999]: one ProducerIdsRecord{BrokerId, BrokerEpoch,
      NextProducerId = first + 1000} and the response {ProducerIdStart = first,
      ProducerIdLen = 1000}. The image moves only when the record is replayed, so the caller must
      replay it before running the next command, and answer only after commit.
    """
    Resp = _R("AllocateProducerIdsResponse")
    reg = image.brokers.get(request.broker_id)
    if reg is None or reg.epoch != request.broker_epoch:
        return ControllerResult([], Resp(error_code=ErrorCode.STALE_BROKER_EPOCH))
    first = max(image.producer_ids.next_producer_id, 0)
    if first > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
        return ControllerResult([], Resp(error_code=ErrorCode.UNKNOWN_SERVER_ERROR))
    rec = _R("ProducerIdsRecord")(
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        next_producer_id=first + PRODUCER_ID_BLOCK_SIZE,
    )
    return ControllerResult(
        [rec],
        Resp(error_code=0, producer_id_start=first, producer_id_len=PRODUCER_ID_BLOCK_SIZE),
    )


class AllocationThrottle:
    """The active controller's AllocateProducerIds rate limit: at most ``limit`` blocks per
    broker in any one-second window (ms timestamps of the granted blocks, in memory only; a new
    active controller starts empty)."""

    def __init__(self) -> None:
        self._allocations: dict[int, deque[int]] = {}

    def throttle_ms(self, broker_id: int, limit: int, now_ms: int) -> int:
        """ms until ``broker_id`` may get another block (0: now; always 0 for ``limit <= 0``).
        Over the limit the request gets THROTTLING_QUOTA_EXCEEDED with this ThrottleTimeMs."""
        window = self._allocations.get(broker_id)
        if limit <= 0 or not window:
            return 0
        while window and window[0] <= now_ms - 1000:
            window.popleft()
        if len(window) < limit:
            return 0
        return max(1, window[0] + 1000 - now_ms)

    def granted(self, broker_id: int, now_ms: int) -> None:
        """Count a block handed to ``broker_id`` at ``now_ms``."""
        self._allocations.setdefault(broker_id, deque()).append(now_ms)

    def clear(self) -> None:
        """Forget every allocation (on activation and resignation)."""
        self._allocations = {}


# ============================================================================ replay
def _producer_ids(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ProducerIdControlManager.replay(ProducerIdsRecord): ids only go up. Once a block was
    handed out, a NextProducerId <= the current one is a ReplayError; gaps are fine."""
    cur = img.producer_ids
    if cur.next_producer_id >= 0 and r.next_producer_id <= cur.next_producer_id:
        raise ReplayError(
            f"Next Producer ID from replayed record ({r.next_producer_id}) is not greater "
            f"than current next Producer ID in block ({cur.next_producer_id})"
        )
    return evolve(
        img, producer_ids=ProducerIdsImage(r.broker_id, r.broker_epoch, r.next_producer_id)
    )


REPLAY = {"ProducerIdsRecord": _producer_ids}


# ============================================================================ snapshot
def producer_ids_records(image: MetadataImage) -> list:
    """The ProducerIdsRecord of the next block, none before the first block was handed out."""
    pids = image.producer_ids
    if pids.next_producer_id < 0:
        return []
    return [
        _R("ProducerIdsRecord")(
            broker_id=pids.broker_id,
            broker_epoch=pids.broker_epoch,
            next_producer_id=pids.next_producer_id,
        )
    ]


SNAPSHOT = (producer_ids_records,)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""
