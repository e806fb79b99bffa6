"""KIP-853 dynamic voters in the core (Kafka ``KafkaRaftClientReconfigTest`` names where one
exists): the voter set read from the bootstrap checkpoint, the snapshot and the log, the
leader's start-of-epoch records, directory ids, and the reconfiguration RPCs."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from kafka_rpc.protocol.record_batch import control_type, encode_batch
from kafka_rpc.raft.api import ElectionState, OffsetAndEpoch
from kafka_rpc.raft.memory import MemoryLog
from kafka_rpc.raft.voters import (
    KRAFT_VERSION,
    KRAFT_VOTERS,
    LEADER_CHANGE,
    ControlRecordError,
    VoterNode,
    VoterSet,
    bootstrap_checkpoint_bytes,
    encode_voters_control_batch,
)

from .conftest import (
    FETCH,
    FETCH_SNAPSHOT,
    V_FETCH,
    V_SNAP,
    Node,
    data_batch,
    elect,
    fetch_partition,
    fetch_request,
    fetch_response,
    fetch_snapshot_request,
    make_node,
    one,
    snapshot_partition,
)


def dir_of(i: int) -> uuid.UUID:
    return uuid.UUID(int=100 + i)


def vnode(i: int, d: uuid.UUID | None = None) -> VoterNode:
    return VoterNode(i, d or dir_of(i), {"CONTROLLER": (f"controller-{i}", 9090 + i)}, 0, 1)


def vset(*ids: int) -> VoterSet:
    return VoterSet(vnode(i) for i in ids)


def boot_log(*ids: int) -> MemoryLog:
    """A log holding only the bootstrap checkpoint of voters ``ids`` (kraft.version 1)."""
    log = MemoryLog()
    w = log.create_snapshot(OffsetAndEpoch(0, 0))
    w.append(bootstrap_checkpoint_bytes(vset(*ids), 1, 1000))
    w.freeze()
    return log


def dyn_node(node_id: int, ids=(1, 2, 3), *, log: MemoryLog | None = None, **kw: Any) -> Node:
    """Node ``node_id`` of a dynamic quorum (no static voters) formatted with voters ``ids``."""
    kw.setdefault("directory_id", dir_of(node_id))
    return make_node(node_id, (), log=log if log is not None else boot_log(*ids), **kw)


def dyn_leader(ids=(1, 2, 3), epoch: int = 1, now: int = 0, **kw: Any) -> Node:
    """Node 1, leader of ``epoch`` of the dynamic quorum ``ids``."""
    n = dyn_node(1, ids, state=ElectionState(epoch=epoch, voted_id=1), now=now, **kw)
    if n.core.state != "Leader":
        elect(n, now)
    n.flush(now)
    return n


def controls(batch: Any) -> list[int]:
    return [control_type(k) for k in batch.keys]


def fetch_v17(replica: int, epoch: int, offset: int, last_epoch: int, directory: uuid.UUID,
              **kw: Any) -> Any:  # fmt: skip
    req = fetch_request(replica, epoch, offset, last_epoch, **kw)
    t = req.topics[0]
    p = t.partitions[0]
    import dataclasses

    p2 = dataclasses.replace(p, replica_directory_id=directory)
    return dataclasses.replace(req, topics=(dataclasses.replace(t, partitions=(p2,)),))


# ====================================================================== replay
def test_follower_reads_kraft_bootstrap_records():
    n = dyn_node(2)
    assert n.core.voter_set == vset(1, 2, 3)
    assert n.core.kraft_version == 1
    assert n.core.voters == {i: (f"controller-{i}", 9090 + i) for i in (1, 2, 3)}
    assert n.core.is_voter


def test_static_voters_without_voters_record():
    n = make_node(2)
    assert n.core.kraft_version == 0
    assert n.core.voter_set == VoterSet.from_static(n.core.config.voters, "CONTROLLER")
    assert n.core.is_voter


def test_another_directory_id_is_not_the_voter():
    n = dyn_node(2, directory_id=uuid.UUID(int=999))
    assert not n.core.is_voter
    assert n.core.state == "Unattached" and n.core._election_deadline is None


def test_leader_writes_bootstrap_records():
    n = dyn_leader()
    (b,) = list(n.log.batches(0, n.log.end_offset))
    assert b.is_control and b.epoch == 1
    assert controls(b) == [LEADER_CHANGE, KRAFT_VERSION, KRAFT_VOTERS]
    assert codec.decode("KRaftVersionRecord", 0, b.records[1]).kraft_version == 1
    assert VoterSet.from_record(codec.decode("VotersRecord", 0, b.records[2])) == vset(1, 2, 3)
    # the voter set now comes from the log
    assert n.core._crs.last_voter_set_offset() == 2


def test_leader_does_not_bootstrap_records_with_kraft_version_0():
    n = make_node(1, state=ElectionState(epoch=1, voted_id=1))
    elect(n, 0)
    (b,) = list(n.log.batches(0, n.log.end_offset))
    assert controls(b) == [LEADER_CHANGE]


def test_leader_does_not_rewrite_voters_already_in_the_log():
    n = dyn_leader()
    log = n.log  # restart node 1 from the same log, in epoch 2
    m = make_node(1, (), log=log, directory_id=dir_of(1),
                  state=ElectionState(epoch=2, voted_id=1))  # fmt: skip
    elect(m, 0)
    last = list(m.log.batches(0, m.log.end_offset))[-1]
    assert controls(last) == [LEADER_CHANGE]


def test_leader_updates_its_own_entry_at_epoch_start():
    listeners = {"CONTROLLER": ("new-host", 1)}
    n = dyn_leader(local_listeners=listeners)
    b = list(n.log.batches(0, n.log.end_offset))[0]
    vs = VoterSet.from_record(codec.decode("VotersRecord", 0, b.records[2]))
    assert vs[1].endpoints == listeners and vs[2] == vnode(2)


def test_bootstrap_checkpoint_is_not_returned_on_fetch():
    n = dyn_leader()
    rp = fetch_partition(n.request(1, FETCH, V_FETCH, fetch_request(2, 1, 0, 0)))
    assert rp.snapshot_id.epoch == -1 and rp.records
    sp = snapshot_partition(
        n.request(1, FETCH_SNAPSHOT, V_SNAP, fetch_snapshot_request(2, 1, OffsetAndEpoch(0, 0), 0))
    )
    assert sp.error_code == E.SNAPSHOT_NOT_FOUND


def test_voters_record_counts_from_its_append_on_a_follower():
    n = dyn_node(2, state=ElectionState(epoch=1, leader_id=1))
    assert n.core.state == "Follower"
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    b1 = encode_voters_control_batch(0, 1, vset(1, 2, 3, 4), 5, kraft_version=1)
    n.core.handle_response(0, 1, f.correlation, fetch_response(1, 1, records=b1.data))
    assert sorted(n.core.voter_set) == [1, 2, 3, 4]  # uncommitted, already in force
    assert n.core.high_watermark <= 0


def test_truncation_on_diverging_epoch_rolls_the_voter_set_back():
    log = boot_log(1, 2, 3)
    log.append([data_batch(0, 1, 2),
                encode_voters_control_batch(2, 2, vset(1, 2, 3, 4), 5)])  # fmt: skip
    log.flush()
    n = dyn_node(2, log=log, state=ElectionState(epoch=3, leader_id=1))
    assert sorted(n.core.voter_set) == [1, 2, 3, 4]
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    m = codec.module("FetchResponse")
    resp = fetch_response(1, 3)
    p = resp.responses[0].partitions[0]
    import dataclasses

    p = dataclasses.replace(p, diverging_epoch=m.EpochEndOffset(epoch=1, end_offset=2))
    resp = dataclasses.replace(
        resp, responses=(dataclasses.replace(resp.responses[0], partitions=(p,)),)
    )
    n.core.handle_response(0, 1, f.correlation, resp)
    assert n.log.end_offset == 2
    assert n.core.voter_set == vset(1, 2, 3)


def test_unknown_control_record_at_start_up_raises():
    log = MemoryLog()
    bad = encode_batch(0, 1, [b"\x00\x00\x00"], 5, keys=[struct.pack(">hh", 0, 9)], control=True)
    log.append([bad])
    log.flush()
    with pytest.raises(ControlRecordError, match="unknown control record type 9"):
        make_node(2, log=log)


def test_follower_refuses_fetched_unknown_control_record():
    n = dyn_node(2, state=ElectionState(epoch=1, leader_id=1))
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    bad = encode_batch(0, 1, [b"\x00\x00\x00"], 5, keys=[struct.pack(">hh", 0, 9)], control=True)
    n.core.handle_response(0, 1, f.correlation, fetch_response(1, 1, records=bad.data))
    assert n.log.end_offset == 0
    assert n.core.voter_set == vset(1, 2, 3)


def test_snapshot_at_kraft_version_1_holds_the_voter_set():
    n = dyn_leader(ids=(1,))
    n.core.append(0, [b"a", b"b"])
    n.core.poll(100)
    n.flush(100)
    assert n.core.high_watermark == n.log.end_offset
    sid = n.core.create_snapshot(100)
    assert sid is not None
    reader = n.log.read_snapshot(sid)
    head = next(iter(reader.batches()))
    assert controls(head)[1:] == [KRAFT_VERSION, KRAFT_VOTERS]
    assert VoterSet.from_record(codec.decode("VotersRecord", 0, head.records[2])) == vset(1)


def test_snapshot_at_kraft_version_0_has_only_the_header():
    n = make_node(1, (1,))
    n.core.append(0, [b"a"])
    n.core.poll(100)
    n.flush(100)
    sid = n.core.create_snapshot(100)
    head = next(iter(n.log.read_snapshot(sid).batches()))
    assert len(head.keys) == 1


def test_follower_loads_voters_from_a_downloaded_snapshot():
    src = dyn_leader(ids=(1,))
    src.core.append(0, [b"a"])
    src.core.poll(100)
    src.flush(100)
    sid = src.core.create_snapshot(100)
    data = src.log.read_snapshot(sid).read(0, 1 << 20)
    n = dyn_node(2, ids=(1, 2, 3), state=ElectionState(epoch=1, leader_id=1))
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    m = codec.module("FetchResponse")
    import dataclasses

    resp = fetch_response(1, 1)
    snap_id = m.SnapshotId(end_offset=sid.offset, epoch=sid.epoch)
    p = dataclasses.replace(resp.responses[0].partitions[0], snapshot_id=snap_id)
    resp = dataclasses.replace(
        resp, responses=(dataclasses.replace(resp.responses[0], partitions=(p,)),)
    )
    n.core.handle_response(0, 1, f.correlation, resp)
    n.core.poll(1)
    fs = one(n.outbound(), FETCH_SNAPSHOT, 1)
    sm = codec.module("FetchSnapshotResponse")
    sp = sm.PartitionSnapshot(
        index=0,
        current_leader=sm.LeaderIdAndEpoch(leader_id=1, leader_epoch=1),
        snapshot_id=sm.SnapshotId(end_offset=sid.offset, epoch=sid.epoch),
        size=len(data),
        position=0,
        unaligned_records=data,
    )
    n.core.handle_response(
        1, 1, fs.correlation,
        sm.FetchSnapshotResponse(topics=(sm.TopicSnapshot(name="__cluster_metadata",
                                                          partitions=(sp,)),)),
    )  # fmt: skip
    assert n.log.latest_snapshot_id() == sid
    assert n.core.voter_set == vset(1)
    assert not n.core.is_voter


# ====================================================================== directory ids
def test_fetch_from_a_voter_id_with_another_directory_is_an_observer():
    n = dyn_leader()
    end = n.log.end_offset
    fetch_partition(n.request(1, FETCH, V_FETCH, fetch_v17(2, 1, end, 1, uuid.UUID(int=5))))
    fetch_partition(n.request(1, FETCH, V_FETCH, fetch_v17(3, 1, end, 1, uuid.UUID(int=6))))
    assert n.core.high_watermark == -1  # neither counts
    fetch_partition(n.request(2, FETCH, V_FETCH, fetch_v17(2, 1, end, 1, dir_of(2))))
    assert n.core.high_watermark == end
    p = n.core.describe_quorum_partition(3)
    assert [(r.replica_id, r.replica_directory_id) for r in p.current_voters] == [
        (1, dir_of(1)), (2, dir_of(2)), (3, dir_of(3)),
    ]  # fmt: skip
    assert [(r.replica_id, r.replica_directory_id) for r in p.observers] == [
        (2, uuid.UUID(int=5)), (3, uuid.UUID(int=6)),
    ]  # fmt: skip


# ====================================================================== reconfiguration
AddReq = codec.module("AddRaftVoterRequest")
RemoveReq = codec.module("RemoveRaftVoterRequest")
UpdateReq = codec.module("UpdateRaftVoterRequest")
ApiResp = codec.module("ApiVersionsResponse")
ADD, REMOVE, UPDATE, API_VERSIONS = 80, 81, 82, 18
CLUSTER = "raft-core-test-cluster"


def committed_leader(ids=(1, 2), now: int = 0, **kw: Any) -> Node:
    """Leader 1 of the dynamic quorum ``ids`` with a high watermark past its epoch start (every
    other voter fetched to the end)."""
    n = dyn_leader(ids=ids, now=now, **kw)
    for v in ids[1:]:
        fetch_partition(n.request(now, FETCH, V_FETCH,
                                  fetch_v17(v, 1, n.log.end_offset, 1, dir_of(v))))  # fmt: skip
    assert n.core.high_watermark == n.log.end_offset
    return n


def observe(n: Node, now: int, rid: int = 3, d: uuid.UUID | None = None) -> None:
    """Observer ``rid`` fetches at the leader's log end offset."""
    fetch_partition(n.request(now, FETCH, V_FETCH,
                              fetch_v17(rid, n.core.epoch, n.log.end_offset,
                                        n.log.last_fetched_epoch(), d or dir_of(rid))))  # fmt: skip


