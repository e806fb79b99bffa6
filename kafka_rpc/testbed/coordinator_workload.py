"""Clients of the replicated Batch Coordinator that record a history
(``kafka_rpc.testbed.history``) while faults happen: the workload of the network-fault scenarios
and of ``bench/nemesis.py`` (``docs/network-faults.md``).

* :class:`Writer`: an idempotent producer (its own producer id, epoch 0, a base sequence per
  partition) committing one object per operation with CommitBatches, one batch on each of one or
  two partitions, to the coordinator it finds with FindCoordinator v7 key type BATCH
  ``write:<topic>:0`` (docs/batch-coordinator.md), asking the nodes in turn. An answer with every
  entry NONE is ``ok``; an entry answering NOT_COORDINATOR (16), COORDINATOR_NOT_AVAILABLE (15),
  REQUEST_TIMED_OUT (7), KAFKA_STORAGE_ERROR (56) or UNKNOWN_SERVER_ERROR (-1), a timeout or a
  lost connection leaves the operation indeterminate (``info``) and the same request (same
  object, same sequences) is sent again, to the coordinator found again, until it is answered or
  ``give_up_s`` passed; a connection that could not be made is ``fail`` (nothing was sent), and
  so is any other entry error. When a batch stays indeterminate, or is rejected, the producer
  takes a new producer id (its sequences could no longer be trusted), as Kafka's producer resets
  after an unresolved batch.
* :class:`Reader`: one client bound to one node (its read-only coordinator, or the leader),
  alternating FindDisklessBatches from where it left off and ListDisklessOffsets (LATEST) for
  every partition, each an ``ok`` read with the high watermarks (and batches) the node answered.
* :class:`QuorumPoller`: DescribeQuorum of the metadata log and of ``__diskless-metadata``
  partition 0 on nodes, as :class:`~kafka_rpc.testbed.history.LeaderObservation`.
* :func:`final_state`: every batch of every partition, read on the leader after the heal.

Times are ``time.monotonic()`` seconds. Every request is bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Sequence

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.coordinator.replicated import DISKLESS_METADATA_TOPIC_NAME
from kafka_rpc.protocol import codec
from kafka_rpc.raft.api import METADATA_TOPIC_NAME
from kafka_rpc.testbed.bench_cluster import batch_key
from kafka_rpc.testbed.history import (
    FAIL,
    INFO,
    OK,
    Entry,
    FinalPartition,
    LeaderObservation,
    Op,
    Read,
)

__all__ = [
    "LOGS",
    "QuorumPoller",
    "Reader",
    "Recorder",
    "Writer",
    "coordinator_of",
    "final_state",
    "init_topic",
    "last_leader",
    "max_high_watermark",
    "tp_name",
]

BATCH = 3  # FindCoordinator key type BATCH (KIP-1164)
INDETERMINATE_CODES = frozenset((16, 15, 7, 56, -1))
LOGS = (METADATA_TOPIC_NAME, DISKLESS_METADATA_TOPIC_NAME)
_Commit = codec.module("CommitBatchesRequest")
_Find = codec.module("FindDisklessBatchesRequest")
_List = codec.module("ListDisklessOffsetsRequest")
_Init = codec.module("InitDisklessTopicsRequest")
_FC = codec.module("FindCoordinatorRequest")
_DQ = codec.module("DescribeQuorumRequest")


def tp_name(topic_id: uuid.UUID, partition: int) -> str:
    return f"{topic_id}:{partition}"


def batch_identity(tp: str, producer_id: int, producer_epoch: int, base_sequence: int) -> str:
    """The history's key of a batch: an idempotent producer's batch is one logical write
    whatever object carried it (``<tp>/<producer id>/<epoch>/<base sequence>``)."""
    return f"{tp}/{producer_id}/{producer_epoch}/{base_sequence}"


class Recorder:
    """The history: every :class:`Op`, numbered in invocation order."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def invoke(self, process: str, kind: str, node: int | None, role: str | None) -> Op:
        op = Op(len(self.ops), process, kind, time.monotonic(), node=node, role=role)
        self.ops.append(op)
        return op

    @staticmethod
    def complete(op: Op, outcome: str, error: str | None = None) -> None:
        op.complete = time.monotonic()
        op.outcome = outcome
        op.error = error


