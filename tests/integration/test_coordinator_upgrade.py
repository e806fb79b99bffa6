"""The upgrade to the default topic-based Batch Coordinator: a data directory written by the
standalone SQLite coordinator (``<log.dirs>/coordinator.db``, the default before) starts under
the new default with every batch found at its offsets over the wire, the idempotent producer's
retry still a duplicate, and the old file renamed ``coordinator.db.imported`` (kept)."""

from __future__ import annotations

import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.coordinator.assigned import AssignedBatchCoordinator
from kafka_rpc.coordinator.sqlite import SqliteBatchCoordinator
from tests.integration.conftest import Running, start_server
from tests.integration.test_crash import _F_PART, _F_TOPIC, Batch, commit_request
from tests.integration.test_diskless_e2e import M, _first_elem, mod

pytestmark = pytest.mark.integration

START = 30.0  # s: a start that imports waits for the import
_I_TOPIC = _first_elem(mod("InitDisklessTopicsRequest"), "topics")


async def serving(data, **extra) -> Running:
    """A server on ``data`` (conftest's ``<tmp>/data``), its start bounded by ``START``."""
    assert data.name == "data"
    return await start_server(data.parent, start_timeout=START, **extra)


async def batches(client, topic: uuid.UUID, partitions: int) -> list[tuple]:
    resp = await client.request(M("FindDisklessBatchesRequest")(
        topics=(_F_TOPIC(topic_id=topic, partitions=tuple(
            _F_PART(partition_index=p, offset=0, max_bytes=1 << 20) for p in range(partitions))),),
        max_bytes=1 << 20))  # fmt: skip
    return [(p.partition_index, p.error_code, p.base_offset, p.last_offset, p.object_key,
             p.producer_id, p.base_sequence, p.high_watermark)
            for p in resp.responses[0].partitions]  # fmt: skip


async def test_a_standalone_sqlite_data_directory_starts_under_the_default(tmp_path):
    data = tmp_path / "data"
    topic = uuid.uuid4()
    # the standalone SQLite coordinator, as the default ran it before
    running = await serving(data, **{
        "diskless.coordinator.url": f"sqlite://{data / 'coordinator.db'}"})  # fmt: skip
    server = running.server
    try:
        assert isinstance(server.coordinator, SqliteBatchCoordinator)
        async with KafkaRpcClient(f"127.0.0.1:{server.bound['PLAINTEXT'][1]}") as c:
            resp = await c.request(M("InitDisklessTopicsRequest")(
                topics=(_I_TOPIC(topic_id=topic, num_partitions=2),)))  # fmt: skip
            assert resp.responses[0].error_code == 0
            acked = []
            for i in range(4):
                bs = [Batch(0, 2, pid=7, seq=2 * i), Batch(1, 1)]
                r = await c.request(commit_request(topic, f"old-{i}", bs))
                assert [p.error_code for p in r.topics[0].partitions] == [0, 0]
                acked.append([p.assigned_base_offset for p in r.topics[0].partitions])
            before = await batches(c, topic, 2)
    finally:
        await running.stop()
    assert acked == [[0, 0], [2, 1], [4, 2], [6, 3]]
    assert (data / "coordinator.db").exists()

    # the same directory with no coordinator setting: imported on first start
    running = await serving(data)
    server = running.server
    try:
        assert isinstance(server.coordinator, AssignedBatchCoordinator)
        assert server.coordinator.is_writable
        assert not (data / "coordinator.db").exists()
        assert (data / "coordinator.db.imported").exists()
        async with KafkaRpcClient(f"127.0.0.1:{server.bound['PLAINTEXT'][1]}") as c:
            assert await batches(c, topic, 2) == before
            # the producer's state came along: its last commit again is a duplicate
            r = await c.request(commit_request(topic, "retry", [Batch(0, 2, pid=7, seq=6)]))
            (p,) = r.topics[0].partitions
            assert (p.error_code, p.is_duplicate, p.assigned_base_offset) == (0, True, 6)
            r = await c.request(commit_request(topic, "new", [Batch(0, 1, pid=7, seq=8)]))
            assert r.topics[0].partitions[0].assigned_base_offset == 8
    finally:
        await running.stop()

    # a restart does not import again and keeps everything
    running = await serving(data)
    server = running.server
    try:
        assert server.coordinator.replica(0).imports_applied == 0
        async with KafkaRpcClient(f"127.0.0.1:{server.bound['PLAINTEXT'][1]}") as c:
            got = await batches(c, topic, 2)
        kept = [b[:-1] + (9,) if b[0] == 0 else b for b in before]  # partition 0's HW is 9 now
        assert sorted(got) == sorted([*kept, (0, 0, 8, 8, "new", 7, 8, 9)])
    finally:
        await running.stop()
