"""Differential property test: random operation sequences give identical answers from the
in-memory reference, the SQLite implementation, the replicated one (a single-voter
``__diskless-metadata`` Raft log applied to SQLite) and the PostgreSQL one (hypothesis); the
replicated coordinator's SQLite tables equal the plain SQLite coordinator's row by row."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_rpc.coordinator.api import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    FindBatchRequest,
    ListOffsetsRequest,
    TopicIdPartition,
)
from kafka_rpc.coordinator.memory import InMemoryBatchCoordinator
from kafka_rpc.coordinator.postgres import PostgresBatchCoordinator
from kafka_rpc.coordinator.replicated import ReplicatedBatchCoordinator
from kafka_rpc.coordinator.sqlite import SqliteBatchCoordinator

from .conftest import START_MS, Clock

TOPICS = [uuid.UUID(int=i + 1) for i in range(2)]
TPS = [TopicIdPartition(t, p) for t in TOPICS for p in range(3)]  # partition 2 never created

tp_st = st.sampled_from(TPS)
pid_st = st.sampled_from([-1, 7, 8])
batch_st = st.builds(
    lambda tp, n, size, ts, tt, pid, epoch, seq: CommitBatchRequest(
        tp,
        0,
        size,
        0,
        n - 1,
        ts,
        tt,
        pid,
        epoch if pid >= 0 else -1,
        seq if pid >= 0 else -1,
        (seq + n - 1) % 2**31 if pid >= 0 else -1,
    ),
    tp_st,
    st.integers(1, 4),
    st.integers(0, 300),  # size 0 is invalid and must be isolated
    st.integers(START_MS - 5000, START_MS + 5000),
    st.sampled_from([0, 1]),
    pid_st,
    st.integers(0, 2),
    st.sampled_from([0, 1, 2, 3, 4, 5, 6, 2**31 - 1]),
)
op_st = st.one_of(
    st.tuples(st.just("commit"), st.lists(batch_st, max_size=5), st.integers(0, 3)),
    st.tuples(
        st.just("find"),
        st.lists(st.tuples(tp_st, st.integers(-1, 12), st.integers(0, 500)), max_size=3),
        st.integers(0, 700),
    ),
    st.tuples(st.just("list"), st.lists(st.tuples(tp_st, st.integers(-6, START_MS + 6000)))),
    st.tuples(st.just("delete_records"), st.lists(st.tuples(tp_st, st.integers(-2, 12)))),
    st.tuples(
        st.just("retention"),
        st.lists(st.tuples(tp_st, st.integers(-1, 600), st.integers(-1, 8000)), max_size=2),
        st.integers(0, 2),
    ),
    st.tuples(st.just("delete_topic"), st.sampled_from(TOPICS)),
    st.tuples(st.just("files"), st.integers(0, 2)),
    st.tuples(st.just("advance"), st.integers(0, 3000)),
)


async def apply(c, op, step):
    kind = op[0]
    if kind == "commit":
        _, reqs, reuse = op
        # lay the batches out one after the other; reuse an earlier key sometimes
        laid, pos = [], 0
        for r in reqs:
            laid.append(
                CommitBatchRequest(
                    r.topic_id_partition,
                    pos,
                    *[getattr(r, f) for f in CommitBatchRequest.__slots__[2:]],
                )
            )
            pos += max(r.size, 0)
        key = f"k{reuse}" if reuse < 2 else f"obj{step}"  # k0/k1 repeat: rejected keys
        return await c.commit_file(key, 1, pos, laid)
    if kind == "find":
        return await c.find_batches([FindBatchRequest(*r) for r in op[1]], op[2])
    if kind == "list":
        return await c.list_offsets([ListOffsetsRequest(*r) for r in op[1]])
    if kind == "delete_records":
        return await c.delete_records([DeleteRecordsRequest(*r) for r in op[1]])
    if kind == "retention":
        return await c.enforce_retention([EnforceRetentionRequest(*r) for r in op[1]], op[2])
    if kind == "delete_topic":
        return await c.delete_topics([op[1]])
    if kind == "files":
        files = await c.get_files_to_delete()
        keys_now = [f.object_key for f in files][: op[1]]
        return (
            files,
            await c.delete_files(keys_now),
            [await c.is_safe_to_delete_file(k) for k in ("k0", "k1", "obj0", "obj1")],
        )
    raise AssertionError(kind)


def sqlite_rows(path: Path) -> dict[str, list[tuple]]:
    """Every row of the coordinator's own tables, sorted (not ``schema_version``, whose
    applied_at_ms is the clock at start, nor the replicated coordinator's ``raft_applied``)."""
    conn = sqlite3.connect(str(path))
    try:
        names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                 if n not in ("schema_version", "raft_applied")]  # fmt: skip
        return {n: sorted(conn.execute(f'SELECT * FROM "{n}"').fetchall(), key=repr) for n in names}
    finally:
        conn.close()


async def run(ops, path: Path, dsn: str):
    clocks = [Clock(), Clock(), Clock(), Clock()]
    mem = InMemoryBatchCoordinator(time_ms=clocks[0], producer_id_expiration_ms=4000)
    sql = SqliteBatchCoordinator(str(path), time_ms=clocks[1], producer_id_expiration_ms=4000)
    pg = PostgresBatchCoordinator(dsn, time_ms=clocks[2], producer_id_expiration_ms=4000)
    rep = ReplicatedBatchCoordinator(
        path.parent / "replicated", time_ms=clocks[3], producer_id_expiration_ms=4000
    )
    impls = (mem, sql, pg, rep)
    for c in impls:
        await c.start()
    try:
        for c in impls:
            await c.create_topic_and_partitions(
                [CreateTopicAndPartitionsRequest(t, f"t{i}", 2) for i, t in enumerate(TOPICS)]
            )
        for step, op in enumerate(ops):
            if op[0] == "advance":
                for clock in clocks:
                    clock.advance(op[1])
                continue
            results = []
            for c in impls:
                results.append(await apply(c, op, step))
            assert results[0] == results[1], ("sqlite", step, op)
            assert results[0] == results[2], ("postgres", step, op)
            assert results[0] == results[3], ("replicated", step, op)
        rep.commit_applied()  # another connection reads its file: the open apply commits first
        assert sqlite_rows(path) == sqlite_rows(rep.db_path)
    finally:
        for c in impls:
            await c.close()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(op_st, min_size=1, max_size=25))
def test_memory_sqlite_and_postgres_agree(pg_databases, ops):
    name, dsn = pg_databases.create()  # a fresh database per example
    try:
        with tempfile.TemporaryDirectory() as d:
            asyncio.run(run(ops, Path(d) / "diff.db", dsn))
    finally:
        pg_databases.drop(name)