class Clients:
    """One client per node address (``host:port``), made on first use; a client whose request
    failed is closed and made again next time (no pipelining onto a stalled connection)."""

    def __init__(self, client_id: str, timeout: float) -> None:
        self.client_id = client_id
        self.timeout = timeout
        self.clients: dict[str, KafkaRpcClient] = {}

    async def get(self, address: str) -> KafkaRpcClient:
        """A connected client; raises ``ConnectionError``/``OSError`` when no connection could
        be made within the timeout (nothing was sent)."""
        c = self.clients.get(address)
        if c is None:
            c = await KafkaRpcClient.connect(address, client_id=self.client_id,
                                             request_timeout=self.timeout,
                                             connect_timeout=min(1.0, self.timeout),
                                             max_backoff=0.2)  # fmt: skip
            self.clients[address] = c
        return c

    async def drop(self, address: str) -> None:
        c = self.clients.pop(address, None)
        if c is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(c.close(), 1.0)

    async def close(self) -> None:
        for a in list(self.clients):
            await self.drop(a)


async def coordinator_of(clients: Clients, address: str, topic_id: uuid.UUID) -> int | None:
    """The node id ``address`` names as the write coordinator of ``topic_id`` (FindCoordinator
    v7 BATCH ``write:``), or None (an error, no answer)."""
    key = batch_key("write", topic_id, 0)
    req = _FC.FindCoordinatorRequest(key_type=BATCH, coordinator_keys=(key,))
    try:
        c = await clients.get(address)
        resp = await c.request(req, version=7, timeout=clients.timeout)
    except (OSError, TimeoutError, ConnectionError):
        await clients.drop(address)
        return None
    (k,) = resp.coordinators
    return k.node_id if k.error_code == 0 and k.node_id >= 0 else None


async def init_topic(addresses: dict[int, str], topic_id: uuid.UUID, partitions: int,
                     timeout: float = 30.0) -> None:  # fmt: skip
    """InitDisklessTopics of ``topic_id`` on the write coordinator, retried (bounded) until it
    answers NONE. RuntimeError after ``timeout`` seconds."""
    clients = Clients("netns-init", 3.0)
    req = _Init.InitDisklessTopicsRequest(
        topics=(_Init.InitDisklessTopic(topic_id=topic_id, num_partitions=partitions),)
    )
    deadline = time.monotonic() + timeout
    last: BaseException | list[int] | None = None
    try:
        while time.monotonic() < deadline:
            for address in addresses.values():
                leader = await coordinator_of(clients, address, topic_id)
                if leader is None or leader not in addresses:
                    continue
                try:
                    c = await clients.get(addresses[leader])
                    resp = await c.request(req, timeout=3.0)
                except (OSError, TimeoutError, ConnectionError) as exc:
                    last = exc
                    await clients.drop(addresses[leader])
                    continue
                codes = [r.error_code for r in resp.responses]
                if codes == [0]:
                    return
                last = codes
            await asyncio.sleep(0.2)
    finally:
        await clients.close()
    raise RuntimeError(f"InitDisklessTopics did not succeed in {timeout:g} s: {last}")


