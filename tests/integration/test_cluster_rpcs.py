"""UnregisterBroker (64) and DescribeCluster (60) over real sockets with the project's client: a
fake broker registered with BrokerRegistration is unregistered on the controller listener, on
the broker listener of the controller's node, and forwarded by a broker-only node, and vanishes
from the image, Metadata and DescribeCluster; an unknown id is BROKER_ID_NOT_REGISTERED; a
controller that is not active answers NOT_CONTROLLER; DescribeCluster lists brokers on a broker
listener and controllers on a controller listener, with Kafka's endpoint-type errors."""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.handlers.cluster import CLUSTER_AUTHORIZED_OPERATIONS
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from tests.controller.harness import broker_features
from tests.integration.conftest import TIMEOUT, start_server
from tests.waiting import until

pytestmark = pytest.mark.integration

R = codec.message_class
BR = codec.module("BrokerRegistrationRequest")
DC = codec.module("DescribeClusterRequest")
MD = codec.module("MetadataRequest")
#: long sessions: a fake broker that stops heartbeating stays unfenced for the whole test
SLOW_FENCING = {"broker.session.timeout.ms": "600000"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def registration(broker_id: int, cluster_id: str, port: int):
    return R("BrokerRegistrationRequest")(
        broker_id=broker_id,
        cluster_id=cluster_id,
        incarnation_id=uuid.uuid4(),
        log_dirs=(uuid.UUID(int=(broker_id + 1) << 64),),
        listeners=(
            BR.Listener(name="PLAINTEXT", host="127.0.0.1", port=port, security_protocol=0),
        ),
        features=broker_features(),
        rack="rack-a",
    )


async def register_fake(ctl: KafkaRpcClient, broker_id: int, cluster_id: str, unfence: bool):
    """Register ``broker_id`` (endpoint PLAINTEXT 127.0.0.1:19000+id) through the active
    controller's listener; heartbeat it unfenced when asked. Returns its broker epoch."""

    async def registered():
        resp = await ctl.request(registration(broker_id, cluster_id, 19000 + broker_id))
        registered.resp = resp
        return resp.error_code != E.NOT_CONTROLLER

    await until(registered, "an active controller", timeout=3 * TIMEOUT)
    assert registered.resp.error_code == 0, registered.resp
    epoch = registered.resp.broker_epoch
    if unfence:
        hb = R("BrokerHeartbeatRequest")(
            broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=epoch
        )
        resp = await ctl.request(hb)
        assert (resp.error_code, resp.is_fenced) == (0, False)
    return epoch


async def metadata_brokers(client: KafkaRpcClient) -> list[int]:
    md = await client.request(MD.MetadataRequest(topics=()))
    return [b.node_id for b in md.brokers]


async def unregister(client: KafkaRpcClient, broker_id: int):
    return await client.request(R("UnregisterBrokerRequest")(broker_id=broker_id))


def unregister_records(server) -> list[tuple[int, int]]:
    """(BrokerId, BrokerEpoch) of every UnregisterBrokerRecord in the node's metadata log."""
    log = server.raft.log
    out = []
    for batch in log.batches(log.start_offset, log.end_offset):
        if batch.is_control:
            continue
        for value in batch.records:
            rec, _ = codec.decode_record(value)
            if type(rec).__spec_name__ == "UnregisterBrokerRecord":
                out.append((rec.broker_id, rec.broker_epoch))
    return out


@pytest.fixture
async def combined(tmp_path):
    running = await start_server(tmp_path, **SLOW_FENCING)
    clients: list[KafkaRpcClient] = []
    try:
        await asyncio.wait_for(running.server.broker_lifecycle.unfenced.wait(), 3 * TIMEOUT)
        for name in ("PLAINTEXT", "CONTROLLER"):
            clients.append(
                await KafkaRpcClient.connect(
                    f"127.0.0.1:{running.port(name)}", request_timeout=TIMEOUT
                )
            )
        yield running, clients[0], clients[1]
    finally:
        for c in clients:
            await c.close()
        await running.stop()


# ------------------------------------------------------------------ one combined node
async def test_unregister_on_both_listeners_of_the_active_controller(combined):
    running, broker, ctl = combined
    server = running.server
    cid = server.cluster_id
    for client in (broker, ctl):
        assert client.server_versions[64] == (0, 0)
        assert client.server_versions[60] == (0, 2)
    e100 = await register_fake(ctl, 100, cid, unfence=True)
    e101 = await register_fake(ctl, 101, cid, unfence=False)
    assert await metadata_brokers(broker) == [1, 100]  # 101 is fenced

    # on the controller listener: answered after commit, so this node's image is already new
    resp = await unregister(ctl, 100)
    assert (resp.error_code, resp.error_message) == (0, None)
    assert 100 not in server.controller.image.brokers
    assert await metadata_brokers(broker) == [1]
    dc = await broker.request(DC.DescribeClusterRequest(include_fenced_brokers=True))
    assert [(b.broker_id, b.is_fenced) for b in dc.brokers] == [(1, False), (101, True)]

    # on the broker listener of the same node: the local active controller, no forwarding
    resp = await unregister(broker, 101)
    assert (resp.error_code, resp.error_message) == (0, None)
    assert sorted(server.controller.image.brokers) == [1]
    assert unregister_records(server) == [(100, e100), (101, e101)]

    for client in (ctl, broker):
        resp = await unregister(client, 100)
        assert resp.error_code == E.BROKER_ID_NOT_REGISTERED
        assert resp.error_message == "Broker ID 100 is not currently registered"
    assert len(unregister_records(server)) == 2  # the errors wrote nothing

    # the old registration's epoch is stale now; the id may register again with a new one
    hb = R("BrokerHeartbeatRequest")(broker_id=100, broker_epoch=e100, current_metadata_offset=0)
    assert (await ctl.request(hb)).error_code == E.STALE_BROKER_EPOCH
    assert await register_fake(ctl, 100, cid, unfence=True) > e101
    assert await metadata_brokers(broker) == [1, 100]


async def test_describe_cluster_on_both_listeners(combined):
    running, broker, ctl = combined
    server = running.server
    cid = server.cluster_id
    await register_fake(ctl, 100, cid, unfence=True)
    await register_fake(ctl, 101, cid, unfence=False)
    md = await broker.request(MD.MetadataRequest(topics=()))

    for version in (0, 1, 2):
        dc = await broker.request(DC.DescribeClusterRequest(), version=version)
        assert (dc.error_code, dc.error_message, dc.cluster_id) == (0, None, cid)
        assert dc.controller_id == md.controller_id == 1
        assert [(b.broker_id, b.host, b.port, b.rack) for b in dc.brokers] == [
            (b.node_id, b.host, b.port, b.rack) for b in md.brokers
        ]
        assert [b.broker_id for b in dc.brokers] == [1, 100]
        assert dc.brokers[1].rack == "rack-a" and dc.brokers[1].port == 19100
        assert dc.cluster_authorized_operations == -(1 << 31)
    dc = await broker.request(
        DC.DescribeClusterRequest(include_cluster_authorized_operations=True,
                                  include_fenced_brokers=True), version=2)  # fmt: skip
    assert [(b.broker_id, b.is_fenced) for b in dc.brokers] == [(1, False), (100, False),
                                                                 (101, True)]  # fmt: skip
    assert dc.cluster_authorized_operations == CLUSTER_AUTHORIZED_OPERATIONS == 8096

    # the controller listener lists the controllers (KIP-919): this node, at its bound address
    dc = await ctl.request(DC.DescribeClusterRequest(endpoint_type=2), version=1)
    assert (dc.error_code, dc.endpoint_type, dc.cluster_id, dc.controller_id) == (0, 2, cid, 1)
    assert [(b.broker_id, b.host, b.port, b.rack) for b in dc.brokers] == [
        (1, "127.0.0.1", running.port("CONTROLLER"), None)
    ]

    # Kafka's endpoint-type checks
    cases = [
        (broker, 1, 2, E.MISMATCHED_ENDPOINT_TYPE,
         "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
         "type CONTROLLER"),
        (ctl, 2, 1, E.MISMATCHED_ENDPOINT_TYPE,
         "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of "
         "type BROKER"),
        (broker, 1, 3, E.UNSUPPORTED_ENDPOINT_TYPE, "Unsupported endpoint type 3"),
        (ctl, 2, 0, E.UNSUPPORTED_ENDPOINT_TYPE, "Unsupported endpoint type 0"),
        (ctl, 0, 1, E.INVALID_REQUEST,  # v0 means brokers: never served by a controller
         "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of "
         "type BROKER"),
    ]  # fmt: skip
    for client, version, endpoint_type, code, message in cases:
        dc = await client.request(DC.DescribeClusterRequest(endpoint_type=endpoint_type),
                                  version=version)  # fmt: skip
        assert (dc.error_code, dc.error_message, dc.brokers) == (code, message, ())


# ------------------------------------------------------------------ forwarding
async def test_broker_only_node_forwards_unregister_to_the_controller(tmp_path):
    ctl_port = _free_port()
    voters = f"1@127.0.0.1:{ctl_port}"
    controller = await start_server(
        tmp_path / "c",
        **{"listeners": f"CONTROLLER://127.0.0.1:{ctl_port}", "process.roles": "controller",
           "controller.quorum.voters": voters, **SLOW_FENCING},
    )  # fmt: skip
    broker = None
    clients: list[KafkaRpcClient] = []
    try:
        cid = controller.server.cluster_id
        broker = await start_server(
            tmp_path / "b",
            **{"listeners": "PLAINTEXT://127.0.0.1:0", "process.roles": "broker",
               "node.id": "2", "controller.quorum.voters": voters, "cluster.id": cid},
        )  # fmt: skip
        await asyncio.wait_for(broker.server.broker_lifecycle.unfenced.wait(), 3 * TIMEOUT)
        ctl = await KafkaRpcClient.connect(f"127.0.0.1:{ctl_port}", request_timeout=TIMEOUT)
        clients.append(ctl)
        bc = await KafkaRpcClient.connect(f"127.0.0.1:{broker.port()}", request_timeout=TIMEOUT)
        clients.append(bc)
        epoch = await register_fake(ctl, 100, cid, unfence=True)

        async def listed():
            return await metadata_brokers(bc) == [2, 100]

        await until(listed, "the broker-only node's image to list broker 100",
                    timeout=3 * TIMEOUT)  # fmt: skip
        dc = await bc.request(DC.DescribeClusterRequest())
        assert [b.broker_id for b in dc.brokers] == [2, 100] and dc.controller_id == 2

        resp = await unregister(bc, 100)  # forwarded to node 1's controller listener
        assert (resp.error_code, resp.error_message) == (0, None)
        assert 100 not in controller.server.controller.image.brokers
        assert unregister_records(controller.server) == [(100, epoch)]

        async def gone():
            return await metadata_brokers(bc) == [2]

        await until(gone, "the broker-only node's image to drop broker 100",
                    timeout=3 * TIMEOUT)  # fmt: skip
        dc = await bc.request(DC.DescribeClusterRequest(include_fenced_brokers=True))
        assert [b.broker_id for b in dc.brokers] == [2]
        resp = await unregister(bc, 100)
        assert resp.error_code == E.BROKER_ID_NOT_REGISTERED
        assert resp.error_message == "Broker ID 100 is not currently registered"

        # the controller-only node's controller listener: controllers, leader 1
        dc = await ctl.request(DC.DescribeClusterRequest(endpoint_type=2))
        assert (dc.error_code, dc.controller_id) == (0, 1)
        assert [(b.broker_id, b.port) for b in dc.brokers] == [(1, ctl_port)]
    finally:
        for c in clients:
            await c.close()
        if broker is not None:
            await broker.stop()
        await controller.stop()


async def test_no_active_controller_not_controller_and_request_timed_out(tmp_path):
    """Voter 1 of two, voter 2 never started: no leader. Its controller listener answers
    NOT_CONTROLLER; a broker-only node whose controller went away after it started (it starts
    only once caught up, as Kafka's broker) answers REQUEST_TIMED_OUT."""
    port, other = _free_port(), _free_port()
    voter = await start_server(
        tmp_path / "v",
        **{"listeners": f"CONTROLLER://127.0.0.1:{port}", "process.roles": "controller",
           "controller.quorum.voters": f"1@127.0.0.1:{port},2@127.0.0.1:{other}"},
    )  # fmt: skip
    controller = broker = None
    try:
        client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", request_timeout=TIMEOUT)
        try:
            resp = await unregister(client, 1)
            assert resp.error_code == E.NOT_CONTROLLER and resp.error_message
            dc = await client.request(DC.DescribeClusterRequest(endpoint_type=2))
            assert dc.error_code == 0 and dc.controller_id == -1  # no leader known
            assert [(b.broker_id, b.port) for b in dc.brokers] == [(1, port), (2, other)]
        finally:
            await client.close()
        ctl_port = _free_port()
        voters = f"9@127.0.0.1:{ctl_port}"
        controller = await start_server(
            tmp_path / "c",
            **{"listeners": f"CONTROLLER://127.0.0.1:{ctl_port}", "process.roles": "controller",
               "node.id": "9", "controller.quorum.voters": voters},
        )  # fmt: skip
        broker = await start_server(
            tmp_path / "b",
            **{"listeners": "PLAINTEXT://127.0.0.1:0", "process.roles": "broker",
               "controller.quorum.voters": voters, "cluster.id": controller.server.cluster_id,
               "controller.quorum.request.timeout.ms": "300"},
            )  # fmt: skip
        await controller.stop()
        controller = None
        client = await KafkaRpcClient.connect(f"127.0.0.1:{broker.port()}", request_timeout=TIMEOUT)
        try:
            resp = await unregister(client, 1)
            assert resp.error_code == E.REQUEST_TIMED_OUT and resp.error_message
        finally:
            await client.close()
    finally:
        for running in (broker, controller):
            if running is not None:
                await running.stop()
        await voter.stop()
