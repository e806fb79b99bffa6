"""More Batch Coordinators by adding ``__diskless-metadata`` partitions (KIP-1164 "Scaling the
number of Batch Coordinators") on one node with the default coordinator:

* ``kafka-rpc topics --alter --topic __diskless-metadata --partitions 3`` (CreatePartitions, 37,
  through the broker listener, forwarded to the controller) adds two partitions, and this node,
  their replica, starts a coordinator on each;
* AssignPartitionToBatchCoordinator (``kafka-rpc diskless assign``) moves a topic-partition that
  has no batch to a new coordinator partition; its commits land there (its SQLite state) and
  FindCoordinator names this node;
* moving a topic-partition that already has batches is refused (POLICY_VIOLATION): the KIP
  defines no migration, and its batches stay where they are, readable.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller.coordinator_mapping import DISKLESS_METADATA_TOPIC
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.integration.conftest import start_server
from tests.integration.test_crash import Batch, commit_request
from tests.waiting import until

pytestmark = pytest.mark.integration

STEP = 20.0
CT = codec.module("CreateTopicsRequest")


async def cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kafka_rpc.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KAFKA_RPC_NO_REEXEC": "1"},
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode, out.decode(), err.decode()


def batches_in(db, topic: uuid.UUID) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM batches b JOIN logs l ON b.log_id = l.log_id "
                            "WHERE l.topic_id = ?", (topic.bytes,)).fetchone()[0]  # fmt: skip
    finally:
        conn.close()


async def test_more_coordinators_by_adding_partitions(tmp_path):
    running = await start_server(tmp_path)
    server = running.server
    bootstrap = f"127.0.0.1:{running.port()}"
    controller = f"127.0.0.1:{running.port('CONTROLLER')}"
    try:
        assert server.coordinator.is_writable  # a node alone starts with its coordinator
        async with KafkaRpcClient(bootstrap) as c:
            resp = await c.request(CT.CreateTopicsRequest(
                topics=(CT.CreatableTopic(name="d", num_partitions=2, replication_factor=1,
                        configs=(CT.CreatableTopicConfig(name="diskless.enable",
                                                         value="true"),)),),
                timeout_ms=10_000))  # fmt: skip
            assert resp.topics[0].error_code == 0, resp
            topic = resp.topics[0].topic_id

        code, out, err = await cli("topics", "--bootstrap-server", bootstrap, "--alter",
                                   "--topic", DISKLESS_METADATA_TOPIC, "--partitions", "3")
        assert (code, out) == (0, ""), err
        meta = server.controller.image.topic_by_name(DISKLESS_METADATA_TOPIC)
        assert sorted(meta.partitions) == [0, 1, 2]
        code, out, _ = await cli("topics", "--bootstrap-server", bootstrap, "--alter",
                                 "--topic", DISKLESS_METADATA_TOPIC, "--partitions", "2")
        assert code == 1 and out == (
            "Error while executing topic command : The topic __diskless-metadata currently has "
            "3 partition(s); 2 would not be an increase.\n")
        coordinator = server.coordinator
        await until(lambda: sorted(coordinator.replicas_running) == [0, 1, 2]
                    and all(r.is_writable for r in coordinator.replicas_running.values()),
                    "the new coordinators", timeout=STEP)  # fmt: skip

        async with KafkaRpcClient(bootstrap) as c:
            # d-0 gets a batch on coordinator 0 (it is unmapped) once the topic is there
            async def committed(partition: int, key: str):
                r = await c.request(commit_request(topic, key, [Batch(partition, 2)]))
                (p,) = r.topics[0].partitions
                # UNKNOWN_TOPIC_OR_PARTITION: the publisher has not created it yet
                return None if p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else p

            p = await until(lambda: committed(0, "before"), "a commit to d-0", timeout=STEP)
            assert (p.error_code, p.assigned_base_offset) == (0, 0)

            # d-1 (no batch) moves to coordinator 2; d-0 (a batch on 0) may not move
            code, out, _ = await cli("diskless", "assign", "--bootstrap-controller", controller,
                                     "--bootstrap-server", bootstrap, "--topic", "d",
                                     "--partition", "1", "--coordinator-partition", "2")
            assert (code, out) == (0, "Assigned d-1 to Batch Coordinator partition 2.\n")
            code, out, _ = await cli("diskless", "assign", "--bootstrap-controller", controller,
                                     "--bootstrap-server", bootstrap, "--topic", "d",
                                     "--partition", "0", "--coordinator-partition", "1")
            assert (code, out) == (1, "Error for d-0: POLICY_VIOLATION\n")
            image = server.controller.image
            assert dict(image.topics[topic].batch_coordinators) == {1: 2}

            p = await until(lambda: committed(1, "moved"), "a commit to d-1", timeout=STEP)
            assert (p.error_code, p.assigned_base_offset) == (0, 0)
            # each partition's SQLite file (its apply COMMITs within apply_commit_ms): d-1's
            # batch on coordinator 2, coordinator 0 holds d-0's only
            data = tmp_path / "data"
            dbs = [data / f"{DISKLESS_METADATA_TOPIC}-{i}" / "coordinator.db" for i in (0, 2)]
            await until(lambda: [batches_in(db, topic) for db in dbs] == [1, 1],
                        "the batches in their coordinators' SQLite files",
                        timeout=STEP)  # fmt: skip
            r = await c.request(codec.message_class("FindCoordinatorRequest")(
                key_type=3, coordinator_keys=(f"write:{topic}:1", f"read:{topic}:0")), version=7)
            assert [(k.error_code, k.node_id) for k in r.coordinators] == [(0, 1), (0, 1)]
    finally:
        await running.stop()
