"""Authorization as Kafka's StandardAuthorizer and the TLS principal, in-process:
an unauthorized principal gets CLUSTER_AUTHORIZATION_FAILED on AllocateProducerIds and
BrokerRegistration while a super user succeeds; the node's own broker registration reaches
its SASL controller listener as the super user."""

from __future__ import annotations

import asyncio
import ssl
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.security.authorizer import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
)
from kafka_rpc.security.client import ClientSecurity
from tests.controller.harness import broker_features
from tests.handlers.test_raft_voters import add_voter, remove_voter
from tests.integration.conftest import start_server
from tests.security.conftest import JAAS_PLAIN, Pki
from tests.waiting import until

pytestmark = pytest.mark.integration

BR = codec.module("BrokerRegistrationRequest")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _registration(cluster_id: str, broker_id: int):
    return codec.message_class("BrokerRegistrationRequest")(
        broker_id=broker_id, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
        log_dirs=(uuid.UUID(int=(broker_id + 1) << 64),),
        listeners=(BR.Listener(name="PLAINTEXT", host="127.0.0.1", port=9092,
                               security_protocol=0),),
        features=broker_features(),
        rack=None,
    )  # fmt: skip


async def test_cluster_action_needs_a_super_user_or_an_acl(tmp_path):
    running = await start_server(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.jaas.config": JAAS_PLAIN,
        "sasl.mechanism.controller.protocol": "PLAIN",
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    })  # fmt: skip
    server = running.server
    ctl = f"127.0.0.1:{running.port('CONTROLLER')}"
    alice = ClientSecurity(None, "PLAIN", "alice", "alice-secret")
    admin = ClientSecurity(None, "PLAIN", "admin", "admin-secret")
    try:
        # the node's own broker role registered through its SASL controller listener as admin
        await until(lambda: server.controller.image.brokers.get(1) is not None,
                    "the node's broker to register", timeout=15.0)  # fmt: skip
        async with KafkaRpcClient(ctl, security=alice) as c:
            resp = await c.request(_registration(server.cluster_id, 7))
            assert resp.error_code == 31  # CLUSTER_AUTHORIZATION_FAILED
            resp = await c.request(
                codec.message_class("AllocateProducerIdsRequest")(broker_id=7, broker_epoch=1)
            )
            assert resp.error_code == 31
            # DescribeCluster needs nothing
            resp = await c.request(
                codec.message_class("DescribeClusterRequest")(endpoint_type=2)  # controllers
            )
            assert resp.error_code == 0
        async with KafkaRpcClient(ctl, security=admin) as c:
            reg = await c.request(_registration(server.cluster_id, 7))
            assert reg.error_code == 0
            resp = await c.request(
                codec.message_class("AllocateProducerIdsRequest")(
                    broker_id=7, broker_epoch=reg.broker_epoch
                )
            )
            assert resp.error_code == 0 and resp.producer_id_len > 0
        # an ACL grants alice CLUSTER_ACTION without making her a super user
        grant = AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                           "User:alice", "*", AclOperation.CLUSTER_ACTION,
                           AclPermissionType.ALLOW)  # fmt: skip
        server.authorizer.add_acl("a1", grant)
        async with KafkaRpcClient(ctl, security=alice) as c:
            resp = await c.request(_registration(server.cluster_id, 8))
            assert resp.error_code == 0
            # but not DESCRIBE on the cluster (DescribeQuorum), nor ALTER (AddRaftVoter,
            # RemoveRaftVoter: ControllerApis.handleAddRaftVoter / handleRemoveRaftVoter)
            resp = await c.request(codec.message_class("DescribeQuorumRequest")(topics=()))
            assert resp.error_code == 31
            for req in (add_voter(), remove_voter()):
                assert (await c.request(req)).error_code == 31
        grant = AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                           "User:alice", "*", AclOperation.ALTER,
                           AclPermissionType.ALLOW)  # fmt: skip
        server.authorizer.add_acl("a2", grant)
        async with KafkaRpcClient(ctl, security=alice) as c:
            for req in (add_voter(), remove_voter()):  # now the Raft layer answers
                assert (await c.request(req)).error_code != 31
    finally:
        await running.stop()