class Writer:
    """An idempotent producer (module docstring). ``addresses``: node id -> ``host:port``;
    ``partitions``: of ``topic_id``; ``think_s``: pause between operations."""

    def __init__(self, name: str, rec: Recorder, addresses: dict[int, str],
                 topic_id: uuid.UUID, partitions: int, rng: random.Random,
                 producer_id_base: int, timeout: float = 3.0, give_up_s: float = 20.0,
                 think_s: float = 0.02) -> None:  # fmt: skip
        self.name = name
        self.rec = rec
        self.addresses = addresses
        self.topic_id = topic_id
        self.partitions = partitions
        self.rng = rng
        self.timeout = timeout
        self.give_up_s = give_up_s
        self.think_s = think_s
        self.clients = Clients(f"netns-{name}", timeout)
        self.producer_id_base = producer_id_base
        self.generation = 0
        self.next_seq: dict[int, int] = {}
        self.coordinator: int | None = None
        self.ops = 0
        self.abandoned = 0
        #: set by an abort: no further attempt (the operation stays as it is)
        self.aborted = False

    @property
    def producer_id(self) -> int:
        return self.producer_id_base + self.generation

    def _new_producer(self) -> None:
        self.generation += 1
        self.next_seq.clear()
        self.abandoned += 1

    async def _discover(self, deadline: float) -> int | None:
        order = list(self.addresses)
        self.rng.shuffle(order)
        delay = 0.05
        while time.monotonic() < deadline:
            for node in order:
                found = await coordinator_of(self.clients, self.addresses[node], self.topic_id)
                if found is not None and found in self.addresses:
                    return found
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        return None

    def _request(self, object_key: str, parts: list[int], counts: list[int],
                 seqs: list[int]):  # fmt: skip
        """``(CommitBatchesRequest, [Entry])`` for one object holding a batch of ``counts[i]``
        records at base sequence ``seqs[i]`` on partition ``parts[i]``."""
        now_ms = int(time.time() * 1000)
        entries, wire = [], []
        pid = self.producer_id
        for i, (p, n, seq) in enumerate(zip(parts, counts, seqs, strict=True)):
            tp = tp_name(self.topic_id, p)
            entries.append(Entry(tp=tp, key=batch_identity(tp, pid, 0, seq), records=n,
                                 producer_id=pid, producer_epoch=0, base_sequence=seq))  # fmt: skip
            wire.append(_Commit.CommitBatchesTopicPartition(
                partition_index=p, object_key=object_key, byte_offset=i * 100, size=100,
                base_offset=0, last_offset=n - 1, batch_max_timestamp=now_ms,
                message_timestamp_type=0, producer_id=pid, producer_epoch=0,
                base_sequence=seq, last_sequence=seq + n - 1,
            ))  # fmt: skip
        topic = _Commit.CommitBatchesTopic(topic_id=self.topic_id, partitions=tuple(wire))
        req = _Commit.CommitBatchesRequest(broker_id=1, batches=(_Commit.Batches(topics=(topic,)),))
        return req, entries

    async def one(self) -> None:
        """One logical commit, retried while indeterminate (module docstring)."""
        self.ops += 1
        k = 1 if self.partitions == 1 or self.rng.random() < 0.7 else 2
        parts = self.rng.sample(range(self.partitions), k)
        counts = [self.rng.randint(1, 5) for _ in parts]
        seqs = [self.next_seq.get(p, 0) for p in parts]
        deadline = time.monotonic() + self.give_up_s
        attempt = 0
        while True:
            # every attempt uploads "its own object" (a retry of a known object key is
            # INVALID_REQUEST); the producer id and sequences stay, so a committed earlier
            # attempt is answered IsDuplicate with its offsets
            attempt += 1
            req, template = self._request(f"{self.name}-{self.ops:07d}-{attempt}", parts,
                                          counts, seqs)  # fmt: skip
            if self.coordinator is None:
                self.coordinator = await self._discover(deadline)
                if self.coordinator is None:
                    self._new_producer()  # the earlier attempts may have committed
                    return
            node = self.coordinator
            address = self.addresses[node]
            op = self.rec.invoke(self.name, "commit", node, "leader")
            op.entries = [Entry(**vars(e)) for e in template]
            try:
                client = await self.clients.get(address)
            except (OSError, TimeoutError, ConnectionError) as exc:
                Recorder.complete(op, FAIL, f"connect: {exc}")
                await self.clients.drop(address)
                self.coordinator = None
            else:
                try:
                    resp = await client.request(req, timeout=self.timeout)
                except (OSError, TimeoutError, ConnectionError) as exc:
                    Recorder.complete(op, INFO, f"{type(exc).__name__}: {exc}")
                    await self.clients.drop(address)
                    self.coordinator = None
                else:
                    answers = [p for t in resp.topics for p in t.partitions]
                    codes = [a.error_code for a in answers]
                    for e, a in zip(op.entries, answers, strict=False):
                        e.error = a.error_code
                        e.base_offset = a.assigned_base_offset if a.error_code == 0 else -1
                        e.duplicate = bool(a.is_duplicate)
                    if len(answers) == len(op.entries) and all(c == 0 for c in codes):
                        Recorder.complete(op, OK)
                        for e, p in zip(op.entries, parts, strict=True):
                            self.next_seq[p] = e.base_sequence + e.records
                        return
                    if any(c in INDETERMINATE_CODES for c in codes):
                        Recorder.complete(op, INFO, f"codes {codes}")
                        self.coordinator = None
                    else:
                        Recorder.complete(op, FAIL, f"codes {codes}")
                        self._new_producer()
                        return
            if time.monotonic() > deadline or self.aborted:
                self._new_producer()
                return
            await asyncio.sleep(0.05)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                await self.one()
                if self.think_s:
                    await asyncio.sleep(self.think_s)
        finally:
            await self.clients.close()


