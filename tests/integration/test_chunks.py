"""KIP-1114 chunks on a real in-process server over real sockets (SQLite Batch Coordinator),
KIP-1114's test plan as far as this server can play it (docs/architecture.md):

a diskless topic on this node (broker 1) with two more registered brokers (2, 3, registered and
unfenced over the controller listener with BrokerRegistration and BrokerHeartbeat, as brokers
do); batches committed; a chunk created on broker 2 through the broker listener (this node, the
leader, fills the offsets and timestamp from the Batch Coordinator and forwards to the
controller); more batches; Metadata v14, decoded by kio's reader from kio-style classes written
here (not our codec), shows the first chunk inactive with the right offsets and the active chunk
on the new replica; AlterChunkAssignments moves the first chunk to broker 3; the same through the
``kafka-rpc chunks`` tool; per-entry errors for bad input change nothing; ``topics --describe``
lists the chunks."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import struct
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.coordinator.api import ListOffsetsRequest, TopicIdPartition
from kafka_rpc.protocol import codec, frames
from kafka_rpc.protocol.errors import ErrorCode as E
from kafka_rpc.tools import chunks as chunks_tool
from kafka_rpc.tools import topics as topics_tool
from tests.controller.harness import broker_features
from tests.integration.conftest import TIMEOUT, start_server
from tests.waiting import until

pytestmark = pytest.mark.integration

R = codec.message_class
CT = codec.module("CreateTopicsRequest")
CB = codec.module("CommitBatchesRequest")
BR = codec.module("BrokerRegistrationRequest")
CC = codec.module("CreateChunksRequest")
AC = codec.module("AlterChunkAssignmentsRequest")
NODE = 1  # the server's node id (and broker id)


# ------------------------------------------------------------------ Metadata v14, independently
# kio's entity conventions (frozen slotted dataclasses, kafka_type metadata, ClassVars), written
# here from the spec text so that kio's own reader decodes our v14 bytes, not our codec.

def _topics_args(bootstrap: str, *argv: str) -> argparse.Namespace:
    """``kafka-rpc topics`` arguments as its own parser reads them."""
    p = argparse.ArgumentParser()
    topics_tool.add_arguments(p)
    return p.parse_args(["--bootstrap-server", bootstrap, "--timeout", str(TIMEOUT), *argv])

def _kio_classes():
    from kio.schema.response_header.v1.header import ResponseHeader
    from kio.static.constants import EntityType
    from kio.static.primitive import i16, i32, i64

    common = {
        "__version__": i16(14),
        "__flexible__": True,
        "__api_key__": i16(3),
        "__header_schema__": ResponseHeader,
    }

    def cls(name, etype, fields_):
        ns = {"__annotations__": {}, "__type__": etype}
        for k in common:
            ns["__annotations__"][k] = ClassVar
            ns[k] = common[k]
        ns["__annotations__"]["__type__"] = ClassVar
        for fname, typ, ktype in fields_:
            ns["__annotations__"][fname] = typ
            if ktype is not None:
                ns[fname] = field(metadata={"kafka_type": ktype})
        return dataclass(frozen=True, slots=True, kw_only=True)(type(name, (), ns))

    nested = EntityType.nested
    chunk = cls("MetadataResponseChunk", nested, [
        ("start_offset", i64, "int64"), ("start_timestamp", i64, "int64"),
        ("stop_offset", i64, "int64"), ("end_offset", i64, "int64"),
        ("replica_nodes", tuple[i32, ...], "int32"), ("isr_nodes", tuple[i32, ...], "int32"),
    ])  # fmt: skip
    partition = cls("MetadataResponsePartition", nested, [
        ("error_code", i16, "int16"), ("partition_index", i32, "int32"),
        ("leader_id", i32, "int32"), ("leader_epoch", i32, "int32"),
        ("replica_nodes", tuple[i32, ...], "int32"), ("isr_nodes", tuple[i32, ...], "int32"),
        ("offline_replicas", tuple[i32, ...], "int32"), ("start_offset", i64, "int64"),
        ("chunks", tuple[chunk, ...], None),
    ])  # fmt: skip
    topic = cls("MetadataResponseTopic", nested, [
        ("error_code", i16, "int16"), ("name", str | None, "string"),
        ("topic_id", uuid.UUID | None, "uuid"), ("is_internal", bool, "bool"),
        ("partitions", tuple[partition, ...], None),
        ("topic_authorized_operations", i32, "int32"),
    ])  # fmt: skip
    broker = cls("MetadataResponseBroker", nested, [
        ("node_id", i32, "int32"), ("host", str, "string"), ("port", i32, "int32"),
        ("rack", str | None, "string"),
    ])  # fmt: skip
    return cls("MetadataResponse", EntityType.response, [
        ("throttle_time_ms", i32, "int32"), ("brokers", tuple[broker, ...], None),
        ("cluster_id", str | None, "string"), ("controller_id", i32, "int32"),
        ("topics", tuple[topic, ...], None), ("error_code", i16, "int16"),
    ])  # fmt: skip


async def raw_metadata(port: int, version: int, topic: str):
    """Metadata at ``version`` over a raw socket; the body decoded by kio (v14: the classes
    above; v13 and below: kio's own schema)."""
    from kio.serial import entity_reader

    mod = codec.module("MetadataRequest")
    req = mod.MESSAGE(topics=(mod.MetadataRequestTopic(name=topic),))
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT)
    try:
        w.write(frames.frame(frames.request_header_bytes(3, version, 7, "t")
                             + codec.encode(req, version)))  # fmt: skip
        n = struct.unpack(">i", await asyncio.wait_for(r.readexactly(4), TIMEOUT))[0]
        payload = await asyncio.wait_for(r.readexactly(n), TIMEOUT)
    finally:
        w.close()
    assert struct.unpack_from(">i", payload)[0] == 7
    body = payload[4 + frames.response_header_version(3, version) :]
    if version == 14:
        schema = _kio_classes()
    else:
        from kio.index import load_response_schema

        schema = load_response_schema(3, version)
    entity, size = entity_reader(schema)(body, 0)
    assert size == len(body)
    return entity