def test_standard_authorizer_rules():
    a = StandardAuthorizer(["User:root"], allow_everyone_if_no_acl=True)
    T, C = ResourceType.TOPIC, ResourceType.CLUSTER

    def acl(name, pattern, principal, op, perm, host="*", rtype=T):
        return AclBinding(rtype, name, pattern, principal, host, op, perm)

    # no ACL for the resource: allow.everyone.if.no.acl.found
    assert a.authorize("User:x", "h", AclOperation.READ, T, "orders")
    a.add_acl(1, acl("ord", PatternType.PREFIXED, "User:bob", AclOperation.READ,
                     AclPermissionType.ALLOW))  # fmt: skip
    assert a.authorize("User:bob", "h", AclOperation.READ, T, "orders")
    assert a.authorize("User:bob", "h", AclOperation.DESCRIBE, T, "orders")  # READ implies it
    assert not a.authorize("User:bob", "h", AclOperation.WRITE, T, "orders")
    assert not a.authorize("User:eve", "h", AclOperation.READ, T, "orders")  # ACLs exist now
    assert a.authorize("User:root", "h", AclOperation.WRITE, T, "orders")  # super user
    a.add_acl(2, acl("*", PatternType.LITERAL, "User:*", AclOperation.READ,
                     AclPermissionType.DENY, host="10.0.0.1"))  # fmt: skip
    assert not a.authorize("User:bob", "10.0.0.1", AclOperation.READ, T, "orders")  # DENY wins
    assert a.authorize("User:bob", "10.0.0.2", AclOperation.READ, T, "orders")
    # a DENY of READ does not deny DESCRIBE (only ALLOWs imply)
    assert a.authorize("User:bob", "10.0.0.1", AclOperation.DESCRIBE, T, "orders")
    assert a.authorize("User:x", "h", AclOperation.CLUSTER_ACTION, C, "kafka-cluster")
    a.remove_acl(1)
    a.remove_acl(2)
    strict = StandardAuthorizer([], allow_everyone_if_no_acl=False)
    assert not strict.authorize("User:x", "h", AclOperation.READ, T, "orders")


async def test_tls_principal_is_the_certificate_subject(tmp_path):
    pki = Pki(tmp_path / "pki")
    running = await start_server(tmp_path, **{
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server), "ssl.key.password": "key-secret",
        "ssl.truststore.location": pki.truststore, "ssl.client.auth": "requested",
        "listener.name.ssl.ssl.principal.mapping.rules":
            "RULE:^CN=(.*?),OU=eng,O=acme$/$1/U,DEFAULT",
    })  # fmt: skip
    try:
        port = running.port("SSL")
        ctx = ssl.create_default_context(cafile=pki.truststore)
        principals = {}
        for who, keystore in (("client1", pki.client), ("anonymous", None), ("mallory", None)):
            if keystore is not None:
                ctx.load_cert_chain(str(keystore))
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                                 server_hostname="localhost")  # fmt: skip
            local = w.get_extra_info("sockname")
            conns = await until(
                lambda local=local: [c for c in running.server.listeners["SSL"].connections
                                     if c.peer == local],
                f"the server's connection of {who}", timeout=10.0, interval=0.01)  # fmt: skip
            principals[who] = conns[0].principal
            w.close()
            ctx = ssl.create_default_context(cafile=pki.truststore)
        assert principals["client1"] == "User:CLIENT1"  # the RULE, upper-cased
        assert principals["anonymous"] == "User:ANONYMOUS"
        from kafka_rpc.security.principal import SslPrincipalMapper, subject_name

        der = ssl.PEM_cert_to_DER_cert(pki.client_cert.read_text())
        assert subject_name(der) == "CN=client1,OU=eng,O=acme"  # Java's RFC 2253 order
        assert SslPrincipalMapper("DEFAULT").name(subject_name(der)) == subject_name(der)
        # PLAINTEXT keeps the plain connection class (no authorizer configured)
        assert running.server.listeners["PLAINTEXT"].security is None
    finally:
        await running.stop()


