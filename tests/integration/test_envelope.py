"""Envelope (58) on the controller listener of a running node, over real sockets, as an Apache
Kafka broker's ``ForwardingManager`` sends it: a forwarded CreateTopics is answered with the
inner response (its own correlation id and header) and creates the topic; each malformed
envelope gets Kafka's envelope error and changes nothing (``EnvelopeUtils``); with an
authorizer, a forwarding principal without CLUSTER_ACTION gets CLUSTER_AUTHORIZATION_FAILED
and a forwarded principal without CREATE gets the inner TOPIC_AUTHORIZATION_FAILED."""

from __future__ import annotations

import struct

import pytest

from kafka_rpc.client import KafkaRpcClient, decode_response
from kafka_rpc.handlers.envelope import serialize_principal
from kafka_rpc.protocol import codec, frames
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.security.authorizer import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafka_rpc.security.client import ClientSecurity
from tests.controller.harness import broker_features
from tests.integration.conftest import start_server
from tests.security.conftest import JAAS_PLAIN
from tests.waiting import until

pytestmark = pytest.mark.integration

R = codec.message_class
CT = codec.module("CreateTopicsRequest")
LOOPBACK = bytes([127, 0, 0, 1])
INNER_CORR = 4242


def create_topics_frame(name: str, version: int = 7, corr: int = INNER_CORR) -> bytes:
    """A client's CreateTopics request as a Kafka broker forwards it: header + body, no size."""
    req = R("CreateTopicsRequest")(
        topics=(CT.CreatableTopic(name=name, num_partitions=2, replication_factor=1),),
        timeout_ms=5000,
    )
    return frames.request_header_bytes(19, version, corr, "admin-client") + codec.encode(
        req, version
    )


def envelope(data: bytes, principal: bytes | None = None, address: bytes = LOOPBACK):
    return R("EnvelopeRequest")(
        request_data=data,
        request_principal=serialize_principal("User:ANONYMOUS") if principal is None else principal,
        client_host_address=address,
    )


def inner(resp, api_key: int, version: int):
    """(correlation id, decoded response) of an EnvelopeResponse's ResponseData."""
    corr = struct.unpack_from(">i", resp.response_data)[0]
    return corr, decode_response(api_key, version, resp.response_data)


def user_topics(image) -> dict:
    """The topics of ``image`` but the internal ones (``__diskless-metadata`` may be created by
    the controller's timer meanwhile)."""
    return {t.name: t for t in image.topics.values() if not t.name.startswith("__")}


async def until_active(server, timeout: float = 10.0) -> None:
    await until(lambda: server.controller.is_active and server.controller.image.brokers,
                "an active controller with a registered broker", timeout=timeout)  # fmt: skip


async def until_topic(server, name: str) -> None:
    await until(lambda: name in server.controller.image.topics_by_name, f"topic {name}")


async def barrier(c: KafkaRpcClient, server, name: str = "barrier"):
    """Create topic ``name`` through the controller ``c`` reaches and wait until it is in the
    committed image, then return that image. The metadata log is ordered: whatever an earlier
    request had written is committed before it, so what the image lacks, earlier requests did
    not write."""
    resp = await c.request(R("CreateTopicsRequest")(topics=(CT.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1),), timeout_ms=5000))  # fmt: skip
    assert resp.topics[0].error_code == 0, resp
    await until_topic(server, name)
    return server.controller.image


def without(image, name: str):
    """``image``'s brokers, user topics and configs, topic ``name`` left out."""
    topics = {n: t for n, t in user_topics(image).items() if n != name}
    configs = {k: v for k, v in image.configs.items() if k != (2, name)}
    return image.brokers, topics, configs


async def test_forwarded_create_topics_and_malformed_envelopes(tmp_path):
    running = await start_server(tmp_path)
    server = running.server
    try:
        await until_active(server)
        async with KafkaRpcClient(f"127.0.0.1:{running.port('CONTROLLER')}") as c:
            # a forwarded CreateTopics v7: the inner answer keeps the client's correlation id
            resp = await c.request(envelope(create_topics_frame("forwarded")))
            assert resp.error_code == 0, resp
            corr, ct = inner(resp, 19, 7)
            assert corr == INNER_CORR
            [t] = ct.topics
            assert (t.name, t.error_code, t.num_partitions) == ("forwarded", 0, 2)
            assert server.controller.image.topics_by_name.get("forwarded") == t.topic_id
            # and at an older, non-flexible version (request header v1, response header v0)
            resp = await c.request(envelope(create_topics_frame("old-client", 4, 7)))
            corr, ct = inner(resp, 19, 4)
            assert corr == 7 and ct.topics[0].error_code == 0
            before = server.controller.image

            async def refused(req, code):
                resp = await c.request(req)
                assert (resp.error_code, resp.response_data) == (code, None), resp

            data = create_topics_frame("never")
            await refused(envelope(data, principal=b"\x00\x07garbage"),
                          ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE)  # fmt: skip
            await refused(envelope(data, principal=b"\x00\x00\x01"),
                          ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE)  # fmt: skip
            await refused(envelope(data, address=b"\x7f\x00\x01"), ErrorCode.INVALID_REQUEST)
            # a header that does not parse, a body cut short: UNSUPPORTED_VERSION
            await refused(envelope(b"\x00\x13\x00"), ErrorCode.UNSUPPORTED_VERSION)
            await refused(envelope(data[:-9]), ErrorCode.UNSUPPORTED_VERSION)
            # a version this controller does not serve
            v99 = bytearray(data)
            v99[2:4] = (99).to_bytes(2, "big")  # the header's api version
            await refused(envelope(bytes(v99)), ErrorCode.UNSUPPORTED_VERSION)
            # an API that is never forwarded (Metadata)
            meta = frames.request_header_bytes(3, 12, 1, "c") + codec.encode(
                R("MetadataRequest")(topics=None), 12
            )
            await refused(envelope(meta), ErrorCode.INVALID_REQUEST)
            # nothing of those reached the metadata log (committed before the barrier if so)
            after = await barrier(c, server)
            assert "never" not in after.topics_by_name
            assert without(after, "barrier")[1] == user_topics(before)
    finally:
        await running.stop()


