"""On a real 3-process quorum: producer-id blocks and topics survive SIGKILL of the
active controller, and no producer-id block is ever handed out twice across 20 failovers
(KIP-730: a block is answered only after its ProducerIdsRecord commits, and the next active
controller continues from the committed record).

Each round, on three ``kafka-rpc serve`` processes (broker+controller each):

1. a CreateTopics on the active controller (its topic id kept);
2. one AllocateProducerIds per live broker (the nodes' brokers 1-3 with the broker epoch of
   their latest RegisterBrokerRecord in the committed log, and a broker 100 the test registered
   itself), all at once;
3. one more AllocateProducerIds per live broker sent straight to the active controller, and its
   process SIGKILLed a few ms later, so some are in flight: answered (then committed) or lost;
4. a new leader elected by the two others; the killed node restarted (its broker registers
   again with a new epoch once the session of the old one ran out); one AllocateProducerIds per
   live broker from the new active controller, and the next round's topic and blocks, while
   it boots: it is killable again once it is up and names the leader.

At the end, against every answer and the committed metadata log read back with observer Fetches
(kafka-python parses the batches): no block was answered twice or overlaps another; every
answered block is one committed ProducerIdsRecord of the same broker and epoch; in commit order
every block is strictly above the ones before it (Kafka's ``ProducerIdControlManager.replay``
refuses a NextProducerId that does not grow); every topic is in the log with the id it was
created with, and every node's Metadata (answered from its own committed image) lists it so.

The timing (election 400 ms, fetch timeout 1000 ms, session 2500 ms) makes a failover (SIGKILL
to a new leader both others name) take about a second; the whole test takes about a minute on a
2-core runner (50-70 s measured under a load average of 5-6).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import re
import statistics
import time
from pathlib import Path
from uuid import UUID

import pytest
from kafka.record.default_records import DefaultRecordBatch

from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.raft.api import METADATA_TOPIC_ID
from kafka_rpc.raft.wire import for_version
from tests.integration.test_controller import registration
from tests.integration.test_raft_cluster import STEP_TIMEOUT, Cluster, split_batches
from tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROUNDS = 20
#: the whole test, processes included; killed when it runs out (about 60 s idle, 2 cores)
TEST_BUDGET = 240.0
BROKER = 100  # a broker of the test's own (the nodes' brokers are 1-3)
NODE_BROKERS = (1, 2, 3)
BLOCK = 1000  # ProducerIdsRecord blocks are 1000 ids (Kafka's PRODUCER_ID_BLOCK_SIZE)
NOT_CONTROLLER = int(ErrorCode.NOT_CONTROLLER)
RETRY_CREATE = (NOT_CONTROLLER, int(ErrorCode.INVALID_REPLICATION_FACTOR))
RETRY_ALLOCATE = (
    NOT_CONTROLLER,
    int(ErrorCode.STALE_BROKER_EPOCH),  # the broker registered again: read its epoch again
    int(ErrorCode.THROTTLING_QUOTA_EXCEEDED),
)
#: short but realistic quorum and session timing (Kafka: 1000 / 2000 / 2000 / 9000 ms)
FAST_FAILOVER = {
    "controller.quorum.election.timeout.ms": "400",
    "controller.quorum.fetch.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "2500",
}
_PLAINTEXT_RE = re.compile(r"listening PLAINTEXT \(\w+\) on [\d.]+:(\d+)")


class RestartingCluster(Cluster):
    """A :class:`Cluster` whose restarted node counts as live (DescribeQuorum asked, brokers
    used) only once it is up again, so the rest can go on while it boots."""

    def __init__(self, root: Path, **props: str) -> None:
        super().__init__(root, **props)
        self.booting: set[int] = set()

    def live(self) -> list[int]:
        return [i for i in super().live() if i not in self.booting]

    def begin_restart(self, i: int) -> None:
        self.booting.add(i)
        self.nodes[i].start()

    async def finish_restart(self, i: int) -> None:
        await self.nodes[i].started()
        self.booting.discard(i)


@contextlib.asynccontextmanager
async def cluster_running(root: Path, budget: float = TEST_BUDGET, **props: str):
    """A started 3-voter :class:`RestartingCluster` for at most ``budget`` seconds; every
    process SIGKILLed on the way out, and no node may have logged a traceback."""
    cluster = RestartingCluster(root, **props)
    try:
        async with asyncio.timeout(budget):
            await cluster.start()
            yield cluster
        cluster.assert_no_tracebacks()
    finally:
        await cluster.close()


def _create(name: str):
    m = codec.module("CreateTopicsRequest")
    return m.CreateTopicsRequest(
        topics=(m.CreatableTopic(name=name, num_partitions=2, replication_factor=1),),
        timeout_ms=5000,
    )


def _allocate(broker_id: int, epoch: int):
    req = codec.message_class("AllocateProducerIdsRequest")
    return req(broker_id=broker_id, broker_epoch=epoch)


async def on_active_controller(cluster, request, code_of, retry=(NOT_CONTROLLER,)):
    """Send ``request`` to whichever node is the active controller, following elections:
    retried on a connection error, a timeout or a code in ``retry``; returns the response."""

    async def attempt():
        lead = await cluster.agreed_leader()
        if lead is None:
            return None
        try:
            client = await cluster.client(lead.leader_id)
            resp = await client.request(request, timeout=5.0)
        except (OSError, TimeoutError, KafkaConnectionError):
            await cluster.drop_client(lead.leader_id)
            return None
        return None if code_of(resp) in retry else resp

    return await until(attempt, f"an answer to {type(request).__name__} from the controller",
                       timeout=STEP_TIMEOUT)  # fmt: skip


async def new_leader(cluster, old: int, old_epoch: int):
    """The leader the live nodes other than ``old`` agree on in an epoch after ``old_epoch``."""
    lead = await cluster.agreed_leader(among=[i for i in cluster.live() if i != old])
    return lead if lead is not None and lead.leader_epoch > old_epoch else None


def broker_port(node) -> int:
    """The PLAINTEXT (broker listener) port a ``Node`` bound in its current run (port 0)."""
    m = _PLAINTEXT_RE.search(node.out_path().read_text(errors="replace"))
    assert m, f"node {node.node_id} printed no PLAINTEXT listener"
    return int(m.group(1))


# -- the committed metadata log, read back ---------------------------------------------------------


@dataclasses.dataclass
class CommittedLog:
    """The committed metadata log as an observer reads it: Fetch (ReplicaId -1) from the leader
    up to its high watermark, batches parsed by kafka-python, records decoded with the codec.
    ``records`` is ``[(offset, record)]`` in commit order (control batches left out)."""

    cluster: Cluster
    offset: int = 0  # next offset to read
    last_epoch: int = 0  # epoch of the last batch read
    records: list = dataclasses.field(default_factory=list)
    _lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)

    async def _fetch(self, lead):
        m = codec.module("FetchRequest")
        i = lead.leader_id
        try:
            c = await self.cluster.client(i)
            version = min(c.version_for(1), 18)
            part = m.FetchPartition(partition=0, current_leader_epoch=lead.leader_epoch,
                                    fetch_offset=self.offset, last_fetched_epoch=self.last_epoch,
                                    partition_max_bytes=1 << 20)  # fmt: skip
            req = m.FetchRequest(
                cluster_id=self.cluster.cluster_id, replica_state=m.ReplicaState(replica_id=-1),
                max_wait_ms=0,
                topics=(m.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=(part,)),),
            )  # fmt: skip
            resp = await c.request(for_version(1, version, req), version=version, timeout=5.0)
        except (OSError, TimeoutError, KafkaConnectionError):
            await self.cluster.drop_client(i)
            return None
        if resp.error_code != 0:
            return None
        (p,) = resp.responses[0].partitions
        if p.error_code != 0:  # the leadership moved meanwhile
            return None
        # committed data is never cut (no snapshot is due here) or diverges
        assert p.snapshot_id.epoch < 0 and p.diverging_epoch.epoch < 0, p
        return p

    async def catch_up(self, target: int | None = None) -> bool:
        """Read everything the agreed leader has committed (at least to offset ``target``,
        exclusive, when given); False when that is not possible now (an election, a dead
        node, a leader not there yet). One reader at a time."""
        async with self._lock:
            return await self._catch_up(target)

    async def _catch_up(self, target: int | None) -> bool:
        lead = await self.cluster.agreed_leader()
        if lead is None or (target is not None and lead.high_watermark < target):
            return False
        hw = lead.high_watermark
        for _ in range(1000):
            if self.offset >= hw:
                return True
            p = await self._fetch(lead)
            if p is None:
                return False
            batches = [b for b in split_batches(p.records or b"") if b[0] < hw]
            assert batches, f"no records at {self.offset} below the high watermark {hw}"
            for base, last, epoch, data in batches:
                assert base == self.offset, f"gap: a batch at {base}, expected {self.offset}"
                assert epoch >= self.last_epoch, f"the epoch went down at {base}"
                batch = DefaultRecordBatch(data)
                assert batch.validate_crc(), f"bad CRC in the batch at {base}"
                if not batch.is_control_batch:
                    for r in batch:
                        record, _version = codec.decode_record(bytes(r.value))
                        self.records.append((r.offset, record))
                self.offset, self.last_epoch = last + 1, epoch
        raise AssertionError("the committed log did not end")

    def of(self, *names: str) -> list:
        return [(o, r) for o, r in self.records if type(r).__spec_name__ in names]

    def broker_epoch(self, broker_id: int) -> int | None:
        """The epoch of ``broker_id``'s latest registration (its RegisterBrokerRecord)."""
        regs = [r for _, r in self.of("RegisterBrokerRecord") if r.broker_id == broker_id]
        return regs[-1].broker_epoch if regs else None