async def test_topic_apis_are_authorized_per_topic(tmp_path):
    running = await start_server(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.jaas.config": JAAS_PLAIN,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin;User:ANONYMOUS",  # the node's own plaintext controller link
        "allow.everyone.if.no.acl.found": "false",
        "auto.create.topics.enable": "false",
    })  # fmt: skip
    server = running.server
    bootstrap = f"127.0.0.1:{running.port('SASL_PLAINTEXT')}"
    admin = ClientSecurity(None, "PLAIN", "admin", "admin-secret")
    alice = ClientSecurity(None, "PLAIN", "alice", "alice-secret")
    ct = codec.module("CreateTopicsRequest")
    md = codec.module("MetadataRequest")
    dt = codec.module("DeleteTopicsRequest")

    dc = codec.module("DescribeConfigsRequest")

    def describe_configs(*names):
        wanted = (dc.DescribeConfigsResource(resource_type=2, resource_name=n) for n in names)
        return dc.DescribeConfigsRequest(resources=tuple(wanted))

    def create(*names):
        return ct.CreateTopicsRequest(topics=tuple(
            ct.CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in names
        ), timeout_ms=10000)  # fmt: skip

    try:
        await until(lambda: server.controller.image.unfenced_brokers(),
                    "the node's broker registered and unfenced", timeout=15.0)  # fmt: skip
        async with KafkaRpcClient(bootstrap, security=admin) as c:
            resp = await c.request(create("orders", "secret"))
            assert [t.error_code for t in resp.topics] == [0, 0]
        for op in (AclOperation.DESCRIBE, AclOperation.CREATE):
            acl = AclBinding(ResourceType.TOPIC, "ord", PatternType.PREFIXED, "User:alice", "*",
                             op, AclPermissionType.ALLOW)  # fmt: skip
            server.authorizer.add_acl(op, acl)
        async with KafkaRpcClient(bootstrap, security=alice) as c:
            everything = await c.request(md.MetadataRequest(topics=None))
            assert [t.name for t in everything.topics] == ["orders"]  # secret is hidden
            wanted = (
                md.MetadataRequestTopic(name="secret"),
                md.MetadataRequestTopic(name="orders"),
            )
            named = await c.request(md.MetadataRequest(topics=wanted))
            assert {t.name: t.error_code for t in named.topics} == {"orders": 0, "secret": 29}
            resp = await c.request(create("ord-new", "other"))
            assert {t.name: t.error_code for t in resp.topics} == {"ord-new": 0, "other": 29}
            resp = await c.request(dt.DeleteTopicsRequest(
                topics=(dt.DeleteTopicState(name="secret"),), timeout_ms=10000))  # fmt: skip
            assert [(t.name, t.error_code) for t in resp.responses] == [("secret", 29)]
            # DescribeConfigs: DESCRIBE_CONFIGS per topic (DESCRIBE does not imply it)
            cfg = await c.request(describe_configs("orders", "secret"))
            assert [(r.resource_name, r.error_code) for r in cfg.results] == [
                ("orders", 29), ("secret", 29)]  # fmt: skip
            acl = AclBinding(ResourceType.TOPIC, "ord", PatternType.PREFIXED, "User:alice", "*",
                             AclOperation.DESCRIBE_CONFIGS, AclPermissionType.ALLOW)  # fmt: skip
            server.authorizer.add_acl("dc", acl)
            cfg = await c.request(describe_configs("secret", "orders"))
            assert [(r.resource_name, r.error_code) for r in cfg.results] == [
                ("orders", 0), ("secret", 29)]  # fmt: skip
            assert cfg.results[1].error_message == "Topic authorization failed."
            # DescribeTopicPartitions: named topics answered per topic, all topics filtered,
            # the operations alice may perform as TopicAuthorizedOperations
            tp = codec.module("DescribeTopicPartitionsRequest")
            two = (tp.TopicRequest(name="secret"), tp.TopicRequest(name="orders"))
            named = await c.request(tp.DescribeTopicPartitionsRequest(topics=two))
            assert [(t.name, t.error_code) for t in named.topics] == [("orders", 0), ("secret", 29)]
            allowed = sum(1 << op for op in (AclOperation.CREATE, AclOperation.DESCRIBE,
                                             AclOperation.DESCRIBE_CONFIGS))  # fmt: skip
            assert named.topics[0].topic_authorized_operations == allowed
            every = await c.request(tp.DescribeTopicPartitionsRequest(topics=()))
            assert [t.name for t in every.topics] == ["ord-new", "orders"]
        async with KafkaRpcClient(bootstrap, security=admin) as c:  # a super user sees all
            every = await c.request(tp.DescribeTopicPartitionsRequest(topics=()))
            assert [t.name for t in every.topics if not t.name.startswith("__")] == [
                "ord-new", "orders", "secret"]  # fmt: skip
            assert every.topics[-1].topic_authorized_operations == sum(
                1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))  # fmt: skip
        assert server.controller.image.topic_by_name("secret") is not None
        assert server.controller.image.topic_by_name("other") is None
    finally:
        await running.stop()
