"""PostgreSQL-only behaviour of ``PostgresBatchCoordinator``: selection by URL, migrations and
their version check, sharing one database between coordinators (concurrent commits to the same
partitions from several connection pools: gap-free offsets, no lost update, no deadlock), and
faults (a connection terminated during a commit, a server restart).

The rules themselves are the contract suite's (tests/contract, parametrized with "postgres")."""

from __future__ import annotations

import asyncio
import random
import uuid

import asyncpg
import pytest

from kafka_rpc.coordinator.api import (
    CreateTopicAndPartitionsRequest,
    Errors,
    FindBatchRequest,
    ListOffsetsRequest,
    TopicIdPartition,
)
from kafka_rpc.coordinator.factory import create_coordinator
from kafka_rpc.coordinator.postgres import (
    CoordinatorUnavailableError,
    PostgresBatchCoordinator,
    SchemaVersionError,
    load_migrations,
)
from tests import pg_cluster as pg_cluster_module
from tests.contract.conftest import Clock, batch
from tests.waiting import until

BIG = 10**9


async def started(dsn, **kw) -> PostgresBatchCoordinator:
    c = PostgresBatchCoordinator(dsn, **kw)
    await c.start()
    return c


async def new_topic(c, partitions=3) -> uuid.UUID:
    t = uuid.uuid4()
    assert await c.create_topic_and_partitions(
        [CreateTopicAndPartitionsRequest(t, "t", partitions)]
    ) == [0]
    return t


