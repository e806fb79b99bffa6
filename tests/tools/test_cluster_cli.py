"""``kafka-rpc cluster`` (Kafka's kafka-cluster.sh): ``cluster-id`` and ``unregister`` end to end
against a ``kafka-rpc serve`` process, on its broker and its controller listener, and
``--bootstrap-controller`` at a controller that is not the active one (the tool finds the leader
with DescribeCluster)."""

from __future__ import annotations

import argparse
import asyncio
import io
import re
import socket
import subprocess
import sys
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.tools.cluster import add_arguments, run
from tests.controller.harness import broker_features
from tests.waiting import until

pytestmark = pytest.mark.integration

TIMEOUT = 5.0
R = codec.message_class
BR = codec.module("BrokerRegistrationRequest")


def cluster(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "cluster", *argv, "--timeout", "10"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def register(address: str, cluster_id: str, *broker_ids: int) -> None:
    """Register fake brokers (fenced) through the active controller's listener at
    ``address``, retrying NOT_CONTROLLER until a leader is elected."""
    client = await KafkaRpcClient.connect(address, request_timeout=TIMEOUT)
    try:
        for bid in broker_ids:
            req = R("BrokerRegistrationRequest")(
                broker_id=bid,
                cluster_id=cluster_id,
                incarnation_id=uuid.uuid4(),
                log_dirs=(uuid.UUID(int=(bid + 1) << 64),),
                listeners=(
                    BR.Listener(
                        name="PLAINTEXT", host="127.0.0.1", port=19000 + bid, security_protocol=0
                    ),
                ),  # fmt: skip
                features=broker_features(),
            )

            async def answered(req=req):
                resp = await client.request(req)
                return None if resp.error_code == ErrorCode.NOT_CONTROLLER else resp

            resp = await until(answered, "an active controller", timeout=3 * TIMEOUT)
            assert resp.error_code == 0, resp
    finally:
        await client.close()


async def registered(address: str) -> list[int]:
    """Broker ids DescribeCluster lists on a broker listener, fenced ones included."""
    client = await KafkaRpcClient.connect(address, request_timeout=TIMEOUT)
    try:
        req = R("DescribeClusterRequest")(include_fenced_brokers=True)
        return [b.broker_id for b in (await client.request(req)).brokers]
    finally:
        await client.close()


def test_cluster_id_and_unregister_against_serve(tmp_path):
    from tests.integration.test_cli import ServeProcess

    srv = ServeProcess(tmp_path)
    try:
        (line,) = [ln for ln in srv.lines if ln.startswith("cluster id ")]
        cid = line.split()[2].rstrip(",")
        controller = f"127.0.0.1:{srv.ports['CONTROLLER']}"
        for where in ("--bootstrap-server", "--bootstrap-controller"):
            address = srv.bootstrap if where == "--bootstrap-server" else controller
            r = cluster("cluster-id", where, address)
            assert (r.returncode, r.stdout, r.stderr) == (0, f"Cluster ID: {cid}\n", "")

        asyncio.run(register(controller, cid, 100, 101))
        assert {100, 101} <= set(asyncio.run(registered(srv.bootstrap)))
        r = cluster("unregister", "--bootstrap-server", srv.bootstrap, "--id", "100")
        assert (r.returncode, r.stdout) == (0, "Broker 100 is no longer registered.\n"), r.stderr
        r = cluster("unregister", "--bootstrap-controller", controller, "--id", "101")
        assert (r.returncode, r.stdout) == (0, "Broker 101 is no longer registered.\n"), r.stderr
        listed = asyncio.run(registered(srv.bootstrap))  # answered after commit: already gone
        assert 100 not in listed and 101 not in listed and 1 in listed

        for where, address in (("--bootstrap-server", srv.bootstrap),
                               ("--bootstrap-controller", controller)):  # fmt: skip
            r = cluster("unregister", where, address, "--id", "100")
            assert (r.returncode, r.stdout) == (1, "")
            assert r.stderr == (
                "Error: Broker ID 100 is not currently registered (BROKER_ID_NOT_REGISTERED)\n"
            )
        r = cluster("unregister", "--bootstrap-server", srv.bootstrap)  # --id is required
        assert r.returncode == 2 and "--id" in r.stderr
    finally:
        srv.stop()


def test_connection_failure_exits_1():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "cluster", "cluster-id", "--bootstrap-server",
         f"127.0.0.1:{port}", "--timeout", "0.5"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1 and r.stdout == "" and r.stderr.startswith("Error: cannot connect")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_bootstrap_controller_follows_the_active_controller(tmp_path):
    from tests.integration.conftest import start_server

    ports = {1: _free_port(), 2: _free_port()}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    nodes = {}
    try:
        for i, port in ports.items():
            nodes[i] = await start_server(
                tmp_path / str(i),
                **{"listeners": f"CONTROLLER://127.0.0.1:{port}", "process.roles": "controller",
                   "node.id": str(i), "controller.quorum.voters": voters,
                   "cluster.id": "MkU3OEVBNTcwNTJENDM2Qg"},
            )  # fmt: skip
        leader = await until(
            lambda: next((i for i, n in nodes.items() if n.server.controller.is_active), None),
            "a leader elected", timeout=3 * TIMEOUT)  # fmt: skip
        follower = 3 - leader
        await register(f"127.0.0.1:{ports[leader]}", "MkU3OEVBNTcwNTJENDM2Qg", 100)

        # the follower's controller listener itself refuses: NOT_CONTROLLER
        client = await KafkaRpcClient.connect(f"127.0.0.1:{ports[follower]}")
        try:
            resp = await client.request(R("UnregisterBrokerRequest")(broker_id=100))
            assert resp.error_code == ErrorCode.NOT_CONTROLLER
        finally:
            await client.close()

        await until(lambda: nodes[follower].server.controller.active_controller_id == leader,
                    "the follower to learn the leader", timeout=3 * TIMEOUT)  # fmt: skip
        p = argparse.ArgumentParser()
        add_arguments(p)
        bootstrap = f"127.0.0.1:{ports[follower]}"
        args = p.parse_args(
            ["unregister", "--bootstrap-controller", bootstrap, "--id", "100", "--timeout", "5"]
        )
        out, err = io.StringIO(), io.StringIO()
        rc = await run(args, out=out, err=err)
        assert (rc, out.getvalue(), err.getvalue()) == (
            0, "Broker 100 is no longer registered.\n", "")  # fmt: skip
        assert 100 not in nodes[leader].server.controller.image.brokers
    finally:
        for n in nodes.values():
            await n.stop()


def test_usage_lines_in_help():
    r = subprocess.run([sys.executable, "-m", "kafka_rpc.cli", "cluster", "--help"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0
    assert re.search(r"cluster-id\s+print the cluster id", r.stdout)
    assert re.search(r"unregister\s+remove a broker's registration", r.stdout)