class Reader:
    """Reads on one node (module docstring); ``interval_s`` between reads."""

    def __init__(self, name: str, rec: Recorder, node: int, address: str,
                 topic_id: uuid.UUID, partitions: int, timeout: float = 2.0,
                 interval_s: float = 0.1) -> None:  # fmt: skip
        self.name = name
        self.rec = rec
        self.node = node
        self.address = address
        self.topic_id = topic_id
        self.partitions = partitions
        self.timeout = timeout
        self.interval_s = interval_s
        self.clients = Clients(f"netns-{name}", timeout)
        self.position = dict.fromkeys(range(partitions), 0)
        self.n = 0

    async def one(self) -> None:
        self.n += 1
        find = self.n % 2 == 1
        if find:
            req = _Find.FindDisklessBatchesRequest(max_bytes=4 * 1024 * 1024, topics=(
                _Find.FindDisklessBatchTopic(topic_id=self.topic_id, partitions=tuple(
                    _Find.FindDisklessBatchTopicPartition(partition_index=p, offset=off,
                                                          max_bytes=1024 * 1024)
                    for p, off in self.position.items())),))  # fmt: skip
        else:
            req = _List.ListDisklessOffsetsRequest(topics=(_List.ListDisklessOffsetsTopic(
                topic_id=self.topic_id, partitions=tuple(
                    _List.ListDisklessOffsetsTopicPartition(partition_index=p, timestamp=-1)
                    for p in range(self.partitions))),))  # fmt: skip
        op = self.rec.invoke(self.name, "read", self.node, "replica")
        try:
            client = await self.clients.get(self.address)
            resp = await client.request(req, timeout=self.timeout)
        except (OSError, TimeoutError, ConnectionError) as exc:
            Recorder.complete(op, FAIL, f"{type(exc).__name__}: {exc}")
            await self.clients.drop(self.address)
            return
        reads: dict[int, Read] = {}
        errors = []
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code:
                    errors.append(p.error_code)
                    continue
                r = reads.setdefault(p.partition_index, Read(
                    tp_name(self.topic_id, p.partition_index), -1))  # fmt: skip
                if find:
                    r.high_watermark = max(r.high_watermark, p.high_watermark)
                    if p.object_key and p.base_offset >= 0:
                        r.batches.append([p.base_offset, p.last_offset,
                                          _found_identity(r.tp, p)])  # fmt: skip
                        pos = self.position[p.partition_index]
                        self.position[p.partition_index] = max(pos, p.last_offset + 1)
                else:
                    r.high_watermark = p.offset
        op.reads = [r for r in reads.values() if r.high_watermark >= 0]
        Recorder.complete(op, OK if op.reads else FAIL, f"codes {errors}" if errors else None)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                await self.one()
                await asyncio.sleep(self.interval_s)
        finally:
            await self.clients.close()


