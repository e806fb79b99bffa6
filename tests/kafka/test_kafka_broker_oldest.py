"""The oldest pinned 4.x broker (4.0.2, metadata.version 7-25) on a kafka-rpc controller: it
registers and is unfenced, creates a topic through Envelope, produces idempotently with
producer ids from our AllocateProducerIds, consumes with a consumer group and takes a topic
config. First, while the controller has our own features finalized, the broker is refused with
UNSUPPORTED_VERSION naming the feature, until Kafka's kafka-features takes them to 0. The newest
release runs the whole scenario (``test_kafka_broker.py``); this module keeps to what differs by
release: the broker's request versions and its features."""

from __future__ import annotations

import time

import pytest

from tests.kafka import peer
from tests.kafka.test_kafka_broker import STEP, Cluster, _describe, running_cluster
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka


def _refused_then_admitted(c: Cluster) -> None:
    """Our controller at the broker's newest metadata.version, but with our own features
    finalized (not --kafka-compatible): the broker does not list them, so it is refused until
    Kafka's own tool (4.0.2) takes them to 0 through our controller."""
    c.ctrl.format(c.cluster_id, "--release-version", "4.0-IV3")
    c.ctrl.start()
    c.ctrl.wait_started(STEP)
    c.broker.format(c.cluster_id)
    c.broker.start()
    c.broker.wait_for_log(r"Unable to register broker \d+ because the controller returned "
                          r"error UNSUPPORTED_VERSION", STEP)  # fmt: skip
    c.refusal = c.ctrl.wait_for_log(r"broker \d+ registration refused: (.*)", STEP).group(1)
    c.downgrade = peer.run_tool(
        c.version, "kafka-features", "--bootstrap-controller", f"127.0.0.1:{c.ctrl_port}",
        "downgrade", "--feature", "kafka_rpc.chunks.version=0",
        "--feature", "kafka_rpc.diskless.version=0", timeout=STEP,
    ).stdout  # fmt: skip
    c.broker.wait_for_log(r"Transitioning from RECOVERY to RUNNING", STEP)
    c.broker.wait_for_log(r"Kafka Server started", STEP)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, kafka_oldest):
    with running_cluster(tmp_path_factory.mktemp("kafka-broker-oldest"), kafka_oldest,
                         _refused_then_admitted) as c:  # fmt: skip
        yield c


def test_a_broker_is_refused_while_our_features_are_finalized(cluster):
    """ClusterControlManager.processRegistrationFeature: a finalized feature the broker does not
    list is checked as 0..0, so UNSUPPORTED_VERSION with Kafka's message naming it; once
    UpdateFeatures (from Kafka 4.0.2's kafka-features) took our features to 0, the broker's
    next try registers."""
    assert cluster.refusal == (
        "UNSUPPORTED_VERSION (Unable to register because the broker does not support finalized "
        "version 1 of kafka_rpc.chunks.version. The broker wants a version between 0 and 0, "
        "inclusive.)"
    )
    assert "kafka_rpc.chunks.version was downgraded to 0." in cluster.downgrade, cluster.downgrade
    assert "kafka_rpc.diskless.version was downgraded to 0." in cluster.downgrade
    assert "The broker has been unfenced" in cluster.broker.log_text()


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
    wait_until(lambda: _describe(cluster, "topics", "old").get("retention.ms") == "86400000",
               "the topic config on the 4.0 broker", timeout=STEP)  # fmt: skip
    m = cluster.metrics()
    for api in ("BrokerRegistration", "Envelope", "CreateTopics", "AllocateProducerIds",
                "IncrementalAlterConfigs", "UpdateFeatures"):  # fmt: skip
        assert m.get(api, 0) > 0, (api, m)
    assert "controller responded unsupported version" not in cluster.broker.log_text()