def add_req(vid: int = 3, d: uuid.UUID | None = None, *, listener: str = "CONTROLLER",
            ack: bool = True, cluster_id: str | None = CLUSTER) -> Any:  # fmt: skip
    return AddReq.AddRaftVoterRequest(
        cluster_id=cluster_id, timeout_ms=10_000, voter_id=vid,
        voter_directory_id=dir_of(vid) if d is None else d,
        listeners=(AddReq.Listener(name=listener, host=f"controller-{vid}", port=9090 + vid),),
        ack_when_committed=ack,
    )  # fmt: skip


def api_versions(lo: int = 0, hi: int = 1, code: int = 0) -> Any:
    feats = (ApiResp.SupportedFeatureKey(name="kraft.version", min_version=lo, max_version=hi),)
    return ApiResp.ApiVersionsResponse(error_code=code, supported_features=feats)


def start_add(n: Node, now: int, req: Any, version: int = 1) -> tuple[list, Any]:
    replies: list = []
    n.core.handle_request(now, ADD, version, req, replies.append)
    out = [o for o in n.outbound() if o.api_key == API_VERSIONS]
    return replies, (out[0] if out else None)


def test_add_voter():
    n = committed_leader()
    observe(n, 1)
    replies, probe = start_add(n, 2, add_req())
    assert replies == [] and probe is not None
    assert n.core.address_of(probe.destination) == ("controller-3", 9093)
    assert probe.destination not in (1, 2, 3)
    n.core.handle_response(3, probe.destination, probe.correlation, api_versions())
    assert sorted(n.core.voter_set) == [1, 2, 3]  # in force from the append
    assert n.core.voter_set[3] == vnode(3)
    last = list(n.log.batches(0, n.log.end_offset))[-1]
    assert controls(last) == [KRAFT_VOTERS]
    assert replies == []
    observe(n, 4, 3)
    assert replies == []  # 1 of 3 voters besides the leader: not yet a majority with 2 stale
    observe(n, 4, 2)
    assert n.core.high_watermark == n.log.end_offset
    assert [r.error_code for r in replies] == [0]


