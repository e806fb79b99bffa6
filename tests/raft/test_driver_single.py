"""A single-voter server over real loopback sockets: it elects itself, the active node's records
commit, Raft requests get Kafka's errors, and `kafka-rpc metadata-quorum` reads it."""

import asyncio
import contextlib
import socket
import sys
from uuid import UUID

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller.features import BOOTSTRAP_METADATA_VERSION
from kafka_rpc.protocol import codec
from kafka_rpc.raft.api import METADATA_TOPIC_NAME
from kafka_rpc.raft.wire import for_version
from tests.integration.conftest import start_server
from tests.waiting import until

pytestmark = pytest.mark.integration

TIMEOUT = 5.0
CLUSTER_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_single(tmp_path, **extra):
    port = free_port()
    running = await start_server(
        tmp_path,
        **{
            "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
            "controller.quorum.voters": f"1@127.0.0.1:{port}",
            "metadata.max.idle.interval.ms": "100",
            "cluster.id": CLUSTER_ID,
            **extra,
        },
    )
    assert running.server.raft is not None
    return running, port


def describe_request():
    m = codec.module("DescribeQuorumRequest")
    topic = m.TopicData(topic_name=METADATA_TOPIC_NAME, partitions=(m.PartitionData(),))
    return m.DescribeQuorumRequest(topics=(topic,))


async def describe(client):
    resp = await client.request(describe_request(), timeout=TIMEOUT)
    assert resp.error_code == 0
    return resp.topics[0].partitions[0]


@pytest.fixture
async def single(tmp_path):
    running, port = await start_single(tmp_path)
    client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", connect_timeout=TIMEOUT)
    try:
        yield running, port, client
    finally:
        await client.close()
        await running.stop()


async def test_elects_itself_and_noops_advance_the_high_watermark(single):
    running, _port, client = single

    async def led():
        p = await describe(client)
        return p if p.error_code == 0 and p.leader_id == 1 and p.high_watermark > 0 else None

    p = await until(led, "leadership and a high watermark", timeout=TIMEOUT)
    assert p.leader_epoch >= 1
    assert [r.replica_id for r in p.current_voters] == [1]
    first = p.high_watermark

    async def grew():
        return (await describe(client)).high_watermark >= first + 2

    await until(grew, "NoOpRecords to commit", timeout=TIMEOUT)
    state = running.server.controller

    async def replayed():
        return (
            state.image.features.get("metadata.version") == BOOTSTRAP_METADATA_VERSION
            and state.record_counts["NoOpRecord"]
        )

    await until(replayed, "the state machine to replay the bootstrap and NoOps", timeout=TIMEOUT)
    assert state.is_active and state.leader_epoch == p.leader_epoch


async def test_vote_with_a_wrong_cluster_id(single):
    _running, _port, client = single
    m = codec.module("VoteRequest")
    version = client.version_for(52)
    part = m.PartitionData(replica_epoch=100, replica_id=2, last_offset_epoch=0, last_offset=0)
    topic = m.TopicData(topic_name=METADATA_TOPIC_NAME, topic_id=UUID(int=1), partitions=(part,))
    req = for_version(52, version, m.VoteRequest(cluster_id="wrong-cluster-id-xxxxx",
                                                 topics=(topic,)))  # fmt: skip
    resp = await client.request(req, timeout=TIMEOUT)
    assert resp.error_code == 104  # INCONSISTENT_CLUSTER_ID, top level, no topics
    assert resp.topics == ()


def fetch_request(topic_id):
    m = codec.module("FetchRequest")
    part = m.FetchPartition(partition=0, current_leader_epoch=1, fetch_offset=0,
                            last_fetched_epoch=0, partition_max_bytes=1 << 20)  # fmt: skip
    topic = m.FetchTopic(topic_id=topic_id, partitions=(part,))
    return m.FetchRequest(cluster_id=CLUSTER_ID, replica_id=-1, max_wait_ms=0, topics=(topic,))