def test_missing_postgres_fails_unless_opted_out(monkeypatch):
    monkeypatch.setattr(pg_cluster_module, "find_pg_ctl", lambda: None)
    monkeypatch.delenv(pg_cluster_module.SKIP_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y postgresql"):
        pg_cluster_module.require_pg_ctl()
    monkeypatch.setenv(pg_cluster_module.SKIP_ENV, "1")
    with pytest.raises(pytest.skip.Exception):
        pg_cluster_module.require_pg_ctl()


async def test_selected_by_url(pg_dsn):
    url = pg_dsn.replace("postgresql://", "postgres://") + (
        "?pool_max_size=3&producer_id_expiration_ms=5&application_name=kr"
    )
    c = create_coordinator(url)
    assert isinstance(c, PostgresBatchCoordinator)
    assert c._max == 3 and c._expiration_ms == 5
    assert c.dsn.endswith("?application_name=kr")  # driver parameters stay in the URL
    async with c:
        t = await new_topic(c, 1)
        assert await c.list_partitions() == [TopicIdPartition(t, 0)]
    with pytest.raises(ValueError):
        create_coordinator(pg_dsn + "?pool_max_size=x")


async def test_durable_and_shared_at_once(pg_dsn):
    a = await started(pg_dsn)
    b = await started(pg_dsn)
    try:
        t = await new_topic(a)
        tp = TopicIdPartition(t, 1)
        (r,) = await a.commit_file("k1", 1, 100, [batch(tp, 3, pid=7, epoch=0, seq=0)])
        assert (r.error, r.assigned_base_offset) == (0, 0)
        # acknowledged on a -> visible to b at once, producer state included
        (f,) = await b.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
        assert [(x.object_key, x.base_offset, x.last_offset) for x in f.batches] == [("k1", 0, 2)]
        (d,) = await b.commit_file("k2", 2, 100, [batch(tp, 3, pid=7, epoch=0, seq=0)])
        assert d.is_duplicate and d.assigned_base_offset == 0
        # a key committed through a is known to b (and to a)
        assert (await b.commit_file("k1", 2, 100, [batch(tp)]))[0].error == Errors.INVALID_REQUEST
        assert (await a.commit_file("k2", 1, 100, [batch(tp)]))[0].error == Errors.INVALID_REQUEST
    finally:
        await a.close()
        await b.close()
    c = await started(pg_dsn)  # a new pool: everything is in the database
    try:
        (lo,) = await c.list_offsets([ListOffsetsRequest(tp, -1)])
        assert lo.offset == 3
    finally:
        await c.close()


async def test_migrations_recorded_and_checked(pg_dsn):
    # several servers starting at once on an empty database: each migration applied once
    cs = [PostgresBatchCoordinator(pg_dsn) for _ in range(4)]
    await asyncio.gather(*(c.start() for c in cs))
    for c in cs:
        await c.close()
    latest = load_migrations()[-1][0]
    assert {c.schema_version for c in cs} == {latest}
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch("SELECT version FROM schema_version ORDER BY version")
        assert [r[0] for r in rows] == [v for v, _, _ in load_migrations()]
        await conn.execute("UPDATE schema_version SET checksum = 'x' WHERE version = 1")
        with pytest.raises(SchemaVersionError, match="changed"):
            await started(pg_dsn)
        await conn.execute("INSERT INTO schema_version VALUES ($1, 'future', 'y', 0)", latest + 1)
        with pytest.raises(SchemaVersionError, match="newer"):
            await started(pg_dsn)
    finally:
        await conn.close()


async def test_concurrent_commits_from_several_pools(pg_dsn):
    """Four coordinators (four connection pools, as four servers would have) commit at once to
    overlapping partitions, each object naming them in a different order: no deadlock, every
    acknowledged batch has its own gap-free offsets, HW = records committed, and interleaved
    idempotent producers never get a duplicate offset."""
    cs = [await started(pg_dsn, pool_max_size=4) for _ in range(4)]
    try:
        t = await new_topic(cs[0], 6)
        tps = [TopicIdPartition(t, p) for p in range(6)]
        rng = random.Random(16)
        acked: dict[TopicIdPartition, list[tuple[int, int]]] = {tp: [] for tp in tps}
        seqs = {(w, tp): 0 for w in range(8) for tp in tps}

        async def worker(w: int) -> None:
            c = cs[w % len(cs)]
            for i in range(15):
                chosen = rng.sample(tps, 4)  # random order: lock order must not depend on it
                reqs = []
                for j, tp in enumerate(chosen):
                    n = rng.randint(1, 3)
                    reqs.append(
                        batch(tp, n, byte_offset=j * 100, pid=w, epoch=0, seq=seqs[(w, tp)])
                    )
                out = await c.commit_file(f"w{w}-{i}", w, 400, reqs)
                for r, resp in zip(reqs, out):
                    assert resp.error == 0 and not resp.is_duplicate, resp
                    tp = r.topic_id_partition
                    seqs[(w, tp)] += r.record_count
                    acked[tp].append((resp.assigned_base_offset, r.record_count))

        await asyncio.wait_for(asyncio.gather(*(worker(w) for w in range(8))), 60)
        assert [c.conflict_retries for c in cs] == [0] * len(cs)  # ordered locks: no deadlock
        for tp in tps:
            spans = sorted(acked[tp])
            pos = 0
            for base, n in spans:
                assert base == pos, (tp, spans)  # gap-free, no overlap
                pos += n
            (f,) = await cs[1].find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
            assert f.high_watermark == pos
            assert [(b.base_offset, b.last_offset - b.base_offset + 1) for b in f.batches] == spans
            ids = [b.batch_id for b in f.batches]
            assert ids == sorted(ids) and len(set(ids)) == len(ids)
        # every retry of a producer's newest batch is answered with its original offset
        w, tp = 3, tps[2]
        last = max((b for b in (await cs[2].find_batches([FindBatchRequest(tp, 0, BIG)], BIG))[
            0].batches if b.producer_id == w), key=lambda b: b.base_offset)  # fmt: skip
        (d,) = await cs[0].commit_file(
            "retry", w, 100,
            [batch(tp, last.last_offset - last.base_offset + 1, pid=w, epoch=0,
                   seq=last.base_sequence)],
        )  # fmt: skip
        assert d.is_duplicate and d.assigned_base_offset == last.base_offset
    finally:
        for c in cs:
            await c.close()


async def test_connection_terminated_during_commit(pg_dsn):
    """The commit's backend is terminated while it waits for a partition's row lock: the call
    fails with a retriable error (an OSError), nothing of it is written, and the retry of the
    same idempotent batch is committed once, as a new batch."""
    clock = Clock()
    c = await started(pg_dsn, time_ms=clock)
    admin = await asyncpg.connect(pg_dsn)
    try:
        t = await new_topic(c, 1)
        tp = TopicIdPartition(t, 0)
        await c.commit_file("first", 1, 100, [batch(tp, 2, pid=9, epoch=0, seq=0)])
        blocker = admin.transaction()
        await blocker.start()
        await admin.fetch("SELECT 1 FROM logs FOR UPDATE")  # the commit below waits for it
        task = asyncio.create_task(
            c.commit_file("lost", 1, 100, [batch(tp, 3, pid=9, epoch=0, seq=2)])
        )
        pid = await until(lambda: admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ), "the commit to wait for the row lock", timeout=10.0)  # fmt: skip
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        with pytest.raises(CoordinatorUnavailableError) as info:
            await asyncio.wait_for(task, 10)
        assert isinstance(info.value, OSError)
        await blocker.rollback()
        assert await c.is_safe_to_delete_file("lost")  # nothing of it was written
        (r,) = await c.commit_file("again", 1, 100, [batch(tp, 3, pid=9, epoch=0, seq=2)])
        assert (r.error, r.assigned_base_offset, r.is_duplicate) == (0, 2, False)
        (r,) = await c.commit_file("dup", 1, 100, [batch(tp, 3, pid=9, epoch=0, seq=2)])
        assert (r.assigned_base_offset, r.is_duplicate) == (2, True)
        (f,) = await c.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
        assert [b.object_key for b in f.batches] == ["first", "again"] and f.high_watermark == 5
    finally:
        await admin.close()
        await c.close()