def test_add_voter_completes_early_with_ack_when_committed_false():
    n = committed_leader()
    observe(n, 1)
    replies, probe = start_add(n, 2, add_req(ack=False))
    n.core.handle_response(3, probe.destination, probe.correlation, api_versions())
    assert [r.error_code for r in replies] == [0]
    # still pending until the commit: another change waits
    r2, _ = start_add(n, 4, add_req(4))
    assert r2[0].error_code == E.REQUEST_TIMED_OUT


def test_add_voter_with_pending_add_voter():
    n = committed_leader()
    observe(n, 1)
    start_add(n, 2, add_req())
    replies, probe = start_add(n, 3, add_req(4))
    assert replies[0].error_code == E.REQUEST_TIMED_OUT and probe is None


def test_add_voter_without_fenced_previous_leaders():
    n = dyn_leader(ids=(1, 2))
    assert n.core.high_watermark == -1
    replies, _ = start_add(n, 1, add_req())
    assert replies[0].error_code == E.REQUEST_TIMED_OUT


def test_add_voter_with_kraft_version_0():
    n = make_node(1, (1,))
    assert n.core.state == "Leader"
    n.flush(0)
    replies, _ = start_add(n, 1, add_req())
    assert replies[0].error_code == E.UNSUPPORTED_VERSION