# ------------------------------------------------------------------ helpers
async def register(ctl: KafkaRpcClient, broker_id: int) -> int:
    """BrokerRegistration then BrokerHeartbeat (caught up): broker ``broker_id`` is unfenced;
    returns its broker epoch."""
    reg = R("BrokerRegistrationRequest")(
        broker_id=broker_id, cluster_id=CLUSTER, incarnation_id=uuid.uuid4(),
log_dirs=(uuid.UUID(int=(broker_id + 1) << 64),),
        listeners=(BR.Listener(name="PLAINTEXT", host="127.0.0.1", port=1000 + broker_id,
                               security_protocol=0),),
        features=broker_features(),
        rack=None,
    )  # fmt: skip
    resp = await ctl.request(reg, timeout=TIMEOUT)
    assert resp.error_code == 0, resp
    hb = R("BrokerHeartbeatRequest")(
        broker_id=broker_id, broker_epoch=resp.broker_epoch,
        current_metadata_offset=resp.broker_epoch,
    )  # fmt: skip
    resp = await ctl.request(hb, timeout=TIMEOUT)
    assert resp.error_code == 0 and not resp.is_fenced, resp
    return hb.broker_epoch


async def keep_alive(ctl: KafkaRpcClient, epochs: dict[int, int]) -> None:
    """Heartbeat every second for the registered brokers, as their processes would, so their
    sessions (``broker.session.timeout.ms``) never expire however slow the test runs."""
    while True:
        await asyncio.sleep(1.0)
        for b, epoch in epochs.items():
            hb = R("BrokerHeartbeatRequest")(
                broker_id=b, broker_epoch=epoch, current_metadata_offset=epoch
            )
            with contextlib.suppress(Exception):
                await ctl.request(hb, timeout=TIMEOUT)


