"""Features over real sockets on one in-process node (combined mode): ApiVersions carries
SupportedFeatures / FinalizedFeatures / FinalizedFeaturesEpoch on both listeners as Kafka's
controller and broker do; UpdateFeatures answers on the controller listener and is forwarded
from the broker listener; a node that formatted its empty directory Kafka-compatible refuses
the chunk commands until UpdateFeatures finalizes our feature."""

from __future__ import annotations

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller.features import (
    BOOTSTRAP_METADATA_VERSION,
    CHUNKS_VERSION,
    default_feature_levels,
)
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.controller.test_features import update_features_request
from tests.integration.conftest import TIMEOUT, start_server
from tests.waiting import until

pytestmark = pytest.mark.integration

R = codec.message_class
UF = codec.module("UpdateFeaturesRequest")


def _finalized(resp) -> dict[str, int]:
    assert all(f.min_version_level == f.max_version_level for f in resp.finalized_features)
    return {f.name: f.max_version_level for f in resp.finalized_features}


async def test_api_versions_features_and_update_features(tmp_path):
    running = await start_server(tmp_path)
    ctl = running.server.controller
    controller = broker = None
    try:
        controller = await KafkaRpcClient.connect(f"127.0.0.1:{running.port('CONTROLLER')}")
        broker = await KafkaRpcClient.connect(f"127.0.0.1:{running.port('PLAINTEXT')}")
        av = R("ApiVersionsRequest")(client_software_name="t", client_software_version="1")

        async def bootstrapped():
            r = await controller.request(av, version=4)
            return r if "metadata.version" in _finalized(r) else None

        r4 = await until(bootstrapped, "the bootstrap records", timeout=3 * TIMEOUT)
        want = {k: v for k, v in default_feature_levels().items() if v > 0}
        assert _finalized(r4) == want
        assert r4.finalized_features_epoch == ctl.features_epoch >= 0
        supported = {f.name: (f.min_version, f.max_version) for f in r4.supported_features}
        assert supported["metadata.version"] == (7, BOOTSTRAP_METADATA_VERSION)
        assert supported[CHUNKS_VERSION] == (0, 1) and supported["kraft.version"] == (0, 1)
        # below v4 the features whose minimum is 0 are left out (KAFKA-17492)
        r3 = await controller.request(av, version=3)
        assert [f.name for f in r3.supported_features] == ["metadata.version"]
        assert _finalized(r3) == want
        # v0-2 have no feature fields at all
        assert (await controller.request(av, version=2)).api_keys == r4.api_keys
        # the broker listener: the same features, the epoch is the image's offset
        rb = await broker.request(av, version=4)
        assert _finalized(rb) == want and rb.finalized_features_epoch >= r4.finalized_features_epoch
        assert 57 in {k.api_key for k in rb.api_keys} and 57 in {k.api_key for k in r4.api_keys}

        # refused: nothing changes, the message names the feature
        bad = await controller.request(update_features_request(("group.version", 0, 1)), version=2)
        assert bad.error_code == ErrorCode.INVALID_UPDATE_VERSION
        assert "feature group.version" in bad.error_message
        # through the broker listener (forwarded), v1 with per-feature results
        ok = await broker.request(update_features_request(("group.version", 0, 2)), version=1)
        assert (ok.error_code, [(x.feature, x.error_code) for x in ok.results]) == (
            0, [("group.version", 0)])
        assert "group.version" not in ctl.image.features  # answered once committed
        after = await controller.request(av, version=4)
        assert "group.version" not in _finalized(after)
        assert after.finalized_features_epoch > r4.finalized_features_epoch
        ok = await controller.request(update_features_request(("group.version", 1, 1)), version=2)
        assert ok.error_code == 0 and ok.results == () and ctl.image.features["group.version"] == 1
    finally:
        for c in (controller, broker):
            if c is not None:
                await c.close()
        await running.stop()


async def test_a_kafka_compatible_node_gates_chunks_until_the_feature_is_finalized(tmp_path):
    running = await start_server(tmp_path, **{"kafka.compatible": "true"})
    ctl = running.server.controller
    client = None
    try:
        await until(lambda: ctl.is_active and 1 in ctl.image.brokers
                    and not ctl.image.brokers[1].fenced, "broker 1 unfenced",
                    timeout=3 * TIMEOUT)  # fmt: skip
        assert CHUNKS_VERSION not in ctl.image.features
        client = await KafkaRpcClient.connect(f"127.0.0.1:{running.port('CONTROLLER')}")
        CT = codec.module("CreateTopicsRequest")
        created = await client.request(R("CreateTopicsRequest")(topics=(
            CT.CreatableTopic(name="t", num_partitions=1, replication_factor=1),),
            timeout_ms=5000))  # fmt: skip
        assert created.topics[0].error_code == 0
        CC = codec.module("CreateChunksRequest")
        req = R("CreateChunksRequest")(topic_partitions=(CC.CreateChunksTopicPartition(
            topic_name="t", partition_id=0, broker_ids=(1,), start_offset=10,
            prev_stop_offset=9, start_timestamp=-1),))  # fmt: skip
        r = (await client.request(req)).results[0]
        assert r.error_code == ErrorCode.UNSUPPORTED_VERSION and CHUNKS_VERSION in r.error_message
        up = R("UpdateFeaturesRequest")(feature_updates=(UF.FeatureUpdateKey(
            feature=CHUNKS_VERSION, max_version_level=1, upgrade_type=1),))  # fmt: skip
        assert (await client.request(up, version=2)).error_code == 0
        assert (await client.request(req)).results[0].error_code == 0
        assert ctl.image.topic_by_name("t").partitions[0].start_offset == 10
    finally:
        if client is not None:
            await client.close()
        await running.stop()

