"""FileLog: Kafka's on-disk metadata log (segments, snapshots, recovery) on real files."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_rpc.protocol.record_batch import Batch, CorruptRecordError, encode_batch
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.file_log import FileLog, LogStateError, segment_path, snapshot_path

OE = OffsetAndEpoch


def batch(base: int, epoch: int, n: int = 2, size: int = 40) -> Batch:
    return encode_batch(base, epoch, [bytes([base % 251]) * size] * n, 1_700_000_000_000 + base)


def fill(log: FileLog, epochs: list[int], n: int = 2, size: int = 40) -> list[Batch]:
    """Append one batch of ``n`` records per entry of ``epochs``."""
    out = []
    for e in epochs:
        b = batch(log.end_offset, e, n, size)
        log.append([b])
        out.append(b)
    return out


def snap(log: FileLog, sid: OffsetAndEpoch, payload: bytes = b"state") -> None:
    w = log.create_snapshot(sid)
    w.append(encode_batch(0, sid.epoch, [payload], 0).data)
    w.freeze()


def segments(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".log"))


def test_append_read_batches_flush(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    assert (log.start_offset, log.end_offset, log.flushed_offset) == (0, 0, 0)
    assert log.read(0, 1000) == b""
    bs = fill(log, [1, 1, 2])
    assert log.end_offset == 6 and log.flushed_offset == 0
    assert log.read(0, 1 << 20) == b"".join(b.data for b in bs)
    # from the batch containing offset 3, whole batches only
    assert log.read(3, 1 << 20) == bs[1].data + bs[2].data
    # at least one batch even when larger than max_bytes; stop before exceeding
    assert log.read(0, 1) == bs[0].data
    assert log.read(0, bs[0].size + bs[1].size - 1) == bs[0].data
    assert log.read(6, 100) == b""
    got = list(log.batches(2, 4))
    assert [(b.base_offset, b.epoch, b.records) for b in got] == [(2, 1, bs[1].records)]
    assert [b.base_offset for b in log.batches(0, 100)] == [0, 2, 4]
    assert log.size_in_bytes() == sum(b.size for b in bs)
    log.flush()
    assert log.flushed_offset == 6
    assert log.last_fetched_epoch() == 2
    log.close()
    assert (tmp_path / "00000000000000000000.log").stat().st_size == sum(b.size for b in bs)


def test_append_validation(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    fill(log, [3])
    with pytest.raises(ValueError):
        log.append([batch(5, 3)])  # gap
    with pytest.raises(ValueError):
        log.append([batch(1, 3)])  # overlap
    with pytest.raises(ValueError):
        log.append([batch(2, 2)])  # epoch goes down
    with pytest.raises(ValueError):
        log.append([batch(2, 3), batch(5, 3)])  # second not contiguous: nothing written
    assert log.end_offset == 2
    assert log.size_in_bytes() == batch(0, 3).size
    log.append([batch(2, 3), batch(4, 4)])
    assert log.end_offset == 6


def test_reopen_recovers_same_state(tmp_path: Path) -> None:
    log = FileLog(tmp_path, segment_bytes=300)
    bs = fill(log, [1, 1, 2, 2, 3, 5])
    log.flush()
    before = log.read(0, 1 << 20)
    log.close()
    log = FileLog(tmp_path, segment_bytes=300)
    assert (log.start_offset, log.end_offset, log.flushed_offset) == (0, 12, 12)
    assert log.read(0, 1 << 20) == before
    assert [b.data for b in log.batches(0, 12)] == [b.data for b in bs]
    assert log.end_offset_for_epoch(2) == OE(8, 2)
    assert log.end_offset_for_epoch(4) == OE(10, 3)
    assert log.last_fetched_epoch() == 5
    fill(log, [5])
    assert log.end_offset == 14


def test_torn_tail_truncated_at_open(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = FileLog(tmp_path)
    bs = fill(log, [1, 1, 2])
    log.close()
    seg = tmp_path / "00000000000000000000.log"
    good = bs[0].size + bs[1].size
    os.truncate(seg, good + bs[2].size // 2)
    with caplog.at_level(logging.WARNING):
        log = FileLog(tmp_path)
    assert "00000000000000000000.log" in caplog.text and str(good) in caplog.text
    assert (log.end_offset, log.flushed_offset) == (4, 4)
    assert seg.stat().st_size == good
    assert log.read(0, 1 << 20) == bs[0].data + bs[1].data
    assert log.last_fetched_epoch() == 1
    fill(log, [2])  # appends continue at the truncation point
    assert log.end_offset == 6


def test_flipped_byte_truncated_at_open(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    bs = fill(log, [1, 1, 1, 2])
    log.close()
    seg = tmp_path / "00000000000000000000.log"
    raw = bytearray(seg.read_bytes())
    pos = bs[0].size + bs[1].size + 70  # inside the third batch's records: its CRC fails
    raw[pos] ^= 0xFF
    seg.write_bytes(bytes(raw))
    log = FileLog(tmp_path)
    assert log.end_offset == 4
    assert seg.stat().st_size == bs[0].size + bs[1].size
    assert [b.base_offset for b in log.batches(0, 100)] == [0, 2]


def test_non_contiguous_or_decreasing_epoch_ends_log(tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(batch(0, 2).data + batch(2, 1).data + batch(4, 2).data)
    log = FileLog(tmp_path)
    assert log.end_offset == 2 and seg.stat().st_size == batch(0, 2).size
    log.close()
    seg.write_bytes(batch(0, 2).data + batch(3, 2).data)
    log = FileLog(tmp_path)
    assert log.end_offset == 2


def test_corruption_deletes_later_segments(tmp_path: Path) -> None:
    one = batch(0, 1).size
    log = FileLog(tmp_path, segment_bytes=2 * one)
    fill(log, [1] * 6)
    log.close()
    names = segments(tmp_path)
    assert len(names) == 3
    first = tmp_path / names[0]
    raw = bytearray(first.read_bytes())
    raw[-5] ^= 1
    first.write_bytes(bytes(raw))
    log = FileLog(tmp_path, segment_bytes=2 * one)
    assert segments(tmp_path) == names[:1]
    assert log.end_offset == 2


def test_segment_roll_and_reads_across_segments(tmp_path: Path) -> None:
    one = batch(0, 1).size
    log = FileLog(tmp_path, segment_bytes=2 * one + 10)
    bs = fill(log, [1, 1, 1, 2, 2, 3, 3])
    assert segments(tmp_path) == [f"{o:020d}.log" for o in (0, 4, 8, 12)]
    assert (tmp_path / segments(tmp_path)[0]).stat().st_size == 2 * one
    # a read crossing segment boundaries, cut at whole batches
    assert log.read(2, 3 * one) == bs[1].data + bs[2].data + bs[3].data
    assert log.read(9, 1 << 20) == b"".join(b.data for b in bs[4:])
    assert [b.base_offset for b in log.batches(3, 11)] == [2, 4, 6, 8, 10]
    assert log.size_in_bytes() == 7 * one
    log.flush()
    log.close()
    log = FileLog(tmp_path, segment_bytes=2 * one + 10)
    assert log.end_offset == 14 and log.read(0, 1 << 20) == b"".join(b.data for b in bs)


def test_truncate_to_across_segments(tmp_path: Path) -> None:
    one = batch(0, 1).size
    log = FileLog(tmp_path, segment_bytes=2 * one)
    fill(log, [1, 1, 2, 2, 3, 3])
    log.flush()
    assert segments(tmp_path) == [f"{o:020d}.log" for o in (0, 4, 8)]
    log.truncate_to(7)  # inside the batch 6..7: truncated to its base
    assert (log.end_offset, log.flushed_offset) == (6, 6)
    assert segments(tmp_path) == [f"{o:020d}.log" for o in (0, 4)]
    assert (tmp_path / f"{4:020d}.log").stat().st_size == one
    assert log.end_offset_for_epoch(3) == OE(6, 2)
    assert log.last_fetched_epoch() == 2
    log.truncate_to(4)  # a segment's base: kept, empty
    assert log.end_offset == 4 and log.last_fetched_epoch() == 1
    assert (tmp_path / f"{4:020d}.log").stat().st_size == 0
    log.truncate_to(10)  # past the end: nothing
    assert log.end_offset == 4
    fill(log, [4])
    log.close()
    log = FileLog(tmp_path, segment_bytes=2 * one)
    assert log.end_offset == 6
    assert [(b.base_offset, b.epoch) for b in log.batches(0, 6)] == [(0, 1), (2, 1), (4, 4)]


def test_end_offset_for_epoch(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    assert log.end_offset_for_epoch(0) == OE(0, 0)
    assert log.end_offset_for_epoch(5) == OE(0, 0)
    assert log.last_fetched_epoch() == 0
    fill(log, [2, 2, 4, 7])  # epoch 2: 0..3, 4: 4..5, 7: 6..7
    assert log.end_offset_for_epoch(2) == OE(4, 2)
    assert log.end_offset_for_epoch(3) == OE(4, 2)  # largest epoch <= 3
    assert log.end_offset_for_epoch(4) == OE(6, 4)
    assert log.end_offset_for_epoch(6) == OE(6, 4)
    assert log.end_offset_for_epoch(7) == OE(8, 7)  # the latest ends at the log end
    assert log.end_offset_for_epoch(9) == OE(8, 7)
    # below every epoch with no snapshot: Kafka answers (start of the first epoch, epoch)
    assert log.end_offset_for_epoch(1) == OE(0, 1)
    assert log.end_offset_for_epoch(-1) == OE(8, 7)


def test_end_offset_for_epoch_after_snapshot(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    fill(log, [1, 1, 2, 3, 3])  # 1: 0..3, 2: 4..5, 3: 6..9
    snap(log, OE(6, 2))
    assert log.delete_before_snapshot(OE(6, 2))
    assert log.start_offset == 6
    # below the log's first epoch (3, at 6 == the snapshot offset): the snapshot id
    assert log.end_offset_for_epoch(2) == OE(6, 2)
    assert log.end_offset_for_epoch(1) == OE(6, 2)
    assert log.end_offset_for_epoch(3) == OE(10, 3)
    # a log emptied onto a snapshot answers the snapshot id for everything
    snap(log, OE(20, 4))
    assert log.truncate_to_latest_snapshot()
    assert log.end_offset_for_epoch(1) == OE(20, 4)
    assert log.end_offset_for_epoch(4) == OE(20, 4)
    assert log.last_fetched_epoch() == 4


def test_snapshot_write_freeze_read(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    fill(log, [1, 1])
    sid = OE(4, 1)
    w = log.create_snapshot(sid)
    parts = list(tmp_path.glob("*.checkpoint.part"))
    assert len(parts) == 1 and parts[0].name.startswith("00000000000000000004-0000000001-")
    data = encode_batch(0, 1, [b"a", b"b"], 5).data + encode_batch(2, 1, [b"c"], 5).data
    w.append(data[:10])
    w.append(data[10:])
    assert w.size == len(data)
    assert log.snapshot_ids() == [] and log.read_snapshot(sid) is None
    w.freeze()
    final = snapshot_path(tmp_path, sid)
    assert final.name == "00000000000000000004-0000000001.checkpoint"
    assert final.read_bytes() == data
    assert not stat.S_IMODE(final.stat().st_mode) & 0o222  # read-only
    assert not list(tmp_path.glob("*.part"))
    w.close()  # after freeze: nothing
    assert final.exists()
    assert log.snapshot_ids() == [sid]
    assert log.latest_snapshot_id() == log.earliest_snapshot_id() == sid
    r = log.read_snapshot(sid)
    assert r is not None and r.size == len(data) and r.snapshot_id == sid
    assert r.read(0, 1 << 20) == data
    assert r.read(5, 7) == data[5:12]
    assert r.read(len(data) - 3, 100) == data[-3:]
    assert r.read(len(data), 100) == b""
    assert [b.records for b in r.batches()] == [(b"a", b"b"), (b"c",)]
    r.close()
    log.close()
    log = FileLog(tmp_path)
    assert log.snapshot_ids() == [sid]


def test_snapshot_corrupt_raises(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    fill(log, [1])
    data = bytearray(encode_batch(0, 1, [b"hello"], 5).data)
    data[-3] ^= 0xFF
    w = log.create_snapshot(OE(2, 1))
    w.append(bytes(data))
    w.freeze()
    r = log.read_snapshot(OE(2, 1))
    assert r is not None
    with pytest.raises(CorruptRecordError):
        list(r.batches())
    r.close()
    w = log.create_snapshot(OE(2, 1))
    w.append(encode_batch(0, 1, [b"hello"], 5).data[:-4])  # a torn last batch
    w.freeze()
    r = log.read_snapshot(OE(2, 1))
    assert r is not None
    with pytest.raises(CorruptRecordError):
        list(r.batches())
    r.close()


def test_snapshot_abort_and_leftovers_removed_at_open(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    fill(log, [1])
    w = log.create_snapshot(OE(2, 1))
    w.append(b"partial")
    w.close()
    assert not list(tmp_path.glob("*.part"))
    assert log.snapshot_ids() == []
    with pytest.raises(ValueError):
        w.freeze()
    w2 = log.create_snapshot(OE(2, 1))  # left behind as by a crash
    w2.append(b"partial")
    log.close()
    (tmp_path / "00000000000000000001-0000000001.checkpoint.deleted").write_bytes(b"x")
    (tmp_path / "00000000000000000000.log.deleted").write_bytes(b"x")
    log = FileLog(tmp_path)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["00000000000000000000.log", "leader-epoch-checkpoint"]
    assert log.snapshot_ids() == []


def test_truncate_to_latest_snapshot(tmp_path: Path) -> None:
    log = FileLog(tmp_path, segment_bytes=250)
    fill(log, [1, 1, 1, 2])  # 0..7, last epoch 2
    snap(log, OE(2, 1))
    assert not log.truncate_to_latest_snapshot()  # behind the log
    snap(log, OE(8, 2))
    assert not log.truncate_to_latest_snapshot()  # same epoch, offset == end
    snap(log, OE(12, 2))  # same epoch, past the end
    assert log.truncate_to_latest_snapshot()
    assert (log.start_offset, log.end_offset, log.flushed_offset) == (12, 12, 12)
    assert log.snapshot_ids() == [OE(12, 2)]
    assert segments(tmp_path) == [f"{12:020d}.log"]
    assert sorted(p.name for p in tmp_path.glob("*.checkpoint")) == [
        "00000000000000000012-0000000002.checkpoint"
    ]
    assert log.read(12, 100) == b"" and log.size_in_bytes() == 0
    fill(log, [3])
    assert log.end_offset == 14
    log.close()
    log = FileLog(tmp_path, segment_bytes=250)
    assert (log.start_offset, log.end_offset) == (12, 14)
    assert log.snapshot_ids() == [OE(12, 2)]


def test_truncate_to_latest_snapshot_higher_epoch_and_at_open(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    fill(log, [1, 1, 1])  # 0..5 epoch 1
    snap(log, OE(4, 3))  # a higher epoch, below the end: the log diverged from it
    log.close()  # crash after downloading, before truncating: done at open
    log = FileLog(tmp_path)
    assert (log.start_offset, log.end_offset) == (4, 4)
    assert log.last_fetched_epoch() == 3
    assert segments(tmp_path) == [f"{4:020d}.log"]


def test_bootstrap_snapshot_is_not_past_empty_log(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    snap(log, OE(0, 0))
    assert not log.truncate_to_latest_snapshot()
    log.close()
    log = FileLog(tmp_path)
    assert log.snapshot_ids() == [OE(0, 0)] and log.start_offset == 0


def test_delete_before_snapshot(tmp_path: Path) -> None:
    one = batch(0, 1).size
    log = FileLog(tmp_path, segment_bytes=2 * one)
    fill(log, [1, 1, 1, 1, 2, 2])  # segments 0 (0..3), 4 (4..7), 8 (8..11)
    log.flush()
    assert not log.delete_before_snapshot(OE(4, 1))  # no such snapshot
    snap(log, OE(4, 1))
    snap(log, OE(8, 1))
    assert not log.delete_before_snapshot(OE(6, 1))  # not a snapshot
    assert log.delete_before_snapshot(OE(4, 1))
    assert log.start_offset == 4
    assert segments(tmp_path) == [f"{o:020d}.log" for o in (4, 8)]
    assert not log.delete_before_snapshot(OE(4, 1))  # not above the start
    with pytest.raises(ValueError):
        log.read(2, 100)
    assert log.read(4, 1) == batch(4, 1).data
    assert log.delete_before_snapshot(OE(8, 1))
    assert log.snapshot_ids() == [OE(8, 1)]
    assert segments(tmp_path) == [f"{8:020d}.log"]
    assert not (tmp_path / "00000000000000000004-0000000001.checkpoint").exists()
    assert log.size_in_bytes() == 2 * one
    with pytest.raises(ValueError):
        log.truncate_to(6)  # below the start
    log.close()
    log = FileLog(tmp_path, segment_bytes=2 * one)
    assert (log.start_offset, log.end_offset, log.snapshot_ids()) == (8, 12, [OE(8, 1)])


def test_delete_before_snapshot_refuses_past_latest_or_end(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    fill(log, [1, 1])
    snap(log, OE(2, 1))
    snap(log, OE(10, 1))  # beyond the log end
    assert not log.delete_before_snapshot(OE(10, 1))
    assert log.start_offset == 0
    assert log.delete_before_snapshot(OE(2, 1))
    assert log.start_offset == 2
    # a segment holding the new start is kept: it also holds later batches
    assert segments(tmp_path) == [f"{0:020d}.log"]


def test_start_offset_above_zero_without_snapshot_raises(tmp_path: Path) -> None:
    seg = segment_path(tmp_path, 10)
    seg.write_bytes(batch(10, 1).data)
    with pytest.raises(LogStateError, match=str(tmp_path)):
        FileLog(tmp_path)
    snapshot_path(tmp_path, OE(10, 1)).write_bytes(encode_batch(0, 1, [b"s"], 0).data)
    log = FileLog(tmp_path)
    assert (log.start_offset, log.end_offset) == (10, 12)


def test_snapshots_below_start_deleted_at_open(tmp_path: Path) -> None:
    segment_path(tmp_path, 10).write_bytes(batch(10, 2).data)
    for sid in (OE(5, 1), OE(10, 1)):
        snapshot_path(tmp_path, sid).write_bytes(b"")
    log = FileLog(tmp_path)
    assert log.snapshot_ids() == [OE(10, 1)]
    assert not snapshot_path(tmp_path, OE(5, 1)).exists()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's importlib use
def test_kafka_python_reads_our_segments(tmp_path: Path) -> None:
    """An independent RecordBatch v2 reader (kafka-python) accepts the segment bytes."""
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.memory_records import MemoryRecords

    one = batch(0, 1).size
    log = FileLog(tmp_path, segment_bytes=3 * one)
    bs = fill(log, [1, 1, 2, 2, 2, 5, 7], n=3)
    log.close()
    seen = []
    for name in segments(tmp_path):
        data = (tmp_path / name).read_bytes()
        records = MemoryRecords(data)
        first = True
        while (b := records.next_batch()) is not None:
            if first:
                assert b.base_offset == int(name[:20])
                first = False
            assert isinstance(b, DefaultRecordBatch)
            assert b.validate_crc()
            seen.append((b.base_offset, b.leader_epoch, b.last_offset_delta + 1, b.magic))
    assert seen == [(x.base_offset, x.epoch, 3, 2) for x in bs]
    # and batch by batch from the raw bytes
    data = b"".join((tmp_path / n).read_bytes() for n in segments(tmp_path))
    pos = 0
    for x in bs:
        kb = DefaultRecordBatch(data[pos : pos + x.size])
        assert kb.validate_crc() and kb.base_offset == x.base_offset
        assert [r.value for r in kb] == list(x.records)
        pos += x.size
    assert pos == len(data)


# ---- the tail cache: the decoded batches appended last serve batches() without a file read


def _view(log: FileLog, lo: int, hi: int) -> list[tuple[int, int, int, bytes, tuple]]:
    return [(b.base_offset, b.last_offset, b.epoch, bytes(b.data), b.records)
            for b in log.batches(lo, hi)]  # fmt: skip


def test_tail_cache_serves_recent_batches_without_reading(tmp_path: Path) -> None:
    log = FileLog(tmp_path, tail_cache_bytes=1 << 20)
    bs = fill(log, [1, 1, 2])
    # the very objects appended come back (no re-read, no re-decode)
    assert list(log.batches(2, 6)) == bs[1:]
    assert all(a is b for a, b in zip(log.batches(0, 6), bs, strict=True))
    # a corrupted file does not matter to the cached tail, and does to an uncached reader
    seg = segment_path(tmp_path, 0)
    raw = bytearray(seg.read_bytes())
    raw[-1] ^= 0xFF
    seg.write_bytes(raw)
    assert list(log.batches(4, 6)) == bs[2:]
    log.close()


def test_tail_cache_follows_truncation(tmp_path: Path) -> None:
    log = FileLog(tmp_path, tail_cache_bytes=1 << 20)
    fill(log, [1, 1, 1])
    log.truncate_to(3)  # inside the second batch: it goes too, the log ends at 2
    new = batch(2, 2, n=1)
    log.append([new])
    assert list(log.batches(0, 10))[1:] == [new]
    log.close()


def test_tail_cache_bounded_by_bytes(tmp_path: Path) -> None:
    one = batch(0, 1).size
    log = FileLog(tmp_path, tail_cache_bytes=2 * one)
    bs = fill(log, [1, 1, 1, 1])
    assert [b.base_offset for b in log._tail] == [4, 6]
    # below the cache: read from the file, equal content
    assert _view(log, 0, 8) == [(b.base_offset, b.last_offset, b.epoch, b.data, b.records)
                                for b in bs]  # fmt: skip
    big = FileLog(tmp_path / "big", tail_cache_bytes=1)
    fill(big, [1, 1])
    assert len(big._tail) == 1  # at least the last batch
    off = FileLog(tmp_path / "off", tail_cache_bytes=0)
    fill(off, [1])
    assert not off._tail
    for x in (log, big, off):
        x.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "truncate", "snapshot", "past"]),
                          st.integers(0, 40), st.integers(1, 3)),
                max_size=25))  # fmt: skip
def test_tail_cache_equals_file_reads(ops) -> None:
    """Any sequence of appends, truncations, snapshots with log-start moves and full
    truncations to a snapshot: ``batches`` of a cached log equals an uncached one's."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        cached = FileLog(Path(d) / "a", tail_cache_bytes=6 * batch(0, 1).size)
        plain = FileLog(Path(d) / "b", tail_cache_bytes=0)
        epoch = 1
        for op, x, k in ops:
            for log in (cached, plain):
                if op == "append":
                    for _ in range(k):
                        log.append([batch(log.end_offset, epoch, n=1 + x % 3)])
                elif op == "truncate":
                    if log.end_offset > log.start_offset:
                        log.truncate_to(log.start_offset
                                        + x % (log.end_offset - log.start_offset))  # fmt: skip
                elif op == "snapshot":
                    if log.end_offset > log.start_offset:
                        at = log.start_offset + 1 + x % (log.end_offset - log.start_offset)
                        # a snapshot on a batch boundary at or below `at`
                        bounds = [b.last_offset + 1 for b in log.batches(0, at)
                                  if b.last_offset < at]  # fmt: skip
                        if bounds and bounds[-1] > log.start_offset:
                            sid = OE(bounds[-1], log.last_fetched_epoch())
                            if sid not in log.snapshot_ids():
                                snap(log, sid)
                            log.delete_before_snapshot(sid)
                else:  # a snapshot past the log, as a FetchSnapshot download leaves it
                    sid = OE(log.end_offset + 1 + x, epoch + 1)
                    snap(log, sid)
                    log.truncate_to_latest_snapshot()
            if op == "past":
                epoch += 1
            assert (cached.start_offset, cached.end_offset) == (plain.start_offset,
                                                                plain.end_offset)  # fmt: skip
            end = cached.end_offset
            for lo in range(max(0, cached.start_offset - 1), end + 1):
                assert _view(cached, lo, end + 1) == _view(plain, lo, end + 1)
        cached.close()
        plain.close()