def test_add_voter_with_existing_voter():
    n = committed_leader()
    replies, _ = start_add(n, 1, add_req(2, uuid.UUID(int=77)))
    assert replies[0].error_code == E.DUPLICATE_VOTER


def test_add_voter_timeout():
    n = committed_leader()
    observe(n, 1)
    replies, probe = start_add(n, 2, add_req())
    n.core.poll(2 + n.core.config.request_timeout_ms)
    assert replies[0].error_code == E.REQUEST_TIMED_OUT
    assert sorted(n.core.voter_set) == [1, 2]


def test_add_voter_with_api_versions_from_incorrect_node():
    n = committed_leader()
    observe(n, 1)
    replies, probe = start_add(n, 2, add_req())
    n.core.handle_response(3, 3, probe.correlation, api_versions())  # not the probe
    assert replies == [] and sorted(n.core.voter_set) == [1, 2]
    n.core.handle_response(3, probe.destination, probe.correlation, api_versions())
    assert sorted(n.core.voter_set) == [1, 2, 3]


def test_add_voter_api_versions_error():
    n = committed_leader()
    observe(n, 1)
    replies, probe = start_add(n, 2, add_req())
    n.core.handle_response(3, probe.destination, probe.correlation, None)
    assert replies[0].error_code == E.REQUEST_TIMED_OUT


