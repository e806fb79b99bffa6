"""Voter sets, their history and the bootstrap checkpoint (Kafka ``VoterSetTest``,
``VoterSetHistoryTest``, ``KRaftControlRecordStateMachineTest``)."""

from __future__ import annotations

import struct
from uuid import UUID

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import control_type, decode_batches, encode_batch
from kafka_rpc.raft.voters import (
    KRAFT_VERSION,
    KRAFT_VOTERS,
    LEADER_CHANGE,
    SNAPSHOT_FOOTER,
    SNAPSHOT_HEADER,
    ControlRecordError,
    ControlRecordState,
    VoterNode,
    VoterSet,
    VoterSetHistory,
    bootstrap_checkpoint_bytes,
    encode_voters_control_batch,
)

D1, D2, D3, D4 = (UUID(int=i) for i in (11, 12, 13, 14))


def node(i: int, d: UUID | None = None, port: int | None = None) -> VoterNode:
    return VoterNode(i, d or UUID(int=10 + i), {"CONTROLLER": ("localhost", port or 9990 + i)},
                     0, 1)  # fmt: skip


def vset(*ids: int) -> VoterSet:
    return VoterSet(node(i) for i in ids)


# ---------------------------------------------------------------- VoterSetTest
def test_constants_are_kafkas_control_record_types():
    assert (LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER, KRAFT_VERSION, KRAFT_VOTERS) == (
        2, 3, 4, 5, 6,
    )  # fmt: skip


def test_record_round_trip():
    vs = VoterSet(
        [
            VoterNode(1, D1, {"CONTROLLER": ("h1", 9093), "SSL": ("h1", 9094)}, 0, 1),
            node(2),
            VoterNode(3, UUID(int=0), {"CONTROLLER": ("h3", 1)}, 0, 0),
        ]
    )
    rec = vs.to_record()
    assert [v.voter_id for v in rec.voters] == [1, 2, 3]
    assert VoterSet.from_record(rec) == vs
    body = codec.encode(rec, 0)
    assert VoterSet.from_record(codec.decode("VotersRecord", 0, body)) == vs


def test_from_static_has_no_directory_and_range_0():
    vs = VoterSet.from_static({2: ("b", 2), 1: ("a", 1)}, "CONTROLLER")
    assert list(vs) == [1, 2]
    assert vs[1] == VoterNode(1, UUID(int=0), {"CONTROLLER": ("a", 1)}, 0, 0)
    assert vs.is_voter(1, D4) and vs.is_voter(1, None)
    assert vs.addresses("CONTROLLER") == {1: ("a", 1), 2: ("b", 2)}
    assert vs.addresses("OTHER") == {}


def test_is_voter_checks_a_known_directory():
    vs = vset(1, 2)
    assert vs.is_voter(1, D1)
    assert not vs.is_voter(1, D2)
    assert not vs.is_voter(1, None)
    assert not vs.is_voter(3, D3)
    assert vs.is_only_voter(1, D1) is False
    assert vset(1).is_only_voter(1, D1)


def test_add_voter():
    vs = vset(1, 2)
    assert vs.add(node(2, D4)) is None  # id already a voter, whatever the directory
    new = vs.add(node(3))
    assert new is not None and sorted(new) == [1, 2, 3]
    assert sorted(vs) == [1, 2]  # immutable


def test_remove_voter():
    vs = vset(1, 2)
    assert vs.remove(1, D2) is None  # wrong directory id
    assert vs.remove(3, D3) is None
    new = vs.remove(1, D1)
    assert new is not None and list(new) == [2]


def test_cannot_remove_to_empty_voter_set():
    vs = vset(1)
    assert vs.remove(1, D1) is None


def test_update_voter():
    vs = vset(1, 2)
    upd = node(1, port=1234)
    new = vs.update(upd)
    assert new is not None and new[1].endpoints == {"CONTROLLER": ("localhost", 1234)}
    assert vs.update(node(1, D4)) is None  # another directory: not this voter
    assert vs.update(node(3)) is None
    assert vs.needs_update(upd) and not vs.needs_update(node(1))
    assert not vs.needs_update(node(1, D4, port=1))


def test_update_voter_ignoring_directory_id():
    vs = VoterSet.from_static({1: ("a", 1), 2: ("b", 2)}, "CONTROLLER")
    upd = VoterNode(1, D4, {"CONTROLLER": ("a", 1)}, 0, 1)
    new = vs.update_ignoring_directory_id(upd)
    assert new is not None and new[1] == upd
    already = vset(1, 2)
    new2 = already.update_ignoring_directory_id(upd)
    assert new2 is not None and new2[1].directory_id == D4
    assert vs.update_ignoring_directory_id(node(3)) is None


