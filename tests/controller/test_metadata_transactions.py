"""Metadata transactions (KIP-868) as Kafka's OffsetControlManager and ActivationRecordsGenerator
handle them: a Kafka active controller wraps an empty log's bootstrap records in
Begin/EndTransactionRecord; an AbortTransactionRecord reverts everything since the Begin; a new
active controller whose log ends inside a transaction first writes AbortTransactionRecord
("Controller failover") and then the bootstrap records again; no snapshot is taken inside a
transaction."""

from __future__ import annotations

import pytest

from kafka_rpc.controller.quorum_controller import QuorumController
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import decode_batches, encode_batch
from tests.controller.harness import CLUSTER
from tests.raft.conftest import leader_node

R = codec.message_class


def mv(level=25):
    return R("FeatureLevelRecord")(name="metadata.version", feature_level=level)


def quota(value):
    m = codec.module("ClientQuotaRecord")
    return R("ClientQuotaRecord")(entity=(m.EntityData(entity_type="user", entity_name="a"),),
                                  key="producer_byte_rate", value=value)  # fmt: skip


BEGIN = R("BeginTransactionRecord")(name="Bootstrap records")
END = R("EndTransactionRecord")()
ABORT = R("AbortTransactionRecord")(reason="Controller failover")


def commit(qc: QuorumController, *runs, epoch: int = 1) -> None:
    """Hand ``qc`` committed batches, one per run of records, from offset ``qc.committed_offset
    + 1`` on."""
    off = qc.committed_offset + 1
    batches = []
    for run in runs:
        data = encode_batch(off, epoch, [codec.encode_record(r) for r in run], 1000).data
        batches += decode_batches(data)
        off += len(run)
    qc.handle_commit(batches)


def test_records_wrapped_in_a_committed_transaction_stand():
    qc = QuorumController(1, CLUSTER)
    commit(qc, [BEGIN, mv()], [END])
    assert qc.image.features["metadata.version"] == 25 and qc.transaction is None
    assert qc.image.last_offset == 2 and qc.skipped_records == 0


@pytest.mark.parametrize("split", [False, True], ids=["one-batch", "batch-per-record"])
def test_an_aborted_transaction_is_reverted(split):
    qc = QuorumController(1, CLUSTER)
    commit(qc, [mv(), quota(1.0)])
    before = qc.image
    recs = [BEGIN, quota(2.0), mv(24)]
    commit(qc, *([r] for r in recs)) if split else commit(qc, recs)
    assert qc.in_transaction and qc.transaction.start_offset == 2
    assert qc.image.features["metadata.version"] == 24  # the controller replays as it goes
    commit(qc, [ABORT, quota(3.0)])
    assert not qc.in_transaction
    assert qc.image.features == before.features
    assert list(qc.image.client_quotas.values())[0]["producer_byte_rate"] == 3.0
    assert qc.image.last_offset == 6


def test_end_or_abort_without_begin_and_begin_inside_a_transaction_are_refused():
    qc = QuorumController(1, CLUSTER)
    commit(qc, [mv()], [END], [ABORT])
    assert qc.skipped_records == 2 and qc.transaction is None
    commit(qc, [BEGIN], [BEGIN])
    assert qc.skipped_records == 3 and qc.transaction.start_offset == 3


class AppendOnly:
    """What the controller needs of RaftDriver here: ``core.next_offset`` and ``append``
    (which keeps the records)."""

    def __init__(self, next_offset: int):
        self.core = self
        self.next_offset = next_offset
        self.written: list = []

    def append(self, records):
        self.written += [codec.decode_record(v)[0] for v in records]
        self.next_offset += len(records)
        return self.next_offset - 1


def test_new_active_controller_aborts_the_open_transaction_then_bootstraps_again():
    """A Kafka leader died between its BeginTransactionRecord and EndTransactionRecord of the
    bootstrap: the next active controller writes AbortTransactionRecord ("Controller failover")
    and the bootstrap records again (ActivationRecordsGenerator.recordsForNonEmptyLog); no
    snapshot is taken while the transaction is open."""
    qc = QuorumController(1, CLUSTER, clock_ms=lambda: 0)
    commit(qc, [BEGIN, mv(21)], epoch=1)  # an earlier leader's, never ended
    assert qc.in_transaction
    node = leader_node(epoch=2, sm=qc)
    assert node.core.create_snapshot(0) is None  # not a stable offset
    driver = AppendOnly(qc.committed_offset + 2)  # after the new leader's LeaderChange batch
    qc.attach(driver)
    qc.handle_leader_change(1, 2)
    assert qc.is_active
    qc.tick()
    assert driver.written[0] == ABORT
    assert driver.written[1] == mv(25)  # the aborted bootstrap again, at our level
    assert qc.uncommitted_image.features["metadata.version"] == 25
    # a follower replaying those records ends where our speculative image is
    qc2 = QuorumController(2, CLUSTER)
    commit(qc2, [BEGIN, mv(21)], driver.written, epoch=1)
    assert not qc2.in_transaction and qc2.image.features == qc.uncommitted_image.features
