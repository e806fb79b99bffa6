"""MetadataLogState: replay, snapshot records that rebuild an equal image, the active writer."""

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import (
    CONTROL_SNAPSHOT_FOOTER,
    CONTROL_SNAPSHOT_HEADER,
    encode_batch,
    encode_control_batch,
)
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.metadata_state import (
    BOOTSTRAP_METADATA_VERSION,
    ActiveWriter,
    FeatureLevelRecord,
    MetadataLogState,
    NoOpRecord,
)

FLR = codec.encode_record(FeatureLevelRecord(name="metadata.version", feature_level=25))
NOOP = codec.encode_record(NoOpRecord())


class Reader:
    def __init__(self, sid, batches):
        self.snapshot_id = sid
        self._batches = batches

    def batches(self):
        return iter(self._batches)


def _snapshot(sid, records):
    header = encode_control_batch(0, sid.epoch, [(CONTROL_SNAPSHOT_HEADER, b"\0\0" + bytes(8))], 0)
    body = encode_batch(1, sid.epoch, records, 0)
    footer = encode_control_batch(1 + len(records), sid.epoch, [(CONTROL_SNAPSHOT_FOOTER, b"")], 0)
    return Reader(sid, [header, body, footer])


def test_replay_counts_and_skips_control_batches():
    st = MetadataLogState(1)
    st.handle_commit([
        encode_control_batch(0, 1, [(2, b"x")], 0),
        encode_batch(1, 1, [FLR, NOOP], 0),
        encode_batch(3, 2, [NOOP], 0),
    ])  # fmt: skip
    assert st.committed_offset == 3 and st.committed_epoch == 2
    assert st.record_counts == {"FeatureLevelRecord": 1, "NoOpRecord": 2}
    assert st.features == {"metadata.version": 25}
    assert st.last_feature_level.feature_level == 25 and st.noop_seen
    st.handle_commit([encode_batch(3, 2, [NOOP], 0)])  # redelivery: ignored
    assert st.record_counts["NoOpRecord"] == 2


def test_snapshot_records_rebuild_an_equal_image():
    st = MetadataLogState(1)
    st.handle_commit([encode_batch(0, 1, [FLR, NOOP, NOOP], 0)])
    other = MetadataLogState(2)
    other.handle_load_snapshot(_snapshot(OffsetAndEpoch(3, 1), st.snapshot_records()))
    assert other.image() == st.image()
    assert (other.committed_offset, other.committed_epoch) == (2, 1)
    empty = MetadataLogState(3)
    assert empty.snapshot_records() == []


class FakeDriver:
    def __init__(self):
        self.appended = []

    def append(self, records):
        self.appended.append(records)
        return len(self.appended)


def test_active_writer_bootstraps_then_noops():
    st = MetadataLogState(1)
    drv = FakeDriver()
    w = ActiveWriter(drv, st, 500)
    assert not w.tick()  # not the leader
    st.handle_leader_change(1, 3)
    assert w.tick()
    rec, _ = codec.decode_record(drv.appended[0][0])
    assert (rec.name, rec.feature_level) == ("metadata.version", BOOTSTRAP_METADATA_VERSION)
    assert w.tick()  # bootstrap appended, not yet committed: a NoOp, not a second bootstrap
    assert drv.appended[1] == [NOOP]
    st.handle_leader_change(2, 4)
    assert not w.tick()