async def test_fetch_of_an_unknown_topic_id(single):
    running, _port, client = single
    resp = await client.request(fetch_request(UUID(int=7)), timeout=TIMEOUT)
    assert resp.error_code == 42  # INVALID_REQUEST, top level (KafkaRaftClient.handleFetchRequest)
    # the broker listener holds no classic partitions: UNKNOWN_TOPIC_ID per partition
    broker = await KafkaRpcClient.connect(f"127.0.0.1:{running.port()}", connect_timeout=TIMEOUT)
    try:
        resp = await broker.request(fetch_request(UUID(int=7)), timeout=TIMEOUT)
        assert resp.error_code == 0
        assert [p.error_code for p in resp.responses[0].partitions] == [100]
    finally:
        await broker.close()


async def run_cli(*args):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kafka_rpc.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode, out.decode(), err.decode()


async def test_metadata_quorum_describe(single):
    _running, port, client = single

    async def led():
        return (await describe(client)).leader_id == 1

    await until(led, "leadership", timeout=TIMEOUT)
    rc, out, err = await run_cli("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{port}",
                                 "describe", "--status")  # fmt: skip
    assert rc == 0, err
    lines = dict(line.split(":", 1) for line in out.splitlines())
    assert lines["LeaderId"].strip() == "1"
    assert int(lines["LeaderEpoch"]) >= 1 and int(lines["HighWatermark"]) > 0
    assert set(lines) >= {"ClusterId", "MaxFollowerLag", "MaxFollowerLagTimeMs",
                          "CurrentVoters", "CurrentObservers"}  # fmt: skip
    assert lines["ClusterId"].strip() == CLUSTER_ID  # DescribeCluster on the controller listener
    assert '"id": 1' in lines["CurrentVoters"]
    rc, out, err = await run_cli("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{port}",
                                 "describe", "--replication")  # fmt: skip
    assert rc == 0, err
    header, row = out.splitlines()[:2]
    assert header.split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag",
                              "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]  # fmt: skip
    assert row.split()[0] == "1" and row.split()[-1] == "Leader"
    assert int(row.split()[4]) > 1_600_000_000_000  # wall-clock ms, as Kafka prints


async def test_metadata_quorum_unreachable_exits_1():
    rc, _out, err = await run_cli("metadata-quorum", "--bootstrap-controller",
                                  f"127.0.0.1:{free_port()}", "--timeout", "0.5",
                                  "describe", "--status")  # fmt: skip
    assert rc == 1 and err


async def test_restart_keeps_the_log_and_bumps_the_epoch(tmp_path):
    running, port = await start_single(tmp_path)
    try:
        client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", connect_timeout=TIMEOUT)

        async def led():
            p = await describe(client)
            return p if p.leader_id == 1 and p.high_watermark > 2 else None

        before = await until(led, "leadership", timeout=TIMEOUT)
        await client.close()
    finally:
        await running.stop()
    running, port = await start_single(tmp_path)
    try:
        client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", connect_timeout=TIMEOUT)
        after = await until(led, "leadership after a restart", timeout=TIMEOUT)
        assert after.leader_epoch > before.leader_epoch
        assert after.high_watermark > before.high_watermark
        features = running.server.controller.image.features
        assert features["metadata.version"] == BOOTSTRAP_METADATA_VERSION
        await client.close()
    finally:
        await running.stop()


async def test_a_bad_peer_does_not_kill_the_driver(tmp_path):
    """Voter 2 answers every connection with garbage: node 1 keeps campaigning, its loop alive."""

    connections = []

    async def garbage(reader, writer):
        connections.append(writer)
        writer.write(b"\x00\x00\x00\x08garbage!" * 4)
        await writer.drain()
        writer.close()

    bad = await asyncio.start_server(garbage, "127.0.0.1", 0)
    bad_port = bad.sockets[0].getsockname()[1]
    port = free_port()
    running = await start_server(
        tmp_path,
        **{
            # controller only: a broker role would not open its listener without a leader
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "process.roles": "controller",
            "controller.quorum.voters": f"1@127.0.0.1:{port},2@127.0.0.1:{bad_port}",
            "controller.quorum.election.timeout.ms": "100",
            "controller.quorum.request.timeout.ms": "200",
            "shutdown.timeout.ms": "500",
        },
    )
    client = None
    try:
        driver = running.server.raft
        # several elections against the bad peer: it keeps asking voter 2 on new connections
        # (pre-votes do not bump the epoch)
        await until(lambda: len(connections) >= 3, "three connections to voter 2", timeout=TIMEOUT)
        assert driver.running
        client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", connect_timeout=TIMEOUT)
        p = (await client.request(describe_request(), timeout=TIMEOUT)).topics[0].partitions[0]
        assert p.error_code == 6  # NOT_LEADER_OR_FOLLOWER: no majority without voter 2
        assert not driver.core.is_leader
    finally:
        if client is not None:
            await client.close()
        await running.stop()
        bad.close()
        await bad.wait_closed()


