"""Snapshots (KIP-630): a snapshot is just the image written as records.

``image_records(image)`` gives the framed records (Kafka's ``AbstractApiMessageSerde`` framing,
``codec.encode_record``) that rebuild ``image`` from the empty image, in Kafka's
``MetadataImage.write`` order: features, brokers (with their fencing and controlled-shutdown
state), topics (TopicRecord, then one PartitionRecord per partition holding its current state,
epochs included, each followed by a ChunkRecord per inactive chunk of that partition, by start
offset, holding the chunk's current state and epoch), configs, the topics' Batch Coordinator
mappings (KIP-1164), producer ids.
``load(records, last_offset, last_epoch)`` replays them, every record at the snapshot's last
contained offset (QuorumController.handleLoadSnapshot), and gives
``load(image_records(img), img.last_offset, img.last_epoch) == img``.

One deviation from Kafka: the ProducerIdsRecord keeps the broker id and epoch of the last block
(Kafka writes -1 / -1); replay treats them identically and the image round-trips exactly.
The snapshot header/footer control records and the file format belong to the Raft layer.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafka_rpc.controller.coordinator_mapping import mapping_records
from kafka_rpc.controller.image import EMPTY, ImageDraft, MetadataImage
from kafka_rpc.controller.replay import replay
from kafka_rpc.protocol import codec

__all__ = ["image_records", "image_to_records", "load"]

_R = codec.message_class


def image_to_records(image: MetadataImage) -> list:
    """The decoded records that rebuild ``image`` (see the module docstring for the order)."""
    out: list = []
    for name in sorted(image.features):
        out.append(_R("FeatureLevelRecord")(name=name, feature_level=image.features[name]))
    reg_mod = codec.module("RegisterBrokerRecord")
    for bid in sorted(image.brokers):
        b = image.brokers[bid]
        out.append(
            _R("RegisterBrokerRecord")(
                broker_id=bid,
                is_migrating_zk_broker=b.is_migrating_zk_broker,
                incarnation_id=b.incarnation_id,
                broker_epoch=b.epoch,
                end_points=tuple(
                    reg_mod.BrokerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in b.endpoints
                ),
                features=tuple(
                    reg_mod.BrokerFeature(
                        name=n, min_supported_version=lo, max_supported_version=hi
                    )
                    for n, lo, hi in b.features
                ),
                rack=b.rack,
                fenced=b.fenced,
                in_controlled_shutdown=b.in_controlled_shutdown,
                log_dirs=b.log_dirs,
            )
        )
    for t in sorted(image.topics.values(), key=lambda t: t.name):
        out.append(_R("TopicRecord")(name=t.name, topic_id=t.topic_id))
        for i in sorted(t.partitions):
            p = t.partitions[i]
            out.append(
                _R("PartitionRecord")(
                    partition_id=i,
                    topic_id=t.topic_id,
                    replicas=p.replicas,
                    isr=p.isr,
                    removing_replicas=p.removing_replicas,
                    adding_replicas=p.adding_replicas,
                    leader=p.leader,
                    leader_recovery_state=p.leader_recovery_state,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                    directories=p.directories,
                    eligible_leader_replicas=p.elr,
                    last_known_elr=p.last_known_elr,
                    start_offset=p.start_offset,
                    start_timestamp=p.start_timestamp,
                )
            )
            for c in t.partition_chunks(i):
                out.append(
                    _R("ChunkRecord")(
                        partition_id=i,
                        topic_id=t.topic_id,
                        start_offset=c.start_offset,
                        start_timestamp=c.start_timestamp,
                        stop_offset=c.stop_offset,
                        end_offset=c.end_offset,
                        chunk_epoch=c.epoch,
                        replicas=c.replicas,
                        directories=c.directories,
                        isr=c.isr,
                        removing_replicas=c.removing_replicas,
                        adding_replicas=c.adding_replicas,
                        epoch=c.epoch,
                    )
                )
    for rtype, rname in sorted(image.configs):
        cfg = image.configs[(rtype, rname)]
        for k in sorted(cfg):
            out.append(
                _R("ConfigRecord")(resource_type=rtype, resource_name=rname, name=k, value=cfg[k])
            )
    out.extend(mapping_records(image))  # KIP-1164 TopicPartitionToBatchCoordinatorMapping
    pids = image.producer_ids
    if pids.next_producer_id >= 0:
        out.append(
            _R("ProducerIdsRecord")(
                broker_id=pids.broker_id,
                broker_epoch=pids.broker_epoch,
                next_producer_id=pids.next_producer_id,
            )
        )
    if image.acls:
        from kafka_rpc.security.acls import acl_records

        out.extend(acl_records(image))
    if image.scram:
        from kafka_rpc.security.sasl import image_scram_records

        out.extend(image_scram_records(image))
    return out


def image_records(image: MetadataImage) -> list[bytes]:
    """``image`` as framed metadata records (each at its latest version)."""
    return [codec.encode_record(r) for r in image_to_records(image)]


def load(records: Iterable[bytes], last_offset: int = -1, last_epoch: int = -1) -> MetadataImage:
    """The image a snapshot with id ``(last_offset + 1, last_epoch)`` holds: the framed
    ``records`` replayed on the empty image. Raises ReplayError (fatal) or DecodeError."""
    draft = ImageDraft(EMPTY)
    for data in records:
        rec, _version = codec.decode_record(data)
        replay(draft, rec, last_offset, last_epoch)
    draft.last_offset = last_offset
    draft.last_epoch = last_epoch
    return draft.freeze()
