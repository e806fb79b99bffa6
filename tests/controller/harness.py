"""A minimal stand-in for the QuorumController loop around the sans-io core: run a command,
append its records to an in-memory log (framed and decoded again, as the Raft log would), replay
them at their offsets, track heartbeats as BrokerHeartbeatManager would."""

from __future__ import annotations

import random
import uuid

from kafka_rpc.controller import cluster, producer_ids, replication
from kafka_rpc.controller.base import ControllerContext
from kafka_rpc.controller.image import EMPTY, MetadataImage
from kafka_rpc.controller.placement import BATCH_COORDINATOR_FEATURE
from kafka_rpc.controller.replay import replay
from kafka_rpc.protocol import codec

R = codec.message_class
CT = codec.module("CreateTopicsRequest")
BR = codec.module("BrokerRegistrationRequest")
DT = codec.module("DeleteTopicsRequest")
CLUSTER = "test-cluster-id"
RPC_FEATURES = (
    BR.Feature(name=BATCH_COORDINATOR_FEATURE, min_supported_version=0, max_supported_version=1),
)
"""What a kafka-rpc broker registers with besides metadata.version (it runs the Batch
Coordinator: ``kafka_rpc.controller.placement``)."""


class Cluster:
    def __init__(self, seed: int = 0, session_timeout_ms: int = 9000):
        self.image: MetadataImage = EMPTY
        self.log: list[bytes] = []
        self.now = 0
        self.rng = random.Random(seed)
        self.heartbeats: dict[int, int] = {}
        self.session_timeout_ms = session_timeout_ms
        self.incarnations: dict[int, uuid.UUID] = {}

    @property
    def next_offset(self) -> int:
        return len(self.log)

    def ctx(self, **kw) -> ControllerContext:
        base = {
            "now_ms": self.now,
            "next_offset": self.next_offset,
            "cluster_id": CLUSTER,
            "rng": self.rng,
            "last_heartbeat_ms": dict(self.heartbeats),
            "session_timeout_ms": self.session_timeout_ms,
        }
        base.update(kw)
        return ControllerContext(**base)

    def apply(self, records: list) -> None:
        for rec in records:
            data = codec.encode_record(rec)
            decoded, _ = codec.decode_record(data)
            self.image = replay(self.image, decoded, self.next_offset, 1)
            self.log.append(data)

    def run(self, fn, request, **ctx_kw):
        res = fn(self.image, request, self.ctx(**ctx_kw))
        self.apply(res.records)
        return res

    # ------------------------------------------------------------ shortcuts
    def register(self, broker_id: int, incarnation: uuid.UUID | None = None, **kw):
        inc = (
            incarnation
            or self.incarnations.get(broker_id)
            or uuid.UUID(int=self.rng.getrandbits(128))
        )
        self.incarnations[broker_id] = inc
        req = R("BrokerRegistrationRequest")(
            broker_id=broker_id,
            cluster_id=kw.pop("cluster_id", CLUSTER),
            incarnation_id=inc,
            listeners=(
                BR.Listener(name="PLAINTEXT", host=f"h{broker_id}", port=9092, security_protocol=0),
            ),
            log_dirs=kw.pop("log_dirs", (uuid.UUID(int=(broker_id + 1) << 64),)),
            # a kafka-rpc broker unless kafka=True (a Kafka broker does not know our feature)
            features=() if kw.pop("kafka", False) else RPC_FEATURES,
            rack=None,
            previous_broker_epoch=kw.pop("previous_broker_epoch", -1),
        )
        res = self.run(
            lambda img, r, ctx: cluster.register_broker(
                img, r, ctx, replication.broker_shutdown_records
            ),
            req,
        )
        if res.response.error_code == 0:
            self.heartbeats[broker_id] = self.now
        return res

    def heartbeat(self, broker_id: int, epoch: int | None = None, offset: int | None = None, **kw):
        reg = self.image.brokers.get(broker_id)
        req = R("BrokerHeartbeatRequest")(
            broker_id=broker_id,
            broker_epoch=epoch if epoch is not None else (reg.epoch if reg else 0),
            current_metadata_offset=self.next_offset - 1 if offset is None else offset,
            want_fence=kw.get("want_fence", False),
            want_shut_down=kw.get("want_shut_down", False),
        )
        res = self.run(replication.broker_heartbeat, req)
        if res.response.error_code == 0:
            self.heartbeats[broker_id] = self.now
        return res

    def live(self, *ids: int) -> None:
        for b in ids:
            self.register(b)
            self.heartbeat(b)

    def create(self, *topics, validate_only: bool = False):
        return self.run(
            replication.create_topics,
            R("CreateTopicsRequest")(topics=tuple(topics), validate_only=validate_only),
        )

    def delete(self, names=(), ids=()):
        topics = tuple(DT.DeleteTopicState(name=n) for n in names) + tuple(
            DT.DeleteTopicState(name=None, topic_id=i) for i in ids
        )
        return self.run(replication.delete_topics, R("DeleteTopicsRequest")(topics=topics))

    def allocate(self, broker_id: int, epoch: int | None = None):
        reg = self.image.brokers.get(broker_id)
        e = epoch if epoch is not None else (reg.epoch if reg else 0)
        return self.run(
            producer_ids.allocate_producer_ids,
            R("AllocateProducerIdsRequest")(broker_id=broker_id, broker_epoch=e),
        )

    def fence_stale(self):
        res = replication.fence_stale_brokers(
            self.image, self.heartbeats, self.now, self.session_timeout_ms, self.next_offset
        )
        self.apply(res.records)
        return res


def topic(name: str, n: int = 1, rf: int = 1, configs=(), assignments=()):
    return CT.CreatableTopic(
        name=name,
        num_partitions=n,
        replication_factor=rf,
        configs=tuple(CT.CreatableTopicConfig(name=k, value=v) for k, v in configs),
        assignments=tuple(
            CT.CreatableReplicaAssignment(partition_index=i, broker_ids=tuple(b))
            for i, b in assignments
        ),
    )
