"""A minimal stand-in for the QuorumController loop around the sans-io core: run a command,
append its records to an in-memory log (framed and decoded again, as the Raft log would), replay
them at their offsets, track heartbeats as BrokerHeartbeatManager would."""

from __future__ import annotations

import random
import uuid

from pyrsistent import pmap

from kafka_rpc.controller import cluster, producer_ids, replication
from kafka_rpc.controller.base import ControllerContext
from kafka_rpc.controller.features import (
    BootstrapMetadata,
    default_feature_levels,
    record_version,
    supported_features,
)
from kafka_rpc.controller.image import EMPTY, MetadataImage, evolve
from kafka_rpc.controller.replay import replay
from kafka_rpc.protocol import codec

R = codec.message_class
CT = codec.module("CreateTopicsRequest")
BR = codec.module("BrokerRegistrationRequest")
DT = codec.module("DeleteTopicsRequest")
CLUSTER = "test-cluster-id"


def bootstrapped(levels=None, kafka_compatible: bool = False) -> MetadataImage:
    """The empty image with the finalized ``levels`` (default: a new cluster's, every proposal
    on unless ``kafka_compatible``), as the bootstrap records leave it (offsets still -1)."""
    if levels is None:
        levels = default_feature_levels(kafka_compatible=kafka_compatible)
    return evolve(EMPTY, features=pmap({k: v for k, v in levels.items() if v > 0
                                        and k != "kraft.version"}))  # fmt: skip


def broker_features(**ranges):
    """BrokerRegistration Features: every range this code supports, ``ranges`` (name with
    ``_`` for ``.`` -> (min, max), None drops it) replacing some."""
    fs = dict(supported_features())
    for k, v in ranges.items():
        name = k.replace("__", ".")
        if v is None:
            fs.pop(name, None)
        else:
            fs[name] = v
    return tuple(
        BR.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
        for n, (lo, hi) in sorted(fs.items())
    )


KAFKA_FEATURES = broker_features(kafka_rpc__diskless__version=None, kafka_rpc__chunks__version=None)
"""An Apache Kafka broker's Features: Kafka's ranges, none of ours (so the controller also takes
it for a broker that does not run the Batch Coordinator: ``kafka_rpc.controller.placement``)."""


class Cluster:
    def __init__(self, seed: int = 0, session_timeout_ms: int = 9000, levels=None,
                 kafka_compatible: bool = False):  # fmt: skip
        # the bootstrap records in the log (followers replay them too), as a new cluster's
        # first active controller writes them
        self.image: MetadataImage = EMPTY
        self.log: list[bytes] = []
        self.now = 0
        self.rng = random.Random(seed)
        self.heartbeats: dict[int, int] = {}
        self.session_timeout_ms = session_timeout_ms
        self.incarnations: dict[int, uuid.UUID] = {}
        if levels is None:
            levels = default_feature_levels(kafka_compatible=kafka_compatible)
        boot = BootstrapMetadata.from_levels(levels)
        self.image = bootstrapped(levels)  # the versions of the bootstrap records
        self.apply(list(boot.records), start=EMPTY)

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

    def apply(self, records: list, start: MetadataImage | None = None) -> None:
        version_image = self.image
        if start is not None:
            self.image = start
        for rec in records:
            data = codec.encode_record(rec, record_version(rec, version_image))
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
            # every range this code supports; kafka=True: an Apache Kafka broker's (none of our
            # features, so it registers only where they are not finalized)
            features=kw.pop("features", KAFKA_FEATURES if kw.pop("kafka", False)
                            else broker_features()),  # fmt: skip
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
