"""SIGKILL of the ``__diskless-metadata`` leader under idempotent commits.

Three ``kafka-rpc serve`` processes, each with ``diskless.coordinator.url=raft://...`` naming the
same partition (topic id) and the three controller listeners as its voters. Three idempotent
producers commit through whichever node answers (NOT_COORDINATOR or a broken connection: the
next node, the same batches in a new object, as a broker re-uploads). The leader is SIGKILLed in
the middle of the load. Checked on the survivors:

* a new leader is elected and takes the commits;
* every acknowledged batch is in the log exactly once, at the offsets it was given; no producer
  sequence is in the log twice (an in-flight commit at the kill landed once or not at all);
* re-sending a producer's last acknowledged commit (new object key) after the failover is answered
  IsDuplicate with the ORIGINAL offsets;
* the follower's answers equal the new leader's once it caught up.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import threading
import uuid

import pytest

from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
from kafka_rpc.protocol.uuids import uuid_text
from tests.integration.test_crash import _F_PART, _F_TOPIC, Batch, commit_request
from tests.integration.test_diskless_e2e import M, _first_elem, mod
from tests.raft.test_driver_single import free_port
from tests.waiting import until

pytestmark = pytest.mark.integration

PARTITIONS = 6
PRODUCERS = 3
COMMITS_BEFORE_KILL = 15  # per producer
COMMITS_AFTER_KILL = 10  # per producer, counted from the kill
MAX_COMMITS = 2_000  # per producer and phase: bounds the loop whatever the timing
START_TIMEOUT = 60.0  # s, a bound: a node starts in ~3 s alone, ~15 s on a loaded machine
STEP_TIMEOUT = 15.0
NOT_COORDINATOR = 16
LOAD_IN_PROGRESS = 14  # COORDINATOR_LOAD_IN_PROGRESS: retriable on the same node

_im = mod("InitDisklessTopicsRequest")
_I_TOPIC = _first_elem(_im, "topics")


class Node:
    """`kafka-rpc serve` with a replicated coordinator; waits on its printed lines."""

    def __init__(self, root, node_id: int, cports: dict[int, int], topic_id: uuid.UUID) -> None:
        self.node_id = node_id
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in cports.items())
        url = (
            f"raft://{root}/n{node_id}/coordinator?node_id={node_id}&voters={voters}"
            f"&topic_id={uuid_text(topic_id)}&raft.election_timeout_ms=300"
            "&raft.fetch_timeout_ms=600&write_timeout_ms=5000"
        )
        args = [
            sys.executable, "-m", "kafka_rpc.cli", "--log-level", "WARNING", "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{cports[node_id]}",
            "--override", f"log.dirs={root}/n{node_id}/data",
            "--override", f"node.id={node_id}",
            "--override", f"controller.quorum.voters={node_id}@127.0.0.1:{cports[node_id]}",
            "--override", f"diskless.coordinator.url={url}",
        ]  # fmt: skip
        env = dict(os.environ, KAFKA_RPC_NO_REEXEC="1")
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines: list[str] = []
        self.port: int | None = None
        self._started = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.match(r"listening PLAINTEXT \(\w+\) on [\d.]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if line.startswith("cluster id"):
                self._started.set()
        self._started.set()

    async def started(self) -> str:
        ok = await asyncio.to_thread(self._started.wait, START_TIMEOUT)
        if not ok or self.port is None or self.proc.poll() is not None:
            self.kill()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"node {self.node_id} did not start: {self.lines} {err[-3000:]}")
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(START_TIMEOUT)

    def close(self) -> None:
        self.kill()
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


class Producers:
    """The producers' view: what was acknowledged where, and every attempt's batches."""

    def __init__(self, topic: uuid.UUID, clients: dict[int, KafkaRpcClient]) -> None:
        self.topic = topic
        self.clients = clients
        self.alive = set(clients)
        self.target = min(clients)
        self.rng = random.Random(1164)
        self.seqs: dict[tuple[int, int], int] = {}
        self.attempts: dict[str, list[Batch]] = {}  # object key -> its batches
        self.acked: dict[tuple[int, int, int], int] = {}  # (pid, partition, seq) -> base offset
        self.last: dict[int, tuple[list[Batch], list[int]]] = {}  # pid -> last acked commit
        self.counter = 0
        self.failovers = 0
        self.dup_retries = 0  # retries answered IsDuplicate (an earlier attempt had landed)

    def batches(self, pid: int) -> list[Batch]:
        out = []
        for partition in self.rng.sample(range(PARTITIONS), 2):  # distinct: one per partition
            b = Batch(partition, self.rng.randint(1, 3), pid)
            b.seq = self.seqs.get((pid, partition), 0)
            self.seqs[(pid, partition)] = b.seq + b.count
            out.append(b)
        return out

    async def send(self, batches: list[Batch], resend: bool = False) -> list:
        """Commit ``batches`` through the current target, failing over (new object key each
        attempt) until a node answers without NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS: the
        same node again); returns its partition results."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STEP_TIMEOUT
        first = not resend
        while loop.time() < deadline:
            node = self.target
            self.counter += 1
            key = f"obj-{self.counter}"
            self.attempts[key] = batches
            try:
                resp = await asyncio.wait_for(
                    self.clients[node].request(commit_request(self.topic, key, batches)), 6
                )
            except (KafkaConnectionError, ConnectionError, TimeoutError, OSError):
                resp = None
            parts = resp.topics[0].partitions if resp is not None else None
            if parts and all(p.error_code == 0 for p in parts):
                dups = [p.is_duplicate for p in parts]
                if first:
                    assert not any(dups), parts  # a first attempt answered is fresh
                elif any(dups):
                    # an earlier attempt landed (its answer was lost with the leader): the
                    # retry is all duplicates, at the offsets that attempt was given
                    assert all(dups), parts
                    self.dup_retries += 1
                return list(parts)
            first = False
            codes = {p.error_code for p in parts} if parts else set()
            assert codes <= {NOT_COORDINATOR, LOAD_IN_PROGRESS}, parts
            if codes == {LOAD_IN_PROGRESS}:  # the coordinator is loading here: ask again
                await asyncio.sleep(0.05)
                continue
            self.failovers += 1
            alive = sorted(self.alive)
            self.target = alive[(alive.index(node) + 1) % len(alive)] if node in alive else alive[0]
            await asyncio.sleep(0.05)
        raise AssertionError("no node took the commit in time")

    async def produce(self, pid: int, n: int, killed: asyncio.Event | None = None) -> None:
        """``n`` commits; with ``killed``: until ``n`` commits were made after it was set
        (at most ``MAX_COMMITS``)."""
        done_after = 0
        for i in range(MAX_COMMITS):
            if killed is None and i >= n or killed is not None and done_after >= n:
                return
            if killed is not None and killed.is_set():
                done_after += 1
            batches = self.batches(pid)
            parts = await self.send(batches)
            for b, p in zip(batches, parts):
                self.acked[(pid, b.partition, b.seq)] = p.assigned_base_offset
            self.last[pid] = (batches, [p.assigned_base_offset for p in parts])


