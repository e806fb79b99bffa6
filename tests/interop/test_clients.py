"""Third-party Kafka clients against `kafka-rpc serve` (subprocess)."""

import asyncio
import struct
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec, frames

pytestmark = [pytest.mark.interop, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def test_confluent_admin(served):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": served.bootstrap, "socket.timeout.ms": 5000})
    md = admin.list_topics(timeout=10)
    assert md.cluster_id and md.controller_id == 1
    assert list(md.brokers) == [1]
    assert md.brokers[1].port == served.ports["PLAINTEXT"]
    desc = admin.describe_cluster(request_timeout=10).result(timeout=10)
    assert desc.cluster_id == md.cluster_id
    assert [n.id for n in desc.nodes] == [1]


def test_kafka_python_admin(served):
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=served.bootstrap, request_timeout_ms=10000)
    try:
        desc = admin.describe_cluster()
        assert desc["controller_id"] == 1
        assert [b["broker_id"] for b in desc["brokers"]] == [1]
        assert desc["brokers"][0]["port"] == served.ports["PLAINTEXT"]
    finally:
        admin.close()


async def test_aiokafka_bootstrap(served):
    from aiokafka.client import AIOKafkaClient

    client = AIOKafkaClient(bootstrap_servers=served.bootstrap, request_timeout_ms=10000)
    try:
        await asyncio.wait_for(client.bootstrap(), 15)
        assert [b.nodeId for b in client.cluster.brokers()] == [1]
    finally:
        await client.close()


# ------------------------------------------------------------------ kio decodes what we send
async def _raw_exchange(port, api_key, version, msg):
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    w.write(
        frames.frame(
            frames.request_header_bytes(api_key, version, 1, "kio-test")
            + codec.encode(msg, version)
        )
    )
    n = struct.unpack(">i", await asyncio.wait_for(r.readexactly(4), 5))[0]
    payload = await asyncio.wait_for(r.readexactly(n), 5)
    w.close()
    hv = frames.response_header_version(api_key, version)
    return payload[4 + hv :]  # header v1 has an empty tagged section (1 byte)


def _kio_decode(api_key, version, body):
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    schema = load_response_schema(api_key, version)
    entity, size = entity_reader(schema)(body, 0)
    assert size == len(body)
    return entity


TID = uuid.UUID("0123456789abcdef0123456789abcdef")


def _requests():
    av = codec.message_class("ApiVersionsRequest")
    md = codec.message_class("MetadataRequest")
    mdt = codec.module("MetadataRequest").MetadataRequestTopic
    fc = codec.message_class("FindCoordinatorRequest")
    for v in range(0, 5):
        yield 18, v, av(client_software_name="kio", client_software_version="1")
    for v in range(0, 13):  # kio 0.6.5 knows Metadata up to v12
        yield 3, v, md(topics=(mdt(name="t"),))
        yield 3, v, md(topics=None if v else ())
    for v in range(0, 7):  # kio knows FindCoordinator up to v6 (no BATCH)
        if v < 4:
            yield 10, v, fc(key="g", key_type=0) if v else fc(key="g")
        else:
            yield 10, v, fc(key_type=0, coordinator_keys=("g", "h"))


async def test_kio_decodes_our_responses(served):
    from kio.index import load_response_schema

    checked = 0
    for api_key, version, msg in _requests():
        try:
            load_response_schema(api_key, version)
        except Exception:  # noqa: BLE001 - kio does not know this version
            continue
        body = await _raw_exchange(served.ports["PLAINTEXT"], api_key, version, msg)
        entity = _kio_decode(api_key, version, body)
        assert entity is not None
        checked += 1
    assert checked >= 20


async def test_our_client_find_coordinator_batch(served):
    from kafka_rpc.protocol.uuids import uuid_text

    fc = codec.message_class("FindCoordinatorRequest")
    short = uuid_text(TID)
    keys = (f"read:{short}:0", f"write:{TID}:7", "read:nope:1", f"write:{short}:-1")
    client = await KafkaRpcClient.connect(served.bootstrap, client_id="t", request_timeout=5)
    try:
        resp = await client.request(fc(key_type=3, coordinator_keys=keys))
        got = [(c.key, c.error_code, c.node_id, c.port) for c in resp.coordinators]
        port = served.ports["PLAINTEXT"]
        assert got == [
            (keys[0], 0, 1, port),
            (keys[1], 0, 1, port),
            (keys[2], 42, -1, -1),
            (keys[3], 42, -1, -1),
        ]
        resp = await client.request(fc(key_type=0, coordinator_keys=("group",)))
        assert [(c.error_code, c.node_id) for c in resp.coordinators] == [(15, -1)]
        resp = await client.request(fc(key="txn", key_type=1), version=3)
        assert (resp.error_code, resp.node_id) == (15, -1)
        md = codec.message_class("MetadataRequest")
        mdt = codec.module("MetadataRequest").MetadataRequestTopic
        topics = (mdt(name="x"), mdt(topic_id=TID, name=None))
        resp = await client.request(md(topics=topics, allow_auto_topic_creation=False))
        assert [t.error_code for t in resp.topics] == [3, 100]
        # auto.create.topics.enable (Kafka's default): a missing name is being created
        resp = await client.request(md(topics=topics))
        assert [t.error_code for t in resp.topics] == [5, 100]
        # pipelined requests matched by correlation id
        many = await asyncio.gather(
            *(client.request(fc(key_type=0, coordinator_keys=(str(i),))) for i in range(50))
        )
        assert [r.coordinators[0].key for r in many] == [str(i) for i in range(50)]
    finally:
        await client.close()


async def test_client_falls_back_and_reconnects(served):
    client = await KafkaRpcClient.connect(served.bootstrap, request_timeout=5)
    try:
        client._proto.transport.abort()
        av = codec.message_class("ApiVersionsRequest")
        resp = await client.request(
            av(client_software_name="a", client_software_version="1"), raise_on_error=True
        )
        assert resp.error_code == 0
        resp = await client.request(av(), version=4)  # empty software name -> INVALID_REQUEST
        assert resp.error_code == 42 and resp.api_keys == ()
    finally:
        await client.close()
