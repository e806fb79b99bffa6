"""``kafka-rpc diskless assign`` against a real in-process server (real sockets): by topic name
(looked up on the broker listener) and by id, per-partition lines, exit status 1 on any error,
the ``kafka-rpc`` entry point as a real process."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import sys

import pytest

from kafka_rpc.cli import build_parser
from kafka_rpc.controller.coordinator_mapping import DISKLESS_METADATA_TOPIC, coordinator_partition
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.uuids import uuid_text
from kafka_rpc.tools.diskless import parse_topic_id, run
from tests.integration.conftest import TIMEOUT, start_server
from tests.waiting import until

CT = codec.module("CreateTopicsRequest")


def test_parse_topic_id():
    import uuid

    u = uuid.UUID("3c5a3f0e-8d4b-4a51-9a10-6c1bd0f5e0aa")
    short = base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")
    assert parse_topic_id(short) == u and parse_topic_id(str(u)) == u
    assert parse_topic_id("orders") is None
    assert parse_topic_id("a" * 22) is None  # not the canonical text of any id: a name
    assert parse_topic_id("x" * 36) is None


async def _cli(*argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args(["diskless", *argv])
    out, err = io.StringIO(), io.StringIO()
    rc = await run(args, out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.integration
async def test_assign_by_name_and_by_id(tmp_path):
    running = await start_server(tmp_path, **{"diskless.metadata.topic.num.partitions": "3"})
    server = running.server
    try:
        await until(lambda: server.controller.image.topic_by_name(DISKLESS_METADATA_TOPIC),
                    f"{DISKLESS_METADATA_TOPIC} created", timeout=3 * TIMEOUT)  # fmt: skip
        from kafka_rpc.client import KafkaRpcClient

        async with KafkaRpcClient(f"127.0.0.1:{running.port()}") as c:
            resp = await c.request(CT.CreateTopicsRequest(
                topics=(CT.CreatableTopic(name="orders", num_partitions=2, replication_factor=1),),
                timeout_ms=5000))  # fmt: skip
        tid = resp.topics[0].topic_id
        ctl = f"127.0.0.1:{running.port('CONTROLLER')}"
        brk = f"127.0.0.1:{running.port()}"

        rc, out, err = await _cli("assign", "--bootstrap-controller", ctl, "--bootstrap-server",
                                  brk, "--topic", "orders", "--partition", "0", "--partition",
                                  "1", "--coordinator-partition", "2")  # fmt: skip
        assert (rc, err) == (0, ""), out
        assert out.splitlines() == [
            "Assigned orders-0 to Batch Coordinator partition 2.",
            "Assigned orders-1 to Batch Coordinator partition 2.",
        ]
        img = server.controller.image
        assert [coordinator_partition(img, tid, p) for p in (0, 1)] == [2, 2]

        short = uuid_text(tid)
        rc, out, _ = await _cli("assign", "--bootstrap-controller", ctl, "--topic", short,
                                "--partition", "1", "--partition", "5",
                                "--coordinator-partition", "1")  # fmt: skip
        assert rc == 1
        assert out.splitlines() == [
            f"Assigned {short}-1 to Batch Coordinator partition 1.",
            f"Error for {short}-5: UNKNOWN_TOPIC_OR_PARTITION",
        ]
        rc, out, _ = await _cli("assign", "--bootstrap-controller", ctl, "--topic", str(tid),
                                "--partition", "0", "--coordinator-partition", "3")  # fmt: skip
        assert (rc, out) == (1, f"Error for {tid}-0: INVALID_PARTITIONS\n")
        rc, out, err = await _cli("assign", "--bootstrap-controller", ctl, "--topic", "orders",
                                  "--partition", "0", "--coordinator-partition", "0")  # fmt: skip
        assert rc == 1 and out == "" and "--bootstrap-server" in err
        rc, out, err = await _cli("assign", "--bootstrap-controller", ctl, "--bootstrap-server",
                                  brk, "--topic", "nope", "--partition", "0",
                                  "--coordinator-partition", "0")  # fmt: skip
        assert rc == 1 and err.startswith("Error: Topic 'nope' not found")

        # the entry point, as a real process
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kafka_rpc.cli", "diskless", "assign", "--bootstrap-controller",
            ctl, "--topic", short, "--partition", "0", "--coordinator-partition", "0",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "KAFKA_RPC_NO_REEXEC": "1"},
        )  # fmt: skip
        try:
            out_b, err_b = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, err_b
        assert out_b.decode() == f"Assigned {short}-0 to Batch Coordinator partition 0.\n"
        assert coordinator_partition(server.controller.image, tid, 0) == 0
    finally:
        await running.stop()