async def find_all(client: KafkaRpcClient, topic: uuid.UUID) -> dict[int, list]:
    """Every batch of every partition, FindDisklessBatches from offset 0 until the HW."""
    out: dict[int, list] = {}
    for partition in range(PARTITIONS):
        got: list = []
        offset, hw = 0, None
        while hw is None or offset < hw:
            resp = await client.request(M("FindDisklessBatchesRequest")(
                topics=(_F_TOPIC(topic_id=topic, partitions=(
                    _F_PART(partition_index=partition, offset=offset, max_bytes=1 << 20),)),),
                max_bytes=1 << 20,
            ))  # fmt: skip
            parts = resp.responses[0].partitions
            assert all(p.error_code == 0 for p in parts), parts
            hw = parts[0].high_watermark
            batches = [p for p in parts if p.object_key]
            if not batches:
                break
            got.extend(batches)
            offset = batches[-1].last_offset + 1
        out[partition] = [
            (b.base_offset, b.last_offset, b.object_key, b.byte_offset, b.producer_id,
             b.base_sequence)
            for b in got
        ]  # fmt: skip
    return out


async def test_sigkill_of_the_leader_loses_and_duplicates_nothing(tmp_path):
    cports = {i: free_port() for i in (1, 2, 3)}
    topic_id = uuid.uuid4()  # the diskless data topic
    meta_id = uuid.uuid4()  # the __diskless-metadata partition's topic id
    nodes = {i: Node(tmp_path, i, cports, meta_id) for i in cports}
    clients: dict[int, KafkaRpcClient] = {}
    try:
        for i, n in nodes.items():
            clients[i] = await KafkaRpcClient.connect(await n.started(), connect_timeout=5)
        # the data topic, created through whichever node leads
        async def created_on_leader():
            for i, c in clients.items():
                req = M("InitDisklessTopicsRequest")(
                    topics=(_I_TOPIC(topic_id=topic_id, num_partitions=PARTITIONS),)
                )
                resp = await c.request(req)
                if resp.responses[0].error_code == 0:
                    return i
                # a follower answers NOT_COORDINATOR; a node still replaying its replica answers
                # COORDINATOR_LOAD_IN_PROGRESS: both retriable, ask again
                assert resp.responses[0].error_code in (NOT_COORDINATOR, LOAD_IN_PROGRESS), resp
            return None

        leader = await until(created_on_leader, "a coordinator leader", timeout=START_TIMEOUT,
                             interval=0.1)  # fmt: skip

        prod = Producers(topic_id, clients)
        prod.target = leader
        pids = [1000 + k for k in range(PRODUCERS)]
        await asyncio.gather(*(prod.produce(pid, COMMITS_BEFORE_KILL) for pid in pids))

        # SIGKILL the leader while the producers are committing
        killed = asyncio.Event()

        async def kill_soon():
            await asyncio.sleep(0.3)
            nodes[leader].kill()
            prod.alive.discard(leader)
            killed.set()

        await asyncio.gather(
            kill_soon(), *(prod.produce(pid, COMMITS_AFTER_KILL, killed) for pid in pids)
        )
        assert prod.failovers > 0
        new_leader = prod.target
        assert new_leader != leader and new_leader in prod.alive

        # an acknowledged commit re-sent after the failover is a duplicate at its first offsets
        for pid in pids:
            batches, offsets = prod.last[pid]
            parts = await prod.send(batches, resend=True)
            assert [p.is_duplicate for p in parts] == [True] * len(batches), (pid, parts)
            assert [p.assigned_base_offset for p in parts] == offsets, pid

        # the survivors agree (the follower caught up), nothing lost, nothing twice
        follower = next(i for i in prod.alive if i != new_leader)
        want = await find_all(clients[new_leader], topic_id)

        async def caught_up():
            return await find_all(clients[follower], topic_id) == want

        await until(caught_up, "the follower to catch up", timeout=STEP_TIMEOUT)
        seen: dict[tuple[int, int, int], int] = {}
        for partition, batches in want.items():
            expect = 0
            for base, last, key, byte_offset, pid, seq in batches:
                assert base == expect, (partition, batches)  # gap-free from 0
                expect = last + 1
                b = prod.attempts[key][byte_offset // 100]
                assert (b.partition, b.pid, b.seq) == (partition, pid, seq)
                ident = (b.pid, b.partition, b.seq)
                assert ident not in seen, ("duplicated", ident)
                seen[ident] = base
        for ident, base in prod.acked.items():
            assert seen.get(ident) == base, ("lost or moved", ident, base, seen.get(ident))
    finally:
        for c in clients.values():
            await c.close()
        for n in nodes.values():
            n.close()
