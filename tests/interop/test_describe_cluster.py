"""Third-party clients against ``kafka-rpc serve``: kafka-python's ``describe_cluster()`` (a
DescribeCluster v2 request with IncludeFencedBrokers), confluent-kafka's ``describe_cluster()``
(librdkafka 2.16 answers it with a Metadata v10 request, not DescribeCluster) and kio's
independent decoding of our DescribeCluster v0-2 and UnregisterBroker v0 bytes. A fake broker 100
registered (fenced) through the controller listener is listed by kafka-python as fenced; another
one is gone once UnregisterBroker answered."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.controller.harness import broker_features
from tests.integration.conftest import wait_broker_unfenced
from tests.integration.test_cli import ServeProcess
from tests.interop.test_clients import _kio_decode, _raw_exchange

pytestmark = [pytest.mark.interop, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

R = codec.message_class
BR = codec.module("BrokerRegistrationRequest")
FAKE = 100
CLUSTER_OPERATIONS = ["CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
                      "ALTER_CONFIGS", "IDEMPOTENT_WRITE"]  # fmt: skip


async def _request(port: int, msg):
    client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", request_timeout=10)
    try:
        return await client.request(msg)
    finally:
        await client.close()


def register(srv, cid: str, broker_id: int) -> None:
    """Register a fake broker (fenced, endpoint 127.0.0.1:19000+id) on the controller listener."""
    reg = R("BrokerRegistrationRequest")(
        broker_id=broker_id,
        cluster_id=cid,
        incarnation_id=uuid.uuid4(),
        log_dirs=(uuid.UUID(int=(broker_id + 1) << 64),),
        listeners=(
            BR.Listener(
                name="PLAINTEXT", host="127.0.0.1", port=19000 + broker_id, security_protocol=0
            ),
        ),  # fmt: skip
        features=broker_features(),  # fmt: skip
        rack="rack-x",
    )
    resp = asyncio.run(_request(srv.ports["CONTROLLER"], reg))
    assert resp.error_code == 0, resp


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``(serve process, cluster id)`` with node 1 unfenced and fake broker 100 registered."""
    srv = ServeProcess(tmp_path_factory.mktemp("describe-cluster"))
    try:
        wait_broker_unfenced(srv.bootstrap)
        (line,) = [ln for ln in srv.lines if ln.startswith("cluster id ")]
        cid = line.split()[2].rstrip(",")
        register(srv, cid, FAKE)
        yield srv, cid
    finally:
        srv.stop()


def test_kafka_python_describe_cluster(cluster):
    from kafka.admin import KafkaAdminClient

    srv, cid = cluster
    admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
    try:
        got = admin.describe_cluster()
        assert got["cluster_id"] == cid and got["controller_id"] == 1
        assert got["brokers"] == [
            {"broker_id": 1, "host": "127.0.0.1", "port": srv.ports["PLAINTEXT"], "rack": None,
             "is_fenced": False},
            {"broker_id": FAKE, "host": "127.0.0.1", "port": 19100, "rack": "rack-x",
             "is_fenced": True},
        ]  # fmt: skip
        assert sorted(got["authorized_operations"]) == sorted(CLUSTER_OPERATIONS)
    finally:
        admin.close()


def test_confluent_describe_cluster(cluster):
    from confluent_kafka.admin import AdminClient

    srv, cid = cluster
    admin = AdminClient({"bootstrap.servers": srv.bootstrap, "socket.timeout.ms": 5000})
    desc = admin.describe_cluster(request_timeout=10).result(timeout=15)
    assert desc.cluster_id == cid
    assert desc.controller.id == 1
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [
        (1, "127.0.0.1", srv.ports["PLAINTEXT"])  # the fenced fake broker is not listed
    ]


async def test_kio_decodes_describe_cluster_and_unregister_broker(cluster):
    srv, cid = cluster
    dc = codec.message_class("DescribeClusterRequest")
    for version in (0, 1, 2):
        body = await _raw_exchange(srv.ports["PLAINTEXT"], 60, version, dc())
        entity = _kio_decode(60, version, body)
        assert (entity.error_code, entity.cluster_id, entity.controller_id) == (0, cid, 1)
        assert [b.broker_id for b in entity.brokers] == [1]
    body = await _raw_exchange(srv.ports["CONTROLLER"], 60, 1, dc(endpoint_type=2))
    entity = _kio_decode(60, 1, body)
    assert (entity.error_code, entity.endpoint_type, entity.controller_id) == (0, 2, 1)
    assert [(b.broker_id, b.port) for b in entity.brokers] == [(1, srv.ports["CONTROLLER"])]

    unreg = codec.message_class("UnregisterBrokerRequest")
    body = await _raw_exchange(srv.ports["PLAINTEXT"], 64, 0, unreg(broker_id=999))
    entity = _kio_decode(64, 0, body)
    assert entity.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert entity.error_message == "Broker ID 999 is not currently registered"


def test_unregistered_broker_leaves_kafka_python_describe_cluster(cluster):
    from kafka.admin import KafkaAdminClient

    srv, cid = cluster
    register(srv, cid, 101)
    admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
    try:
        assert 101 in [b["broker_id"] for b in admin.describe_cluster()["brokers"]]
        unreg = R("UnregisterBrokerRequest")(broker_id=101)
        assert asyncio.run(_request(srv.ports["PLAINTEXT"], unreg)).error_code == 0
        assert 101 not in [b["broker_id"] for b in admin.describe_cluster()["brokers"]]
    finally:
        admin.close()
