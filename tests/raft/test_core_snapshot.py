"""RaftCore snapshots (KIP-630; ``KafkaRaftClient``, ``Snapshots``), in the spirit of
Kafka's ``KafkaRaftClientSnapshotTest``: writing a snapshot, a lagging follower redirected to
it by Fetch, the chunked FetchSnapshot download, and FetchSnapshot's error codes."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from kafka_rpc.protocol.record_batch import (
    CONTROL_SNAPSHOT_FOOTER,
    CONTROL_SNAPSHOT_HEADER,
    control_type,
    decode_batches,
    encode_control_batch,
)
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.memory import MemoryLog
from tests.raft.conftest import (
    FETCH,
    FETCH_SNAPSHOT,
    V_FETCH,
    V_SNAP,
    Node,
    deliver,
    fetch_partition,
    fetch_request,
    fetch_snapshot_request,
    follower_node,
    leader_node,
    make_node,
    one,
    snapshot_error_response,
    snapshot_partition,
)


def commit_records(n: Node, now: int, records: list[bytes], follower: int = 3) -> None:
    """Append ``records`` on leader ``n``, linger, flush, and let ``follower`` fetch them."""
    n.core.append(now, records)
    n.core.poll(now + 25)
    n.flush(now + 25)
    end = n.log.end_offset
    req = fetch_request(follower, n.core.epoch, end, n.core.epoch)
    fetch_partition(n.request(now + 26, FETCH, V_FETCH, req))
    assert n.core.high_watermark == end


def leader_with_snapshot(**kw: Any) -> tuple[Node, OffsetAndEpoch]:
    """Leader 1 of {1, 2, 3} at epoch 1 with committed records, a snapshot at the committed
    offset and the log start moved onto it."""
    n = leader_node(epoch=1, **kw)
    commit_records(n, 10, [b"a", b"b", b"c"])
    commit_records(n, 100, [b"d", b"e"])
    sid = n.core.create_snapshot(200)
    assert sid == OffsetAndEpoch(6, 1)
    assert n.log.delete_before_snapshot(sid)
    assert n.log.start_offset == 6
    return n, sid


# =============================================================================== create_snapshot


def test_create_snapshot_header_records_footer():
    n = make_node(1, voter_ids=(1,))
    n.flush(0)
    n.core.append(1, [b"x", b"y"])
    n.core.poll(26)
    n.flush(26)
    assert n.core.high_watermark == 3 and n.core.committed_offset == 3
    n.sm.snapshot = [b"rec-%d" % i for i in range(5)]
    sid = n.core.create_snapshot(30)
    assert sid == OffsetAndEpoch(3, 1)
    assert n.log.latest_snapshot_id() == sid
    reader = n.log.read_snapshot(sid)
    batches = list(reader.batches())
    assert len(batches) >= 3
    first, last = batches[0], batches[-1]
    assert first.is_control and control_type(first.keys[0]) == CONTROL_SNAPSHOT_HEADER
    header = codec.decode("SnapshotHeaderRecord", 0, first.records[0])
    assert header.version == 0
    assert last.is_control and len(last.records) == 1
    assert control_type(last.keys[0]) == CONTROL_SNAPSHOT_FOOTER
    assert codec.decode("SnapshotFooterRecord", 0, last.records[0]).version == 0
    data = [r for b in batches[1:-1] for r in b.records]
    assert data == [b"rec-%d" % i for i in range(5)]
    assert all(not b.is_control for b in batches[1:-1])
    # inside a snapshot, offsets start at 0 and every batch carries the snapshot epoch
    assert batches[0].base_offset == 0
    assert all(b.epoch == sid.epoch for b in batches)
    # the same id again: nothing new
    assert n.core.create_snapshot(31) is None


def test_create_empty_snapshot_has_exactly_header_and_footer():
    n = make_node(1, voter_ids=(1,))
    n.flush(0)
    n.sm.snapshot = []
    sid = n.core.create_snapshot(5)
    assert sid == OffsetAndEpoch(1, 1)
    records = [r for b in n.log.read_snapshot(sid).batches() for r in b.records]
    assert len(records) == 2


# =============================================================================== Fetch -> snapshot


def test_follower_at_offset_zero_downloads_snapshot_in_pieces_then_fetches():
    leader, sid = leader_with_snapshot()
    size = leader.log.read_snapshot(sid).size
    fl = follower_node(2, leader=1, epoch=1, max_fetch_bytes=64)
    assert size > 3 * 64
    fl.core.poll(300)
    f = one(fl.outbound(), FETCH, 1)
    fp = f.request.topics[0].partitions[0]
    assert (fp.fetch_offset, fp.last_fetched_epoch) == (0, 0)
    rp = fetch_partition(deliver(fl, leader, 300, f))
    assert rp.error_code == 0 and not rp.records
    assert (rp.snapshot_id.end_offset, rp.snapshot_id.epoch) == (6, 1)
    assert rp.log_start_offset == 6
    chunks = 0
    positions = []
    t = 301
    while not fl.sm.loads:
        fl.core.poll(t)
        out = fl.outbound()
        ob = one(out, FETCH_SNAPSHOT, 1)
        assert [o for o in out if o.api_key == FETCH] == []
        req = ob.request
        assert req.max_bytes == 64 and req.replica_id == 2
        sp = req.topics[0].partitions[0]
        assert (sp.snapshot_id.end_offset, sp.snapshot_id.epoch) == (6, 1)
        assert sp.current_leader_epoch == 1
        positions.append(sp.position)
        resp = deliver(fl, leader, t, ob)
        part = snapshot_partition(resp)
        assert part.error_code == 0 and part.size == size and part.position == sp.position
        assert len(part.unaligned_records) == min(64, size - sp.position)
        chunks += 1
        t += 1
        assert chunks < 100
    assert chunks == -(-size // 64)
    assert positions == list(range(0, size, 64))
    assert fl.sm.loads == [sid]
    loaded = [r for b in fl.sm.loaded_batches[0] if not b.is_control for r in b.records]
    assert loaded == leader.sm.snapshot
    assert fl.log.latest_snapshot_id() == sid
    assert fl.log.start_offset == fl.log.end_offset == 6
    assert fl.core.high_watermark == 6 and fl.core.committed_offset == 6
    assert fl.core.state == "Follower"
    # then Fetch continues from the snapshot
    leader.core.append(t, [b"f"])
    leader.core.poll(t + 25)
    leader.flush(t + 25)
    fl.core.poll(t + 26)
    f = one(fl.outbound(), FETCH, 1)
    fp = f.request.topics[0].partitions[0]
    assert (fp.fetch_offset, fp.last_fetched_epoch) == (6, 1)
    rp = fetch_partition(deliver(fl, leader, t + 26, f))
    assert rp.error_code == 0 and rp.snapshot_id.epoch == -1 and rp.diverging_epoch.epoch == -1
    assert [b.base_offset for b in decode_batches(rp.records)] == [6]
    assert fl.log.end_offset == 7 and fl.log.start_offset == 6


def test_fetch_below_log_start_redirected_to_latest_snapshot():
    leader, sid = leader_with_snapshot()
    rp = fetch_partition(leader.request(300, FETCH, V_FETCH, fetch_request(2, 1, 3, 1)))
    assert rp.error_code == 0 and not rp.records
    assert (rp.snapshot_id.end_offset, rp.snapshot_id.epoch) == (sid.offset, sid.epoch)


def test_fetch_at_log_start_with_snapshot_epoch_is_valid():
    leader, sid = leader_with_snapshot()
    leader.core.append(300, [b"z"])
    leader.core.poll(325)
    rp = fetch_partition(leader.request(330, FETCH, V_FETCH, fetch_request(2, 1, 6, 1)))
    assert rp.snapshot_id.epoch == -1 and rp.diverging_epoch.epoch == -1
    assert [b.records for b in decode_batches(rp.records)] == [(b"z",)]


def test_bootstrap_snapshot_is_never_sent_on_fetch():
    log = MemoryLog()
    w = log.create_snapshot(OffsetAndEpoch(0, 0))
    header = b"\x00\x00" + bytes(8) + b"\x00"  # SnapshotHeaderRecord v0, no tagged fields
    w.append(encode_control_batch(0, 0, [(CONTROL_SNAPSHOT_HEADER, header)], 0).data)
    w.freeze()
    n = leader_node(epoch=1, log=log)
    rp = fetch_partition(n.request(1, FETCH, V_FETCH, fetch_request(2, 1, 0, 0)))
    assert rp.error_code == 0 and rp.snapshot_id.epoch == -1
    assert rp.records
    sp = snapshot_partition(
        n.request(1, FETCH_SNAPSHOT, V_SNAP, fetch_snapshot_request(2, 1, OffsetAndEpoch(0, 0), 0))
    )
    assert sp.error_code == E.SNAPSHOT_NOT_FOUND


# ====================================================================== FetchSnapshot errors


def snap(n: Node, now: int, req: Any) -> Any:
    return n.request(now, FETCH_SNAPSHOT, V_SNAP, req)


def test_fetch_snapshot_unknown_id_not_found():
    leader, sid = leader_with_snapshot()
    for bad in (OffsetAndEpoch(sid.offset + 1, 1), OffsetAndEpoch(sid.offset, 2)):
        sp = snapshot_partition(snap(leader, 300, fetch_snapshot_request(2, 1, bad, 0)))
        assert sp.error_code == E.SNAPSHOT_NOT_FOUND
        assert (sp.current_leader.leader_id, sp.current_leader.leader_epoch) == (1, 1)


@pytest.mark.parametrize("position", ["size", "size+1", -1])
def test_fetch_snapshot_position_out_of_range(position):
    leader, sid = leader_with_snapshot()
    size = leader.log.read_snapshot(sid).size
    pos = {"size": size, "size+1": size + 1}.get(position, position)
    sp = snapshot_partition(snap(leader, 300, fetch_snapshot_request(2, 1, sid, pos)))
    assert sp.error_code == E.POSITION_OUT_OF_RANGE
    assert not sp.unaligned_records


def test_fetch_snapshot_last_byte_is_in_range():
    leader, sid = leader_with_snapshot()
    reader = leader.log.read_snapshot(sid)
    sp = snapshot_partition(snap(leader, 300, fetch_snapshot_request(2, 1, sid, reader.size - 1)))
    assert sp.error_code == 0 and sp.unaligned_records == reader.read(reader.size - 1, 10)
    assert sp.size == reader.size and sp.position == reader.size - 1


def test_fetch_snapshot_on_non_leader():
    leader, sid = leader_with_snapshot()
    fl = follower_node(2, leader=1, epoch=1)
    sp = snapshot_partition(snap(fl, 300, fetch_snapshot_request(3, 1, sid, 0)))
    assert sp.error_code == E.NOT_LEADER_OR_FOLLOWER
    assert (sp.current_leader.leader_id, sp.current_leader.leader_epoch) == (1, 1)


@pytest.mark.parametrize("epoch, code", [(0, E.FENCED_LEADER_EPOCH), (2, E.UNKNOWN_LEADER_EPOCH)])
def test_fetch_snapshot_epoch_validation(epoch, code):
    leader, sid = leader_with_snapshot()
    sp = snapshot_partition(snap(leader, 300, fetch_snapshot_request(2, epoch, sid, 0)))
    assert sp.error_code == code


def test_fetch_snapshot_wrong_cluster_id():
    leader, sid = leader_with_snapshot()
    resp = snap(leader, 300, fetch_snapshot_request(2, 1, sid, 0, cluster_id="elsewhere"))
    assert resp.error_code == E.INCONSISTENT_CLUSTER_ID and resp.topics == ()


def test_fetch_snapshot_counts_for_check_quorum():
    leader, sid = leader_with_snapshot()
    for t in (1000, 2000, 3000, 4000, 5000):
        snapshot_partition(snap(leader, t, fetch_snapshot_request(2, 1, sid, 0)))
        leader.core.poll(t)
    assert leader.core.state == "Leader"


# =============================================================================== follower side


def start_download(fl: Node, leader: Node, now: int) -> None:
    fl.core.poll(now)
    f = one(fl.outbound(), FETCH, 1)
    deliver(fl, leader, now, f)


def test_follower_abandons_download_on_snapshot_not_found():
    leader, sid = leader_with_snapshot()
    fl = follower_node(2, leader=1, epoch=1, max_fetch_bytes=64)
    start_download(fl, leader, 300)
    fl.core.poll(301)
    ob = one(fl.outbound(), FETCH_SNAPSHOT, 1)
    deliver(fl, leader, 301, ob)  # one chunk written
    fl.core.poll(302)
    ob = one(fl.outbound(), FETCH_SNAPSHOT, 1)
    assert ob.request.topics[0].partitions[0].position == 64
    resp = snapshot_error_response(1, 1, E.SNAPSHOT_NOT_FOUND)
    fl.core.handle_response(302, 1, ob.correlation, resp)
    assert fl.core.state == "Follower"
    assert fl.log.snapshot_ids() == [] and fl.sm.loads == []
    fl.core.poll(303)
    out = fl.outbound()
    f = one(out, FETCH, 1)
    assert [o for o in out if o.api_key == FETCH_SNAPSHOT] == []
    assert f.request.topics[0].partitions[0].fetch_offset == 0
    # the fetch timer was reset: no election at 302 + fetch.timeout - 1
    fl.core.poll(302 + 2000 - 1)
    assert fl.core.state == "Follower"


def test_follower_fetch_snapshot_request_after_snapshot_id_resets_fetch_timer():
    leader, sid = leader_with_snapshot()
    fl = follower_node(2, leader=1, epoch=1, max_fetch_bytes=64)
    start_download(fl, leader, 1500)
    t = 1501
    while not fl.sm.loads:
        t += 1000  # each chunk arrives 1 s after the previous one: well past fetch.timeout
        fl.core.poll(t)
        assert fl.core.state == "Follower"
        ob = one(fl.outbound(), FETCH_SNAPSHOT, 1)
        deliver(fl, leader, t, ob)
        leader.core.poll(t)
        leader.outbound()
    assert fl.sm.loads == [sid]


def test_follower_does_not_download_a_snapshot_it_already_has():
    leader, sid = leader_with_snapshot()
    log = MemoryLog()
    w = log.create_snapshot(sid)
    w.append(leader.log.read_snapshot(sid).read(0, 1 << 20))
    w.freeze()
    fl = follower_node(2, leader=1, epoch=1, log=log)
    assert fl.log.start_offset == 6  # truncated to the snapshot at start-up
    assert fl.sm.loads == [sid]
    fl.core.poll(300)
    f = one(fl.outbound(), FETCH, 1)
    fp = f.request.topics[0].partitions[0]
    assert (fp.fetch_offset, fp.last_fetched_epoch) == (6, 1)


def test_fetch_snapshot_wrong_topic_name_unknown_topic_or_partition():
    leader, sid = leader_with_snapshot()
    req = fetch_snapshot_request(2, 1, sid, 0)
    t = req.topics[0]
    req = type(req)(
        cluster_id=req.cluster_id,
        replica_id=2,
        max_bytes=req.max_bytes,
        topics=(type(t)(name="other", partitions=t.partitions),),
    )
    sp = snapshot_partition(snap(leader, 300, req))
    assert sp.error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_snapshot_two_topics_top_level_invalid_request():
    leader, sid = leader_with_snapshot()
    req = fetch_snapshot_request(2, 1, sid, 0)
    req = type(req)(cluster_id=req.cluster_id, replica_id=2, max_bytes=1, topics=req.topics * 2)
    resp = snap(leader, 300, req)
    assert resp.error_code == E.INVALID_REQUEST and resp.topics == ()