# ---- flushes in three steps (begin_flush / sync on another thread / end_flush)


def test_a_split_flush_covers_what_was_appended_before_it_began(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    fill(log, [1, 1])
    ticket = log.begin_flush()
    fill(log, [1])  # appended while the fsync runs: not covered by it
    ticket.sync()
    log.end_flush(ticket, True)
    assert (log.end_offset, log.flushed_offset) == (6, 4)
    log.flush()
    assert log.flushed_offset == 6
    log.close()


def test_a_truncation_during_a_split_flush_keeps_the_flushed_offset(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    fill(log, [1, 1])
    log.flush()
    fill(log, [1, 1])  # 4..8
    ticket = log.begin_flush()
    log.truncate_to(4)
    fill(log, [2, 2])  # other batches at the same offsets, not yet on disk
    ticket.sync()
    log.end_flush(ticket, True)
    assert (log.end_offset, log.flushed_offset) == (8, 4)
    log.flush()
    assert log.flushed_offset == 8
    log.close()


def test_a_failed_split_flush_is_retried_by_the_next(tmp_path: Path) -> None:
    log = FileLog(tmp_path, segment_bytes=200)
    fill(log, [1, 1, 1])  # rolls segments: the directory is dirty too
    ticket = log.begin_flush()
    log.end_flush(ticket, False)  # as if the fsync raised
    assert log.flushed_offset == 0
    retry = log.begin_flush()
    assert retry.end_offset == 6 and retry.directory is not None
    assert len(retry._fds) == len(segments(tmp_path))
    retry.sync()
    log.end_flush(retry, True)
    assert log.flushed_offset == 6
    log.close()


def test_a_split_flush_survives_its_segment_being_deleted(tmp_path: Path) -> None:
    log = FileLog(tmp_path, segment_bytes=200)
    fill(log, [1, 1, 1, 1])
    n_open = len(os.listdir("/proc/self/fd"))
    ticket = log.begin_flush()
    snap(log, OE(6, 1))
    assert log.delete_before_snapshot(OE(6, 1))  # closes and unlinks the old segments
    ticket.sync()  # its own descriptors are still valid
    log.end_flush(ticket, True)
    assert log.flushed_offset == 8
    assert len(os.listdir("/proc/self/fd")) <= n_open  # the ticket closed its duplicates
    log.close()


def test_leader_epoch_checkpoint_is_kafkas_format_and_follows_the_cache(tmp_path):
    """``leader-epoch-checkpoint`` as Kafka's ``LeaderEpochCheckpointFile`` writes it (version
    0, the count, ``<epoch> <start offset>`` lines), rewritten on a new epoch and on truncations
    at either end."""
    path = tmp_path / "leader-epoch-checkpoint"
    log = FileLog(tmp_path)
    assert path.read_text() == "0\n0\n"
    log.append([encode_batch(0, 1, [b"a", b"b"], 0)])
    log.append([encode_batch(2, 1, [b"c"], 0), encode_batch(3, 3, [b"d", b"e"], 0)])
    assert path.read_text() == "0\n2\n1 0\n3 3\n"
    log.truncate_to(3)
    assert path.read_text() == "0\n1\n1 0\n"
    log.append([encode_batch(3, 4, [b"f"], 0)])
    log.flush()
    w = log.create_snapshot(OE(3, 1))
    w.append(b"x")
    w.freeze()
    assert log.delete_before_snapshot(OE(3, 1))
    assert path.read_text() == "0\n1\n4 3\n"
    log.close()
    # reopened: the log starts at its first segment again (as Kafka's), the cache and the file
    # are rebuilt from the batches
    log = FileLog(tmp_path)
    assert log.start_offset == 0 and path.read_text() == "0\n2\n1 0\n4 3\n"
    log.close()
