"""ACLs in the metadata log: `kafka-rpc acls` grants a principal CLUSTER_ACTION
without making it a super user (CreateAcls -> AccessControlEntryRecord -> the authorizer),
lists and removes it (DeleteAcls); the records survive a snapshot; without an authorizer the
ACL APIs answer SECURITY_DISABLED."""

from __future__ import annotations

import asyncio
import random
import sys
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller import snapshot
from kafka_rpc.controller.acls import create_acls, delete_acls
from kafka_rpc.controller.base import ControllerContext
from kafka_rpc.controller.image import EMPTY
from kafka_rpc.controller.replay import ReplayError, replay, replay_all
from kafka_rpc.protocol import codec
from kafka_rpc.security import acls
from kafka_rpc.security.client import ClientSecurity
from tests.integration.conftest import start_server
from tests.security.conftest import JAAS_PLAIN
from tests.security.test_authorization import _registration

pytestmark = pytest.mark.integration

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


async def _cli(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kafka_rpc.cli", "acls", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode, out.decode()


async def test_acls_tool_grants_cluster_action(tmp_path):
    running = await start_server(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.jaas.config": JAAS_PLAIN,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    })  # fmt: skip
    server = running.server
    admin_cfg = tmp_path / "admin.properties"
    admin_cfg.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret";\n'
    )
    alice_cfg = tmp_path / "alice.properties"
    alice_cfg.write_text(admin_cfg.read_text().replace('"admin', '"alice'))
    broker = ["--bootstrap-server", f"127.0.0.1:{running.port('SASL_PLAINTEXT')}"]
    ctl = f"127.0.0.1:{running.port('CONTROLLER')}"
    alice = ClientSecurity(None, "PLAIN", "alice", "alice-secret")
    grant = ["--cluster", "--allow-principal", "User:alice", "--operation", "ClusterAction"]
    try:
        async with KafkaRpcClient(ctl, security=alice) as c:
            assert (await c.request(_registration(server.cluster_id, 7))).error_code == 31
        # alice may not add ACLs herself (ALTER on the cluster)
        rc, out = await _cli(*broker, "--command-config", str(alice_cfg), "--add", *grant)
        assert rc == 1 and "CLUSTER_AUTHORIZATION_FAILED" in out, out
        assert not server.controller.image.acls
        rc, out = await _cli(*broker, "--command-config", str(alice_cfg), "--list")
        assert rc == 1 and "CLUSTER_AUTHORIZATION_FAILED" in out, out
        # the super user grants CLUSTER_ACTION
        rc, out = await _cli(*broker, "--command-config", str(admin_cfg), "--add", *grant)
        assert rc == 0, out
        assert "principal=User:alice, host=*, operation=CLUSTER_ACTION" in out, out
        (acl,) = server.controller.image.acls.values()
        assert (acl.principal, acl.operation, acl.resource_type) == ("User:alice", 9, 4)
        async with KafkaRpcClient(ctl, security=alice) as c:
            assert (await c.request(_registration(server.cluster_id, 7))).error_code == 0
        rc, out = await _cli(*broker, "--command-config", str(admin_cfg), "--list")
        assert rc == 0 and "name=kafka-cluster, patternType=LITERAL" in out, out
        rc, out = await _cli(*broker, "--command-config", str(admin_cfg), "--remove", *grant)
        assert rc == 0 and "Removed\t(principal=User:alice" in out, out
        assert not server.controller.image.acls
        async with KafkaRpcClient(ctl, security=alice) as c:
            assert (await c.request(_registration(server.cluster_id, 7))).error_code == 31
    finally:
        await running.stop()


async def test_acl_apis_without_an_authorizer(tmp_path):
    running = await start_server(tmp_path)
    try:
        async with KafkaRpcClient(f"127.0.0.1:{running.port()}") as c:
            mod = codec.module("CreateAclsRequest")
            resp = await c.request(mod.CreateAclsRequest(creations=(mod.AclCreation(
                resource_type=4, resource_name="kafka-cluster", resource_pattern_type=3,
                principal="User:x", host="*", operation=9, permission_type=3),)))  # fmt: skip
            assert [r.error_code for r in resp.results] == [54]  # SECURITY_DISABLED
            describe = codec.message_class("DescribeAclsRequest")(
                resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
            )
            resp = await c.request(describe)
            assert resp.error_code == 54
    finally:
        await running.stop()


def test_acl_commands_replay_and_snapshot():
    ctx = ControllerContext(now_ms=0, next_offset=0, cluster_id="c", rng=random.Random(3))
    mod = codec.module("CreateAclsRequest")

    def creation(**kw):
        base = {
            "resource_type": 2,
            "resource_name": "orders",
            "resource_pattern_type": 4,
            "principal": "User:bob",
            "host": "*",
            "operation": 3,
            "permission_type": 3,
        }
        return mod.AclCreation(**{**base, **kw})

    req = mod.CreateAclsRequest(creations=(
        creation(), creation(),  # the same binding twice: written once
        creation(operation=1),  # ANY: invalid
        creation(principal="bob"),  # no principal type: invalid
        creation(resource_type=4, resource_name="kafka-cluster", resource_pattern_type=3,
                 operation=9),
    ))  # fmt: skip
    res = create_acls(EMPTY, req, ctx)
    assert [r.error_code for r in res.response.results] == [0, 0, 42, 42, 0]
    assert len(res.records) == 2
    img = replay_all(EMPTY, [(r, i) for i, r in enumerate(res.records)])
    assert len(img.acls) == 2
    # a second CreateAcls of an existing binding writes nothing
    assert create_acls(img, mod.CreateAclsRequest(creations=(creation(),)), ctx).records == []
    # snapshots carry the ACLs
    assert snapshot.load(snapshot.image_records(img)).acls == img.acls
    # DescribeAcls with pattern MATCH finds the prefixed binding for a name under it
    d = codec.message_class("DescribeAclsRequest")(
        resource_type_filter=2, resource_name_filter="orders-eu", pattern_type_filter=2,
        principal_filter=None, host_filter=None, operation=1, permission_type=1)  # fmt: skip
    (res_d,) = acls.describe_acls(img, d).resources
    assert (res_d.resource_name, res_d.pattern_type) == ("orders", 4)
    # DeleteAcls of everything on topics
    dm = codec.module("DeleteAclsRequest")
    f = dm.DeleteAclsFilter(resource_type_filter=2, resource_name_filter=None,
                            pattern_type_filter=1, principal_filter=None, host_filter=None,
                            operation=1, permission_type=1)  # fmt: skip
    dres = delete_acls(img, dm.DeleteAclsRequest(filters=(f, f)), ctx)
    assert [len(r.matching_acls) for r in dres.response.filter_results] == [1, 0]
    img2 = replay_all(img, [(r, 10 + i) for i, r in enumerate(dres.records)])
    assert [a.resource_type for a in img2.acls.values()] == [4]
    with pytest.raises(ReplayError):
        replay(img2, codec.message_class("RemoveAccessControlEntryRecord")(id=uuid.uuid4()), 20)


async def test_kafka_python_acl_admin(tmp_path):
    """kafka-python's create_acls / describe_acls / delete_acls over SASL against our ACLs."""
    running = await start_server(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.jaas.config": JAAS_PLAIN,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin;User:ANONYMOUS",
    })  # fmt: skip
    port = running.port("SASL_PLAINTEXT")

    def admin_session():
        from kafka.admin import (
            ACL,
            ACLFilter,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            KafkaAdminClient,
            ResourcePattern,
            ResourcePatternFilter,
            ResourceType,
        )

        admin = KafkaAdminClient(
            bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN", sasl_plain_username="admin",
            sasl_plain_password="admin-secret", request_timeout_ms=10000,
        )  # fmt: skip
        try:
            t1 = ResourcePattern(ResourceType.TOPIC, "t1", ACLResourcePatternType.LITERAL)
            acl = ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW, t1)
            created = admin.create_acls([acl])
            assert not created["failed"], created
            flt = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                            ResourcePatternFilter(ResourceType.TOPIC, None,
                                                  ACLResourcePatternType.ANY))  # fmt: skip
            found, err = admin.describe_acls(flt)
            assert [(a.principal, a.resource_pattern.resource_name) for a in found] == [
                ("User:bob", "t1")
            ], (found, err)
            deleted = admin.delete_acls([flt])
            (_f, matches, _e) = deleted[0]
            assert len(matches) == 1, deleted
            return admin.describe_acls(flt)[0]
        finally:
            admin.close()

    try:
        assert await asyncio.to_thread(admin_session) == []
        assert not running.server.controller.image.acls
    finally:
        await running.stop()
