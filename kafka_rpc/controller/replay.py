"""``replay(image, record, offset) -> image``: how every node builds its image from the log.

A thin dispatcher: each record type's rule is the ``REPLAY`` table of the control manager that
owns it (:mod:`~kafka_rpc.controller.features`, :mod:`~kafka_rpc.controller.cluster`,
:mod:`~kafka_rpc.controller.replication`, :mod:`~kafka_rpc.controller.configuration`,
:mod:`~kafka_rpc.controller.producer_ids`, :mod:`~kafka_rpc.controller.acls`,
:mod:`~kafka_rpc.controller.scram`, :mod:`~kafka_rpc.controller.client_quotas`,
:mod:`~kafka_rpc.controller.delegation_tokens`, :mod:`~kafka_rpc.controller.chunks`,
:mod:`~kafka_rpc.controller.coordinator_mapping`, and the metadata transaction markers of
:mod:`~kafka_rpc.controller.offsets`, which leave a single image unchanged), each the
``replay`` method of the Kafka class named in its docstring. A record that contradicts the image
raises :class:`~kafka_rpc.controller.base.ReplayError`, which Kafka treats as a fatal fault (the
node stops: its state would diverge from the log). ``offset`` is the record's log offset; for
records loaded from a snapshot it is the snapshot's last contained offset (Kafka's
``QuorumController.handleLoadSnapshot``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar, cast

from kafka_rpc.controller import (
    acls,
    chunks,
    client_quotas,
    cluster,
    configuration,
    coordinator_mapping,
    delegation_tokens,
    features,
    offsets,
    producer_ids,
    replication,
    scram,
)
from kafka_rpc.controller.base import ReplayError, apply_record
from kafka_rpc.controller.image import ImageDraft, MetadataImage

__all__ = ["MANAGERS", "ReplayError", "replay", "replay_all"]

MANAGERS = (
    features,
    cluster,
    replication,
    configuration,
    client_quotas,
    producer_ids,
    acls,
    scram,
    delegation_tokens,
    coordinator_mapping,
    chunks,
    offsets,
)
"""Every control manager module, in Kafka's ``MetadataImage.write`` order (the snapshot's): each
has ``REPLAY`` (record type name -> replay rule; the tables are disjoint) and ``SNAPSHOT`` (its
snapshot writers, ``(MetadataImage) -> list`` of records)."""


def _noop(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """NoOpRecord, and ZkMigrationStateRecord (Kafka 4.x replays it as a no-op: migration from
    ZooKeeper is gone, the record only survives in logs begun on 3.x): only moves the image's
    offset."""
    return img


_HANDLERS = {
    "NoOpRecord": _noop,
    "ZkMigrationStateRecord": _noop,
    **{name: rule for manager in MANAGERS for name, rule in manager.REPLAY.items()},
}
"""Record type name -> replay rule, over every manager."""


#: an image, or a draft of one (a rule works on either and returns the draft it was given)
_Image = TypeVar("_Image", MetadataImage, ImageDraft)


def replay(image: _Image, record: Any, offset: int, epoch: int | None = None) -> _Image:
    """The image after applying decoded metadata ``record`` written at log ``offset`` (in leader
    ``epoch``, or the image's current epoch when None). Raises ReplayError, or TypeError for a
    record type the controller does not know."""
    return cast(_Image, apply_record(_HANDLERS, cast(MetadataImage, image), record, offset, epoch))


def replay_all(
    image: MetadataImage, records: Iterable[tuple[Any, int]], epoch: int | None = None
) -> MetadataImage:
    """Replay ``(record, offset)`` pairs in order."""
    for rec, off in records:
        image = replay(image, rec, off, epoch)
    return image