def commit_req(topic_id: uuid.UUID, key: str, base: int, count: int, ts: int):
    part = CB.CommitBatchesTopicPartition(
        partition_index=0, object_key=key, byte_offset=0, size=100, base_offset=0,
        last_offset=count - 1, batch_max_timestamp=ts, message_timestamp_type=0,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, last_sequence=-1,
    )  # fmt: skip
    topic = CB.CommitBatchesTopic(topic_id=topic_id, partitions=(part,))
    return CB.CommitBatchesRequest(broker_id=NODE, batches=(CB.Batches(topics=(topic,)),))


async def commit(client, topic_id, key, count, ts, expect_base):
    r = await client.request(commit_req(topic_id, key, 0, count, ts), timeout=TIMEOUT)
    [p] = [p for t in r.topics for p in t.partitions]
    assert (p.error_code, p.assigned_base_offset) == (0, expect_base)


def create_chunks_req(*entries):
    return CC.MESSAGE(
        topic_partitions=tuple(
            CC.CreateChunksTopicPartition(topic_name=t, partition_id=p, broker_ids=tuple(b))
            for t, p, b in entries
        )
    )


def alter_req(*entries):
    return AC.MESSAGE(
        chunks=tuple(
            AC.AlterChunkAssignment(topic_name=t, partition_id=p, start_offset=s,
                                    chunk_epoch=ep, broker_ids=tuple(b))
            for t, p, s, ep, b in entries
        )
    )  # fmt: skip


CLUSTER = "Y2h1bmstdGVzdC1jbHVzdA"


@contextlib.asynccontextmanager
async def chunk_cluster(tmp_path, **extra):
    """(running server, broker-listener client, controller-listener client, topic id) with
    brokers 1 (this node), 2 and 3 registered and unfenced and a diskless topic ``events``
    (one partition on broker 1) mirrored into the Batch Coordinator."""
    from tests.raft.test_driver_single import free_port

    cport = free_port()
    running = await start_server(
        tmp_path,
        **{
            "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{cport}",
            "controller.quorum.voters": f"{NODE}@127.0.0.1:{cport}",
            "cluster.id": CLUSTER,
            **extra,
        },
    )
    clients = []
    tasks: list[asyncio.Future] = []
    try:
        server = running.server
        await asyncio.wait_for(server.broker_lifecycle.unfenced.wait(), 3 * TIMEOUT)
        broker = await KafkaRpcClient.connect(f"127.0.0.1:{running.port()}",
                                              request_timeout=TIMEOUT)  # fmt: skip
        clients.append(broker)
        ctl = await KafkaRpcClient.connect(f"127.0.0.1:{cport}", request_timeout=TIMEOUT)
        clients.append(ctl)
        epochs = {b: await register(ctl, b) for b in (2, 3)}
        hb_client = await KafkaRpcClient.connect(f"127.0.0.1:{cport}", request_timeout=TIMEOUT)
        clients.append(hb_client)
        tasks.append(asyncio.ensure_future(keep_alive(hb_client, epochs)))
        req = CT.CreateTopicsRequest(
            topics=(CT.CreatableTopic(
                name="events", num_partitions=-1, replication_factor=-1,
                assignments=(CT.CreatableReplicaAssignment(partition_index=0, broker_ids=(1,)),),
                configs=(CT.CreatableTopicConfig(name="diskless.enable", value="true"),),
            ),),
            timeout_ms=5000,
        )  # fmt: skip
        resp = await broker.request(req, timeout=TIMEOUT)
        assert resp.topics[0].error_code == 0, resp
        tid = resp.topics[0].topic_id

        async def mirrored():
            return any(tp.topic_id == tid for tp in await server.coordinator.list_partitions())

        await until(mirrored, "the diskless topic in the Batch Coordinator", timeout=3 * TIMEOUT)
        yield running, broker, ctl, tid
    finally:
        for t in tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for c in clients:
            await c.close()
        await running.stop()


@pytest.fixture
async def cluster(tmp_path):
    async with chunk_cluster(tmp_path) as c:
        yield c


async def until_image(server, pred, what):
    """Wait until ``pred`` holds of the server's committed metadata image."""
    await until(lambda: pred(server.controller.image), what, timeout=3 * TIMEOUT)


