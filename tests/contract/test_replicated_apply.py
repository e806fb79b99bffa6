"""The replicated coordinator's apply groups: committed records delivered together are
applied together, in a SQLite transaction that only a read commits (A) or one per group (B); the
answers and every table row must be those of applying each record alone.

Coordinator A runs each wave of writes concurrently (their records share one Raft batch, so one
apply group); coordinator B runs the same writes one after the other (one record per group).
Hypothesis draws the operations (``test_differential``'s). Also: snapshot chunk records framed
around the image's bytes are the codec's own."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_rpc.coordinator.api import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    TopicIdPartition,
)
from kafka_rpc.coordinator.replicated import ReplicatedBatchCoordinator
from kafka_rpc.coordinator.replicated_state import SNAPSHOT_CHUNK_BYTES, _ChunkRec, chunk_records
from kafka_rpc.protocol import codec
from kafka_rpc.raft.driver import monotonic_ms

from .conftest import Clock
from .test_differential import TOPICS, apply, op_st

WRITES = ("commit", "delete_records", "retention", "delete_topic")


def _without_applied(rows: dict) -> dict:
    return {k: v for k, v in rows.items() if k != "raft_applied"}


async def _pair(path: Path, clock: Clock):
    # A: one SQLite transaction until a read commits it; B: a COMMIT per group
    a = ReplicatedBatchCoordinator(path / "a", time_ms=clock, producer_id_expiration_ms=4000,
                                   apply_commit_records=10_000, apply_commit_ms=600_000)
    b = ReplicatedBatchCoordinator(path / "b", time_ms=clock, producer_id_expiration_ms=4000,
                                   apply_commit_records=1)  # fmt: skip
    await a.start()
    await b.start()
    for c in (a, b):
        assert c.is_writable
        await c.create_topic_and_partitions(
            [CreateTopicAndPartitionsRequest(t, f"t{i}", 2) for i, t in enumerate(TOPICS)]
        )
    return a, b


async def run(waves, path: Path) -> None:
    clock = Clock()
    a, b = await _pair(path, clock)
    try:
        step = 0
        for wave in waves:
            writes = [op for op in wave if op[0] in WRITES]
            steps = list(range(step, step + len(writes)))
            step += len(writes)
            # A: the wave's writes at once (appended in this order: each call appends before
            # its first await); B: one by one
            got = await asyncio.gather(*(apply(a, op, s) for op, s in zip(writes, steps)))
            want = [await apply(b, op, s) for op, s in zip(writes, steps)]
            assert list(got) == want, writes
            for op in wave:
                if op[0] == "advance":
                    clock.advance(op[1])
                elif op[0] not in WRITES:  # reads (and files: list, delete, is-safe) in turn
                    assert await apply(a, op, step) == await apply(b, op, step), op
                    step += 1
        assert a.applied_records == b.applied_records
        assert _without_applied(a.state_rows()) == _without_applied(b.state_rows())
    finally:
        await a.close()
        await b.close()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.lists(op_st, min_size=1, max_size=8), min_size=1, max_size=5))
def test_group_apply_equals_record_by_record(waves):
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(run(waves, Path(d)))


def _batches(topic: uuid.UUID, pid: int, n: int) -> list[CommitBatchRequest]:
    """``n`` idempotent batches of producer ``pid`` (3 records each), alternating partitions."""
    return [
        CommitBatchRequest(TopicIdPartition(topic, i % 2), i * 10, 10, 0, 2, 0, 0, pid, 0,
                           3 * (i // 2), 3 * (i // 2) + 2)
        for i in range(n)
    ]  # fmt: skip


async def test_concurrent_commits_share_one_group_and_restart_keeps_them(tmp_path):
    clock = Clock()
    a, b = await _pair(tmp_path, clock)
    topic = TOPICS[0]
    try:
        groups, records = a.apply_groups, a.applied_records
        calls = [(f"o{k}", _batches(topic, 100 + k, 4)) for k in range(16)]
        got = await asyncio.gather(*(a.commit_file(k, 1, 40, r) for k, r in calls))
        assert a.applied_records - records == 16
        assert a.apply_groups - groups < 16  # several records per transaction
        groups_b = b.apply_groups
        want = [await b.commit_file(k, 1, 40, r) for k, r in calls]
        assert b.apply_groups - groups_b == 16
        assert list(got) == want
        assert all(r.error == 0 and not r.is_duplicate for resp in got for r in resp)
        # the retries (new objects, same producers and sequences) are duplicates, in one group
        dups = await asyncio.gather(*(a.commit_file(k + "r", 1, 40, r) for k, r in calls[:3]))
        assert all(r.is_duplicate for d in dups for r in d)
        rows = a.state_rows()
        assert _without_applied(rows) != _without_applied(b.state_rows())  # b: no retries yet
        sid = a.core.create_snapshot(monotonic_ms())
        assert sid is not None and sid.offset == a.applied_offset
    finally:
        await a.close()
        await b.close()
    # a restart re-applies nothing: every group reached SQLite with its applied offset
    a = ReplicatedBatchCoordinator(tmp_path / "a", time_ms=clock, producer_id_expiration_ms=4000)
    await a.start()
    try:
        assert a.applied_records == 0
        assert _without_applied(a.state_rows()) == _without_applied(rows)
    finally:
        await a.close()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 3 * SNAPSHOT_CHUNK_BYTES + 5), st.binary(min_size=0, max_size=64))
def test_snapshot_chunks_are_the_codecs_records(size, head):
    image = (head * (size // max(len(head), 1) + 1))[:size] if head else bytes(size)
    records = chunk_records(bytearray(image))
    want = [
        codec.encode_record(
            _ChunkRec(position=pos, image_size=size, data=image[pos : pos + SNAPSHOT_CHUNK_BYTES])
        )
        for pos in range(0, max(size, 1), SNAPSHOT_CHUNK_BYTES)
    ]
    assert records == want
    assert b"".join(codec.decode_record(r)[0].data for r in records) == image
