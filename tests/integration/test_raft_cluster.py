"""A real 3-node KRaft metadata quorum: three ``kafka-rpc serve`` processes (each directory
formatted with ``kafka-rpc storage format`` and one shared cluster id), talking over loopback
sockets, fsyncing their logs, and SIGKILLed.

* one cluster run: exactly one leader that every node agrees on, a growing high watermark; an
  independent reader (kafka-python's RecordBatch parser) validates every committed batch and
  decodes its records; bad Raft requests get Kafka's errors and change neither leader nor epoch;
* one run: SIGKILL the leader; the other two elect a new one in a later epoch that holds every
  committed batch byte for byte; ``metadata-quorum describe`` names it; the killed node restarts
  and catches up to the high watermark without disturbing the leader;
* one run with tiny snapshot/retention settings: a SIGKILLed follower falls behind the leader's
  log start offset, so when restarted it can only catch up through FetchSnapshot.

Every wait is bounded; every process is SIGKILLed (by pid) in a ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller.features import default_feature_levels
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.raft.api import METADATA_TOPIC_ID, METADATA_TOPIC_NAME
from kafka_rpc.raft.wire import for_version
from kafka_rpc.testbed.bench_cluster import free_ports, write_properties
from tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

START_TIMEOUT = 60.0  # one process, to its "cluster id" line (bounded; a loaded machine is slow)
STEP_TIMEOUT = 15.0  # one awaited condition (an election, a catch-up)
TEST_BUDGET = 180.0  # a whole test (a bound); the processes are killed when it runs out
CLI_TIMEOUT = 20.0
ENV = dict(os.environ, KAFKA_RPC_NO_REEXEC="1")  # the pid is the server itself
VOTERS = (1, 2, 3)
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
#: what the controller writes for the brokers' registration and heartbeats, and for the
#: controllers' registrations (KIP-919)
BROKER_RECORDS = {"RegisterBrokerRecord", "UnfenceBrokerRecord", "FenceBrokerRecord",
                  "BrokerRegistrationChangeRecord", "UnregisterBrokerRecord",
                  "RegisterControllerRecord"}  # fmt: skip

#: the quorum's timing for every run: half of Kafka's defaults, sane on a loaded 2-core runner
BASE_PROPS = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.request.timeout.ms": "2000",
    "metadata.max.idle.interval.ms": "100",
    "shutdown.timeout.ms": "2000",
    # a restarted node serves once its new registration is taken, which waits for its killed
    # incarnation's session to expire (Kafka's ClusterControlManager): shorter than Kafka's 9 s
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}

_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

DEFAULT_LEVELS = default_feature_levels()


def cli(*args: str, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess:
    """``kafka-rpc ARGS`` to completion (killed by subprocess.run on timeout)."""
    return subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", *args],
        capture_output=True, text=True, timeout=timeout, env=ENV,
    )  # fmt: skip


# -- on-disk helpers ------------------------------------------------------------------------------


def segment_bases(meta_dir: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in meta_dir.iterdir() if (m := _SEGMENT_RE.match(p.name)))


def snapshot_ids(meta_dir: Path) -> list[tuple[int, int]]:
    """(end offset, epoch) of every ``.checkpoint`` file, oldest first."""
    return sorted(
        (int(m.group(1)), int(m.group(2)))
        for p in meta_dir.iterdir()
        if (m := _SNAPSHOT_RE.match(p.name))
    )


def split_batches(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(base offset, last offset, partition leader epoch, bytes) of every whole RecordBatch v2
    in ``data``, read from the frame fields themselves (baseOffset int64, batchLength int32,
    partitionLeaderEpoch int32, ..., lastOffsetDelta int32 at byte 23); a torn tail is
    dropped."""
    out = []
    pos = 0
    while len(data) - pos >= 27:
        base, length, epoch = struct.unpack_from(">qii", data, pos)
        size = 12 + length
        if pos + size > len(data):
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        out.append((base, base + delta, epoch, data[pos : pos + size]))
        pos += size
    return out


def log_end_on_disk(meta_dir: Path) -> tuple[int, int]:
    """(log end offset, epoch of the last batch) of a stopped node's metadata log, from its
    segment files (the latest snapshot's id when the segments hold no batch)."""
    end, epoch = None, 0
    for base in segment_bases(meta_dir):
        for _b, last, ep, _data in split_batches((meta_dir / f"{base:020d}.log").read_bytes()):
            end, epoch = last + 1, ep
    if end is None:
        snaps = snapshot_ids(meta_dir)
        end, epoch = snaps[-1] if snaps else (0, 0)
    return end, epoch