class QuorumPoller:
    """DescribeQuorum of both logs on every node of ``addresses`` every ``interval_s``
    (module docstring); each answer appended to :attr:`observations`."""

    def __init__(self, addresses: dict[int, str], interval_s: float = 0.2,
                 timeout: float = 1.0) -> None:  # fmt: skip
        self.addresses = addresses
        self.interval_s = interval_s
        self.clients = {n: Clients(f"netns-quorum-{n}", timeout) for n in addresses}
        self.observations: list[LeaderObservation] = []

    async def ask(self, node: int, log: str) -> LeaderObservation | None:
        part = _DQ.PartitionData(partition_index=0)
        req = _DQ.DescribeQuorumRequest(topics=(_DQ.TopicData(topic_name=log, partitions=(part,)),))
        clients = self.clients[node]
        address = self.addresses[node]
        try:
            c = await clients.get(address)
            resp = await c.request(req, timeout=clients.timeout)
        except (OSError, TimeoutError, ConnectionError):
            await clients.drop(address)
            return None
        if resp.error_code or not resp.topics or not resp.topics[0].partitions:
            return None
        p = resp.topics[0].partitions[0]
        o = LeaderObservation(time.monotonic(), log, node, p.leader_epoch, p.leader_id,
                              p.error_code == 0, p.high_watermark)  # fmt: skip
        self.observations.append(o)
        return o

    async def poll_once(self) -> list[LeaderObservation | None]:
        asks = [self.ask(n, log) for n in self.addresses for log in LOGS]
        return list(await asyncio.gather(*asks))

    async def run(self, stop) -> None:
        """Poll until ``stop.is_set()`` (an ``asyncio.Event`` or a ``threading.Event``)."""
        try:
            while not stop.is_set():
                await self.poll_once()
                await asyncio.sleep(self.interval_s)
        finally:
            for c in self.clients.values():
                await c.close()


def last_leader(observations: Sequence[LeaderObservation], log: str,
                since: float = 0.0) -> int | None:  # fmt: skip
    """The node that last answered as ``log``'s leader at or after ``since`` (observations in
    time order)."""
    for o in reversed(observations):
        if o.t < since:
            break
        if o.log == log and o.is_leader:
            return o.observer
    return None


def max_high_watermark(observations: Sequence[LeaderObservation], log: str) -> int:
    """The highest high watermark a leader of ``log`` reported (-1: none)."""
    return max((o.high_watermark for o in observations if o.log == log and o.is_leader),
               default=-1)  # fmt: skip


def _found_identity(tp: str, e) -> str:
    """:func:`batch_identity` of a FindDisklessBatches entry (``object key/byte offset`` for a
    batch of no idempotent producer)."""
    if e.producer_id < 0:
        return f"{e.object_key}/{e.byte_offset}"
    return batch_identity(tp, e.producer_id, e.producer_epoch, e.base_sequence)


async def final_state(address: str, topic_id: uuid.UUID, partitions: Sequence[int],
                      timeout: float = 5.0) -> dict[str, FinalPartition]:  # fmt: skip
    """Every batch of every partition from node ``address`` (FindDisklessBatches from the log
    start offset, page by page, up to the high watermark)."""
    clients = Clients("netns-final", timeout)
    out: dict[str, FinalPartition] = {}
    try:
        c = await clients.get(address)
        for p in partitions:
            offset = 0
            part = None
            while part is None or offset < part.high_watermark:
                want = _Find.FindDisklessBatchTopicPartition(
                    partition_index=p, offset=offset, max_bytes=8 * 1024 * 1024
                )
                topic = _Find.FindDisklessBatchTopic(topic_id=topic_id, partitions=(want,))
                req = _Find.FindDisklessBatchesRequest(max_bytes=8 * 1024 * 1024, topics=(topic,))
                resp = await c.request(req, timeout=timeout)
                entries = [e for t in resp.responses for e in t.partitions]
                if any(e.error_code for e in entries):
                    raise RuntimeError(f"final read of partition {p} at {offset}: "
                                       f"{[e.error_code for e in entries]}")  # fmt: skip
                first = entries[0]
                if part is None:
                    part = FinalPartition(first.log_start_offset, first.high_watermark)
                    offset = max(offset, first.log_start_offset)
                got = [e for e in entries if e.object_key and e.base_offset >= 0]
                tp = tp_name(topic_id, p)
                for e in got:
                    part.batches.append([e.base_offset, e.last_offset, _found_identity(tp, e)])
                if not got:
                    break
                offset = got[-1].last_offset + 1
            out[tp_name(topic_id, p)] = part
    finally:
        await clients.close()
    return out