def test_add_voter_invalid_feature_version():
    n = committed_leader()
    observe(n, 1)
    replies, probe = start_add(n, 2, add_req())
    n.core.handle_response(3, probe.destination, probe.correlation, api_versions(0, 0))
    assert replies[0].error_code == E.INVALID_REQUEST
    assert sorted(n.core.voter_set) == [1, 2]


def test_add_voter_without_kraft_version_feature():
    n = committed_leader()
    observe(n, 1)
    replies, probe = start_add(n, 2, add_req())
    n.core.handle_response(3, probe.destination, probe.correlation, ApiResp.ApiVersionsResponse())
    assert replies[0].error_code == E.INVALID_REQUEST


def test_add_voter_with_lagging_new_voter():
    n = committed_leader()
    # the observer never reached the log end offset
    fetch_partition(n.request(1, FETCH, V_FETCH, fetch_v17(3, 1, 0, 0, dir_of(3))))
    replies, probe = start_add(n, 2, add_req())
    n.core.handle_response(3, probe.destination, probe.correlation, api_versions())
    assert replies[0].error_code == E.REQUEST_TIMED_OUT


def test_add_voter_caught_up_needs_the_exact_directory():
    n = committed_leader()
    observe(n, 1, 3, uuid.UUID(int=55))
    replies, probe = start_add(n, 2, add_req())
    n.core.handle_response(3, probe.destination, probe.correlation, api_versions())
    assert replies[0].error_code == E.REQUEST_TIMED_OUT


def test_add_voter_fails_when_losing_leadership():
    n = committed_leader()
    observe(n, 1)
    replies, probe = start_add(n, 2, add_req())
    n.core.handle_response(3, probe.destination, probe.correlation, api_versions())
    from .conftest import BEGIN, V_BEGIN, begin_request

    n.request(4, BEGIN, V_BEGIN, begin_request(2, 2))
    assert n.core.state == "Follower"
    assert replies[0].error_code == E.NOT_LEADER_OR_FOLLOWER


def test_add_voter_with_missing_directory_id():
    n = committed_leader()
    replies, _ = start_add(n, 1, add_req(3, uuid.UUID(int=0)))
    assert replies[0].error_code == E.INVALID_REQUEST


def test_add_voter_with_missing_default_listener():
    n = committed_leader()
    replies, _ = start_add(n, 1, add_req(listener="OTHER"))
    assert replies[0].error_code == E.INVALID_REQUEST


def test_add_voter_invalid_cluster_id():
    n = committed_leader()
    replies, _ = start_add(n, 1, add_req(cluster_id="other"))
    assert replies[0].error_code == E.INCONSISTENT_CLUSTER_ID
    replies, _ = start_add(n, 1, add_req(cluster_id=None))
    assert replies == []  # null is accepted