# -- processes ------------------------------------------------------------------------------------


class Node:
    """One ``kafka-rpc serve`` process (broker+controller) with its own directory; stdout and
    stderr go to files (never a pipe nobody reads), one pair per start."""

    def __init__(self, root: Path, node_id: int, ctrl_ports: dict[int, int], props: dict) -> None:
        self.node_id = node_id
        self.ctrl_port = ctrl_ports[node_id]
        self.home = root / f"node{node_id}"
        self.home.mkdir()
        self.data = self.home / "data"
        self.config = self.home / "server.properties"
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in sorted(ctrl_ports.items()))
        write_properties(self.config, BASE_PROPS, node_id, 0, self.ctrl_port, voters, self.data,
                         props)  # fmt: skip
        self.proc: subprocess.Popen | None = None
        self.runs = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.ctrl_port}"

    @property
    def meta_dir(self) -> Path:
        return self.data / "__cluster_metadata-0"

    def out_path(self, run: int | None = None) -> Path:
        return self.home / f"stdout.{run or self.runs}"

    def err_path(self, run: int | None = None) -> Path:
        return self.home / f"stderr.{run or self.runs}"

    def stderr_text(self, run: int | None = None) -> str:
        p = self.err_path(run)
        return p.read_text(errors="replace") if p.exists() else ""

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        self.runs += 1
        with self.out_path().open("wb") as out, self.err_path().open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kafka_rpc.cli", "--log-level", "INFO", "serve",
                 "--config", str(self.config)],
                stdout=out, stderr=err, env=ENV, cwd=self.home,
            )  # fmt: skip

    async def started(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            text = self.out_path().read_text(errors="replace")
            if "cluster id" in text:
                m = re.search(r"listening CONTROLLER \(\w+\) on [\d.]+:(\d+)", text)
                assert m and int(m.group(1)) == self.ctrl_port, text
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"node {self.node_id} exited {self.proc.returncode}: "
                                     f"{text}\n{self.stderr_text()[-4000:]}")  # fmt: skip
            if time.monotonic() > deadline:
                raise AssertionError(f"node {self.node_id} did not start in {START_TIMEOUT}s: "
                                     f"{text}\n{self.stderr_text()[-4000:]}")  # fmt: skip
            await asyncio.sleep(0.05)

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the live process (by pid)."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL by pid and reap."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Cluster:
    """Three voters on fixed controller ports, formatted with one cluster id."""

    def __init__(self, root: Path, **props: str) -> None:
        ports = dict(zip(VOTERS, free_ports(len(VOTERS)), strict=True))
        r = cli("storage", "random-uuid")
        assert r.returncode == 0, r.stderr
        self.cluster_id = r.stdout.strip()
        self.nodes = {i: Node(root, i, ports, props) for i in VOTERS}
        self._clients: dict[int, KafkaRpcClient] = {}

    def format(self) -> None:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kafka_rpc.cli",
                    "storage",
                    "format",
                    "--cluster-id",
                    self.cluster_id,
                    "--config",
                    str(n.config),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=ENV,
            )  # fmt: skip
            for n in self.nodes.values()
        ]
        try:
            for n, p in zip(self.nodes.values(), procs, strict=True):
                out, err = p.communicate(timeout=CLI_TIMEOUT)
                assert p.returncode == 0, err
                assert "Formatting metadata directory" in out, out
                meta = (n.data / "meta.properties").read_text()
                assert f"cluster.id={self.cluster_id}" in meta
                assert f"node.id={n.node_id}" in meta
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(10)

    async def start(self) -> None:
        self.format()
        for n in self.nodes.values():
            n.start()
        for n in self.nodes.values():
            await n.started()

    async def restart(self, i: int) -> None:
        await self.drop_client(i)
        self.nodes[i].start()
        await self.nodes[i].started()

    def kill(self, i: int) -> None:
        self.nodes[i].kill()

    def live(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.alive]

    async def client(self, i: int) -> KafkaRpcClient:
        c = self._clients.get(i)
        if c is None:
            c = await KafkaRpcClient.connect(
                self.nodes[i].address, connect_timeout=3.0, request_timeout=5.0
            )
            self._clients[i] = c
        return c

    async def drop_client(self, i: int) -> None:
        c = self._clients.pop(i, None)
        if c is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(c.close(), 2)

    async def close(self) -> None:
        try:
            for i in list(self._clients):
                await self.drop_client(i)
        finally:
            for n in self.nodes.values():
                n.kill()

    def assert_no_tracebacks(self) -> None:
        for n in self.nodes.values():
            for run in range(1, n.runs + 1):
                text = n.stderr_text(run)
                assert "Traceback" not in text, f"node {n.node_id} run {run}:\n{text[-6000:]}"

    # -- Raft requests ---------------------------------------------------------------------------

    async def describe(self, i: int):
        """Node ``i``'s DescribeQuorum partition data, or None when it cannot be reached."""
        m = codec.module("DescribeQuorumRequest")
        topic = m.TopicData(topic_name=METADATA_TOPIC_NAME, partitions=(m.PartitionData(),))
        try:
            c = await self.client(i)
            resp = await c.request(m.DescribeQuorumRequest(topics=(topic,)), timeout=5.0)
        except (OSError, TimeoutError):
            await self.drop_client(i)
            return None
        assert resp.error_code == 0, resp
        (t,) = resp.topics
        (p,) = t.partitions
        return p

    async def agreed_leader(self, among: list[int] | None = None):
        """The leader's DescribeQuorum partition data when every node of ``among`` (default:
        the live ones) answers and exactly one of them leads, in an epoch every other one names
        with the same leader; else None (an election in progress)."""
        among = self.live() if among is None else among
        views = {i: await self.describe(i) for i in among}
        if any(v is None for v in views.values()):
            return None
        leading = [i for i, p in views.items() if p.error_code == 0]
        if len(leading) != 1:
            return None
        (lead,) = leading
        lp = views[lead]
        assert lp.leader_id == lead, lp
        for i, p in views.items():
            if i == lead:
                continue
            assert p.error_code == NOT_LEADER, p
            if (p.leader_id, p.leader_epoch) != (lead, lp.leader_epoch):
                return None
        return lp

    async def fetch(self, i: int, offset: int, last_epoch: int, leader_epoch: int):
        """One observer Fetch (replica id -1, no wait) of the metadata partition from node i."""
        m = codec.module("FetchRequest")
        c = await self.client(i)
        version = min(c.version_for(1), 18)
        assert version >= 16
        part = m.FetchPartition(partition=0, current_leader_epoch=leader_epoch,
                                fetch_offset=offset, last_fetched_epoch=last_epoch,
                                partition_max_bytes=1 << 20)  # fmt: skip
        req = m.FetchRequest(
            cluster_id=self.cluster_id, replica_state=m.ReplicaState(replica_id=-1),
            max_wait_ms=0, topics=(m.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=(part,)),),
        )  # fmt: skip
        resp = await c.request(for_version(1, version, req), version=version, timeout=5.0)
        assert resp.error_code == 0, resp
        (t,) = resp.responses
        assert t.topic_id == METADATA_TOPIC_ID
        (p,) = t.partitions
        return p

    async def read_committed(self, i: int, leader_epoch: int, hw: int):
        """Every batch of node i's log (it leads ``leader_epoch``) with a base offset below
        ``hw``, read with Fetch from offset 0: (base, last, epoch, bytes)."""
        out: list[tuple[int, int, int, bytes]] = []
        offset, last_epoch = 0, 0
        for _ in range(10_000):
            if offset >= hw:
                return out
            p = await self.fetch(i, offset, last_epoch, leader_epoch)
            assert p.error_code == 0, p
            assert p.snapshot_id.epoch < 0 and p.diverging_epoch.epoch < 0, p
            assert p.high_watermark >= hw, p
            batches = split_batches(p.records or b"")
            assert batches, f"no records at offset {offset} below the high watermark {hw}"
            assert batches[0][0] == offset, (batches[0][:3], offset)
            for base, last, epoch, data in batches:
                if base >= hw:
                    break
                assert base == offset, f"gap: batch at {base}, expected {offset}"
                assert epoch >= last_epoch, f"epoch went down at {base}: {epoch} < {last_epoch}"
                out.append((base, last, epoch, data))
                offset, last_epoch = last + 1, epoch
        raise AssertionError("read_committed did not finish")


