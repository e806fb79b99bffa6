"""Metadata transactions (KIP-868) and the activation records (Kafka's
``ActivationRecordsGenerator``): the committed image takes a transaction's records at its End and
drops them at an Abort, no snapshot cuts one, a new active controller writes the bootstrap
transaction on an empty log and aborts one left open, synchronously, before any command."""

from __future__ import annotations

import asyncio

import pytest

from kafka_rpc.controller import features, snapshot
from kafka_rpc.controller.base import ReplayError
from kafka_rpc.controller.features import BootstrapMetadata, activation_records
from kafka_rpc.controller.image import EMPTY
from kafka_rpc.controller.quorum_controller import QuorumController
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.protocol.record_batch import decode_batches, encode_batch
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.memory import MemorySnapshotReader
from tests.controller.harness import bootstrapped
from tests.controller.test_quorum_controller import Setup, pending, registration
from tests.raft.conftest import leader_node

R = codec.message_class
MV = R("FeatureLevelRecord")(name="metadata.version", feature_level=29)
BEGIN = R("BeginTransactionRecord")(name="Bootstrap records")
END = R("EndTransactionRecord")()
ABORT = R("AbortTransactionRecord")(reason="Controller failover")


def quota(value: float):
    m = codec.module("ClientQuotaRecord")
    return R("ClientQuotaRecord")(entity=(m.EntityData(entity_type="user", entity_name="a"),),
                                  key="producer_byte_rate", value=value)  # fmt: skip


def topic(name: str, n: int):
    import uuid

    return R("TopicRecord")(name=name, topic_id=uuid.UUID(int=n))


class Log:
    """Committed batches handed to a QuorumController, offsets assigned in order."""

    def __init__(self, qc: QuorumController, epoch: int = 1):
        self.qc, self.epoch, self.next = qc, epoch, 0

    def commit(self, *records) -> None:
        data = [codec.encode_record(r) for r in records]
        batch = encode_batch(self.next, self.epoch, data, 0)
        self.next += len(data)
        self.qc.handle_commit(decode_batches(batch.data))


def test_a_transaction_takes_effect_at_its_end():
    qc = QuorumController(1, "c")
    log = Log(qc)
    log.commit(MV)
    log.commit(BEGIN, topic("a", 1))
    assert qc.image.topic_by_name("a") is None and qc.image.last_offset == 0
    assert qc.in_transaction  # no snapshot may cut the open transaction
    assert qc.committed_offset == 2
    log.commit(topic("b", 2), END)
    assert qc.image.topic_by_name("a") and qc.image.topic_by_name("b")
    assert qc.image.last_offset == 4 and not qc.in_transaction


def test_an_aborted_transaction_leaves_no_trace():
    qc = QuorumController(1, "c")
    log = Log(qc)
    log.commit(MV)
    log.commit(BEGIN, topic("a", 1))
    log.commit(topic("b", 2))
    log.commit(ABORT, topic("c", 3))  # a record after the abort counts
    img = qc.image
    assert img.topic_by_name("a") is None and img.topic_by_name("b") is None
    assert img.topic_by_name("c") is not None and img.last_offset == 5


@pytest.mark.parametrize("split", [False, True], ids=["one-batch", "batch-per-record"])
def test_an_aborted_transaction_is_reverted_however_it_is_batched(split):
    qc = QuorumController(1, "c")
    log = Log(qc)
    log.commit(MV, quota(1.0))
    before = qc.image
    recs = [BEGIN, quota(2.0), R("FeatureLevelRecord")(name="metadata.version", feature_level=24)]
    for run in [[r] for r in recs] if split else [recs]:
        log.commit(*run)
    assert qc.in_transaction  # the published image waits for the End
    assert qc.image.features == before.features
    assert qc.image.client_quotas == before.client_quotas
    log.commit(ABORT, quota(3.0))
    assert not qc.in_transaction and qc.image.features == before.features
    assert list(qc.image.client_quotas.values())[0]["producer_byte_rate"] == 3.0
    assert qc.image.last_offset == 6


def test_misplaced_markers_are_refused():
    qc = QuorumController(1, "c")
    log = Log(qc)
    log.commit(MV, END)  # no transaction open: the End is a ReplayError, skipped
    assert qc.skipped_records == 1
    log.commit(BEGIN, BEGIN, topic("a", 1), END)  # the second Begin is refused
    assert qc.skipped_records == 2 and qc.image.topic_by_name("a") is not None


def test_markers_never_appear_in_a_snapshot():
    img = bootstrapped()
    with pytest.raises(ReplayError, match="cannot appear within a snapshot"):
        snapshot.load([codec.encode_record(MV), codec.encode_record(BEGIN)])
    assert snapshot.load(snapshot.image_records(img)).features == img.features


def test_a_snapshot_load_closes_the_open_transaction():
    qc = QuorumController(1, "c")
    log = Log(qc)
    log.commit(MV)
    log.commit(BEGIN, topic("a", 1))
    snap = encode_batch(0, 1, snapshot.image_records(bootstrapped()), 0).data
    qc.handle_load_snapshot(MemorySnapshotReader(OffsetAndEpoch(10, 1), snap))
    assert not qc.in_transaction and qc.image.last_offset == 9


