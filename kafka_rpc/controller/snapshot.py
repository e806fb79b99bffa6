"""Snapshots (KIP-630): a snapshot is just the image written as records.

``image_records(image)`` gives the framed records (Kafka's ``AbstractApiMessageSerde`` framing,
``codec.encode_record``) that rebuild ``image`` from the empty image: each control manager
writes its part, in Kafka's ``MetadataImage.write`` order: features
(:func:`~kafka_rpc.controller.features.feature_records`), brokers with their fencing and
controlled-shutdown state (:func:`~kafka_rpc.controller.cluster.broker_records`), registered
controllers, topics (TopicRecord, then one PartitionRecord per partition holding its current
state, epochs included; :func:`~kafka_rpc.controller.replication.topic_records`), configs,
client quotas, producer ids, ACLs, SCRAM credentials, delegation tokens; then our own
records, which need the topics: the topics' Batch Coordinator mappings (KIP-1164) and one
ChunkRecord per inactive chunk (KIP-1114), holding the chunk's current state and epoch.
``load(records, last_offset, last_epoch)`` replays them, every record at the snapshot's last
contained offset (QuorumController.handleLoadSnapshot), and gives
``load(image_records(img), img.last_offset, img.last_epoch) == img``.

Every record is written at the version the image's finalized features dictate
(:func:`~kafka_rpc.controller.features.record_version`), and our own records only while our
features allow them (the chunk and mapping writers write nothing otherwise), so a snapshot of a
Kafka-compatible cluster holds only what a Kafka node parses. A snapshot never holds a metadata
transaction marker (:func:`load` refuses one, as Kafka's ``OffsetControlManager``).

Deviation from Kafka: the ProducerIdsRecord keeps the broker id and epoch of the last
block (Kafka writes -1 / -1; replay treats them identically and the image round-trips exactly).
The snapshot header/footer control records and the file format belong to the Raft layer.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafka_rpc.controller import features, offsets
from kafka_rpc.controller.base import ReplayError
from kafka_rpc.controller.image import EMPTY, ImageDraft, MetadataImage
from kafka_rpc.controller.replay import MANAGERS, replay
from kafka_rpc.protocol import codec

__all__ = ["image_records", "image_to_records", "load"]

_WRITERS = tuple(write for manager in MANAGERS for write in manager.SNAPSHOT)
"""Each manager's snapshot part, in the order written."""


def image_to_records(image: MetadataImage) -> list:
    """The decoded records that rebuild ``image`` (see the module docstring for the order)."""
    out: list = []
    for write in _WRITERS:
        out.extend(write(image))
    return out


def image_records(image: MetadataImage) -> list[bytes]:
    """``image`` as framed metadata records, each at the version ``image``'s finalized levels
    dictate (:func:`~kafka_rpc.controller.features.record_version`)."""
    version = features.record_version
    return [codec.encode_record(r, version(r, image)) for r in image_to_records(image)]


def load(records: Iterable[bytes], last_offset: int = -1, last_epoch: int = -1) -> MetadataImage:
    """The image a snapshot with id ``(last_offset + 1, last_epoch)`` holds: the framed
    ``records`` replayed on the empty image. Raises ReplayError (fatal; also for a metadata
    transaction marker: "cannot appear within a snapshot") or DecodeError."""
    draft = ImageDraft(EMPTY)
    for data in records:
        rec, _version = codec.decode_record(data)
        if type(rec).__spec_name__ in offsets.MARKERS:
            raise ReplayError(f"{type(rec).__spec_name__} cannot appear within a snapshot.")
        replay(draft, rec, last_offset, last_epoch)
    draft.last_offset = last_offset
    draft.last_epoch = last_epoch
    return draft.freeze()
