"""End to end over real sockets with our client against a server using the SQLite coordinator:
a broker's life (init topic, commits from several producers incl. a retried batch, lookups,
list offsets, delete records, files to delete, delete files, delete topic)."""

from __future__ import annotations

import uuid

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from tests.integration.conftest import start_server
from tests.waiting import until


def M(name):
    return codec.message_class(name)


def mod(name):
    return codec.module(name)


def _commit(topic_id, object_key, entries, broker_id=1):
    m = mod("CommitBatchesRequest")
    parts = tuple(
        m.CommitBatchesTopicPartition(
            partition_index=p, object_key=object_key, byte_offset=i * 100, size=100,
            base_offset=0, last_offset=count - 1, batch_max_timestamp=1000 + i,
            message_timestamp_type=0, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq, last_sequence=seq + count - 1 if seq >= 0 else -1,
        )  # fmt: skip
        for i, (p, count, pid, seq) in enumerate(entries)
    )
    return m.CommitBatchesRequest(
        broker_id=broker_id,
        batches=(m.Batches(topics=(m.CommitBatchesTopic(topic_id=topic_id, partitions=parts),)),),
    )


async def test_a_brokers_life(tmp_path):
    running = await start_server(tmp_path)
    client = await KafkaRpcClient.connect(f"127.0.0.1:{running.port()}", client_id="broker-1")
    try:
        topic = uuid.uuid4()
        mi = mod("InitDisklessTopicsRequest")
        init_topic = _first_elem(mi, "topics")(topic_id=topic, num_partitions=3)
        init = await client.request(M("InitDisklessTopicsRequest")(topics=(init_topic,)))
        assert [r.error_code for r in init.responses] == [0]

        # Two producers in one object: p0 gets 10 + 5 records, p1 gets 7, gap-free.
        r1 = await client.request(_commit(topic, "obj-1", [(0, 10, 100, 0), (1, 7, 200, 0),
                                                           (0, 5, 100, 10)]))  # fmt: skip
        got = [(p.partition_index, p.error_code, p.assigned_base_offset, p.is_duplicate)
               for t in r1.topics for p in t.partitions]  # fmt: skip
        assert got == [(0, 0, 0, False), (1, 0, 0, False), (0, 0, 10, False)]
        # A retry of producer 100's second batch in a new object: duplicate, original offset.
        r2 = await client.request(_commit(topic, "obj-2", [(0, 5, 100, 10), (2, 3, -1, -1)]))
        got = [(p.partition_index, p.error_code, p.assigned_base_offset, p.is_duplicate)
               for t in r2.topics for p in t.partitions]  # fmt: skip
        assert got == [(0, 0, 10, True), (2, 0, 0, False)]

        # Lookups: partition 0 from offset 0 returns its two batches in offset order.
        mf = mod("FindDisklessBatchesRequest")
        topic_cls = _first_elem(mf, "topics")
        part_cls = _first_elem(mf, "partitions", topic_cls)
        find = await client.request(M("FindDisklessBatchesRequest")(
            topics=(topic_cls(topic_id=topic, partitions=(
                part_cls(partition_index=0, offset=0, max_bytes=1 << 20),)),),
            max_bytes=1 << 20))  # fmt: skip
        entries = [p for t in find.responses for p in t.partitions]
        assert [(e.base_offset, e.last_offset, e.object_key) for e in entries] == [
            (0, 9, "obj-1"), (10, 14, "obj-1")]  # fmt: skip
        assert entries[0].high_watermark == 15

        # List offsets: latest and earliest.
        ml = mod("ListDisklessOffsetsRequest")
        lt = _first_elem(ml, "topics")
        lp = _first_elem(ml, "partitions", lt)
        lo = await client.request(M("ListDisklessOffsetsRequest")(topics=(lt(
            topic_id=topic, partitions=(lp(partition_index=0, timestamp=-1),
                                        lp(partition_index=0, timestamp=-2))),)))  # fmt: skip
        assert [p.offset for t in lo.responses for p in t.partitions] == [15, 0]

        # Delete records up to the high watermark (-1) on partitions 0 and 1: obj-1 loses its
        # last reference and is marked for deletion; obj-2 still holds partition 2's batch.
        md = mod("DeleteDisklessRecordsRequest")
        dt = _first_elem(md, "topics")
        dp = _first_elem(md, "partitions", dt)
        dr = await client.request(M("DeleteDisklessRecordsRequest")(topics=(dt(
            topic_id=topic, partitions=(dp(partition_index=0, offset=-1),
                                        dp(partition_index=1, offset=-1))),)))  # fmt: skip
        assert [p.error_code for t in dr.responses for p in t.partitions] == [0, 0]

        files = await client.request(M("ListDisklessFilesToDeleteRequest")(
            marked_for_deletion_before_ms=-1, max_objects=10, object_keys=("obj-1", "nope")))
        assert [f.object_key for f in files.files] == ["obj-1"]
        assert {s.object_key: s.is_safe_to_delete for s in files.safe_to_delete} == {
            "obj-1": False, "nope": True}  # fmt: skip

        deleted = await client.request(M("DeleteDisklessFilesRequest")(object_keys=("obj-1",)))
        assert [r.error_code for r in deleted.results] == [0]

        # Delete the topic: every later lookup answers UNKNOWN_TOPIC_OR_PARTITION.
        mdt = mod("DeleteDisklessTopicsRequest")
        gone = await client.request(M("DeleteDisklessTopicsRequest")(
            topics=(_first_elem(mdt, "topics")(topic_id=topic),)))  # fmt: skip
        assert [r.error_code for r in gone.responses] == [0]
        again = await client.request(M("FindDisklessBatchesRequest")(
            topics=(topic_cls(topic_id=topic, partitions=(
                part_cls(partition_index=2, offset=0, max_bytes=1000),)),), max_bytes=1000))
        assert [p.error_code for t in again.responses for p in t.partitions] == [3]
        # obj-2 lost its last batch with the topic: now listed for deletion too.
        files = await client.request(M("ListDisklessFilesToDeleteRequest")(
            marked_for_deletion_before_ms=-1, max_objects=10))
        assert [f.object_key for f in files.files] == ["obj-2"]
    finally:
        await client.close()
        await running.stop()