def test_overlapping_majority():
    a = vset(1, 2, 3)
    assert a.overlapping_majority(vset(1, 2, 3, 4))
    assert a.overlapping_majority(vset(1, 2))
    assert not a.overlapping_majority(vset(1, 4, 5))
    assert not a.overlapping_majority(vset(1, 2, 3, 4, 5))
    # another directory id is another key
    b = VoterSet([node(1), node(2), node(3, D4)])
    assert a.overlapping_majority(b)
    c = VoterSet([node(1), node(2, D3), node(3, D4)])
    assert not a.overlapping_majority(c)


def test_majority():
    assert [vset(*range(n)).majority for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


# ---------------------------------------------------------------- VoterSetHistoryTest
def test_static_voter_set_is_the_fallback():
    static = vset(1, 2, 3)
    h = VoterSetHistory(static)
    assert h.last_value() == static
    assert h.value_at_or_before(100) is None
    assert h.last_voter_set_offset() is None


def test_bootstrap_add_at():
    h = VoterSetHistory(VoterSet())
    boot = vset(1, 2, 3)
    h.add_at(-1, boot)
    assert h.last_value() == boot
    assert h.value_at_or_before(-1) == boot
    assert h.value_at_or_before(0) == boot
    with pytest.raises(ValueError):
        h.add_at(-2, boot)


def test_add_at_requires_increasing_offsets():
    h = VoterSetHistory(VoterSet())
    h.add_at(5, vset(1))
    with pytest.raises(ValueError):
        h.add_at(5, vset(1, 2))
    with pytest.raises(ValueError):
        h.add_at(4, vset(1, 2))


def test_add_at_non_overlapping_is_only_logged(caplog):
    h = VoterSetHistory(VoterSet())
    h.add_at(0, vset(1, 2, 3))
    h.add_at(10, vset(4, 5, 6))
    assert h.last_value() == vset(4, 5, 6)
    assert "no majority overlapping" in caplog.text


def test_nonoverlapping_from_static_voter_set(caplog):
    h = VoterSetHistory(vset(1, 2, 3))
    h.add_at(0, vset(4, 5, 6))
    assert h.last_value() == vset(4, 5, 6)
    assert "no majority overlapping" not in caplog.text


def test_floor_lookups_and_truncation():
    h = VoterSetHistory(vset(9))
    h.add_at(-1, vset(1))
    h.add_at(10, vset(1, 2))
    h.add_at(20, vset(1, 2, 3))
    assert h.value_at_or_before(9) == vset(1)
    assert h.value_at_or_before(10) == vset(1, 2)
    assert h.value_at_or_before(19) == vset(1, 2)
    assert h.value_at_or_before(25) == vset(1, 2, 3)
    h.truncate_new_entries(20)
    assert h.last_value() == vset(1, 2)
    h.truncate_old_entries(15)  # keeps the last entry at or below 15
    assert len(h) == 1 and h.value_at_or_before(10) == vset(1, 2)
    assert h.value_at_or_before(9) is None
    h.truncate_new_entries(0)
    assert h.last_value() == vset(9)


# ------------------------------------------ KRaftControlRecordStateMachineTest
def _snapshot_batches(voters: VoterSet, level: int) -> list:
    return decode_batches(bootstrap_checkpoint_bytes(voters, level, 1000))


def test_update_with_snapshot():
    st = ControlRecordState(vset(9))
    for b in _snapshot_batches(vset(1, 2), 1):
        st.update_from_batch(b, override_offset=-1)
    assert st.last_voter_set() == vset(1, 2)
    assert st.last_kraft_version() == 1
    assert st.voter_set_at(-1) == vset(1, 2)
    assert st.kraft_version_at(-1) == 1
    assert st.last_voter_set_offset() == -1


def test_update_with_snapshot_and_log_override():
    st = ControlRecordState(vset(9))
    for b in _snapshot_batches(vset(1, 2), 1):
        st.update_from_batch(b, override_offset=-1)
    b = encode_voters_control_batch(0, 1, vset(1, 2, 3), 5, kraft_version=1)
    st.update_from_batch(b)
    assert st.next_offset == 2
    assert st.kraft_version_at(0) == 1
    assert st.voter_set_at(0) == vset(1, 2)  # the VotersRecord is record 1 of the batch
    assert st.voter_set_at(1) == vset(1, 2, 3)
    assert st.last_voter_set() == vset(1, 2, 3)


def test_truncate_to():
    st = ControlRecordState(vset(9))
    st.update_from_batch(encode_voters_control_batch(0, 1, vset(1), 5, kraft_version=1))
    st.update_from_batch(encode_batch(2, 1, [b"x"] * 3, 5))
    st.update_from_batch(encode_voters_control_batch(5, 1, vset(1, 2), 5))
    assert st.last_voter_set() == vset(1, 2)
    st.truncate_new_entries(5)
    assert st.last_voter_set() == vset(1)
    assert st.next_offset == 5
    st.truncate_new_entries(0)
    assert st.last_voter_set() == vset(9)
    assert st.last_kraft_version() == 0


def test_trim_prefix_to():
    st = ControlRecordState(vset(9))
    st.update_from_batch(encode_voters_control_batch(0, 1, vset(1), 5, kraft_version=1))
    st.update_from_batch(encode_voters_control_batch(2, 1, vset(1, 2), 5))
    st.update_from_batch(encode_voters_control_batch(3, 1, vset(1, 2, 3), 5))
    st.truncate_old_entries(2)
    assert st.voter_set_at(1) is None
    assert st.voter_set_at(2) == vset(1, 2)
    assert st.voter_set_at(3) == vset(1, 2, 3)
    assert st.kraft_version_at(2) == 1  # the only kraft.version entry stays


def test_unknown_control_record_type_is_refused():
    st = ControlRecordState(vset(9))
    bad = encode_batch(0, 1, [b"\x00\x00"], 5, keys=[struct.pack(">hh", 0, 7)], control=True)
    with pytest.raises(ControlRecordError, match="unknown control record type 7"):
        st.update_from_batch(bad)
    marker = encode_batch(0, 1, [b"\x00\x00\x00\x00\x00\x00"], 5,
                          keys=[struct.pack(">hh", 0, 1)], control=True)  # fmt: skip
    with pytest.raises(ControlRecordError):
        st.update_from_batch(marker)
    assert st.last_voter_set() == vset(9)


# ---------------------------------------------------------------- the bootstrap checkpoint
def _encode_voter(vid: int, d: UUID, host: str, port: int) -> bytes:
    """A VotersRecord.Voter at version 0 (flexible), built from the schema by hand."""

    def cstr(s: str) -> bytes:
        b = s.encode()
        return bytes([len(b) + 1]) + b

    ep = cstr("CONTROLLER") + cstr(host) + struct.pack(">H", port) + b"\x00"
    return (
        struct.pack(">i", vid) + d.bytes + b"\x02" + ep + struct.pack(">hh", 0, 1) + b"\x00"
        + b"\x00"
    )  # fmt: skip


def test_bootstrap_checkpoint_bytes_is_kafkas_layout():
    voters = VoterSet(
        [
            VoterNode(1, D1, {"CONTROLLER": ("localhost", 9093)}, 0, 1),
            VoterNode(2, D2, {"CONTROLLER": ("h2", 9094)}, 0, 1),
        ]
    )
    data = bootstrap_checkpoint_bytes(voters, 1, 1_700_000_000_123)
    head, foot = decode_batches(data)
    assert len(data) == head.size + foot.size
    # header batch: offset 0, epoch 0, magic 2, control (not transactional), no producer
    base, length, epoch, magic, _crc, attrs, last_delta, t0, tmax, pid, pepoch, seq, n = (
        struct.unpack_from(">qiibIhiqqqhii", data, 0)
    )
    assert (base, epoch, magic, attrs, last_delta, n) == (0, 0, 2, 0x20, 2, 3)
    assert (t0, tmax, pid, pepoch, seq) == (1_700_000_000_123, 1_700_000_000_123, -1, -1, -1)
    assert [control_type(k) for k in head.keys] == [SNAPSHOT_HEADER, KRAFT_VERSION, KRAFT_VOTERS]
    # SnapshotHeaderRecord {Version 0, LastContainedLogTimestamp}, then tagged fields
    assert head.records[0] == struct.pack(">hq", 0, 1_700_000_000_123) + b"\x00"
    assert head.records[1] == struct.pack(">hh", 0, 1) + b"\x00"
    assert head.records[2] == (
        struct.pack(">h", 0) + b"\x03" + _encode_voter(1, D1, "localhost", 9093)
        + _encode_voter(2, D2, "h2", 9094) + b"\x00"
    )  # fmt: skip
    assert head.is_control and foot.is_control
    assert (foot.base_offset, foot.epoch, foot.record_count) == (3, 0, 1)
    assert [control_type(k) for k in foot.keys] == [SNAPSHOT_FOOTER]
    assert foot.records[0] == struct.pack(">h", 0) + b"\x00"


def test_bootstrap_checkpoint_refuses_level_0_and_no_voters():
    with pytest.raises(ValueError):
        bootstrap_checkpoint_bytes(vset(1), 0, 1)
    with pytest.raises(ValueError):
        bootstrap_checkpoint_bytes(VoterSet(), 1, 1)
