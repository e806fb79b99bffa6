"""Crash consistency: SIGKILL `kafka-rpc serve` under concurrent CommitBatches load, restart it on
the same data directory, and check the diskless logs with FindDisklessBatches/ListDisklessOffsets.

Invariants checked after every restart:

* every ACKNOWLEDGED batch (error 0) is present at exactly the offsets it was given, with its
  record count and object key (for an idempotent retry answered IsDuplicate: the key of the
  earlier attempt that landed);
* every partition's batches are gap-free and non-overlapping from the log start offset (0) to the
  high watermark, and ListDisklessOffsets agrees with FindDisklessBatches;
* every object in the logs is one we sent, and it is there whole or not at all (an unacknowledged
  in-flight commit may or may not have landed);
* what a verification saw is a prefix of what the next one sees (nothing lost or rewritten).

Idempotent producers whose commit was in flight at the kill retry it (same sequences, new object
key) after the restart, like a real producer: the retry must come back either all IsDuplicate at
the landed attempt's offsets, or all freshly appended; continuing without retrying would be a
sequence gap. A SIGKILL loses no page cache, so this checks process-crash consistency (WAL
recovery, group commit, acknowledgement only after COMMIT), not power-loss durability.

Seeded (``CRASH_TEST_SEED``, default 1164); the seed is in every assertion message.
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
from dataclasses import dataclass, field

import pytest

from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
from tests.integration.test_diskless_e2e import M, _first_elem, mod

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("CRASH_TEST_SEED", "1164"))
PARTITIONS = 20
WORKERS = 6  # connections; the first IDEMPOTENT of them are idempotent producers
IDEMPOTENT = 3
CYCLES = 6  # load -> SIGKILL -> restart -> verify
LOAD_S = (0.2, 1.0)  # random load time before the kill
MAX_COMMITS_PER_CYCLE = 2_000  # per worker; bounds the load loop whatever the timing
FINAL_COMMITS = 5  # per worker, after the last restart, without a kill
BATCH_BYTES = 100
START_TIMEOUT = 60.0  # s, a bound: a node starts in ~3 s alone, ~15 s on a loaded machine
STEP_TIMEOUT = 20.0


class Serve:
    """`kafka-rpc serve` on ephemeral ports and ``data_dir``; waits on its printed lines."""

    def __init__(self, data_dir) -> None:
        args = [
            sys.executable, "-m", "kafka_rpc.cli", "--log-level", "WARNING", "serve",
            "--override", "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            "--override", f"log.dirs={data_dir}",
            # a restarted node's new registration waits for its killed incarnation's session
            # to expire (Kafka's ClusterControlManager), and the node serves only then: a
            # shorter session than Kafka's 9 s, heartbeats well inside it
            "--override", "broker.session.timeout.ms=3000",
            "--override", "broker.heartbeat.interval.ms=500",
        ]  # fmt: skip
        # No re-exec: self.proc.pid is the server itself from the first instruction on.
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
        self._started.set()  # EOF: died

    async def started(self) -> str:
        ok = await asyncio.to_thread(self._started.wait, START_TIMEOUT)
        if not ok or self.port is None or self.proc.poll() is not None:
            self.kill()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"server did not start: {self.lines} {err[-4000:]}")
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(START_TIMEOUT)

    def terminate(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


# -- request builders ----------------------------------------------------------------------------

_cm = mod("CommitBatchesRequest")
_fm = mod("FindDisklessBatchesRequest")
_F_TOPIC = _first_elem(_fm, "topics")
_F_PART = _first_elem(_fm, "partitions", _F_TOPIC)
_lm = mod("ListDisklessOffsetsRequest")
_L_TOPIC = _first_elem(_lm, "topics")
_L_PART = _first_elem(_lm, "partitions", _L_TOPIC)


@dataclass
class Batch:
    partition: int
    count: int
    pid: int = -1
    seq: int = -1


@dataclass
class Commit:
    """One commit's batches; ``keys``: the object keys of every attempt sent (a retry after a
    kill is the same batches in a new object)."""

    batches: list[Batch]
    keys: list[str] = field(default_factory=list)


def commit_request(topic: uuid.UUID, key: str, batches: list[Batch]):
    parts = tuple(
        _cm.CommitBatchesTopicPartition(
            partition_index=b.partition, object_key=key, byte_offset=i * BATCH_BYTES,
            size=BATCH_BYTES, base_offset=0, last_offset=b.count - 1, batch_max_timestamp=1000 + i,
            message_timestamp_type=0, producer_id=b.pid, producer_epoch=0 if b.pid >= 0 else -1,
            base_sequence=b.seq, last_sequence=b.seq + b.count - 1 if b.seq >= 0 else -1,
        )  # fmt: skip
        for i, b in enumerate(batches)
    )
    return M("CommitBatchesRequest")(
        broker_id=1,
        batches=(_cm.Batches(topics=(_cm.CommitBatchesTopic(topic_id=topic, partitions=parts),)),),
    )


# -- the run's state -----------------------------------------------------------------------------


@dataclass
class State:
    topic: uuid.UUID
    rng: random.Random
    # (partition, base offset) -> (record count, acceptable object keys) for every acked batch
    acked: dict[tuple[int, int], tuple[int, frozenset[str]]] = field(default_factory=dict)
    attempts: dict[str, list[Batch]] = field(default_factory=dict)  # object key -> its batches
    pending: dict[int, Commit] = field(default_factory=dict)  # idempotent worker -> in flight
    absent: set[str] = field(default_factory=set)  # keys that must never be in the logs
    seqs: dict[tuple[int, int], int] = field(default_factory=dict)  # (pid, partition) -> next
    counter: int = 0
    acked_commits: int = 0
    dup_retries: int = 0
    fresh_retries: int = 0
    lost_in_flight: int = 0
    snapshot: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)

    def new_commit(self, worker: int) -> Commit:
        pid = 1000 + worker if worker < IDEMPOTENT else -1
        batches = []
        for _ in range(self.rng.randint(1, 5)):  # <= 5: a retry stays in the dedup window
            b = Batch(self.rng.randrange(PARTITIONS), self.rng.randint(1, 5), pid)
            if pid >= 0:
                b.seq = self.seqs.get((pid, b.partition), 0)
                self.seqs[(pid, b.partition)] = b.seq + b.count
            batches.append(b)
        return Commit(batches)


def where(st: State) -> str:
    return f"(seed {SEED}; CRASH_TEST_SEED={SEED} reproduces the commit contents)"


async def worker(k: int, client: KafkaRpcClient, st: State, stop: asyncio.Event, limit: int):
    for _ in range(limit):
        if stop.is_set():
            return
        commit = st.pending.pop(k, None)
        retry = commit is not None
        if commit is None:
            commit = st.new_commit(k)
        st.counter += 1
        key = f"w{k}/{st.counter}"
        commit.keys.append(key)
        st.attempts[key] = commit.batches
        try:
            resp = await client.request(commit_request(st.topic, key, commit.batches))
        except (KafkaConnectionError, ConnectionError, TimeoutError, OSError):
            if commit.batches[0].pid >= 0:
                st.pending[k] = commit  # an idempotent producer retries after the restart
            else:
                st.lost_in_flight += 1
            return
        got = [p for t in resp.topics for p in t.partitions]
        assert len(got) == len(commit.batches), where(st)
        assert all(p.error_code == 0 for p in got), (
            f"{key} retry={retry}: {[(p.partition_index, p.error_code) for p in got]} {where(st)}"
        )
        dups = {p.is_duplicate for p in got}
        assert len(dups) == 1, f"{key}: object applied partly: {got} {where(st)}"
        if True in dups:
            # nothing of this attempt was written: an earlier attempt landed whole
            assert retry, f"{key}: IsDuplicate on a first attempt {where(st)}"
            keys = frozenset(commit.keys[:-1])
            st.absent.add(key)
            st.dup_retries += 1
        else:
            keys = frozenset((key,))
            if retry:  # no earlier attempt landed, or this would be a duplicate
                st.absent.update(commit.keys[:-1])
                st.fresh_retries += 1
        for b, p in zip(commit.batches, got):
            assert p.partition_index == b.partition
            st.acked[(b.partition, p.assigned_base_offset)] = (b.count, keys)
        st.acked_commits += 1


async def find_all(client: KafkaRpcClient, st: State, p: int) -> tuple[list, int, int]:
    """Page FindDisklessBatches through partition ``p``: (batches, log start, high watermark)."""
    out: list[tuple[int, int, str]] = []
    offset = 0
    lso = hw = None
    for _ in range(100_000):  # bounded; each page moves forward or ends
        resp = await client.request(M("FindDisklessBatchesRequest")(
            topics=(_F_TOPIC(topic_id=st.topic, partitions=(
                _F_PART(partition_index=p, offset=offset, max_bytes=1 << 30),)),),
            max_bytes=1 << 30))  # fmt: skip
        entries = [e for t in resp.responses for e in t.partitions]
        assert entries and all(e.error_code == 0 for e in entries), (p, offset, entries)
        lso, hw = entries[0].log_start_offset, entries[0].high_watermark
        batches = [e for e in entries if e.object_key]
        if not batches:
            assert offset == hw, f"p{p}: no batch at {offset} below hw {hw} {where(st)}"
            return out, lso, hw
        for e in batches:
            assert e.high_watermark == hw and e.partition_index == p
            out.append((e.base_offset, e.last_offset, e.object_key))
        offset = batches[-1].last_offset + 1
    raise AssertionError(f"p{p}: paging did not end {where(st)}")


async def verify(client: KafkaRpcClient, st: State, label: str) -> int:
    logs = {}
    for p in range(PARTITIONS):
        logs[p], lso, hw = await find_all(client, st, p)
        assert lso == 0, f"{label} p{p}: log start {lso}"
        expect = 0
        for base, last, _key in logs[p]:
            assert base == expect, f"{label} p{p}: batch at {base}, expected {expect} (gap or " \
                f"overlap) {where(st)}"  # fmt: skip
            assert last >= base
            expect = last + 1
        assert expect == hw, f"{label} p{p}: batches end at {expect}, hw {hw} {where(st)}"
    lo = await client.request(M("ListDisklessOffsetsRequest")(topics=(_L_TOPIC(
        topic_id=st.topic,
        partitions=tuple(_L_PART(partition_index=p, timestamp=ts)
                         for p in range(PARTITIONS) for ts in (-1, -2))),)))  # fmt: skip
    offs = [(e.partition_index, e.error_code, e.offset) for t in lo.responses for e in t.partitions]
    want = [(p, 0, off) for p in range(PARTITIONS)
            for off in ((logs[p][-1][1] + 1) if logs[p] else 0, 0)]  # fmt: skip
    assert offs == want, f"{label}: ListDisklessOffsets {offs} != {want} {where(st)}"

    # every acked batch at its offsets, with its count and key
    at = {(p, base): (last, key) for p, bs in logs.items() for base, last, key in bs}
    for (p, base), (count, keys) in st.acked.items():
        assert (p, base) in at, f"{label}: acked p{p}@{base} ({keys}) missing {where(st)}"
        last, key = at[(p, base)]
        assert last == base + count - 1 and key in keys, (
            f"{label}: p{p}@{base}: found ({last}, {key}), acked ({count} records, {keys}) "
            f"{where(st)}"
        )
    # every object is ours and whole: per partition, its batches' record counts in request order
    found: dict[str, dict[int, list[int]]] = {}
    for p, bs in logs.items():
        for base, last, key in bs:
            found.setdefault(key, {}).setdefault(p, []).append(last - base + 1)
    for key, per_part in found.items():
        assert key in st.attempts, f"{label}: unknown object {key} {where(st)}"
        assert key not in st.absent, f"{label}: {key} is in the logs, but its idempotent " \
            f"retry was appended again (or it repeats a landed attempt) {where(st)}"  # fmt: skip
        sent: dict[int, list[int]] = {}
        for b in st.attempts[key]:
            sent.setdefault(b.partition, []).append(b.count)
        assert per_part == sent, f"{label}: object {key} not whole: {per_part} != {sent}"
    # nothing seen before is lost or rewritten
    for p, before in st.snapshot.items():
        assert logs[p][: len(before)] == before, f"{label} p{p}: earlier batches changed"
    st.snapshot = logs
    return sum(len(bs) for bs in logs.values())


async def connect(bootstrap: str, k: int) -> KafkaRpcClient:
    return await KafkaRpcClient.connect(
        bootstrap, client_id=f"crash-{k}", connect_timeout=2.0, request_timeout=STEP_TIMEOUT
    )


async def run_load(bootstrap: str, st: State, kill_after: float | None, srv: Serve) -> None:
    clients = [await connect(bootstrap, k) for k in range(WORKERS)]
    stop = asyncio.Event()
    limit = FINAL_COMMITS if kill_after is None else MAX_COMMITS_PER_CYCLE
    try:
        tasks = [asyncio.create_task(worker(k, c, st, stop, limit)) for k, c in enumerate(clients)]
        if kill_after is not None:
            done, _ = await asyncio.wait(tasks, timeout=kill_after)
            for t in done:  # a worker that ended early failed: report it now
                t.result()
            srv.kill()  # SIGKILL, with commits in flight
            stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), STEP_TIMEOUT)
    finally:
        stop.set()
        for c in clients:
            await c.close()


async def test_sigkill_under_commit_load(tmp_path):
    st = State(topic=uuid.uuid4(), rng=random.Random(SEED))
    data = tmp_path / "data"
    servers: list[Serve] = []
    try:
        srv = Serve(data)
        servers.append(srv)
        bootstrap = await srv.started()
        c = await connect(bootstrap, 99)
        mi = mod("InitDisklessTopicsRequest")
        init = await c.request(M("InitDisklessTopicsRequest")(
            topics=(_first_elem(mi, "topics")(topic_id=st.topic, num_partitions=PARTITIONS),)))
        assert [r.error_code for r in init.responses] == [0]
        await c.close()

        for cycle in range(CYCLES):
            await run_load(bootstrap, st, st.rng.uniform(*LOAD_S), srv)
            assert srv.proc.returncode == -signal.SIGKILL
            srv = Serve(data)
            servers.append(srv)
            bootstrap = await srv.started()
            c = await connect(bootstrap, 99)
            try:
                await verify(c, st, f"after kill {cycle + 1}")
            finally:
                await c.close()

        # last round: no kill; the idempotent producers' retries resolve, then a clean stop
        await run_load(bootstrap, st, None, srv)
        assert not st.pending
        c = await connect(bootstrap, 99)
        try:
            total = await verify(c, st, "final")
        finally:
            await c.close()
        assert srv.terminate() == 0
        assert st.acked_commits > CYCLES * WORKERS, st.acked_commits
        print(f"seed {SEED}: {st.acked_commits} commits acked, {total} batches in the logs, "
              f"{st.lost_in_flight} unacked plain commits, idempotent retries after a kill: "
              f"{st.dup_retries} duplicate / {st.fresh_retries} fresh")  # fmt: skip
    finally:
        for s in servers:
            s.close()
