"""DescribeLogDirs (35) over a real server socket: one result per ``log.dirs`` directory with the
``__diskless-metadata`` Raft partitions found on disk (their segment bytes), the request's
topic filter, the volume sizes from v4, the broker listener only, and DESCRIBE on the cluster
(Kafka's ``KafkaApis.handleDescribeLogDirsRequest``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.security.authorizer import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafka_rpc.security.client import ClientSecurity
from tests.integration.conftest import Peer, start_server
from tests.security.conftest import JAAS_PLAIN

M = codec.module("DescribeLogDirsRequest")
META = "__diskless-metadata"


def request(topics=None):
    if topics is not None:
        topics = tuple(M.DescribableLogDirTopic(topic=t, partitions=tuple(ps))
                       for t, ps in topics.items())  # fmt: skip
    return M.DescribeLogDirsRequest(topics=topics)


def segment_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir()
               if p.suffix == ".log" and len(p.stem) == 20)  # fmt: skip


@pytest.fixture
async def two_dirs(tmp_path):
    a, b = tmp_path / "data", tmp_path / "second"
    running = await start_server(tmp_path, **{"log.dirs": f"{a},{b}"})
    yield running, a, b
    await running.stop()


async def test_every_version_lists_the_raft_partition_on_disk(two_dirs):
    running, a, b = two_dirs
    part = a / f"{META}-0"
    assert part.is_dir()
    async with KafkaRpcClient(f"127.0.0.1:{running.port()}") as c:
        assert c.server_versions[35] == (1, 5)
        for version in range(1, 6):
            resp = await c.request(request(), version=version)
            assert resp.error_code == 0
            # one result per directory, in the configured order
            assert [r.log_dir for r in resp.results] == [str(a), str(b)]
            first, second = resp.results
            assert first.error_code == second.error_code == 0
            assert [t.name for t in first.topics] == [META]
            (p,) = first.topics[0].partitions
            assert p.partition_index == 0 and p.offset_lag == 0 and not p.is_future_key
            size = segment_bytes(part)
            assert size > 0 and p.partition_size == size
            assert second.topics == ()
            if version >= 4:
                usage = shutil.disk_usage(a)
                assert first.total_bytes == usage.total
                assert 0 < first.usable_bytes <= usage.total
            else:  # not on the wire: the default
                assert first.total_bytes == first.usable_bytes == -1
            assert first.is_cordoned is False


async def test_topic_filter_and_partitions_not_on_disk(two_dirs):
    running, a, b = two_dirs
    async with KafkaRpcClient(f"127.0.0.1:{running.port()}") as c:
        resp = await c.request(request({META: [0]}), version=5)
        assert [t.name for t in resp.results[0].topics] == [META]
        # another partition of the topic, a topic with no replica on disk, no topic at all:
        # left out, as Kafka does for a partition not in its LogManager
        for topics in ({META: [1]}, {"orders": [0, 1]}, {}):
            resp = await c.request(request(topics), version=5)
            assert resp.error_code == 0
            assert [r.log_dir for r in resp.results] == [str(a), str(b)]
            assert all(r.topics == () for r in resp.results), topics


async def test_an_unreadable_directory_is_a_storage_error(two_dirs):
    running, a, b = two_dirs
    shutil.rmtree(b)  # Kafka's offline log dir
    async with KafkaRpcClient(f"127.0.0.1:{running.port()}") as c:
        resp = await c.request(request(), version=4)
    first, second = resp.results
    assert first.error_code == 0 and first.topics
    assert second.log_dir == str(b) and second.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert second.topics == () and second.total_bytes == -1


async def test_relative_log_dir_is_answered_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    running = await start_server(tmp_path, **{"log.dirs": "rel"})
    try:
        async with KafkaRpcClient(f"127.0.0.1:{running.port()}") as c:
            resp = await c.request(request(), version=3)
        assert [r.log_dir for r in resp.results] == [os.path.join(str(tmp_path), "rel")]
        assert resp.results[0].topics[0].name == META
    finally:
        await running.stop()


async def test_not_on_the_controller_listener(two_dirs):
    running, _a, _b = two_dirs
    async with KafkaRpcClient(f"127.0.0.1:{running.port('CONTROLLER')}") as c:
        assert 35 not in c.server_versions
    p = await Peer.open(running.port("CONTROLLER"))
    p.send(request(), 4, 1)
    await p.assert_closed()  # an API the listener does not serve


async def test_describe_on_the_cluster_is_required(tmp_path):
    running = await start_server(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.jaas.config": JAAS_PLAIN,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",  # the node's own plaintext controller link
        "allow.everyone.if.no.acl.found": "false",
    })  # fmt: skip
    bootstrap = f"127.0.0.1:{running.port('SASL_PLAINTEXT')}"
    alice = ClientSecurity(None, "PLAIN", "alice", "alice-secret")
    try:
        async with KafkaRpcClient(bootstrap, security=alice) as c:
            for version in (2, 3, 5):
                resp = await c.request(request(), version=version)
                assert resp.results == ()
                want = ErrorCode.CLUSTER_AUTHORIZATION_FAILED if version >= 3 else 0
                assert resp.error_code == want  # v1-2 have no top-level ErrorCode
        grant = AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                           "User:alice", "*", AclOperation.DESCRIBE,
                           AclPermissionType.ALLOW)  # fmt: skip
        running.server.authorizer.add_acl("d1", grant)
        async with KafkaRpcClient(bootstrap, security=alice) as c:
            resp = await c.request(request(), version=5)
        assert resp.error_code == 0 and resp.results[0].topics[0].name == META
    finally:
        await running.stop()