def test_add_voter_to_not_leader():
    n = dyn_node(2, state=ElectionState(epoch=1, leader_id=1))
    replies, _ = start_add(n, 1, add_req())
    assert replies[0].error_code == E.NOT_LEADER_OR_FOLLOWER


# -- RemoveRaftVoter
def remove_req(vid: int, d: uuid.UUID | None = None, cluster_id: str | None = CLUSTER) -> Any:
    return RemoveReq.RemoveRaftVoterRequest(
        cluster_id=cluster_id, voter_id=vid, voter_directory_id=dir_of(vid) if d is None else d
    )


def remove(n: Node, now: int, req: Any) -> list:
    replies: list = []
    n.core.handle_request(now, REMOVE, 0, req, replies.append)
    return replies


def test_remove_voter():
    n = committed_leader(ids=(1, 2, 3))
    replies = remove(n, 1, remove_req(3))
    assert replies == [] and sorted(n.core.voter_set) == [1, 2]
    n.flush(2)
    observe(n, 2, 2)
    assert [r.error_code for r in replies] == [0]
    p = n.core.describe_quorum_partition(3)
    assert [r.replica_id for r in p.current_voters] == [1, 2]
    assert [r.replica_id for r in p.observers] == [3]


def test_remove_voter_is_leader():
    n = committed_leader(ids=(1, 2, 3))
    replies = remove(n, 1, remove_req(1))
    assert sorted(n.core.voter_set) == [2, 3] and not n.core.is_voter
    assert n.core.state == "Leader"  # leads until the removal commits
    observe(n, 2, 2)
    assert n.core.high_watermark < n.log.end_offset  # the leader no longer counts
    observe(n, 2, 3)
    assert [r.error_code for r in replies] == [0]
    n.core.poll(3)
    assert n.core.state == "Resigned"
    out = n.outbound()
    assert sorted(o.destination for o in out if o.api_key == 54) == [2, 3]
    n.core.poll(3 + 2 * n.core.config.election_timeout_ms)
    assert n.core.state == "Unattached" and n.core.epoch == 2
    assert n.core._election_deadline is None  # an observer stands for nothing


def test_remove_voter_with_pending_remove_voter():
    n = committed_leader(ids=(1, 2, 3))
    remove(n, 1, remove_req(3))
    assert remove(n, 1, remove_req(2))[0].error_code == E.REQUEST_TIMED_OUT


def test_add_voter_with_pending_remove_voter():
    n = committed_leader(ids=(1, 2, 3))
    remove(n, 1, remove_req(3))
    replies, _ = start_add(n, 1, add_req(4))
    assert replies[0].error_code == E.REQUEST_TIMED_OUT


def test_remove_voter_with_pending_add_voter():
    n = committed_leader()
    observe(n, 1)
    start_add(n, 2, add_req())
    assert remove(n, 2, remove_req(2))[0].error_code == E.REQUEST_TIMED_OUT


def test_remove_voter_with_kraft_version_0():
    n = make_node(1, (1,))
    n.flush(0)
    assert remove(n, 1, remove_req(1))[0].error_code == E.UNSUPPORTED_VERSION


def test_remove_voter_with_none_voter():
    n = committed_leader(ids=(1, 2, 3))
    assert remove(n, 1, remove_req(4))[0].error_code == E.VOTER_NOT_FOUND
    assert remove(n, 1, remove_req(3, uuid.UUID(int=99)))[0].error_code == E.VOTER_NOT_FOUND


def test_remove_voter_to_empty_voter_set():
    n = committed_leader(ids=(1,))
    assert remove(n, 1, remove_req(1))[0].error_code == E.VOTER_NOT_FOUND


def test_remove_voter_timed_out():
    n = committed_leader(ids=(1, 2, 3))
    replies = remove(n, 1, remove_req(3))
    n.core.poll(1 + n.core.config.request_timeout_ms)
    assert replies[0].error_code == E.REQUEST_TIMED_OUT


def test_remove_voter_missing_directory_id_invalid_request():
    n = committed_leader(ids=(1, 2, 3))
    assert remove(n, 1, remove_req(3, uuid.UUID(int=0)))[0].error_code == E.INVALID_REQUEST


