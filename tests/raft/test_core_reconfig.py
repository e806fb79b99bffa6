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