async def metadata_barrier(broker, server, name):
    """Create topic ``name`` through ``broker`` and wait until it is in the committed image:
    the metadata log is ordered, so a write the controller had taken before it is committed
    too."""
    req = CT.CreateTopicsRequest(
        topics=(CT.CreatableTopic(name=name, num_partitions=1, replication_factor=1),),
        timeout_ms=5000,
    )
    assert (await broker.request(req, timeout=TIMEOUT)).topics[0].error_code == 0
    await until_image(server, lambda img: img.topic_by_name(name), f"topic {name}")


# ------------------------------------------------------------------ the KIP's plan, raw RPCs
async def test_create_chunk_and_alter_assignment_over_raw_rpcs(cluster):
    running, broker, ctl, tid = cluster
    server = running.server
    port = running.port()
    await commit(broker, tid, "obj-1", 10, 1_000, 0)  # offsets 0..9

    # errors first: nothing changes
    resp = await broker.request(
        create_chunks_req(("nope", 0, [2]), ("events", 3, [2]), ("events", 0, [2, 3]),
                          ("events", 0, [9])),
        timeout=TIMEOUT,
    )  # fmt: skip
    assert [r.error_code for r in resp.results] == [
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.INVALID_REPLICATION_FACTOR,
        E.INVALID_REPLICA_ASSIGNMENT,
    ]
    assert all(r.error_message for r in resp.results)
    assert server.controller.image.topic_by_name("events").chunks.get(0) is None
    # the controller listener never fills offsets: -1 is INVALID_REQUEST there
    resp = await ctl.request(create_chunks_req(("events", 0, [2])), timeout=TIMEOUT)
    assert [r.error_code for r in resp.results] == [E.INVALID_REQUEST]

    # the chunk on broker 2, through the leader (this node)
    resp = await broker.request(create_chunks_req(("events", 0, [2])), timeout=TIMEOUT)
    assert [(r.topic_name, r.partition_id, r.error_code, r.error_message)
            for r in resp.results] == [("events", 0, 0, None)]  # fmt: skip
    await commit(broker, tid, "obj-2", 10, 2_000, 10)  # offsets 10..19, in the new chunk

    # this node no longer leads: it cannot fill the offsets
    resp = await broker.request(create_chunks_req(("events", 0, [3])), timeout=TIMEOUT)
    assert [r.error_code for r in resp.results] == [E.NOT_LEADER_OR_FOLLOWER]

    await until_image(server, lambda img: img.topic_by_name("events").chunks.get(0),
                      "the chunk in the node's committed image")  # fmt: skip
    md = await raw_metadata(port, 14, "events")
    [t] = md.topics
    [p] = t.partitions
    assert (p.leader_id, p.replica_nodes, p.isr_nodes, p.start_offset) == (2, (2,), (2,), 10)
    assert [(c.start_offset, c.start_timestamp, c.stop_offset, c.end_offset, c.replica_nodes,
             c.isr_nodes) for c in p.chunks] == [(0, -1, 9, 9, (1,), (1,))]  # fmt: skip
    assert server.controller.image.topic_by_name("events").partitions[0].start_timestamp == 1_000

    # AlterChunkAssignments: a stale epoch and an unknown start offset change nothing
    resp = await ctl.request(
        alter_req(("events", 0, 0, 5, [3]), ("events", 0, 4, -1, [3])), timeout=TIMEOUT
    )
    assert [r.error_code for r in resp.results] == [E.INVALID_UPDATE_VERSION, E.INVALID_REQUEST]
    # move the first chunk to broker 3 (through the broker listener: forwarded)
    resp = await broker.request(alter_req(("events", 0, 0, 0, [3])), timeout=TIMEOUT)
    assert [(r.start_offset, r.error_code) for r in resp.results] == [(0, 0)]

    def moved(img):
        [c] = img.topic_by_name("events").partition_chunks(0)
        return c.replicas == (3,)

    await until_image(server, moved, "the chunk moved in the committed image")
    md = await raw_metadata(port, 14, "events")
    [c] = md.topics[0].partitions[0].chunks
    assert (c.start_offset, c.stop_offset, c.end_offset, c.replica_nodes, c.isr_nodes) == (
        0, 9, 9, (3,), (3,))  # fmt: skip

    # lower versions are unchanged: kio's own schemas decode v0-13 (no chunk fields)
    for v in range(14):
        old = await raw_metadata(port, v, "events")
        p_old = old.topics[0].partitions[0]
        assert (p_old.leader_id, p_old.replica_nodes) == (2, (2,)), v
        assert not hasattr(p_old, "chunks") and not hasattr(p_old, "start_offset")

    # removing the chunk: no replica left
    resp = await ctl.request(alter_req(("events", 0, 0, 1, [])), timeout=TIMEOUT)
    assert [r.error_code for r in resp.results] == [0]
    await until_image(server, lambda img: not img.topic_by_name("events").chunks,
                      "the chunk removed")  # fmt: skip
    md = await raw_metadata(port, 14, "events")
    assert md.topics[0].partitions[0].chunks == () and md.topics[0].partitions[0].start_offset == 10