async def test_envelope_authorization(tmp_path):
    running = await start_server(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.jaas.config": JAAS_PLAIN,
        "sasl.mechanism.controller.protocol": "PLAIN",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    })  # fmt: skip
    server = running.server
    ctl = f"127.0.0.1:{running.port('CONTROLLER')}"
    try:
        await until_active(server, 15.0)
        data = create_topics_frame("guarded")
        alice = ClientSecurity(None, "PLAIN", "alice", "alice-secret")
        async with KafkaRpcClient(ctl, security=alice) as c:
            # alice is no broker: no CLUSTER_ACTION, so her envelope is refused outright
            resp = await c.request(envelope(data, serialize_principal("User:admin")))
            assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            assert resp.response_data is None
        admin = ClientSecurity(None, "PLAIN", "admin", "admin-secret")
        async with KafkaRpcClient(ctl, security=admin) as c:
            # the broker (admin) forwards for alice, who may not CREATE: the inner answer says so
            resp = await c.request(envelope(data, serialize_principal("User:alice")))
            assert resp.error_code == 0
            _, ct = inner(resp, 19, 7)
            assert ct.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            assert "guarded" not in server.controller.image.topics_by_name
            # once alice may CREATE on the cluster, the same forwarded request succeeds
            server.authorizer.add_acl("a1", AclBinding(
                ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:alice", "*",
                AclOperation.CREATE, AclPermissionType.ALLOW))  # fmt: skip
            resp = await c.request(envelope(data, serialize_principal("User:alice")))
            _, ct = inner(resp, 19, 7)
            assert ct.topics[0].error_code == 0, ct
            assert "guarded" in server.controller.image.topics_by_name
    finally:
        await running.stop()


async def test_bad_registrations_and_configs_change_nothing(tmp_path):
    """Over the socket, direct: a registration with another cluster id, one with a directory
    another broker registered, one with a reserved directory id; an IncrementalAlterConfigs
    with an unknown and with an invalid topic config (also through an Envelope). Each gets
    Kafka's code and nothing reaches the metadata log."""
    import uuid

    running = await start_server(tmp_path)
    server = running.server
    BR = codec.module("BrokerRegistrationRequest")
    IAC = codec.module("IncrementalAlterConfigsRequest")
    try:
        await until_active(server)
        own = server.controller.image.brokers[1].log_dirs[0]  # the node's own broker role's

        def reg(cluster_id, dirs):
            return R("BrokerRegistrationRequest")(
                broker_id=50, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
                listeners=(BR.Listener(name="PLAINTEXT", host="h", port=1, security_protocol=0),),
                features=broker_features(),
                rack=None, log_dirs=tuple(dirs))  # fmt: skip

        def alter(**cfg):
            return R("IncrementalAlterConfigsRequest")(resources=(IAC.AlterConfigsResource(
                resource_type=2, resource_name="t", configs=tuple(
                    IAC.AlterableConfig(name=k, config_operation=0, value=v)
                    for k, v in cfg.items())),))  # fmt: skip

        async with KafkaRpcClient(f"127.0.0.1:{running.port('CONTROLLER')}") as c:
            ct = await c.request(R("CreateTopicsRequest")(topics=(CT.CreatableTopic(
                name="t", num_partitions=1, replication_factor=1),), timeout_ms=5000))  # fmt: skip
            assert ct.topics[0].error_code == 0
            await until_topic(server, "t")
            before = server.controller.image
            end = server.controller.committed_offset
            cases = [
                (reg(server.cluster_id[::-1], [uuid.uuid4()]), ErrorCode.INCONSISTENT_CLUSTER_ID),
                (reg(server.cluster_id, [own]), ErrorCode.INVALID_REGISTRATION),
                (reg(server.cluster_id, [uuid.UUID(int=1)]), ErrorCode.INVALID_REGISTRATION),
            ]
            for req, code in cases:
                assert (await c.request(req)).error_code == code
            for cfg in ({"no.such.config": "1"}, {"retention.ms": "soon"}):
                resp = await c.request(alter(**cfg))
                assert resp.responses[0].error_code == ErrorCode.INVALID_CONFIG, resp
            data = frames.request_header_bytes(44, 1, 9, "admin") + codec.encode(
                alter(**{"no.such.config": "1"}), 1
            )
            resp = await c.request(envelope(data))
            _, inner_resp = inner(resp, 44, 1)
            assert inner_resp.responses[0].error_code == ErrorCode.INVALID_CONFIG
            assert "Unknown topic config name" in inner_resp.responses[0].error_message
            # nothing of those reached the metadata log (committed before the barrier if so; NoOps
            # may come meanwhile)
            img = await barrier(c, server)
            assert without(img, "barrier") == without(before, "barrier")
            assert server.controller.committed_offset > end
    finally:
        await running.stop()