def voter_state(p, node_id: int):
    return next(r for r in p.current_voters if r.replica_id == node_id)


@contextlib.asynccontextmanager
async def running_cluster(root: Path, **props: str):
    cluster = Cluster(root, **props)
    try:
        async with asyncio.timeout(TEST_BUDGET):
            await cluster.start()
            yield cluster
        cluster.assert_no_tracebacks()
    finally:
        await cluster.close()


# -- 1, 5, 6: election, an independent reader, bad input ------------------------------------------


async def test_one_leader_independent_reader_and_bad_requests(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        # (1) exactly one leader, named by every node, and the high watermark grows (NoOps)
        first = await until(cluster.agreed_leader, "one leader every node agrees on",
                            timeout=STEP_TIMEOUT)  # fmt: skip
        lead, epoch = first.leader_id, first.leader_epoch
        assert lead in VOTERS and epoch >= 1
        assert sorted(r.replica_id for r in first.current_voters) == list(VOTERS)

        async def grown():
            p = await cluster.agreed_leader()
            grew = p is not None and p.high_watermark >= max(first.high_watermark, 0) + 5
            return p if grew else None

        p = await until(grown, "the high watermark to grow by 5 NoOps", timeout=STEP_TIMEOUT)
        assert (p.leader_id, p.leader_epoch) == (lead, epoch), "the leadership changed"
        hw = p.high_watermark

        # (5) an independent reader: kafka-python parses and CRC-checks every committed batch
        batches = await cluster.read_committed(lead, epoch, hw)
        assert batches and batches[-1][1] + 1 >= hw
        records = MemoryRecords(b"".join(b[3] for b in batches))
        parsed = []
        while records.has_next():
            parsed.append(records.next_batch())
        assert len(parsed) == len(batches)
        seen: dict[str, int] = {}
        leader_changes = []
        for (base, last, ep, data), kb in zip(batches, parsed, strict=True):
            assert DefaultRecordBatch(data).validate_crc(), f"bad CRC in the batch at {base}"
            assert kb.validate_crc()
            assert (kb.base_offset, kb.base_offset + kb.last_offset_delta) == (base, last)
            assert kb.leader_epoch == ep and kb.magic == 2 and kb.compression_type == 0
            recs = list(DefaultRecordBatch(data))
            assert [r.offset for r in recs] == list(range(base, last + 1))
            if kb.is_control_batch:
                (rec,) = recs
                version, ctype = struct.unpack(">hh", rec.key)
                assert (version, ctype) == (0, 2), f"control record type {ctype} at {base}"
                msg = codec.decode("LeaderChangeMessage", 0, bytes(rec.value))
                assert [v.voter_id for v in msg.voters] == list(VOTERS)
                granting = {v.voter_id for v in msg.granting_voters}
                assert msg.leader_id in granting and len(granting) >= 2 and granting <= {1, 2, 3}
                leader_changes.append((ep, msg.leader_id, base))
                continue
            for r in recs:
                assert r.key is None
                record, _version = codec.decode_record(bytes(r.value))
                name = type(record).__spec_name__
                seen[name] = seen.get(name, 0) + 1
                if name == "FeatureLevelRecord":  # the bootstrap: the default levels
                    assert DEFAULT_LEVELS[record.name] == record.feature_level, record
                elif name in ("BeginTransactionRecord", "EndTransactionRecord"):
                    pass  # around the bootstrap records
                elif name == "TopicRecord":  # the controller's own __diskless-metadata
                    assert record.name == "__diskless-metadata", record
                    seen["topic id"] = record.topic_id
                elif name == "PartitionRecord":
                    assert record.topic_id == seen.get("topic id"), record
                else:  # NoOps, and the brokers' lifecycle once they register
                    assert name == "NoOpRecord" or name in BROKER_RECORDS, name
        assert batches[0][0] == 0 and parsed[0].is_control_batch, "no LeaderChange at offset 0"
        # one bootstrap FeatureLevelRecord per finalized feature (never kraft.version)
        want = sum(1 for n, v in DEFAULT_LEVELS.items() if v > 0 and n != "kraft.version")
        assert seen.get("FeatureLevelRecord") == want, seen
        # the log grew by NoOps (idle), or by the brokers' registrations when they came first
        assert seen.get("NoOpRecord", 0) + sum(seen.get(n, 0) for n in BROKER_RECORDS) >= 3, seen
        assert leader_changes[-1][:2] == (epoch, lead), leader_changes
        assert [e for e, _, _ in leader_changes] == sorted({e for e, _, _ in leader_changes})

        # (6) bad input: errors, and neither the leader nor the epoch moves
        follower = next(i for i in VOTERS if i != lead)
        for target in (lead, follower):
            c = await cluster.client(target)
            other = next(i for i in VOTERS if i != target)
            vote = codec.module("VoteRequest")
            vv = c.version_for(52)

            def vote_req(cluster_id, candidate, cepoch, vote=vote, vv=vv, target=target,
                         pre_vote=False):  # fmt: skip
                part = vote.PartitionData(replica_epoch=cepoch, replica_id=candidate,
                                          last_offset_epoch=epoch, last_offset=1 << 40,
                                          pre_vote=pre_vote)  # fmt: skip
                topic = vote.TopicData(topic_name=METADATA_TOPIC_NAME, topic_id=METADATA_TOPIC_ID,
                                       partitions=(part,))  # fmt: skip
                return for_version(52, vv, vote.VoteRequest(cluster_id=cluster_id, voter_id=target,
                                                            topics=(topic,)))  # fmt: skip

            other_cluster = cli("storage", "random-uuid").stdout.strip()
            assert other_cluster and other_cluster != cluster.cluster_id
            resp = await c.request(vote_req(other_cluster, other, epoch + 5), version=vv)
            assert resp.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID, resp
            assert resp.topics == ()

            # a vote from outside the voter set is answered like any other (Kafka 4.x checks
            # no membership, never INCONSISTENT_VOTER_SET): in the current epoch neither the
            # leader nor a follower that has fetched grants it (a pre-vote: a standard vote
            # at a higher epoch would move the epoch, as it does on Kafka)
            assert vv >= 2, vv
            resp = await c.request(vote_req(cluster.cluster_id, 99, epoch, pre_vote=True),
                                   version=vv)  # fmt: skip
            assert resp.error_code == 0, resp
            (vp,) = resp.topics[0].partitions
            assert vp.error_code == 0, vp
            assert not vp.vote_granted and (vp.leader_id, vp.leader_epoch) == (lead, epoch), vp

            begin = codec.module("BeginQuorumEpochRequest")
            bv = c.version_for(53)
            part = begin.PartitionData(leader_id=other, leader_epoch=epoch - 1)
            topic = begin.TopicData(topic_name=METADATA_TOPIC_NAME, topic_id=METADATA_TOPIC_ID,
                                    partitions=(part,))  # fmt: skip
            req = for_version(53, bv, begin.BeginQuorumEpochRequest(
                cluster_id=cluster.cluster_id, voter_id=target, topics=(topic,)))  # fmt: skip
            resp = await c.request(req, version=bv)
            assert resp.error_code == 0, resp
            (bp,) = resp.topics[0].partitions
            assert bp.error_code == ErrorCode.FENCED_LEADER_EPOCH, bp
            assert (bp.leader_id, bp.leader_epoch) == (lead, epoch), bp

        # a follower does not serve Fetch: it names the leader
        fp = await cluster.fetch(follower, 0, 0, epoch)
        assert fp.error_code == NOT_LEADER and not fp.records, fp
        assert (fp.current_leader.leader_id, fp.current_leader.leader_epoch) == (lead, epoch)

        c = await cluster.client(lead)
        snap = codec.module("FetchSnapshotRequest")
        sv = c.version_for(59)
        part = snap.PartitionSnapshot(
            partition=0, current_leader_epoch=epoch,
            snapshot_id=snap.SnapshotId(end_offset=hw + 1_000_000, epoch=epoch), position=0,
        )  # fmt: skip
        req = snap.FetchSnapshotRequest(
            cluster_id=cluster.cluster_id, replica_id=-1, max_bytes=1 << 20,
            topics=(snap.TopicSnapshot(name=METADATA_TOPIC_NAME, partitions=(part,)),),
        )  # fmt: skip
        resp = await c.request(req, version=sv)
        assert resp.error_code == 0, resp
        (sp,) = resp.topics[0].partitions
        assert sp.error_code == ErrorCode.SNAPSHOT_NOT_FOUND, sp
        assert (sp.current_leader.leader_id, sp.current_leader.leader_epoch) == (lead, epoch)
        assert sp.unaligned_records in (b"", None)

        # two election timeouts later: the same leader, the same epoch, still committing
        await asyncio.sleep(1.0)

        async def still_leading():
            q = await cluster.agreed_leader()
            return q if q is not None and q.high_watermark > hw + 5 else None

        q = await until(still_leading, "the same leader to keep committing", timeout=STEP_TIMEOUT)
        assert (q.leader_id, q.leader_epoch) == (lead, epoch), "bad requests moved the quorum"
        for i in VOTERS:
            state = (cluster.nodes[i].meta_dir / "quorum-state").read_text()
            assert f'"leaderEpoch":{epoch}' in state.replace(" ", ""), (i, state)


# -- 2, 3: SIGKILL the leader, lose nothing committed, the killed node catches up ------------------


async def test_leader_sigkill_loses_nothing_committed_and_the_node_catches_up(tmp_path):
    async with running_cluster(tmp_path) as cluster:

        async def led():
            p = await cluster.agreed_leader()
            return p if p is not None and p.high_watermark >= 8 else None

        p = await until(led, "a leader with a high watermark of 8", timeout=STEP_TIMEOUT)
        old_lead, old_epoch = p.leader_id, p.leader_epoch
        old = await cluster.read_committed(old_lead, old_epoch, p.high_watermark)
        old_hw = old[-1][1] + 1  # everything read was committed when it was read
        assert old_hw >= 8

        # Freeze both followers (SIGSTOP, well under the fetch timeout) so that the leader
        # writes and fsyncs NoOps nobody replicates, then SIGKILL it: its log ends with an
        # uncommitted tail that the next epoch must overwrite.
        rest = [i for i in VOTERS if i != old_lead]
        old_dir = cluster.nodes[old_lead].meta_dir
        for i in rest:
            cluster.nodes[i].signal(signal.SIGSTOP)
        try:
            # Fetches the followers sent just before the stop may still sit unread at the
            # leader (a loaded runner): answered after the tail is appended, they would carry
            # the whole tail to the stopped followers. Let the leader drain them first; check
            # quorum (1.5 x 1000 ms without fetches) leaves it leading meanwhile.
            await asyncio.sleep(0.4)
            end_at_stop = log_end_on_disk(old_dir)[0]

            async def tail_written():
                # +3 NoOps: a follower's Fetch already parked at the leader (or in flight) still
                # carries the first one into its socket buffer; nothing carries the later ones
                return log_end_on_disk(old_dir)[0] >= end_at_stop + 3

            await until(tail_written, "the leader to append past its followers", timeout=3.0)
            cluster.kill(old_lead)
        finally:
            for i in rest:
                cluster.nodes[i].signal(signal.SIGCONT)
        old_end = log_end_on_disk(old_dir)[0]

        async def new_leader():
            q = await cluster.agreed_leader(rest)
            if q is None or q.leader_id == old_lead:
                return None
            return q if q.high_watermark >= old_hw else None

        q = await until(new_leader, "a new leader past the old high watermark",
                        timeout=STEP_TIMEOUT)  # fmt: skip
        new_lead, new_epoch = q.leader_id, q.leader_epoch
        assert new_lead in rest and new_epoch > old_epoch, (q, old_epoch)

        new = await cluster.read_committed(new_lead, new_epoch, q.high_watermark)
        by_base = {b[0]: b for b in new}
        for base, last, ep, data in old:
            assert base in by_base, f"committed batch at {base} is gone"
            nb = by_base[base]
            assert nb[1:3] == (last, ep), (nb[:3], (base, last, ep))
            assert nb[3] == data, f"committed batch at {base} changed after the failover"
        # the new epoch starts with its LeaderChange, after everything the old leader committed
        starts = [b for b in new if b[2] == new_epoch]
        assert starts and starts[0][0] >= old_hw
        assert starts[0][0] < old_end, "the killed leader had no uncommitted tail to truncate"
        start_batch = DefaultRecordBatch(starts[0][3])
        assert start_batch.is_control_batch
        (rec,) = list(start_batch)
        assert codec.decode("LeaderChangeMessage", 0, bytes(rec.value)).leader_id == new_lead

        # kafka-metadata-quorum names the new leader, asked directly or through the follower
        survivor = next(i for i in rest if i != new_lead)
        for i in (new_lead, survivor):
            r = await asyncio.to_thread(
                cli, "metadata-quorum", "--bootstrap-controller", cluster.nodes[i].address,
                "--timeout", "5", "describe", "--status",
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
            status = {k.strip(): v.strip() for k, v in
                      (line.split(":", 1) for line in r.stdout.splitlines())}  # fmt: skip
            assert status["LeaderId"] == str(new_lead), r.stdout
            assert int(status["LeaderEpoch"]) == new_epoch, r.stdout
            assert int(status["HighWatermark"]) >= old_hw, r.stdout

        # (3) the killed node restarts and catches up, and the leadership stays where it is
        await cluster.restart(old_lead)
        target = q.high_watermark + 3

        async def caught_up():
            lp = await cluster.describe(new_lead)
            if lp is None or lp.error_code != 0:
                return None
            rs = voter_state(lp, old_lead)
            ok = lp.high_watermark >= target and rs.log_end_offset >= lp.high_watermark
            return lp if ok else None

        lp = await until(caught_up, f"node {old_lead} to reach the high watermark",
                         timeout=STEP_TIMEOUT)  # fmt: skip
        assert (lp.leader_id, lp.leader_epoch) == (new_lead, new_epoch)
        assert voter_state(lp, old_lead).last_fetch_timestamp > 1_600_000_000_000

        async def all_agree():
            return await cluster.agreed_leader(list(VOTERS))

        a = await until(all_agree, "all three nodes to agree on the leader", timeout=STEP_TIMEOUT)
        assert (a.leader_id, a.leader_epoch) == (new_lead, new_epoch), "the restart moved it"

        r = await asyncio.to_thread(
            cli, "metadata-quorum", "--bootstrap-controller", cluster.nodes[old_lead].address,
            "--timeout", "5", "describe", "--replication",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        rows = {row.split()[0]: row.split() for row in r.stdout.splitlines()[1:]}
        assert rows[str(new_lead)][-1] == "Leader" and rows[str(old_lead)][-1] == "Follower"
        assert int(rows[str(old_lead)][2]) >= target, r.stdout

        # the restarted node holds the batches committed before its crash, byte for byte, and
        # below the high watermark its log IS the leader's: an uncommitted tail it wrote as the
        # old leader (a NoOp not yet replicated at the kill) was truncated, not kept
        committed = await cluster.read_committed(new_lead, new_epoch, lp.high_watermark)
        on_disk = []
        for base in segment_bases(cluster.nodes[old_lead].meta_dir):
            path = cluster.nodes[old_lead].meta_dir / f"{base:020d}.log"
            on_disk += split_batches(path.read_bytes())
        disk_by_base = {b[0]: b[3] for b in on_disk}
        assert all(disk_by_base.get(base) == data for base, _l, _e, data in old)
        below_hw = [b for b in on_disk if b[1] < committed[-1][1] + 1]
        assert [(b[0], b[3]) for b in below_hw] == [(b[0], b[3]) for b in committed], (
            [b[:3] for b in below_hw],
            [b[:3] for b in committed],
        )


# -- 4: catch-up through FetchSnapshot -------------------------------------------------------------


SNAPSHOT_PROPS = {
    "controller.snapshot.minimum.records": "20",
    "metadata.max.retention.bytes": "1",
    "metadata.log.retention.check.interval.ms": "200",
    "max.replication.lag.ms": "1000",
    "metadata.max.idle.interval.ms": "20",
    "metadata.log.segment.bytes": "1024",
}


async def test_follower_behind_the_log_start_catches_up_through_fetch_snapshot(tmp_path):
    async with running_cluster(tmp_path, **SNAPSHOT_PROPS) as cluster:

        async def led():
            p = await cluster.agreed_leader()
            if p is None or p.high_watermark < 5:
                return None
            return p if all(r.log_end_offset > 0 for r in p.current_voters) else None

        p = await until(led, "a leader and three replicas with records", timeout=STEP_TIMEOUT)
        lead, epoch = p.leader_id, p.leader_epoch
        follower = next(i for i in VOTERS if i != lead)
        other = next(i for i in VOTERS if i not in (lead, follower))
        fnode = cluster.nodes[follower]

        cluster.kill(follower)
        old_end, old_last_epoch = log_end_on_disk(fnode.meta_dir)
        before = set(snapshot_ids(fnode.meta_dir))
        assert all(s[0] <= old_end for s in before), (before, old_end)

        # the live nodes snapshot, and the leader's log start passes the dead node's log end
        async def past_it():
            q = await cluster.fetch(lead, 0, 0, epoch)
            if q.error_code or q.snapshot_id.epoch < 0 or q.log_start_offset <= old_end:
                return None
            lead_dir, other_dir = cluster.nodes[lead].meta_dir, cluster.nodes[other].meta_dir
            if not snapshot_ids(lead_dir) or not snapshot_ids(other_dir):
                return None
            if segment_bases(lead_dir)[0] == 0:
                return None  # still the first segment: nothing deleted on disk
            return q

        q = await until(past_it, "the leader's log start to pass the dead follower's log end",
                        timeout=STEP_TIMEOUT)  # fmt: skip
        assert q.snapshot_id.end_offset >= q.log_start_offset > old_end, q
        # what the dead node will ask for next is no longer in the log: only a snapshot has it
        r = await cluster.fetch(lead, old_end, old_last_epoch, epoch)
        assert r.error_code == 0 and not r.records, r
        assert r.snapshot_id.end_offset > old_end and r.snapshot_id.epoch >= 0, r
        assert min(s[0] for s in snapshot_ids(cluster.nodes[lead].meta_dir)) > old_end

        await cluster.restart(follower)
        target = r.snapshot_id.end_offset + 10

        async def caught_up():
            lp = await cluster.describe(lead)
            if lp is None or lp.error_code != 0:
                return None
            rs = voter_state(lp, follower)
            ok = lp.high_watermark >= target and rs.log_end_offset >= lp.high_watermark
            return lp if ok else None

        lp = await until(caught_up, f"node {follower} to catch up through FetchSnapshot",
                         timeout=STEP_TIMEOUT)  # fmt: skip
        assert (lp.leader_id, lp.leader_epoch) == (lead, epoch), "the leadership moved"

        # it loaded a snapshot it had not written: its log restarted at that snapshot's offset.
        # (On its restart it may first truncate to its own latest snapshot, which ends at its
        # old log end when its log had been cleaned up to it - Kafka's
        # KafkaMetadataLog.truncateToLatestSnapshot at open, an empty log either way - so the
        # fetched snapshot is the truncation past the old log end.)
        text = fnode.stderr_text()
        truncations = [
            int(o)
            for o in re.findall(
                r"truncating the log fully to snapshot OffsetAndEpoch\(offset=(\d+)", text
            )
        ]
        loaded = [o for o in truncations if o > old_end]
        assert loaded, (old_end, truncations, text[-4000:])
        assert all(o == old_end for o in truncations[: truncations.index(loaded[0])]), truncations
        after = set(snapshot_ids(fnode.meta_dir))
        assert after and not (after & before), (before, after)
        assert min(s[0] for s in after) >= loaded[0] > old_end
        assert segment_bases(fnode.meta_dir)[0] >= loaded[0], segment_bases(fnode.meta_dir)
        # the snapshot it holds, read independently: SnapshotHeader, the image, SnapshotFooter
        sid = min(after)
        raw = (fnode.meta_dir / f"{sid[0]:020d}-{sid[1]:010d}.checkpoint").read_bytes()
        snap = split_batches(raw)
        assert sum(len(b[3]) for b in snap) == len(raw), "torn snapshot"
        kinds, image = [], []
        for _base, _last, ep, data in snap:
            kb = DefaultRecordBatch(data)
            assert kb.validate_crc() and ep == sid[1]
            for rec in kb:
                if kb.is_control_batch:
                    kinds.append(struct.unpack(">hh", rec.key)[1])
                else:
                    record, _v = codec.decode_record(bytes(rec.value))
                    image.append((type(record).__spec_name__, getattr(record, "name", None)))
        assert kinds == [3, 4], kinds  # SNAPSHOT_HEADER first, SNAPSHOT_FOOTER last
        assert len(snap) >= 3 and DefaultRecordBatch(snap[0][3]).is_control_batch
        assert DefaultRecordBatch(snap[-1][3]).is_control_batch
        # the controller's image as records (Kafka's MetadataImage.write): NoOps leave no trace
        # (then the brokers, and the __diskless-metadata topic the controller creates for them)
        # the finalized features first (metadata.version leading), then the brokers
        assert image[0] == ("FeatureLevelRecord", "metadata.version"), image
        f = sum(1 for r in image if r[0] == "FeatureLevelRecord")
        assert all(r[0] == "FeatureLevelRecord" for r in image[:f]), image
        n = sum(1 for r in image if r[0] == "RegisterBrokerRecord")
        assert n >= 1 and all(r[0] == "RegisterBrokerRecord" for r in image[f : f + n]), image
        # then the controllers' registrations (ClusterImage.write): each controller registers
        # once it knows the active controller, so a snapshot may be taken before the last one
        m = sum(1 for r in image if r[0] == "RegisterControllerRecord")
        assert 1 <= m <= 3, image
        assert image[f + n : f + n + m] == [("RegisterControllerRecord", None)] * m, image
        n += m
        meta_topic = [("TopicRecord", "__diskless-metadata"), ("PartitionRecord", None)]
        assert image[f + n :] in ([], meta_topic), image
        # and the node works on: it keeps fetching what the leader commits
        a = await until(cluster.agreed_leader, "all three nodes to agree on the leader",
                        timeout=STEP_TIMEOUT)  # fmt: skip
        assert (a.leader_id, a.leader_epoch) == (lead, epoch)
