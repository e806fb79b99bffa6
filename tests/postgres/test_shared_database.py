"""Two ``kafka-rpc serve`` processes on one PostgreSQL database: both are writable
Batch Coordinators (FindCoordinator BATCH names each node itself for ``read:`` and ``write:``),
idempotent commits to the same partitions interleave across them with gap-free offsets, a retry
through the other node is answered with the original offsets, and after a SIGKILL of one node
nothing it acknowledged is lost and its producers carry on through the other node."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from tests.integration.test_cli import ServeProcess
from tests.integration.test_diskless_e2e import _first_elem
from tests.waiting import until

pytestmark = pytest.mark.integration

PARTITIONS = 3


def M(name):
    return codec.message_class(name)


def _commit(topic_id, object_key, entries, broker_id):
    """One object with ``entries`` = [(partition, records, producer_id, base_sequence)]."""
    m = codec.module("CommitBatchesRequest")
    parts = tuple(
        m.CommitBatchesTopicPartition(
            partition_index=p,
            object_key=object_key,
            byte_offset=i * 100,
            size=100,
            base_offset=0,
            last_offset=n - 1,
            batch_max_timestamp=1000,
            message_timestamp_type=0,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            last_sequence=seq + n - 1,
        )  # fmt: skip
        for i, (p, n, pid, seq) in enumerate(entries)
    )
    return m.CommitBatchesRequest(
        broker_id=broker_id,
        batches=(m.Batches(topics=(m.CommitBatchesTopic(topic_id=topic_id, partitions=parts),)),),
    )


async def _find_all(client, topic, partition):
    mf = codec.module("FindDisklessBatchesRequest")
    tc = _first_elem(mf, "topics")
    pc = _first_elem(mf, "partitions", tc)
    resp = await client.request(M("FindDisklessBatchesRequest")(
        topics=(tc(topic_id=topic, partitions=(
            pc(partition_index=partition, offset=0, max_bytes=1 << 30),)),),
        max_bytes=1 << 30))  # fmt: skip
    return [p for t in resp.responses for p in t.partitions]


class Producer:
    """An idempotent producer: one batch per partition per commit, sequences per partition."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seq = dict.fromkeys(range(PARTITIONS), 0)
        self.acked: dict[tuple[int, int], int] = {}  # (partition, base_seq) -> base offset
        self.pending: list[tuple[int, int, int, int]] | None = None  # sent, not acknowledged

    def next_entries(self, records: int) -> list[tuple[int, int, int, int]]:
        if self.pending is None:
            self.pending = [(p, records, self.pid, self.seq[p]) for p in range(PARTITIONS)]
        return self.pending

    def ack(self, resp) -> list[tuple[int, bool]]:
        entries = self.pending
        assert entries is not None
        parts = [p for t in resp.topics for p in t.partitions]
        assert [p.error_code for p in parts] == [0] * len(entries), parts
        for (p, n, _, seq), r in zip(entries, parts):
            self.acked[(p, seq)] = r.assigned_base_offset
            self.seq[p] = seq + n
        self.pending = None
        return [(r.assigned_base_offset, r.is_duplicate) for r in parts]