async def test_commits_survive_restart(tmp_path):
    running = await start_server(tmp_path)
    topic = uuid.uuid4()
    client = await KafkaRpcClient.connect(f"127.0.0.1:{running.port()}")
    mi = mod("InitDisklessTopicsRequest")
    await client.request(M("InitDisklessTopicsRequest")(
        topics=(_first_elem(mi, "topics")(topic_id=topic, num_partitions=1),)))  # fmt: skip
    await client.request(_commit(topic, "a", [(0, 4, -1, -1)]))
    await client.close()
    await running.stop()

    running = await start_server(tmp_path)
    client = await KafkaRpcClient.connect(f"127.0.0.1:{running.port()}")
    try:
        r = await client.request(_commit(topic, "b", [(0, 2, -1, -1)]))
        assert [p.assigned_base_offset for t in r.topics for p in t.partitions] == [4]
    finally:
        await client.close()
        await running.stop()


def _first_elem(module, field_name, cls=None):
    """The element class of an array field (generated names differ per spec)."""
    import typing

    cls = cls or module.MESSAGE
    hint = typing.get_type_hints(cls)[field_name]
    (arg, *_rest) = typing.get_args(hint)
    if typing.get_origin(arg) is not None or arg is type(None):
        arg = typing.get_args(hint)[0]
    inner = typing.get_args(arg) if typing.get_origin(arg) is tuple else (arg,)
    return inner[0]


async def test_retention_task_applies_log_retention_bytes(tmp_path):
    # 100-byte batches, keep at most 250 bytes per partition: the periodic task (every 50 ms)
    # deletes whole batches from the front until the rest fits, as Kafka/Inkless do.
    # Time retention off: the test batches carry timestamps from 1970, which 7 days would expire.
    running = await start_server(tmp_path, **{"log.retention.bytes": "250",
                                              "log.retention.ms": "-1",
                                              "log.retention.check.interval.ms": "50"})  # fmt: skip
    client = await KafkaRpcClient.connect(f"127.0.0.1:{running.port()}")
    try:
        topic = uuid.uuid4()
        mi = mod("InitDisklessTopicsRequest")
        await client.request(M("InitDisklessTopicsRequest")(
            topics=(_first_elem(mi, "topics")(topic_id=topic, num_partitions=1),)))  # fmt: skip
        for i in range(5):
            await client.request(_commit(topic, f"r{i}", [(0, 10, -1, -1)]))
        ml = mod("ListDisklessOffsetsRequest")
        lt = _first_elem(ml, "topics")
        lp = _first_elem(ml, "partitions", lt)
        earliest = M("ListDisklessOffsetsRequest")(topics=(lt(
            topic_id=topic, partitions=(lp(partition_index=0, timestamp=-2),)),))  # fmt: skip

        async def log_start_at_30():
            r = await client.request(earliest)
            return r.responses[0].partitions[0].offset == 30

        # 5 batches x 100 bytes, 250 kept -> the 2 newest (offsets 30-49) stay
        await until(log_start_at_30, "the log start offset at 30", timeout=5.0)
        assert await running.server.enforce_retention_once() == 0  # nothing more to delete
    finally:
        await client.close()
        await running.stop()