async def create_topic(cluster, log: CommittedLog, name: str) -> UUID:
    """Create ``name`` on the active controller; its topic id. A retry after a lost answer (a
    leadership change mid-request whose records still committed) may find it created:
    TOPIC_ALREADY_EXISTS, and the id is then the committed TopicRecord's."""
    r = await on_active_controller(
        cluster, _create(name), lambda r: r.topics[0].error_code, retry=RETRY_CREATE
    )
    (t,) = r.topics
    if t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
        assert await until(log.catch_up, "the committed log", timeout=STEP_TIMEOUT)
        (tid,) = [r.topic_id for _, r in log.of("TopicRecord") if r.name == name]
        return tid
    assert t.error_code == 0 and t.topic_id != UUID(int=0), r
    return t.topic_id


# -- producer-id blocks ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Block:
    broker_id: int
    broker_epoch: int
    start: int
    length: int


async def allocate_block(cluster, log: CommittedLog, broker_id: int) -> Block:
    """One block for ``broker_id`` from the active controller, with the broker's current epoch
    (read again from the committed log after STALE_BROKER_EPOCH: the node's broker registered
    again); every other failure is retried too, within the step timeout."""

    async def attempt():
        if not await log.catch_up():
            return None
        epoch = log.broker_epoch(broker_id)
        if epoch is None:
            return None
        lead = await cluster.agreed_leader()
        if lead is None:
            return None
        try:
            client = await cluster.client(lead.leader_id)
            r = await client.request(_allocate(broker_id, epoch), timeout=5.0)
        except (OSError, TimeoutError, KafkaConnectionError):
            await cluster.drop_client(lead.leader_id)
            return None
        if r.error_code in RETRY_ALLOCATE:
            return None
        assert r.error_code == 0, (broker_id, epoch, r)
        return Block(broker_id, epoch, r.producer_id_start, r.producer_id_len)

    return await until(attempt, f"a producer-id block for broker {broker_id}", timeout=STEP_TIMEOUT)


