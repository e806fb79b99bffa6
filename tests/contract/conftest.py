"""Fixtures of the Batch Coordinator contract suite: every test runs on every implementation."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from kafka_rpc.coordinator.api import (
    BatchCoordinator,
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    TopicIdPartition,
)
from kafka_rpc.coordinator.memory import InMemoryBatchCoordinator
from kafka_rpc.coordinator.postgres import PostgresBatchCoordinator
from kafka_rpc.coordinator.replicated import ReplicatedBatchCoordinator
from kafka_rpc.coordinator.sqlite import SqliteBatchCoordinator
from tests.pg_cluster import pg_cluster, pg_databases, pg_dsn  # noqa: F401 - fixtures

START_MS = 1_700_000_000_000


class Clock:
    """A manual clock in ms, injected as ``time_ms``."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_coordinator(kind: str, tmp_path, clock: Clock, dsn=None, **options) -> BatchCoordinator:
    if kind == "memory":
        return InMemoryBatchCoordinator(time_ms=clock, **options)
    if kind == "postgres":
        return PostgresBatchCoordinator(dsn, time_ms=clock, **options)
    if kind == "replicated":  # one __diskless-metadata partition on a single-voter Raft log
        return ReplicatedBatchCoordinator(tmp_path / "logs", time_ms=clock, **options)
    if kind == "replicated-3":  # three replicas over real sockets, every call on the leader
        from tests.replicated_cluster import LeaderOfThree

        return LeaderOfThree(tmp_path / "three", clock, **options)
    if kind == "sqlite-thread-reads":  # every read through the reader thread (no inline reads)
        options.setdefault("inline_read_max_partitions", 0)
    return SqliteBatchCoordinator(str(tmp_path / "coord.db"), time_ms=clock, **options)


# "sqlite" answers small reads on the loop's thread, "sqlite-thread-reads" never does: the
# contract holds for both read paths. "replicated" is ReplicatedBatchCoordinator with one replica
# (writes through its Raft log, applied to its SQLite state); "replicated-3" three replicas of one
# partition through three servers' controller listeners, each call on the current leader, and the
# three SQLite states compared row by row at the end (tests/replicated_cluster.py). "postgres"
# runs on a throw-away PostgreSQL cluster (one per session, a fresh database per test; see
# tests/pg_cluster.py).
IMPLEMENTATIONS = ["memory", "sqlite", "sqlite-thread-reads", "replicated", "replicated-3",
                   "postgres"]  # fmt: skip


def _dsn(request) -> str | None:
    return request.getfixturevalue("pg_dsn") if request.param == "postgres" else None


@pytest.fixture(params=IMPLEMENTATIONS)
async def coord(request, tmp_path, clock) -> AsyncIterator[BatchCoordinator]:
    c = make_coordinator(request.param, tmp_path, clock, _dsn(request))
    await c.start()
    try:
        yield c
    finally:
        await c.close()


class Topic:
    """A created topic with helpers to build requests against it."""

    def __init__(self, c: BatchCoordinator, topic_id: uuid.UUID, partitions: int) -> None:
        self.c = c
        self.id = topic_id
        self.partitions = partitions
        self._keys = 0

    def tp(self, partition: int = 0) -> TopicIdPartition:
        return TopicIdPartition(self.id, partition)

    async def commit(
        self, *requests: CommitBatchRequest, key: str | None = None, file_size: int | None = None
    ) -> list[CommitBatchResponse]:
        if key is None:
            self._keys += 1
            key = f"obj-{self.id}-{self._keys}"
        if file_size is None:
            file_size = max((r.byte_offset + max(r.size, 0) for r in requests), default=0)
        return await self.c.commit_file(key, 1, file_size, list(requests))


def batch(
    tp: TopicIdPartition,
    records: int = 1,
    *,
    size: int = 100,
    byte_offset: int = 0,
    ts: int = START_MS - 1000,
    tt: int = 0,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    last_seq: int | None = None,
) -> CommitBatchRequest:
    """A batch of ``records`` records; sequences derived from ``seq`` unless ``last_seq``."""
    if last_seq is None:
        last_seq = -1 if seq < 0 else (seq + records - 1) % 2**31
    return CommitBatchRequest(
        tp, byte_offset, size, 0, records - 1, ts, tt, pid, epoch, seq, last_seq
    )


def chain(tp: TopicIdPartition, n: int, *, size: int = 100, **kw) -> list[CommitBatchRequest]:
    """``n`` byte-adjacent batches for one object."""
    return [batch(tp, size=size, byte_offset=i * size, **kw) for i in range(n)]


@pytest.fixture
async def topic(coord) -> Topic:
    t = uuid.uuid4()
    assert await coord.create_topic_and_partitions(
        [CreateTopicAndPartitionsRequest(t, "t", 3)]
    ) == [0]
    return Topic(coord, t, 3)


@pytest.fixture(params=IMPLEMENTATIONS)
async def coord_factory(request, tmp_path):
    """Build a started coordinator with options: ``(coordinator, clock, topic)``."""
    made: list[BatchCoordinator] = []
    dsn = _dsn(request)

    async def factory(**options):
        clock = Clock()
        c = make_coordinator(request.param, tmp_path, clock, dsn, **options)
        await c.start()
        made.append(c)
        t = uuid.uuid4()
        await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t, "t", 3)])
        return c, clock, Topic(c, t, 3)

    yield factory
    for c in made:
        await c.close()
