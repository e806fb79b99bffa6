"""The oldest pinned 4.x broker (4.0.2, metadata.version 7-25) on a kafka-rpc controller: it
registers and is unfenced, creates a topic through Envelope, produces idempotently with
producer ids from our AllocateProducerIds, consumes with a consumer group and takes a topic
config. The newest release runs the whole scenario (``test_kafka_broker.py``); this module
keeps to what differs by release: the broker's request versions and its features."""

from __future__ import annotations

import time

import pytest

from tests.kafka.test_kafka_broker import STEP, _describe, _until, running_cluster

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, kafka_oldest):
    with running_cluster(tmp_path_factory.mktemp("kafka-broker-oldest"), kafka_oldest) as c:
        yield c


def test_a_4_0_broker_serves_clients(cluster):
    from confluent_kafka import Consumer, Producer

    assert "Kafka version: 4.0.2" in cluster.broker.log_text()
    out = cluster.tool("kafka-topics", "--create", "--topic", "old", "--partitions", "2").stdout
    assert "Created topic old" in out, out
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                  "enable.idempotence": True})  # fmt: skip
    for i in range(20):
        p.produce("old", key=str(i % 2).encode(), value=f"m-{i}".encode())
    assert p.flush(STEP) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-old",
                  "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        c.subscribe(["old"])
        seen = set()
        deadline = time.monotonic() + STEP
        while len(seen) < 20 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                seen.add(m.value().decode())
    finally:
        c.close()
    assert seen == {f"m-{i}" for i in range(20)}
    cluster.tool("kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", "old",
                 "--add-config", "retention.ms=86400000")
    _until(lambda: _describe(cluster, "topics", "old").get("retention.ms") == "86400000",
           "the topic config on the 4.0 broker")  # fmt: skip
    m = cluster.metrics()
    for api in ("BrokerRegistration", "Envelope", "CreateTopics", "AllocateProducerIds",
                "IncrementalAlterConfigs"):  # fmt: skip
        assert m.get(api, 0) > 0, (api, m)
    assert "controller responded unsupported version" not in cluster.broker.log_text()