async def test_wait_committed_times_out_and_drops_its_waiter(single):
    """An offset that does not commit in time raises TimeoutError (not before the timeout);
    the expired waiter is dropped at the next settle, and a later wait on a committed offset
    returns the high watermark."""
    import time

    running, _port, _client = single
    driver = running.server.raft
    await until(lambda: driver.core.is_leader, "leadership", timeout=TIMEOUT)
    far = driver.core.log.end_offset + 1_000_000
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):  # the outer bound only keeps a broken timer from hanging
        await asyncio.wait_for(driver.wait_committed(far, 0.2), 10)
    assert 0.19 <= time.monotonic() - t0 < 9
    last = driver.append([_noop()])
    assert await driver.wait_committed(last, TIMEOUT) > last
    assert all(off != far for off, _epoch, _fut, _deadline in driver._commit_waiters)


def _noop() -> bytes:
    from kafka_rpc.protocol import codec

    return codec.encode_record(codec.message_class("NoOpRecord")())


async def test_wait_committed_a_shorter_timeout_after_a_longer_one(single):
    """The driver keeps one expiry timer for all commit waiters: a waiter with a shorter timeout
    registered after one with a longer timeout still times out on its own deadline (the outer
    bound, far below the long timeout, fails the test if it waited for the long one), and the
    long one keeps waiting."""
    import time

    running, _port, _client = single
    driver = running.server.raft
    await until(lambda: driver.core.is_leader, "leadership", timeout=TIMEOUT)
    far = driver.core.log.end_offset + 1_000_000
    long_wait = asyncio.ensure_future(driver.wait_committed(far, 60))
    await asyncio.sleep(0)
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="not committed"):  # not the outer bound's
            await asyncio.wait_for(driver.wait_committed(far + 1, 0.2), 10)
        assert time.monotonic() - t0 >= 0.19
        assert not long_wait.done()
        assert [off for off, *_ in driver._commit_waiters] == [far]
    finally:
        long_wait.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await long_wait


async def test_a_request_timeout_closes_the_connection(tmp_path):
    """Voter 2 answers ApiVersions (relayed from node 1's own listener) and then nothing: every
    Vote request times out. As Kafka's NetworkClient, the driver closes the connection after a
    request timeout, so the next request goes on a new connection, not queued behind a stalled
    one (after a link was down, TCP may not retransmit for seconds: seen in the netns soak)."""

    connections = []
    port = free_port()

    async def read_frame(reader):
        size = await reader.readexactly(4)
        return size + await reader.readexactly(int.from_bytes(size, "big"))

    async def answers_api_versions_only(reader, writer):
        connections.append(writer)
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", port)
            up_w.write(await read_frame(reader))  # ApiVersions
            writer.write(await read_frame(up_r))
            up_w.close()
            while await reader.read(65536):  # every later request: no answer
                pass
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    peer = await asyncio.start_server(answers_api_versions_only, "127.0.0.1", 0)
    peer_port = peer.sockets[0].getsockname()[1]
    running = await start_server(
        tmp_path,
        **{
            # controller only: a broker role would not open its listener without a leader
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "process.roles": "controller",
            "controller.quorum.voters": f"1@127.0.0.1:{port},2@127.0.0.1:{peer_port}",
            "controller.quorum.election.timeout.ms": "100",
            "controller.quorum.request.timeout.ms": "200",
            "shutdown.timeout.ms": "500",
        },
    )
    try:
        await until(lambda: len(connections) >= 3, "three connections to voter 2", timeout=5.0)
        assert not running.server.raft.core.is_leader
    finally:
        await running.stop()
        peer.close()
        await peer.wait_closed()