def test_remove_voter_invalid_cluster_id_and_not_leader():
    n = committed_leader(ids=(1, 2, 3))
    assert remove(n, 1, remove_req(3, cluster_id="x"))[0].error_code == E.INCONSISTENT_CLUSTER_ID
    f = dyn_node(2, state=ElectionState(epoch=1, leader_id=1))
    assert remove(f, 1, remove_req(3))[0].error_code == E.NOT_LEADER_OR_FOLLOWER


# -- UpdateRaftVoter
def update_req(vid: int, epoch: int = 1, *, d: uuid.UUID | None = None, port: int = 1,
               lo: int = 0, hi: int = 1, listener: str = "CONTROLLER") -> Any:  # fmt: skip
    return UpdateReq.UpdateRaftVoterRequest(
        cluster_id=CLUSTER, current_leader_epoch=epoch, voter_id=vid,
        voter_directory_id=dir_of(vid) if d is None else d,
        listeners=(UpdateReq.Listener(name=listener, host="new", port=port),),
        kraft_version_feature=UpdateReq.KRaftVersionFeature(
            min_supported_version=lo, max_supported_version=hi),
    )  # fmt: skip


def test_update_voter():
    n = committed_leader()
    end = n.log.end_offset
    resp = n.request(1, UPDATE, 0, update_req(2))
    assert resp.error_code == 0
    assert (resp.current_leader.leader_id, resp.current_leader.leader_epoch) == (1, 1)
    assert (resp.current_leader.host, resp.current_leader.port) == ("controller-1", 9091)
    assert n.log.end_offset == end + 1
    assert n.core.voter_set[2].endpoints == {"CONTROLLER": ("new", 1)}


def test_invalid_update_voter():
    n = committed_leader()
    bad = [
        update_req(2, d=uuid.UUID(int=0)),
        update_req(2, listener="X"),
        update_req(2, lo=-1),
        update_req(2, lo=1, hi=0),
        update_req(2, lo=2, hi=3),
    ]
    for req in bad:
        assert n.request(1, UPDATE, 0, req).error_code == E.INVALID_REQUEST
    other_dir = update_req(2, d=uuid.UUID(int=9))
    assert n.request(1, UPDATE, 0, other_dir).error_code == E.VOTER_NOT_FOUND
    assert n.request(1, UPDATE, 0, update_req(5)).error_code == E.VOTER_NOT_FOUND


def test_update_voter_old_and_new_epoch():
    n = committed_leader()
    assert n.request(1, UPDATE, 0, update_req(2, 0)).error_code == E.FENCED_LEADER_EPOCH
    assert n.request(1, UPDATE, 0, update_req(2, 2)).error_code == E.UNKNOWN_LEADER_EPOCH


def test_update_voter_with_kraft_version_0():
    n = make_node(1, (1, 2), state=ElectionState(epoch=1, voted_id=1))
    elect(n, 0)
    assert n.request(1, UPDATE, 0, update_req(2)).error_code == E.UNSUPPORTED_VERSION


# ============================================================= observers, bootstrap servers
BOOT = (("boot-a", 1), ("boot-b", 2))


def test_observer_discovers_leader_with_unknown_voters():
    """A ``--no-initial-controllers`` node: no voters at all, only bootstrap servers."""
    n = make_node(4, (), bootstrap_servers=BOOT, directory_id=dir_of(4))
    assert not n.core.is_voter and n.core.state == "Unattached"
    n.core.poll(0)
    (f,) = [o for o in n.outbound() if o.api_key == FETCH]
    assert f.destination in (-2, -3)
    assert n.core.address_of(-2) == ("boot-a", 1) and n.core.address_of(-3) == ("boot-b", 2)
    assert f.request.topics[0].partitions[0].replica_directory_id == dir_of(4)
    m = codec.module("FetchResponse")
    resp = fetch_response(1, 5)
    import dataclasses

    resp = dataclasses.replace(
        resp, node_endpoints=(m.NodeEndpoint(node_id=1, host="leader-host", port=7),)
    )
    n.core.handle_response(0, f.destination, f.correlation, resp)
    assert (n.core.state, n.core.leader_id, n.core.epoch) == ("Follower", 1, 5)
    assert n.core.address_of(1) == ("leader-host", 7)
    n.core.poll(1)
    assert [o.destination for o in n.outbound() if o.api_key == FETCH] == [1]


