"""kafka_rpc.protocol.json_view without a JVM: the rules of Kafka's JSON converters on fixed
messages (tests/kafka/test_codec_oracle.py compares every shared message with Kafka's own)."""

from __future__ import annotations

import uuid

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import UnsupportedVersionError
from kafka_rpc.protocol.json_view import to_kafka_json
from kafka_rpc.protocol.primitives import METADATA_TOPIC_ID
from kafka_rpc.protocol.uuids import uuid_text


def test_uuid_is_kafkas_22_character_form():
    assert uuid_text(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert uuid_text(METADATA_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_fields_of_the_version_only_and_tagged_fields_only_when_not_default():
    m = codec.module("DescribeClusterResponse")
    msg = m.DescribeClusterResponse(cluster_id="c", brokers=(m.DescribeClusterBroker(broker_id=1),))
    v0 = to_kafka_json(msg, 0)
    assert "endpointType" not in v0 and v0["brokers"][0] == {
        "brokerId": 1, "host": "", "port": 0, "rack": None}  # fmt: skip
    assert to_kafka_json(msg, 1)["endpointType"] == 1
    a = codec.module("ApiVersionsResponse")
    assert "finalizedFeaturesEpoch" not in to_kafka_json(a.ApiVersionsResponse(), 3)
    assert to_kafka_json(a.ApiVersionsResponse(finalized_features_epoch=7), 3)[
        "finalizedFeaturesEpoch"] == 7  # fmt: skip


def test_bytes_as_base64_and_records_as_kafkas_write_does():
    f = codec.module("FetchResponse")
    part = f.PartitionData(records=b"\x00\xff")
    msg = f.FetchResponse(responses=(f.FetchableTopicResponse(topic="t", partitions=(part,)),))
    assert to_kafka_json(msg, 11)["responses"][0]["partitions"][0]["records"] == ""
    base64 = to_kafka_json(msg, 11, records="base64")["responses"][0]["partitions"][0]
    assert base64["records"] == "AP8="
    s = codec.module("SaslAuthenticateRequest")
    assert to_kafka_json(s.SaslAuthenticateRequest(auth_bytes=b"\xfb\xff"), 2) == {
        "authBytes": "+/8="}  # fmt: skip


def test_an_undefined_version_is_refused():
    with pytest.raises(UnsupportedVersionError):
        to_kafka_json(codec.message_class("DescribeClusterResponse")(), 99)