async def allocate_once(client: KafkaRpcClient, broker_id: int, epoch: int) -> Block | None:
    """One AllocateProducerIds on ``client``: the block if answered, None on any failure
    (the connection died with the controller, NOT_CONTROLLER, a timeout)."""
    try:
        r = await client.request(_allocate(broker_id, epoch), timeout=5.0)
    except (OSError, TimeoutError, KafkaConnectionError):
        return None
    if r.error_code != 0:
        return None
    return Block(broker_id, epoch, r.producer_id_start, r.producer_id_len)


def live_brokers(cluster) -> list[int]:
    return [b for b in NODE_BROKERS if b in cluster.live()] + [BROKER]


# -- the test --------------------------------------------------------------------------------------


async def test_blocks_and_topics_survive_20_controller_sigkills(tmp_path):
    rng = random.Random(12)
    began = time.monotonic()
    async with cluster_running(tmp_path, **FAST_FAILOVER) as cluster:
        log = CommittedLog(cluster)
        request = dataclasses.replace(registration(BROKER), cluster_id=cluster.cluster_id)
        reg = await on_active_controller(cluster, request, lambda r: r.error_code)
        assert reg.error_code == 0, reg
        blocks: list[Block] = []
        topics: dict[str, UUID] = {}
        failover_s: list[float] = []
        epochs: list[int] = []
        in_flight_answered = 0
        booting = None  # the node killed in the last round, restarting
        for k in range(ROUNDS):
            # a topic and blocks from the active controller, while last round's victim boots;
            # until the nodes' brokers are unfenced no replica can be placed (Kafka answers so)
            name = f"survivor-{k}"
            topics[name] = await create_topic(cluster, log, name)
            # a block for every live broker, at once
            blocks += await asyncio.gather(
                *(allocate_block(cluster, log, b) for b in live_brokers(cluster))
            )

            # every node up and naming the same leader
            if booting is not None:
                await cluster.finish_restart(booting)
            lead = await until(cluster.agreed_leader, f"round {k}: a leader all nodes agree on",
                               timeout=STEP_TIMEOUT)  # fmt: skip
            # more, straight to the active controller, and SIGKILL it while they are in flight
            victim = lead.leader_id
            assert await until(log.catch_up, "the committed log", timeout=STEP_TIMEOUT)
            owners = {b: log.broker_epoch(b) for b in live_brokers(cluster)}
            client = await cluster.client(victim)
            flying = [asyncio.ensure_future(allocate_once(client, b, e)) for b, e in owners.items()]
            await asyncio.sleep(rng.uniform(0.0, 0.08))
            cluster.kill(victim)
            killed_at = time.monotonic()
            answered = [b for b in await asyncio.gather(*flying) if b is not None]
            in_flight_answered += len(answered)
            blocks += answered
            await cluster.drop_client(victim)

            after = await until(
                lambda v=victim, e=lead.leader_epoch: new_leader(cluster, v, e),
                f"round {k}: a new leader after the SIGKILL of node {victim}", timeout=STEP_TIMEOUT
            )
            failover_s.append(time.monotonic() - killed_at)
            epochs.append(after.leader_epoch)
            booting = victim
            cluster.begin_restart(victim)
            # the new active controller hands out blocks to every live broker
            blocks += await asyncio.gather(
                *(allocate_block(cluster, log, b) for b in live_brokers(cluster))
            )
        await cluster.finish_restart(booting)

        # read the whole committed log, from a leader every node agrees on
        final = await until(cluster.agreed_leader, "a leader at the end", timeout=STEP_TIMEOUT)
        assert await until(lambda: log.catch_up(final.high_watermark), "the whole log",
                           timeout=STEP_TIMEOUT)  # fmt: skip

        # no block answered twice, and no two answered blocks overlap
        assert all(b.length == BLOCK for b in blocks), blocks
        by_start = sorted(blocks, key=lambda b: b.start)
        assert len({b.start for b in blocks}) == len(blocks), "a block was answered twice"
        for a, b in zip(by_start, by_start[1:]):
            assert a.start + a.length <= b.start, f"overlapping blocks {a} and {b}"
        # every answer is a committed ProducerIdsRecord of that broker and epoch ...
        committed = [r for _, r in log.of("ProducerIdsRecord")]
        by_next = {r.next_producer_id: r for r in committed}
        assert len(by_next) == len(committed), "two committed records with one NextProducerId"
        for b in blocks:
            rec = by_next.get(b.start + b.length)
            assert rec is not None, f"answered block {b} was never committed"
            assert (rec.broker_id, rec.broker_epoch) == (b.broker_id, b.broker_epoch), (b, rec)
        # ... and in commit order each block is strictly above every block before it
        nexts = [r.next_producer_id for r in committed]
        assert all(b - a >= BLOCK for a, b in zip(nexts, nexts[1:])), nexts
        assert nexts[0] >= BLOCK, nexts
        # one failover per round, each in a later epoch
        assert epochs == sorted(set(epochs)) and len(epochs) == ROUNDS, epochs

        # every topic created before a kill is still there with the id it was created with:
        # in the committed log, and in every node's Metadata (its own committed image)
        in_log = {r.name: r.topic_id for _, r in log.of("TopicRecord")}
        assert {n: in_log.get(n) for n in topics} == topics
        assert not log.of("RemoveTopicRecord")
        for i in cluster.live():
            await until(lambda i=i: _lists_topics(cluster, i, topics),
                        f"node {i}'s Metadata to list every topic with its id",
                        timeout=STEP_TIMEOUT)  # fmt: skip
        # and the next block continues after the last one committed
        last = await allocate_block(cluster, log, BROKER)
        assert last.start >= nexts[-1], (last, nexts[-1])

    elapsed = time.monotonic() - began
    p50 = statistics.median(failover_s)
    print(f"\n{ROUNDS} failovers in {elapsed:.1f} s: failover p50 {p50:.2f} s, "
          f"max {max(failover_s):.2f} s; {len(blocks)} blocks answered "
          f"({in_flight_answered} of them in flight at a kill); {len(committed)} committed "
          f"({len(committed) - len(blocks)} never answered); duplicates 0")  # fmt: skip


async def _lists_topics(cluster, i: int, topics: dict[str, UUID]) -> bool:
    """Node ``i``'s Metadata on its broker listener lists every topic of ``topics`` with that
    topic id (False while its image lags or it cannot be reached)."""
    m = codec.module("MetadataRequest")
    req = m.MetadataRequest(
        topics=tuple(m.MetadataRequestTopic(name=n) for n in topics),
        allow_auto_topic_creation=False,
    )
    try:
        async with KafkaRpcClient(f"127.0.0.1:{broker_port(cluster.nodes[i])}",
                                  connect_timeout=3.0, request_timeout=5.0) as c:  # fmt: skip
            resp = await c.request(req)
    except (OSError, TimeoutError, KafkaConnectionError):
        return False
    got = {t.name: t.topic_id for t in resp.topics if t.error_code == 0}
    return got == topics