# ------------------------------------------------------------------ the same through the tools
async def test_chunks_tool_create_alter_and_topics_describe(cluster, tmp_path):
    running, broker, ctl, tid = cluster
    server = running.server
    bootstrap = f"127.0.0.1:{running.port()}"
    await commit(broker, tid, "obj-1", 10, 1_000, 0)

    create_file = tmp_path / "create.json"
    create_file.write_text(json.dumps({"partitions": [
        {"topic": "events", "partition": 0, "replicas": [2]},
        {"topic": "nope", "partition": 0, "replicas": [2]},
    ]}))  # fmt: skip
    out = io.StringIO()
    args = argparse.Namespace(action="create", bootstrap_server=bootstrap, timeout=TIMEOUT,
                              create_chunk_json_file=str(create_file),
                              alter_chunk_json_file=None)  # fmt: skip
    assert await chunks_tool.run(args, out=out) == 1  # one entry failed
    lines = out.getvalue().splitlines()
    assert lines[0] == "Created a chunk of events-0 on replicas 2."
    assert lines[1].startswith("Error for nope-0: UNKNOWN_TOPIC_OR_PARTITION")
    await commit(broker, tid, "obj-2", 10, 2_000, 10)

    await until_image(server, lambda img: img.topic_by_name("events").chunks.get(0),
                      "the chunk in the node's committed image")  # fmt: skip
    out = io.StringIO()
    targs = _topics_args(bootstrap, "--describe", "--topic", "events")
    assert await topics_tool.run(targs, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[1].endswith("\tLeader: 2\tReplicas: 2\tIsr: 2\tStartOffset: 10"), lines
    assert lines[2] == "\t\tChunk: StartOffset: 0\tStopOffset: 9\tEndOffset: 9\tReplicas: 1\tIsr: 1"

    alter_file = tmp_path / "alter.json"
    alter_file.write_text(json.dumps({"chunks": [
        {"topic": "events", "partition": 0, "startOffset": 0, "replicas": [3]},
    ]}))  # fmt: skip
    out = io.StringIO()
    args = argparse.Namespace(action="alter", bootstrap_server=bootstrap, timeout=TIMEOUT,
                              create_chunk_json_file=None,
                              alter_chunk_json_file=str(alter_file))  # fmt: skip
    assert await chunks_tool.run(args, out=out) == 0, out.getvalue()
    assert out.getvalue() == "Altered the chunk of events-0 at offset 0 to replicas 3.\n"

    def moved(img):
        [c] = img.topic_by_name("events").partition_chunks(0)
        return c.replicas == (3,)

    await until_image(server, moved, "the chunk moved")
    out = io.StringIO()
    assert await topics_tool.run(targs, out=out) == 0
    assert out.getvalue().splitlines()[2].endswith("\tReplicas: 3\tIsr: 3")

    # a stale epoch in the file: an error line and exit 1
    alter_file.write_text(json.dumps({"chunks": [
        {"topic": "events", "partition": 0, "startOffset": 0, "chunkEpoch": 0, "replicas": [2]},
    ]}))  # fmt: skip
    out = io.StringIO()
    assert await chunks_tool.run(args, out=out) == 1
    assert out.getvalue().startswith("Error for events-0 at offset 0: INVALID_UPDATE_VERSION")
    # a malformed file
    alter_file.write_text(json.dumps({"chunks": [{"topic": "events", "partition": "0"}]}))
    out = io.StringIO()
    assert await chunks_tool.run(args, out=out) == 1
    assert out.getvalue().startswith("Error while executing chunk command : ")


# ------------------------------------------------------------------ automatic chunk deletion
async def test_delete_records_past_a_chunk_end_removes_the_chunk(cluster):
    """KIP-1114 automatic chunk deletion: once DeleteDisklessRecords moves the log start offset
    past a chunk's end offset, the chunk is removed (AlterChunkAssignments with no replicas);
    a log start offset inside the chunk keeps it."""
    running, broker, ctl, tid = cluster
    server = running.server
    DR = codec.module("DeleteDisklessRecordsRequest")
    await commit(broker, tid, "obj-1", 10, 1_000, 0)  # 0..9
    await commit(broker, tid, "obj-2", 10, 1_500, 10)  # 10..19
    resp = await broker.request(create_chunks_req(("events", 0, [2])), timeout=TIMEOUT)
    assert [r.error_code for r in resp.results] == [0]
    await commit(broker, tid, "obj-3", 10, 2_000, 20)  # 20..29, the active chunk
    resp = await ctl.request(create_chunks_req(("events", 0, [3])), timeout=TIMEOUT)
    assert [r.error_code for r in resp.results] == [E.INVALID_REQUEST]  # not filled: nothing
    CCm = codec.module("CreateChunksRequest")
    second = CCm.MESSAGE(topic_partitions=(CCm.CreateChunksTopicPartition(
        topic_name="events", partition_id=0, broker_ids=(3,), start_offset=30,
        start_timestamp=2_000, prev_stop_offset=29),))  # fmt: skip
    resp = await ctl.request(second, timeout=TIMEOUT)
    assert [r.error_code for r in resp.results] == [0]

    def starts(img):
        return [c.start_offset for c in img.topic_by_name("events").partition_chunks(0)]

    await until_image(server, lambda img: starts(img) == [0, 20], "two chunks")

    async def delete_before(offset):
        req = DR.MESSAGE(topics=(DR.DeleteDisklessTopicRecords(topic_id=tid, partitions=(
            DR.DeleteDisklessPartitionRecords(partition_index=0, offset=offset),)),))  # fmt: skip
        r = await broker.request(req, timeout=TIMEOUT)
        [p] = [p for t in r.responses for p in t.partitions]
        assert p.error_code == 0
        return p.low_watermark

    assert await delete_before(15) == 15  # inside the first chunk [0, 19]: kept
    # a removal is sent from the DeleteDisklessRecords handler before it answers: a later write
    # through the same controller commits after it, so once that write is in the image a
    # removal would be too
    await metadata_barrier(broker, server, "after-delete-15")
    assert starts(server.controller.image) == [0, 20]
    assert await delete_before(20) == 20  # past its end: removed; [20, 29] stays
    await until_image(server, lambda img: starts(img) == [20], "the first chunk removed")
    md = await raw_metadata(running.port(), 14, "events")
    assert [c.start_offset for c in md.topics[0].partitions[0].chunks] == [20]


async def test_retention_past_a_chunk_end_removes_the_chunk(tmp_path):
    """The same through the broker's retention task (``log.retention.bytes``): once retention
    deleted every batch of the chunk, the chunk is removed."""
    async with chunk_cluster(
        tmp_path,
        **{
            "log.retention.bytes": "150",
            "log.retention.ms": "-1",
            "log.retention.check.interval.ms": "50",
        },
    ) as (running, broker, ctl, tid):
        server = running.server
        await commit(broker, tid, "obj-1", 10, 1_000, 0)  # 0..9, 100 bytes: within retention
        resp = await broker.request(create_chunks_req(("events", 0, [2])), timeout=TIMEOUT)
        assert [r.error_code for r in resp.results] == [0]
        await until_image(server, lambda img: img.topic_by_name("events").chunks.get(0),
                          "the chunk [0, 9]")  # fmt: skip
        await commit(broker, tid, "obj-2", 10, 2_000, 10)  # 200 bytes: batch 0..9 goes
        await until_image(server, lambda img: not img.topic_by_name("events").chunks,
                          "the chunk removed after retention")  # fmt: skip
        [lo] = await server.coordinator.list_offsets(
            [ListOffsetsRequest(TopicIdPartition(tid, 0), -2)]
        )
        assert lo.offset == 10


async def test_kafka_rpc_chunks_command_line(cluster, tmp_path):
    """``kafka-rpc chunks`` as a real process against the server: exit 0 and one line per
    entry, exit 1 on an entry error."""
    import sys

    running, broker, ctl, tid = cluster
    await commit(broker, tid, "obj-1", 10, 1_000, 0)
    bootstrap = f"127.0.0.1:{running.port()}"

    async def cli(*argv):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kafka_rpc.cli", "--log-level", "WARNING", "chunks", *argv,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 4 * TIMEOUT)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return proc.returncode, out.decode(), err.decode()

    f = tmp_path / "create.json"
    f.write_text(json.dumps({"partitions": [{"topic": "events", "partition": 0, "replicas": [2]}]}))
    code, out, err = await cli("create", "--bootstrap-server", bootstrap,
                               "--create-chunk-json-file", str(f))  # fmt: skip
    assert (code, out) == (0, "Created a chunk of events-0 on replicas 2.\n"), err
    await until_image(running.server, lambda img: img.topic_by_name("events").chunks.get(0),
                      "the chunk in the committed image")  # fmt: skip
    f = tmp_path / "alter.json"
    f.write_text(json.dumps({"chunks": [
        {"topic": "events", "partition": 0, "startOffset": 0, "replicas": [3]},
        {"topic": "events", "partition": 0, "startOffset": 5, "replicas": [3]},
    ]}))  # fmt: skip
    code, out, err = await cli("alter", "--bootstrap-server", bootstrap,
                               "--alter-chunk-json-file", str(f))  # fmt: skip
    lines = out.splitlines()
    assert code == 1 and lines[0] == "Altered the chunk of events-0 at offset 0 to replicas 3."
    assert lines[1].startswith("Error for events-0 at offset 5: INVALID_REQUEST: "), out
    code, out, err = await cli("alter", "--bootstrap-server", bootstrap)
    assert code == 1 and "--alter-chunk-json-file" in err


async def test_leader_cannot_fill_empty_or_non_diskless_partition_and_keeps_client_values(
    cluster,
):
    """INVALID_REQUEST with a message for an empty active chunk and for a partition that is not
    diskless; values the client set are kept, only the -1s are filled."""
    running, broker, ctl, tid = cluster
    server = running.server
    req = CT.CreateTopicsRequest(
        topics=(CT.CreatableTopic(
            name="plain", num_partitions=-1, replication_factor=-1,
            assignments=(CT.CreatableReplicaAssignment(partition_index=0, broker_ids=(1,)),),
        ),),
        timeout_ms=5000,
    )  # fmt: skip
    assert (await broker.request(req, timeout=TIMEOUT)).topics[0].error_code == 0
    await until_image(server, lambda img: img.topic_by_name("plain"), "topic plain")
    resp = await broker.request(
        create_chunks_req(("events", 0, [2]), ("plain", 0, [2])), timeout=TIMEOUT
    )
    [empty, plain] = resp.results
    assert empty.error_code == E.INVALID_REQUEST and "holds no record" in empty.error_message
    assert plain.error_code == E.INVALID_REQUEST and "not a diskless" in plain.error_message
    assert not server.controller.image.topic_by_name("events").chunks

    await commit(broker, tid, "obj-1", 10, 1_000, 0)  # 0..9
    # the client names the boundary itself (start 6, stop 5); the leader fills the timestamp
    own = CC.MESSAGE(topic_partitions=(CC.CreateChunksTopicPartition(
        topic_name="events", partition_id=0, broker_ids=(2,), start_offset=6,
        prev_stop_offset=5),))  # fmt: skip
    resp = await broker.request(own, timeout=TIMEOUT)
    assert [r.error_code for r in resp.results] == [0]

    def closed(img):
        return img.topic_by_name("events").partition_chunks(0)

    await until_image(server, closed, "the chunk")
    [c] = closed(server.controller.image)
    p = server.controller.image.topic_by_name("events").partitions[0]
    assert (c.start_offset, c.stop_offset, c.end_offset) == (0, 5, 5)
    assert (p.start_offset, p.start_timestamp) == (6, 1_000)


async def test_real_client_reads_metadata_of_a_partition_with_chunks(cluster):
    """confluent-kafka (librdkafka) asks Metadata below v14: with a chunk in the partition it
    sees the active chunk's leader and replicas, and nothing breaks. (Brokers 2 and 3 have no
    process behind their endpoints, so a client that picks any broker for a request, as
    kafka-python's admin does, cannot be used here.)"""
    from confluent_kafka.admin import AdminClient

    running, broker, ctl, tid = cluster
    bootstrap = f"127.0.0.1:{running.port()}"
    await commit(broker, tid, "obj-1", 10, 1_000, 0)
    resp = await broker.request(create_chunks_req(("events", 0, [2])), timeout=TIMEOUT)
    assert [r.error_code for r in resp.results] == [0]
    await until_image(running.server, lambda img: img.topic_by_name("events").chunks.get(0),
                      "the chunk")  # fmt: skip

    def confluent():
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics("events", timeout=10)
        p = md.topics["events"].partitions[0]
        return p.leader, list(p.replicas), list(p.isrs), sorted(md.brokers)

    assert await asyncio.to_thread(confluent) == (2, [2], [2], [1, 2, 3])


async def test_chunks_survive_a_restart_through_a_snapshot(tmp_path):
    """Chunk state is in the metadata snapshot: after a restart (snapshot load plus the log
    tail) the node's image has the same chunks, epochs included, and Metadata v14 shows them."""
    extra = {"controller.snapshot.minimum.records": "1"}
    async with chunk_cluster(tmp_path, **extra) as (running, broker, ctl, tid):
        cport = running.port("CONTROLLER")
        await commit(broker, tid, "obj-1", 10, 1_000, 0)
        resp = await broker.request(create_chunks_req(("events", 0, [2])), timeout=TIMEOUT)
        assert [r.error_code for r in resp.results] == [0]
        resp = await ctl.request(alter_req(("events", 0, 0, 0, [3])), timeout=TIMEOUT)
        assert [r.error_code for r in resp.results] == [0]

        def moved(img):
            cs = img.topic_by_name("events").partition_chunks(0)
            return cs and cs[0].epoch == 1

        await until_image(running.server, moved, "the moved chunk")
        before = running.server.controller.image.topic_by_name("events")
    running = await start_server(
        tmp_path,
        **{
            "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{cport}",
            "controller.quorum.voters": f"{NODE}@127.0.0.1:{cport}",
            "cluster.id": CLUSTER,
            **extra,
        },
    )
    try:
        log_ = running.server.raft.log
        sid = log_.latest_snapshot_id()
        assert sid is not None
        reader = log_.read_snapshot(sid)
        records = [codec.decode_record(v)[0] for b in reader.batches() if not b.is_control
                   for v in b.records]  # fmt: skip
        chunk_records = [r for r in records if type(r).__spec_name__ == "ChunkRecord"]
        assert [(r.start_offset, r.end_offset) for r in chunk_records] == [(0, 9)]

        def same(img):
            t = img.topic_by_name("events")
            return t is not None and t.chunks == before.chunks

        await until_image(running.server, same, "the chunks after the restart")
        p = running.server.controller.image.topic_by_name("events").partitions[0]
        assert (p.start_offset, p.start_timestamp) == (10, 1_000)
        md = await raw_metadata(running.port(), 14, "events")
        [c] = md.topics[0].partitions[0].chunks
        assert (c.start_offset, c.stop_offset, c.end_offset, c.replica_nodes) == (0, 9, 9, (3,))
    finally:
        await running.stop()