async def test_server_restart():
    """A restart of the PostgreSQL server breaks every pooled connection: calls during the outage
    fail with the retriable error, and the same coordinator serves again once it is back. (Its
    own cluster: the session's one is shared by the other tests.)"""
    cluster = pg_cluster_module.PgCluster().start()
    c = None
    try:
        c = await started(cluster.dsn(), pool_min_size=2, connect_timeout_s=2)
        t = await new_topic(c, 1)
        tp = TopicIdPartition(t, 0)
        await c.commit_file("before", 1, 100, [batch(tp, 1)])
        ex = cluster.executor
        ex.stop()
        with pytest.raises(CoordinatorUnavailableError):
            await c.commit_file("during", 1, 100, [batch(tp, 1)])
        with pytest.raises(CoordinatorUnavailableError):
            await c.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
        ex.start()
        cluster.wait_ready()
        (r,) = await c.commit_file("after", 1, 100, [batch(tp, 1)])
        assert (r.error, r.assigned_base_offset) == (0, 1)
        (f,) = await c.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
        assert [b.object_key for b in f.batches] == ["before", "after"]
    finally:
        if c is not None:
            await c.close()
        cluster.stop()


async def test_object_key_with_nul_is_refused_not_crashed(pg_dsn):
    """PostgreSQL text cannot hold NUL: such a key is answered INVALID_REQUEST (no exception),
    is safe to delete, and is unknown to delete_files; paging after it works."""
    c = await started(pg_dsn)
    try:
        t = await new_topic(c, 1)
        tp = TopicIdPartition(t, 0)
        assert [r.error for r in await c.commit_file("a\x00b", 1, 100, [batch(tp)])] == [
            Errors.INVALID_REQUEST
        ]
        assert await c.is_safe_to_delete_file("a\x00b")
        assert await c.delete_files(["a\x00b"]) == [Errors.RESOURCE_NOT_FOUND]
        await c.commit_file("a", 1, 100, [batch(TopicIdPartition(t, 5))])  # garbage at once
        await c.commit_file("ab", 1, 100, [batch(TopicIdPartition(t, 5))])
        keys = [f.object_key for f in await c.get_files_to_delete(after_object_key="a\x00z")]
        assert keys == ["ab"]
    finally:
        await c.close()


async def _same_objects(*coords, partitions: int, batches: int, records_mod: int) -> uuid.UUID:
    """A new topic of ``partitions`` partitions on every coordinator, then the same 3 objects of
    ``batches`` batches each (batch j on partition j % partitions, 1 + j % records_mod records),
    every batch accepted; returns the topic id."""
    t = uuid.uuid4()
    for c in coords:
        await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t, "t", partitions)])
    for i in range(3):
        reqs = [
            batch(TopicIdPartition(t, j % partitions), 1 + j % records_mod, size=10 + j,
                  byte_offset=j * 200)
            for j in range(batches)
        ]  # fmt: skip
        for c in coords:
            out = await c.commit_file(f"o{i}", 1, 20_000, reqs)
            assert [r.error for r in out] == [0] * batches
    return t