# ============================================================================ activation
def test_activation_records_as_kafkas_generator():
    boot = BootstrapMetadata.from_levels(features.default_feature_levels())
    recs, msg = activation_records(EMPTY, boot)
    names = [type(r).__spec_name__ for r in recs]
    assert names[0] == "BeginTransactionRecord" and recs[0].name == "Bootstrap records"
    assert names[-1] == "EndTransactionRecord"
    assert recs[1:-1] == list(boot.records) and "in metadata transaction" in msg
    # an open (bootstrap) transaction on an empty log: abort it, then the bootstrap again
    recs, msg = activation_records(EMPTY, boot, transaction_start=3)
    assert [type(r).__spec_name__ for r in recs[:2]] == [
        "AbortTransactionRecord", "BeginTransactionRecord"]
    assert recs[0].reason == "Controller failover" and "Aborting partial bootstrap" in msg
    # a log with metadata.version: nothing, or an Abort for an open transaction
    assert activation_records(bootstrapped(), boot)[0] == []
    assert activation_records(bootstrapped(), boot, 7)[0] == [ABORT]
    # below 3.6-IV1 there are no transactions: the bootstrap alone (one atomic batch)
    old = BootstrapMetadata.from_levels({"metadata.version": 12})
    assert [type(r).__spec_name__ for r in activation_records(EMPTY, old)[0]] == [
        "FeatureLevelRecord"]
    with pytest.raises(features.FeatureError, match="Cannot continue"):
        activation_records(EMPTY, old, transaction_start=2)
    # ELR on: the cluster-level min.insync.replicas (never with our levels, which keep ELR 0)
    elr = BootstrapMetadata(boot.records, "test", {**boot.levels,
                                                   "eligible.leader.replicas.version": 1})
    recs = activation_records(EMPTY, elr, min_insync_replicas=2)[0]
    cfg = recs[-2]
    assert (cfg.resource_type, cfg.resource_name, cfg.name, cfg.value) == (
        4, "", "min.insync.replicas", "2")


class FakeDriver:
    """The driver's append side only: records appended become ``written``."""

    def __init__(self, next_offset: int):
        self.core = type("Core", (), {"next_offset": next_offset})()
        self.written: list[bytes] = []

    def append(self, records):
        self.written.extend(records)
        self.core.next_offset += len(records)
        return self.core.next_offset - 1


def test_a_new_leader_aborts_the_transaction_a_failed_leader_left_open():
    qc = QuorumController(1, "c")
    log = Log(qc)
    log.commit(MV)
    log.commit(BEGIN, topic("a", 1))  # the old leader died here
    qc.attach(FakeDriver(log.next))
    qc.handle_leader_change(1, 2)
    assert qc.is_active
    written = [codec.decode_record(d)[0] for d in qc.driver.written]
    assert written == [ABORT]
    assert qc.uncommitted_image.topic_by_name("a") is None
    log.epoch = 2
    log.commit(*written)
    assert qc.image.topic_by_name("a") is None and not qc.in_transaction


def test_a_new_leader_of_a_half_bootstrapped_log_aborts_and_bootstraps_again():
    qc = QuorumController(1, "c")
    log = Log(qc)
    log.commit(BEGIN, MV)  # the first leader's bootstrap transaction, cut short
    assert features.METADATA_VERSION not in qc.image.features
    # the Raft core cuts no snapshot there: not a stable offset
    assert leader_node(epoch=2, sm=qc).core.create_snapshot(0) is None
    qc.attach(FakeDriver(log.next))
    qc.handle_leader_change(1, 2)
    names = [type(codec.decode_record(d)[0]).__spec_name__ for d in qc.driver.written]
    assert names[:2] == ["AbortTransactionRecord", "BeginTransactionRecord"]
    assert names[-1] == "EndTransactionRecord"
    log.commit(*[codec.decode_record(d)[0] for d in qc.driver.written])
    assert dict(qc.image.features) == {k: v for k, v in qc.bootstrap.levels.items() if v}
    # a follower replaying the same log ends where the new leader's uncommitted image is
    follower = QuorumController(2, "c")
    Log(follower).commit(BEGIN, MV, *[codec.decode_record(d)[0] for d in qc.driver.written])
    assert not follower.in_transaction
    assert follower.image.features == qc.uncommitted_image.features == qc.image.features


async def test_no_write_precedes_the_bootstrap_records():
    """The race Kafka's ``ActivationRecordsGenerator`` rules out: a registration handled right after
    activation must find metadata.version already written (the bootstrap is appended while the
    leader change is handled, before any write event)."""
    s = Setup()
    s.commit()  # the leader change reaches the controller: it writes the bootstrap at once
    assert features.METADATA_VERSION in s.qc.uncommitted_image.features
    task = await pending(s.qc.register_broker(registration(), 4))
    s.commit()
    assert (await task).error_code == 0
    batches = [b for b in s.node.log.batches(0, s.node.log.end_offset) if not b.is_control]
    names = [type(codec.decode_record(v)[0]).__spec_name__ for b in batches for v in b.records]
    assert names[0] == "BeginTransactionRecord"
    assert names.index("EndTransactionRecord") < names.index("RegisterBrokerRecord")


def test_writes_are_refused_until_metadata_version_is_written():
    """No metadata.version in the uncommitted image (the bootstrap append failed): every write
    event answers NOT_CONTROLLER instead of writing records no version can be chosen for."""
    qc = QuorumController(1, "c", bootstrap=BootstrapMetadata.default())

    class Refusing(FakeDriver):
        def append(self, records):
            from kafka_rpc.raft.core import NotLeaderError

            raise NotLeaderError("not yet")

    qc.attach(Refusing(0))
    qc.handle_leader_change(1, 1)  # the activation append is refused: renounced
    assert not qc.is_active
    qc._active_epoch = 1  # as if active without a bootstrap
    resp = asyncio.run(qc.register_broker(registration(), 4))
    assert resp.error_code == ErrorCode.NOT_CONTROLLER