def test_follower_observer_tries_bootstrap_servers_after_fetch_timeout():
    n = make_node(4, (), bootstrap_servers=BOOT, state=ElectionState(epoch=5, leader_id=1))
    # leader 1 is not in the (empty) voter set: no endpoints, so Unattached, not Follower
    assert n.core.state == "Unattached"
    n2 = dyn_node(4, bootstrap_servers=BOOT, state=ElectionState(epoch=1, leader_id=1))
    assert n2.core.state == "Follower" and not n2.core.is_voter
    n2.core.poll(0)
    assert [o.destination for o in n2.outbound() if o.api_key == FETCH] == [1]
    n2.core.poll(n2.core.config.fetch_timeout_ms + 1)
    dests = [o.destination for o in n2.outbound() if o.api_key == FETCH]
    assert n2.core.state == "Follower"
    assert len(dests) == 1 and dests[0] in (-2, -3)


def test_address_of_unknown_is_none():
    n = dyn_node(2)
    assert n.core.address_of(1) == ("controller-1", 9091)
    assert n.core.address_of(9) is None
    assert n.core.address_of(-2) is None


def test_observer_with_controller_role_fsyncs_before_fetching():
    n = dyn_node(4, state=ElectionState(epoch=1, leader_id=1))
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    n.core.handle_response(0, 1, f.correlation,
                           fetch_response(1, 1, records=data_batch(0, 1, 2).data))  # fmt: skip
    assert n.core.needs_flush
    n.core.poll(1)
    assert [o for o in n.outbound() if o.api_key == FETCH] == []
    n.flush(2)
    n.core.poll(2)
    assert len([o for o in n.outbound() if o.api_key == FETCH]) == 1


def test_broker_observer_fetches_without_fsync():
    n = dyn_node(4, state=ElectionState(epoch=1, leader_id=1), can_become_voter=False)
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    n.core.handle_response(0, 1, f.correlation,
                           fetch_response(1, 1, records=data_batch(0, 1, 2).data))  # fmt: skip
    n.core.poll(1)
    assert len([o for o in n.outbound() if o.api_key == FETCH]) == 1


def test_observer_becomes_voter_when_added():
    n = dyn_node(4, state=ElectionState(epoch=1, leader_id=1))
    assert not n.core.is_voter
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    b = encode_voters_control_batch(0, 1, vset(1, 2, 3, 4), 5, kraft_version=1)
    n.core.handle_response(0, 1, f.correlation, fetch_response(1, 1, records=b.data))
    assert n.core.is_voter
    n.flush(1)
    n.core.poll(1 + n.core.config.fetch_timeout_ms)
    assert n.core.state == "Prospective"  # a voter's fetch timeout starts an election


# ====================================================================== kraft.version upgrade
def test_invalid_kraft_upgrade_version():
    n = committed_leader()
    assert n.core.upgrade_kraft_version(1, 1, 1, False) == (0, None)  # already 1: no-op
    code, _ = n.core.upgrade_kraft_version(1, 1, 0, False)
    assert code == E.INVALID_UPDATE_VERSION  # no downgrade
    code, _ = n.core.upgrade_kraft_version(1, 1, 2, False)
    assert code == E.INVALID_UPDATE_VERSION
    code, _ = n.core.upgrade_kraft_version(1, 7, 1, False)
    assert code == E.NOT_LEADER_OR_FOLLOWER


def test_kraft_upgrade_of_static_voters_needs_directory_ids():
    n = make_node(1, (1,))
    n.flush(0)
    end = n.log.end_offset
    code, msg = n.core.upgrade_kraft_version(1, n.core.epoch, 1, False)
    assert code == E.INVALID_UPDATE_VERSION and "directory id" in msg
    assert n.log.end_offset == end and n.core.kraft_version == 0


def test_kraft_upgrade_version():
    n = make_node(1, (1,), directory_id=dir_of(1),
                  local_listeners={"CONTROLLER": ("controller-1", 9091)})  # fmt: skip
    n.flush(0)
    assert n.core.upgrade_kraft_version(1, n.core.epoch, 1, True) == (0, None)
    assert n.core.kraft_version == 0  # validate only
    assert n.core.upgrade_kraft_version(1, n.core.epoch, 1, False) == (0, None)
    assert n.core.kraft_version == 1
    last = list(n.log.batches(0, n.log.end_offset))[-1]
    assert controls(last) == [KRAFT_VERSION, KRAFT_VOTERS]
    assert n.core.voter_set[1].directory_id == dir_of(1)