async def test_find_batches_pages_beyond_one_round_trip(pg_dsn):
    """find_batches fetches 64 batches per round trip: answers spanning several pages (one
    partition alone, and several partitions in one snapshot) equal the in-memory reference's,
    budgets included."""
    from kafka_rpc.coordinator.memory import InMemoryBatchCoordinator

    clock = Clock()
    mem = InMemoryBatchCoordinator(time_ms=clock)
    pg = await started(pg_dsn, time_ms=clock)
    try:
        # 3 objects x 100 batches: 150 batches per partition
        t = await _same_objects(mem, pg, partitions=2, batches=100, records_mod=3)
        tp0, tp1 = TopicIdPartition(t, 0), TopicIdPartition(t, 1)
        cases = [
            ([FindBatchRequest(tp0, 0, BIG)], BIG),
            ([FindBatchRequest(tp0, 5, 2_000)], BIG),
            ([FindBatchRequest(tp1, 100, BIG)], 1_500),
            ([FindBatchRequest(tp0, 0, BIG), FindBatchRequest(tp1, 3, BIG)], BIG),
            ([FindBatchRequest(tp1, 0, 900), FindBatchRequest(tp0, 7, BIG)], 2_500),
        ]
        for reqs, fetch_max in cases:
            want = await mem.find_batches(reqs, fetch_max)
            got = await pg.find_batches(reqs, fetch_max)
            assert got == want
        (full,) = await pg.find_batches([FindBatchRequest(tp0, 0, BIG)], BIG)
        assert len(full.batches) == 150  # more than two pages
    finally:
        await pg.close()


async def test_concurrent_find_batches_answered_together_equal_the_reference(pg_dsn):
    """find_batches calls made in one event-loop turn share one find_many statement (at most 64
    partitions each): every call still gets exactly its own answer (the in-memory reference's),
    whatever else is in the statement: unknown and unstorable partitions, offsets out of range
    or at the HW, budgets, a call needing a second page (re-read in a snapshot), a cancelled
    call, and more calls than one statement takes."""
    from kafka_rpc.coordinator.api import ZERO_UUID
    from kafka_rpc.coordinator.memory import InMemoryBatchCoordinator

    clock = Clock()
    mem = InMemoryBatchCoordinator(time_ms=clock)
    pg = await started(pg_dsn, time_ms=clock)
    try:
        # 3 objects x 90 batches: 90 per partition
        t = await _same_objects(mem, pg, partitions=3, batches=90, records_mod=4)
        tp = [TopicIdPartition(t, p) for p in range(3)]
        rnd = random.Random(5)
        calls = [
            # tp0 from 0: 90 batches, a second page; the whole call is re-read
            ([FindBatchRequest(tp[0], 0, BIG), FindBatchRequest(tp[1], 5, BIG)], BIG),
            ([FindBatchRequest(tp[1], 7, 300), FindBatchRequest(tp[2], 0, BIG)], 2_000),
            ([FindBatchRequest(TopicIdPartition(uuid.uuid4(), 0), 0, BIG)], BIG),
            ([FindBatchRequest(TopicIdPartition(ZERO_UUID, 0), 0, BIG),
              FindBatchRequest(tp[0], 10**6, BIG), FindBatchRequest(tp[1], -1, BIG)], BIG),
            ([FindBatchRequest(TopicIdPartition(t, 3), 0, BIG),
              FindBatchRequest(TopicIdPartition(t, -1), 0, BIG)], BIG),
        ]  # fmt: skip
        hw = (await pg.list_offsets([ListOffsetsRequest(tp[2], -1)]))[0].offset
        calls.append(([FindBatchRequest(tp[2], hw, BIG), FindBatchRequest(tp[0], 3, 1)], BIG))
        for _ in range(80):  # single-partition lookups: more than one statement's 64
            p = rnd.randrange(3)
            calls.append(([FindBatchRequest(tp[p], rnd.randrange(200), rnd.choice((1, BIG)))], BIG))
        want = [await mem.find_batches(reqs, fetch_max) for reqs, fetch_max in calls]
        tasks = [asyncio.ensure_future(pg.find_batches(r, m)) for r, m in calls]
        victim = asyncio.ensure_future(pg.find_batches([FindBatchRequest(tp[1], 0, BIG)], BIG))
        await asyncio.sleep(0)  # all sent in the same turn; then one caller gives up
        victim.cancel()
        got = await asyncio.gather(*tasks)
        for (reqs, _), g, w in zip(calls, got, want):
            assert g == w, reqs
        assert victim.cancelled()
        # a lookup made after a commit was acknowledged sees it
        [r] = await pg.commit_file("o3", 1, 100, [batch(tp[2], 1, size=100)])
        [after] = await pg.find_batches([FindBatchRequest(tp[2], r.assigned_base_offset, BIG)], BIG)
        assert [b.object_key for b in after.batches] == ["o3"]
    finally:
        await pg.close()
