"""MemoryLog and MemoryQuorumStateStore: FileLog's semantics in memory, plus crash()."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kafka_rpc.protocol.record_batch import Batch, CorruptRecordError, encode_batch
from kafka_rpc.raft.api import ElectionState, OffsetAndEpoch
from kafka_rpc.raft.file_log import FileLog
from kafka_rpc.raft.memory import MemoryLog, MemoryQuorumStateStore

OE = OffsetAndEpoch


def batch(base: int, epoch: int, n: int = 2) -> Batch:
    return encode_batch(base, epoch, [bytes([base % 251]) * 30] * n, 1000 + base)


def fill(log: MemoryLog | FileLog, epochs: list[int]) -> list[Batch]:
    out = []
    for e in epochs:
        b = batch(log.end_offset, e)
        log.append([b])
        out.append(b)
    return out


def snap(log: MemoryLog | FileLog, sid: OffsetAndEpoch) -> None:
    w = log.create_snapshot(sid)
    w.append(encode_batch(0, sid.epoch, [b"state"], 0).data)
    w.freeze()


def test_append_read_batches_truncate() -> None:
    log = MemoryLog()
    assert log.end_offset_for_epoch(3) == OE(0, 0) and log.last_fetched_epoch() == 0
    bs = fill(log, [1, 1, 2, 3])
    assert log.read(0, 1 << 20) == b"".join(b.data for b in bs)
    assert log.read(3, 1) == bs[1].data
    assert log.read(3, bs[1].size + bs[2].size) == bs[1].data + bs[2].data
    assert log.read(8, 10) == b""
    assert [b.base_offset for b in log.batches(3, 6)] == [2, 4]
    with pytest.raises(ValueError):
        log.append([batch(9, 3)])
    with pytest.raises(ValueError):
        log.append([batch(8, 2)])
    assert log.end_offset_for_epoch(2) == OE(6, 2)
    log.truncate_to(5)
    assert log.end_offset == 4 and log.end_offset_for_epoch(2) == OE(4, 1)
    assert log.size_in_bytes() == bs[0].size + bs[1].size


def test_crash_loses_exactly_the_unflushed_tail() -> None:
    log = MemoryLog()
    kept = fill(log, [1, 1, 2])
    log.flush()
    assert log.flushed_offset == 6
    fill(log, [2, 3])
    assert log.end_offset == 10
    log.crash()
    assert (log.end_offset, log.flushed_offset) == (6, 6)
    assert list(log.batches(0, 100)) == kept
    assert log.last_fetched_epoch() == 2
    assert log.end_offset_for_epoch(3) == OE(6, 2)
    fill(log, [4])  # appends go on at the recovered end
    assert log.end_offset == 8
    log.crash()
    assert log.end_offset == 6
    log.crash()  # nothing unflushed: nothing lost
    assert log.end_offset == 6


def test_crash_after_truncate_keeps_the_truncation() -> None:
    log = MemoryLog()
    fill(log, [1, 1, 1])
    log.flush()
    log.truncate_to(2)
    assert log.flushed_offset == 2
    fill(log, [2, 2])
    log.crash()
    assert log.end_offset == 2 and log.last_fetched_epoch() == 1


def test_crash_loses_unfrozen_snapshots_only() -> None:
    log = MemoryLog()
    fill(log, [1, 1])
    snap(log, OE(2, 1))
    w = log.create_snapshot(OE(4, 1))
    w.append(b"abc")
    log.crash()
    assert log.snapshot_ids() == [OE(2, 1)]
    with pytest.raises(ValueError):
        w.freeze()
    assert log.snapshot_ids() == [OE(2, 1)]


def test_crash_then_truncate_to_latest_snapshot() -> None:
    log = MemoryLog()
    fill(log, [1])
    log.flush()
    fill(log, [1, 1])
    snap(log, OE(6, 1))  # downloaded snapshot frozen, the tail not flushed
    log.crash()
    assert (log.start_offset, log.end_offset, log.flushed_offset) == (6, 6, 6)
    assert log.last_fetched_epoch() == 1


def test_snapshots() -> None:
    log = MemoryLog()
    fill(log, [1, 1, 2, 2])
    w = log.create_snapshot(OE(4, 1))
    data = encode_batch(0, 1, [b"x"], 0).data
    w.append(data[:5])
    w.append(data[5:])
    assert w.size == len(data) and log.read_snapshot(OE(4, 1)) is None
    w.freeze()
    r = log.read_snapshot(OE(4, 1))
    assert r is not None and r.size == len(data)
    assert r.read(3, 4) == data[3:7] and r.read(len(data), 9) == b""
    assert [b.records for b in r.batches()] == [(b"x",)]
    aborted = log.create_snapshot(OE(6, 2))
    aborted.append(b"zz")
    aborted.close()
    assert log.snapshot_ids() == [OE(4, 1)]
    w = log.create_snapshot(OE(8, 2))
    w.append(data[:-2])
    w.freeze()
    r = log.read_snapshot(OE(8, 2))
    assert r is not None
    with pytest.raises(CorruptRecordError):
        list(r.batches())
    assert log.earliest_snapshot_id() == OE(4, 1) and log.latest_snapshot_id() == OE(8, 2)
    assert not log.delete_before_snapshot(OE(6, 2))
    assert log.delete_before_snapshot(OE(4, 1))
    assert log.start_offset == 4 and log.snapshot_ids() == [OE(4, 1), OE(8, 2)]
    assert log.end_offset_for_epoch(1) == OE(4, 1)
    with pytest.raises(ValueError):
        log.read(1, 10)
    assert not log.delete_before_snapshot(OE(4, 1))
    assert log.delete_before_snapshot(OE(8, 2))
    assert log.snapshot_ids() == [OE(8, 2)] and log.size_in_bytes() == 0
    assert log.read(8, 10) == b""


def test_quorum_state_store_is_durable_at_once() -> None:
    store = MemoryQuorumStateStore()
    assert store.read() is None
    st = ElectionState(epoch=4, leader_id=2, voters=(1, 2, 3))
    store.write(st)
    assert store.read() == st and store.writes == 1


def _run(log: MemoryLog | FileLog, rng: random.Random) -> list[object]:
    """Random operations; returns what the log answered, to compare both logs."""
    trace: list[object] = []
    epoch = 1
    for _ in range(150):
        op = rng.random()
        if op < 0.45:
            epoch += rng.random() < 0.2
            log.append([batch(log.end_offset, epoch, rng.randint(1, 3))])
        elif op < 0.55:
            log.flush()
        elif op < 0.65 and log.end_offset > log.start_offset:
            log.truncate_to(rng.randint(log.start_offset, log.end_offset))
        elif op < 0.75 and log.end_offset > log.start_offset:
            last = list(log.batches(log.start_offset, log.end_offset))
            b = rng.choice(last)
            snap(log, OE(b.last_offset + 1, b.epoch))
        elif op < 0.82 and log.snapshot_ids():
            trace.append(log.delete_before_snapshot(rng.choice(log.snapshot_ids())))
        elif op < 0.86:
            epoch += 1
            snap(log, OE(log.end_offset + rng.randint(0, 5), epoch))
            trace.append(log.truncate_to_latest_snapshot())
        start = rng.randint(max(log.start_offset, 0), log.end_offset + 1)
        trace.append(
            (
                log.start_offset,
                log.end_offset,
                log.flushed_offset,
                log.last_fetched_epoch(),
                [log.end_offset_for_epoch(e) for e in range(epoch + 2)],
                log.snapshot_ids(),
                log.read(start, rng.randint(1, 400)),
                list(log.batches(start - 3, start + 5)),
            )
        )
    return trace


@pytest.mark.parametrize("seed", range(6))
def test_memory_log_matches_file_log(tmp_path: Path, seed: int) -> None:
    """The simulator's log answers exactly as the file log under the same operations (except
    size_in_bytes: the file log counts whole segments, which may hold batches below the start)."""
    mem = _run(MemoryLog(), random.Random(seed))
    flog = FileLog(tmp_path, segment_bytes=400)
    try:
        assert _run(flog, random.Random(seed)) == mem
    finally:
        flog.close()
