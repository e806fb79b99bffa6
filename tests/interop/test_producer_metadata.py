"""Real producers bootstrap their metadata from `kafka-rpc serve`: kafka-python's and
aiokafka's producers see a topic created through CreateTopics, with its partitions, and
kafka-python's metadata carries the topic id our Metadata answers (KIP-516). Sending data is not
expected to work: the server holds no classic partition data."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from tests.integration.conftest import TIMEOUT, wait_broker_unfenced
from tests.integration.test_cli import ServeProcess

pytestmark = pytest.mark.interop

TOPIC = "producer-metadata"


@pytest.fixture(scope="module")
def topic_on_server(tmp_path_factory):
    srv = ServeProcess(tmp_path_factory.mktemp("producers"))
    try:
        wait_broker_unfenced(srv.bootstrap)
        topic_id = asyncio.run(_create(srv.bootstrap))
        yield srv, topic_id
    finally:
        srv.stop()


async def _create(bootstrap: str) -> uuid.UUID:
    client = await KafkaRpcClient.connect(bootstrap, request_timeout=TIMEOUT)
    try:
        m = codec.module("CreateTopicsRequest")
        req = m.CreateTopicsRequest(
            topics=(m.CreatableTopic(name=TOPIC, num_partitions=3, replication_factor=1),),
            timeout_ms=5000,
        )
        resp = await client.request(req)
        (t,) = resp.topics
        assert t.error_code == 0, t
        md = codec.module("MetadataRequest")
        meta = await client.request(
            md.MetadataRequest(topics=(md.MetadataRequestTopic(name=TOPIC),)), version=12
        )
        (mt,) = meta.topics
        assert mt.error_code == 0 and mt.topic_id == t.topic_id != uuid.UUID(int=0), mt
        return t.topic_id
    finally:
        await client.close()


def test_kafka_python_producer_sees_the_topic_and_its_id(topic_on_server):
    from kafka import KafkaProducer

    srv, topic_id = topic_on_server
    producer = KafkaProducer(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000,
                             max_block_ms=10000)  # fmt: skip
    try:
        assert producer.partitions_for(TOPIC) == {0, 1, 2}
        # kafka-python keeps the id from MetadataResponse v10+ (ClusterMetadata.topic_id)
        got = producer._metadata.topic_id(TOPIC)
        assert got is not None and uuid.UUID(str(got)) == topic_id, (got, topic_id)
    finally:
        producer.close(timeout=5)


async def test_aiokafka_producer_sees_the_topic(topic_on_server):
    from aiokafka import AIOKafkaProducer

    srv, _ = topic_on_server
    producer = AIOKafkaProducer(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
    await asyncio.wait_for(producer.start(), TIMEOUT)
    try:
        parts = await asyncio.wait_for(producer.partitions_for(TOPIC), TIMEOUT)
        assert parts == {0, 1, 2}
    finally:
        await asyncio.wait_for(producer.stop(), TIMEOUT)