async def test_two_servers_share_one_database(tmp_path, pg_dsn):
    url = ["--override", f"diskless.coordinator.url={pg_dsn}"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = ServeProcess(tmp_path / "a", *url)
    b = None
    clients: list[KafkaRpcClient] = []
    try:
        b = ServeProcess(tmp_path / "b", *url)
        ca = await KafkaRpcClient.connect(a.bootstrap, client_id="broker-a")
        cb = await KafkaRpcClient.connect(b.bootstrap, client_id="broker-b")
        clients += [ca, cb]
        topic = uuid.uuid4()

        # Any node is a writable coordinator: each names itself for read: and write:.
        for client, srv in ((ca, a), (cb, b)):
            keys = (f"write:{topic}:0", f"read:{topic}:1")
            fc = await client.request(
                M("FindCoordinatorRequest")(key_type=3, coordinator_keys=keys), version=7
            )
            assert [(c.error_code, c.port) for c in fc.coordinators] == [
                (0, srv.ports["PLAINTEXT"])
            ] * 2

        mi = codec.module("InitDisklessTopicsRequest")
        init_topic = _first_elem(mi, "topics")(topic_id=topic, num_partitions=PARTITIONS)
        init = await ca.request(M("InitDisklessTopicsRequest")(topics=(init_topic,)))
        assert [r.error_code for r in init.responses] == [0]

        # Interleaved: producer 100 through a, 200 through b, 300 alternating; every third
        # commit of 300 is retried through the other node and answered as a duplicate.
        producers = {pid: Producer(pid) for pid in (100, 200, 300)}
        keys = iter(range(10**6))

        async def run(pid: int, rounds: int, via: KafkaRpcClient | None = None) -> None:
            pr = producers[pid]
            resend = pr.pending is not None  # maybe committed before its node died
            for i in range(rounds):
                client = via or (ca if pid == 100 else cb if pid == 200 else (ca, cb)[i % 2])
                entries = pr.next_entries(1 + i % 3)
                resp = await client.request(_commit(topic, f"o{next(keys)}", entries, pid))
                got = pr.ack(resp)
                assert not any(dup for _, dup in got) or (resend and i == 0)
                if pid == 300 and i % 3 == 0:
                    other = (cb, ca)[i % 2]
                    pr.pending = entries
                    again = await other.request(_commit(topic, f"o{next(keys)}", entries, pid))
                    parts = [p for t in again.topics for p in t.partitions]
                    assert [(p.assigned_base_offset, p.is_duplicate) for p in parts] == [
                        (off, True) for off, _ in got
                    ]
                    pr.pending = None

        await asyncio.wait_for(asyncio.gather(run(100, 12), run(200, 12), run(300, 12)), 60)

        # SIGKILL a while both take commits, with a commit of producer 100 in flight on a; the
        # producer then resends that batch through b: committed before the kill or not, it is
        # answered without error and never stored twice.
        killed = asyncio.Event()

        async def run_until_killed(pid: int) -> None:
            pr = producers[pid]
            for i in range(10_000):
                entries = pr.next_entries(1 + i % 2)
                try:
                    resp = await ca.request(
                        _commit(topic, f"o{next(keys)}", entries, pid), timeout=5
                    )
                except Exception:  # noqa: BLE001 - the node was killed under us
                    assert killed.is_set()
                    return
                pr.ack(resp)
            raise AssertionError("the killed node kept answering")

        async def killer(pid: int) -> None:
            acked = len(producers[pid].acked)
            await until(lambda: len(producers[pid].acked) >= acked + 8 * PARTITIONS,
                        f"{8 * PARTITIONS} more commits of producer {pid}", timeout=60,
                        interval=0.002)  # fmt: skip
            a.proc.kill()
            killed.set()

        await asyncio.wait_for(asyncio.gather(run_until_killed(100), killer(100), run(200, 10)), 60)
        a.stop()
        assert a.proc.returncode == -9
        await run(100, 3, via=cb)  # through b now: its pending batch first

        # Nothing acknowledged is lost; every partition is gap-free from 0; no batch twice.
        for p in range(PARTITIONS):
            entries = await _find_all(cb, topic, p)
            assert all(e.error_code == 0 for e in entries)
            pos = 0
            seen = set()
            for e in entries:
                assert e.base_offset == pos, (p, [(x.base_offset, x.last_offset) for x in entries])
                pos = e.last_offset + 1
                assert (e.producer_id, e.base_sequence) not in seen
                seen.add((e.producer_id, e.base_sequence))
            assert entries[-1].high_watermark == pos
            by_seq = {(e.producer_id, e.base_sequence): e.base_offset for e in entries}
            for pr in producers.values():
                for (part, seq), off in pr.acked.items():
                    if part == p:
                        assert by_seq[(pr.pid, seq)] == off
    finally:
        for c in clients:
            await c.close()
        a.stop()
        if b is not None:
            b.stop()


async def test_lost_database_connection_answers_retriable_error(tmp_path, pg_dsn):
    """The database connection of a commit in flight is terminated (pg_terminate_backend, while
    the commit waits for a partition's row lock): its entries are answered KAFKA_STORAGE_ERROR
    (retriable), never a success; the node keeps serving, and the producer's retry through the
    other node commits the batch once, at the next offset."""
    import asyncpg

    url = ["--override", f"diskless.coordinator.url={pg_dsn}"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = ServeProcess(tmp_path / "a", *url)
    b = None
    clients: list[KafkaRpcClient] = []
    admin = await asyncpg.connect(pg_dsn)
    try:
        b = ServeProcess(tmp_path / "b", *url)
        ca = await KafkaRpcClient.connect(a.bootstrap, client_id="broker-a")
        cb = await KafkaRpcClient.connect(b.bootstrap, client_id="broker-b")
        clients += [ca, cb]
        topic = uuid.uuid4()
        mi = codec.module("InitDisklessTopicsRequest")
        init_topic = _first_elem(mi, "topics")(topic_id=topic, num_partitions=1)
        await ca.request(M("InitDisklessTopicsRequest")(topics=(init_topic,)))

        def offsets(resp):
            return [(p.error_code, p.assigned_base_offset, p.is_duplicate)
                    for t in resp.topics for p in t.partitions]  # fmt: skip

        r = await ca.request(_commit(topic, "first", [(0, 2, 7, 0)], 1))
        assert offsets(r) == [(0, 0, False)]
        lock = admin.transaction()
        await lock.start()
        await admin.fetch("SELECT 1 FROM logs FOR UPDATE")
        inflight = asyncio.create_task(ca.request(_commit(topic, "lost", [(0, 3, 7, 2)], 1)))
        pid = await until(lambda: admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ), "the commit to wait for the row lock", timeout=10.0)  # fmt: skip
        await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        resp = await asyncio.wait_for(inflight, 10)
        assert offsets(resp) == [(56, -1, False)]  # KAFKA_STORAGE_ERROR, retriable
        await lock.rollback()
        # the node reconnects and serves; the retry (through the other node) commits once
        r = await cb.request(_commit(topic, "retry", [(0, 3, 7, 2)], 2))
        assert offsets(r) == [(0, 2, False)]
        r = await ca.request(_commit(topic, "retry-again", [(0, 3, 7, 2)], 1))
        assert offsets(r) == [(0, 2, True)]
        r = await ca.request(_commit(topic, "next", [(0, 1, 7, 5)], 1))
        assert offsets(r) == [(0, 5, False)]
        entries = await _find_all(ca, topic, 0)
        assert [(e.object_key, e.base_offset) for e in entries] == [
            ("first", 0),
            ("retry", 2),
            ("next", 5),
        ]
    finally:
        await admin.close()
        for c in clients:
            await c.close()
        a.stop()
        if b is not None:
            b.stop()
