"""Spark load + verification pipeline for the KIP-1164 diskless Batch Coordinator RPCs.

Launch with ``spark-submit`` (or ``kafka-rpc bench``, which builds the command)::

    SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=$(which python) PYSPARK_DRIVER_PYTHON=$(which python) \\
      spark-submit --master 'local[2]' --conf spark.ui.enabled=false \\
        --conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 \\
        bench/diskless_load.py --server 127.0.0.1:9092 --duration 60

Job 1 (load): ``--tasks`` Spark tasks (default: the default parallelism, so that every task runs at
once) each run an asyncio loop hosting a share of the *roles*, each role with its own connection:

* ``broker`` (``--brokers``): one broker's Diskless Manager. InitDisklessTopics for the topic set,
  then every ``--commit-interval-ms`` one CommitBatches for one shared object holding batches for
  many partitions (counts and sizes drawn from ``--batches-per-object``,
  ``--partitions-per-object``, ``--batch-bytes``, ``--records-per-batch``; objects stop at
  ``--max-object-bytes``). Producers
  are a mix of idempotent (id, epoch, per-partition sequences) and plain ones; a fraction
  ``--retry-fraction`` of the batches are retries of an acknowledged idempotent batch still in the
  5-batch window, re-sent in the new object, which must come back IsDuplicate with the original
  offset. Commits are sequential per broker, as with Inkless's single commit thread.

  Each broker role is also a broker towards the KRaft controller (``--controller``, the
  controller listener): it registers with BrokerRegistration (broker id ``--broker-id-base`` +
  index, a random incarnation id, the cluster id from Metadata, one fake PLAINTEXT endpoint
  ``bench-broker-<id>.invalid:9092``), sends BrokerHeartbeat every ``--heartbeat-interval-ms``
  in a background task (registering again after STALE_BROKER_EPOCH) and ends with a controlled
  shutdown. It follows no metadata log, so it heartbeats with CurrentMetadataOffset -1 and
  WantFence (Kafka's ``!readyToUnfence``): the controller keeps it fenced, so its fake endpoint
  never appears in Metadata nor gets partitions, and AllocateProducerIds does not care (Kafka
  checks the broker epoch only). Its idempotent producers take their ids from Kafka's
  RPCProducerIdManager (``kafka_rpc/client/producer_ids.py``, KIP-730: blocks of 1000 from
  AllocateProducerIds on a second controller connection, prefetch at 90 %). Producers come and
  go: a task apart from the commits gets ids for ``--new-producers-per-s`` new idempotent
  producers per second, as InitProducerId does on a Kafka broker, and at the next commit each
  new one replaces a random running one. While no block is ready (COORDINATOR_LOAD_IN_PROGRESS,
  e.g. after THROTTLING_QUOTA_EXCEEDED from ``producer.ids.allocation.max.per.second``) the new
  producers retry every 10 ms and the old ones keep writing. The defaults (128 producers per
  role, half idempotent, 40 new per second) use ids from 2 blocks per role in a 30-s run; more
  than 10000 new per second (10 blocks/s, the server's default limit) gets throttled.
* ``consumer`` (``--consumers``): follow the tail of their partitions with FindDisklessBatches
  (``--fetch-partitions`` partitions per request) and ListDisklessOffsets (latest every
  ``--lag-interval-ms``, earliest after OFFSET_OUT_OF_RANGE).
* ``retention`` (one, unless ``--no-retention``): every ``--retention-interval-ms``
  ListDisklessOffsets + DeleteDisklessRecords (keeping ``--retain-fraction`` of each log), then
  ListDisklessFilesToDelete + DeleteDisklessFiles, and checks the deleted keys read back as safe.

Clusters (``--server`` a comma-separated bootstrap list, ``--controller`` one too; what
``kafka-rpc bench --cluster 3`` passes): every role finds its Batch Coordinator with
FindCoordinator v7, key type BATCH (``write:`` for brokers and retention, the Raft leader of the
coordinator partition; ``read:`` for consumers and verification, any replica: followers serve
reads; consumer ``c`` asks node ``c`` first), and finds it again after NOT_COORDINATOR (16),
COORDINATOR_NOT_AVAILABLE (15), COORDINATOR_LOAD_IN_PROGRESS (14), a lost connection or a
timeout, with backoff, for at most
``--failover-timeout`` seconds (:class:`Router`). Reads and retention's requests are simply sent
again. A commit whose outcome is unknown (no answer, or per entry 16, 15, REQUEST_TIMED_OUT,
KAFKA_STORAGE_ERROR or UNKNOWN_SERVER_ERROR: the replicated coordinator answers 16 also when its
leader lost the epoch before the record committed, and the record may still commit) resends its
idempotent entries with the same producer id, epoch and sequences in a new object until each is
answered: committed, or IsDuplicate with the offsets the lost attempt got (acknowledged at those,
which verification checks; an entry answered 14 was not written and is resent the same way);
after ``--failover-timeout`` they count as unknown outcome and the
producer bumps its epoch. Its non-idempotent entries are never resent nor acknowledged: unknown
outcome (verification tolerates as many unacknowledged batches). The broker roles' controller
requests follow the active controller through NOT_CONTROLLER (:class:`ControllerChannel`).
Broker role 0 writes the time of its first acknowledged commit to ``<out>/load_started`` (the
launcher times its kill from it); ``--cluster-events`` (the launcher's JSON lines: kill, new
leader, restart) go into results.json and the throughput plot. Broker roles also return the
longest time without an acknowledged commit and a per-second series of acknowledged commits.

Every loop is bounded by time (``--duration``) and count (``--max-requests`` per role). Each role
keeps per-API latency histograms (fixed log-spaced buckets, ``BUCKETS_PER_DECADE`` per decade from
1 us to 100 s), counts per error code and requests per 1-s bucket, and returns a few rows; brokers
also return their acknowledged commits packed (``ACK_FIELDS`` int64 each, zlib). The driver merges
the rows in a Spark DataFrame: rate per API (sum over roles of requests / the role's own span),
p50/p95/p99/p99.9 per API, errors per code, throughput per second.

Job 2 (verification): the acks are shuffled by partition; each task reads its partitions back with
ListDisklessOffsets + FindDisklessBatches paging from the log start offset to the high watermark and
checks: the batches cover [LSO, HW) with no gap and no overlap; every acknowledged non-duplicate
commit whose last offset is >= LSO is there at its offset with its record count and producer
identity; every duplicate answer carried the original offset; no idempotent batch identity appears
twice; no batch that nobody acknowledged (beyond commits with an unknown outcome). Producer ids:
every id a role used lies in a block the controller granted to that role in this run (each role
returns its granted blocks and used ids), no id was used by two roles, no two granted blocks
overlap, and every producer id read back from the logs lies in a granted block.

Writes ``results.json``, ``report.md`` and PNG plots into ``--out`` (default
``bench/results/<timestamp>/``) and exits 1 if anything was lost or duplicated, 2 on a setup error.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import itertools
import math
import os
import random
import sys
import threading
import time
import uuid
import zlib
from array import array
from collections import defaultdict, deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- histograms

BUCKETS_PER_DECADE = 50  # ~4.7 % relative bucket width
DECADES = 8  # 1 us .. 100 s
NBUCKETS = DECADES * BUCKETS_PER_DECADE + 2  # [0]: < 1 us, [-1]: >= 100 s
QUANTILES = (0.5, 0.95, 0.99, 0.999)
TRANSPORT_ERROR = "transport"  # error "code" for timeouts / lost connections


def bucket_of(us: float) -> int:
    """Bucket i >= 1 holds [10**((i-1)/BPD), 10**(i/BPD)) microseconds."""
    if us < 1.0:
        return 0
    return min(int(math.log10(us) * BUCKETS_PER_DECADE) + 1, NBUCKETS - 1)


def bucket_upper_us(i: int) -> float:
    return 10 ** (i / BUCKETS_PER_DECADE)


def quantile_from_counts(counts, q: float) -> float | None:
    """Upper bound (us) of the bucket holding quantile q; None when empty."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    cum = 0
    for i, c in enumerate(counts):
        cum += c
        if c and cum >= rank:
            return bucket_upper_us(i)
    return bucket_upper_us(len(counts) - 1)


class ApiStats:
    __slots__ = ("errors", "hist", "max_us", "n", "series", "sum_us")

    def __init__(self) -> None:
        self.hist = [0] * NBUCKETS
        self.n = 0
        self.sum_us = 0.0
        self.max_us = 0.0
        self.errors: dict[str, int] = defaultdict(int)
        self.series: dict[int, int] = defaultdict(int)  # epoch second -> requests completed


class Recorder:
    """Per-role recorder: histogram + error counts + 1-s throughput series per API."""

    def __init__(self) -> None:
        self.apis: dict[str, ApiStats] = {}

    def record(self, api: str, t0: float, t1: float, codes=()) -> None:
        s = self.apis.get(api)
        if s is None:
            s = self.apis[api] = ApiStats()
        us = (t1 - t0) * 1e6
        s.hist[bucket_of(us)] += 1
        s.n += 1
        s.sum_us += us
        if us > s.max_us:
            s.max_us = us
        s.series[int(t1)] += 1
        for c in codes:
            if c:
                s.errors[str(c)] += 1

    def error(self, api: str, t0: float, t1: float, what: str = TRANSPORT_ERROR) -> None:
        self.record(api, t0, t1)
        self.apis[api].errors[what] += 1

    def rows(self, base: dict, start: float, end: float) -> list[dict]:
        out = []
        for api, s in self.apis.items():
            t0 = min(s.series) if s.series else int(start)
            t1 = max(s.series) if s.series else int(start)
            series = [s.series.get(t, 0) for t in range(t0, t1 + 1)]
            out.append(
                dict(
                    base,
                    api=api,
                    n=s.n,
                    sum_us=s.sum_us,
                    max_us=s.max_us,
                    start=start,
                    end=end,
                    hist=s.hist,
                    errors=dict(s.errors),
                    series_t0=t0,
                    series=series,
                )
            )
        return out


# --------------------------------------------------------------------------- distributions


class Dist:
    """``const:N``, ``uniform:A:B`` or ``lognormal:MEDIAN:SIGMA[:MIN:MAX]`` (integers drawn)."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        kind, *vals = spec.split(":")
        nums = [float(v) for v in vals]
        self.kind = kind
        if kind == "const" and len(nums) == 1:
            self.lo = self.hi = nums[0]
        elif kind == "uniform" and len(nums) == 2:
            self.lo, self.hi = nums
        elif kind == "lognormal" and len(nums) in (2, 4):
            self.mu, self.sigma = math.log(nums[0]), nums[1]
            self.lo, self.hi = (nums[2], nums[3]) if len(nums) == 4 else (1, float("inf"))
        else:
            raise ValueError(f"bad distribution {spec!r}")

    def draw(self, rng: random.Random) -> int:
        if self.kind == "const":
            return int(self.lo)
        if self.kind == "uniform":
            return int(rng.uniform(self.lo, self.hi + 1))
        return int(min(max(rng.lognormvariate(self.mu, self.sigma), self.lo), self.hi))

    def __repr__(self) -> str:
        return self.spec


# --------------------------------------------------------------------------- protocol helpers


def _codec():
    from kafka_rpc.protocol import codec

    return codec


def _directory_id() -> uuid.UUID:
    """A fresh log directory id, as a Kafka broker registers one at metadata.version >= 3.7-IV2
    (never one of Kafka's reserved ids)."""
    from kafka_rpc.protocol.uuids import parse_uuid_text
    from kafka_rpc.storage.meta_properties import random_directory_id

    return parse_uuid_text(random_directory_id())


def topic_ids(cfg: dict) -> list[uuid.UUID]:
    ns = uuid.uuid5(uuid.NAMESPACE_URL, f"kafka-rpc-bench/{cfg['run_id']}")
    return [uuid.uuid5(ns, f"topic-{t}") for t in range(cfg["topics"])]


def partition_ref(cfg: dict, tids: list[uuid.UUID], pidx: int) -> tuple[uuid.UUID, int]:
    ppt = cfg["partitions_per_topic"]
    return tids[pidx // ppt], pidx % ppt


def _group_by_topic(cfg, tids, pidxs):
    by: dict[uuid.UUID, list[int]] = {}
    for p in pidxs:
        tid, part = partition_ref(cfg, tids, p)
        by.setdefault(tid, []).append(part)
    return by


def list_offsets_request(cfg, tids, pidxs, timestamp):
    codec = _codec()
    m = codec.module("ListDisklessOffsetsRequest")
    topics = tuple(
        m.ListDisklessOffsetsTopic(
            topic_id=tid,
            partitions=tuple(
                m.ListDisklessOffsetsTopicPartition(partition_index=p, timestamp=ts)
                for p in parts
                for ts in ((timestamp,) if isinstance(timestamp, int) else timestamp)
            ),
        )
        for tid, parts in _group_by_topic(cfg, tids, pidxs).items()
    )
    return m.ListDisklessOffsetsRequest(topics=topics)


def find_request(cfg, tids, positions: dict[int, int], partition_max: int, request_max: int):
    codec = _codec()
    m = codec.module("FindDisklessBatchesRequest")
    by: dict[uuid.UUID, list] = {}
    for pidx, off in positions.items():
        tid, part = partition_ref(cfg, tids, pidx)
        by.setdefault(tid, []).append(
            m.FindDisklessBatchTopicPartition(
                partition_index=part, offset=off, max_bytes=partition_max
            )
        )
    return m.FindDisklessBatchesRequest(
        topics=tuple(
            m.FindDisklessBatchTopic(topic_id=t, partitions=tuple(ps)) for t, ps in by.items()
        ),
        max_bytes=request_max,
    )


def pidx_of(cfg, tindex: dict, tid, part) -> int:
    return tindex[tid] * cfg["partitions_per_topic"] + part


async def connect(cfg: dict, client_id: str):
    from kafka_rpc.client import KafkaRpcClient

    return await KafkaRpcClient.connect(
        cfg["server"], client_id=client_id, request_timeout=cfg["request_timeout"]
    )


async def cluster_info(cfg: dict) -> tuple[str, list[int]]:
    """``(ClusterId, ids of the live brokers)`` from one Metadata request (v2+ carries the
    ClusterId; an empty topic list asks for no topics) on ``cfg["server"]``. Raises
    ``RuntimeError`` when the server gives no cluster id."""
    codec = _codec()
    client = await connect(cfg, "bench-driver")
    try:
        md = await client.request(codec.message_class("MetadataRequest")(topics=()))
    finally:
        await client.close()
    if not getattr(md, "cluster_id", None):
        raise RuntimeError(f"{cfg['server']} answered Metadata without a ClusterId")
    return md.cluster_id, sorted(b.node_id for b in md.brokers)


# --------------------------------------------------------------------------- cluster routing

#: FindCoordinator key type BATCH (KIP-1164; docs/batch-coordinator.md)
BATCH_KEY_TYPE = 3
NOT_COORDINATOR = 16
COORDINATOR_NOT_AVAILABLE = 15
COORDINATOR_LOAD_IN_PROGRESS = 14
NOT_CONTROLLER = 41
#: per-entry codes after which a node is asked again who the coordinator is
#: (COORDINATOR_LOAD_IN_PROGRESS: a coordinator still loading; asked again after the backoff)
REDISCOVER_CODES = frozenset((NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
                              COORDINATOR_LOAD_IN_PROGRESS))  # fmt: skip
#: per-entry CommitBatches codes after which the entry is sent again: NOT_COORDINATOR (the
#: replicated coordinator answers it too when its leader lost the epoch before the record
#: committed: the record may still commit), COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT (7),
#: KAFKA_STORAGE_ERROR (56, a write timeout is an OSError) and UNKNOWN_SERVER_ERROR (-1), whose
#: outcome is unknown, and COORDINATOR_LOAD_IN_PROGRESS, retriable (nothing was written)
UNKNOWN_OUTCOME_CODES = frozenset((NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
                                   COORDINATOR_LOAD_IN_PROGRESS, 7, 56, -1))  # fmt: skip


def addresses_of(servers: str) -> list[str]:
    """``host:port[,host:port...]`` -> the list of ``host:port`` (stripped, non-empty)."""
    out = [a.strip() for a in servers.split(",") if a.strip()]
    if not out:
        raise ValueError(f"no address in {servers!r}")
    return out


def error_codes(msg) -> list[int]:
    """Every ``error_code`` field of a decoded message, nested entries included, in field order
    (``kafka_rpc.broker.channel.error_codes``)."""
    from kafka_rpc.broker.channel import error_codes as walk

    return list(walk(msg))


def _batch_key(mode: str, topic_id: uuid.UUID, partition: int) -> str:
    from kafka_rpc.testbed.bench_cluster import batch_key

    return batch_key(mode, topic_id, partition)


class Router:
    """One role's route to its Batch Coordinator on a cluster (``cfg["server"]``: one or more
    ``host:port``, comma-separated).

    The coordinator is found with FindCoordinator v7, key type BATCH, key
    ``<mode>:<first bench topic>:0`` (``mode``: ``write`` for the coordinator partition's Raft
    leader, ``read`` for a replica, the asked node itself when it holds one).
    Every bench partition is unmapped, so it belongs to coordinator partition 0 like that
    key's. Nodes are asked in bootstrap order starting at ``first`` (consumers spread over the
    nodes). :meth:`invalidate` forgets the coordinator (after NOT_COORDINATOR (16),
    COORDINATOR_NOT_AVAILABLE (15), a lost connection or a timeout); the next :meth:`client`
    asks again, with backoff (50 ms doubling to 1 s) while no node names one, for at most
    ``cfg["failover_timeout"]`` seconds (then ``RuntimeError``). FindCoordinator answers and
    failures go to ``rec`` under ``FindCoordinator``; ``stats["rediscoveries"]`` counts the
    coordinator lookups after the first.
    """

    def __init__(self, cfg: dict, client_id: str, mode: str, rec: Recorder, stats: dict,
                 first: int = 0) -> None:  # fmt: skip
        self.cfg = cfg
        self.client_id = client_id
        self.addresses = addresses_of(cfg["server"])
        self.key = _batch_key(mode, topic_ids(cfg)[0], 0)
        self.rec = rec
        self.stats = stats
        self.clients: dict[str, object] = {}
        self.current: str | None = None
        self._next = first % len(self.addresses)
        self._lookups = 0
        self._failed: dict[str, float] = {}  # address -> time of its last failure
        stats.setdefault("rediscoveries", 0)

    def _client(self, address: str):
        from kafka_rpc.client import KafkaRpcClient

        c = self.clients.get(address)
        if c is None:
            timeout = self.cfg["request_timeout"]
            # a short connect timeout: a killed node refuses at once, and the client would
            # otherwise keep trying it until the timeout instead of asking the next node
            c = self.clients[address] = KafkaRpcClient(
                address, client_id=self.client_id, request_timeout=timeout,
                connect_timeout=min(timeout, 1.0), max_backoff=0.2,
            )  # fmt: skip
        return c

    async def _ask(self, address: str) -> str | None:
        """``host:port`` of the coordinator ``address`` names, or None."""
        req = (
            _codec()
            .module("FindCoordinatorRequest")
            .FindCoordinatorRequest(key_type=BATCH_KEY_TYPE, coordinator_keys=(self.key,))
        )
        t0 = time.time()
        try:
            resp = await self._client(address).request(
                req, version=7, timeout=min(5.0, self.cfg["request_timeout"])
            )
        except Exception as exc:
            self.rec.error("FindCoordinator", t0, time.time(), type(exc).__name__)
            self._failed[address] = time.time()
            return None
        (k,) = resp.coordinators
        self.rec.record("FindCoordinator", t0, time.time(), [k.error_code])
        if k.error_code or k.node_id < 0:
            return None
        return f"{k.host}:{k.port}"

    async def discover(self) -> str:
        """Ask the nodes (round robin, backoff) until one names the coordinator."""
        self._lookups += 1
        if self._lookups > 1:
            self.stats["rediscoveries"] += 1
        deadline = time.time() + self.cfg["failover_timeout"]
        delay = 0.05
        n = len(self.addresses)
        while True:
            # round robin from _next, the nodes that failed in the last 5 s last
            order = [self.addresses[(self._next + i) % n] for i in range(n)]
            self._next = (self._next + 1) % n
            now = time.time()
            order.sort(key=lambda a: now - self._failed.get(a, 0.0) < 5.0)
            for address in order:
                found = await self._ask(address)
                if found is not None:
                    self.current = found
                    return found
            if time.time() + delay > deadline:
                raise RuntimeError(f"no node of {self.cfg['server']} named the coordinator of "
                                   f"{self.key} in {self.cfg['failover_timeout']:g} s")  # fmt: skip
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def client(self):
        """The coordinator's client (found first when unknown)."""
        if self.current is None:
            await self.discover()
        return self._client(self.current)

    def invalidate(self, failed: bool = False) -> None:
        """Forget the coordinator; ``failed``: its connection failed (asked last for 5 s)."""
        if failed and self.current is not None:
            self._failed[self.current] = time.time()
        self.current = None

    async def request(self, req, timeout: float | None = None):
        """``req`` to the coordinator, sent again (to the coordinator found again) after a lost
        connection, a timeout or a response with NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE in
        any of its error codes, for at most ``cfg["failover_timeout"]`` seconds; only for
        requests that may be repeated (reads, InitDisklessTopics, retention's deletions). Each
        failed attempt goes to ``rec`` under the request's API name (its first such code, or the
        exception's class name). Returns the last response; raises the last exception when no
        attempt got one."""
        api = type(req).__name__.removesuffix("Request")
        deadline = time.time() + self.cfg["failover_timeout"]
        delay = 0.05
        while True:
            client = await self.client()
            t0 = time.time()
            try:
                resp = await client.request(req, timeout=timeout)
            except Exception as exc:
                self.rec.error(api, t0, time.time(), type(exc).__name__)
                self.invalidate(failed=True)
                if time.time() + delay > deadline:
                    raise
            else:
                bad = [c for c in error_codes(resp) if c in REDISCOVER_CODES]
                if not bad or time.time() + delay > deadline:
                    return resp
                self.rec.error(api, t0, time.time(), str(bad[0]))
                self.invalidate()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def close(self) -> None:
        for c in self.clients.values():
            with contextlib.suppress(Exception):
                await c.close()


class ControllerChannel:
    """Requests to the active controller among ``addresses`` (controller listeners): sent to the
    one that answered last; on NOT_CONTROLLER (41), a lost connection or a timeout, to the next
    one, each address at most once per call. Returns the first answer without NOT_CONTROLLER,
    else the last answer; raises the last exception when no address answered. ``request``
    mirrors ``KafkaRpcClient.request``, so ``RPCProducerIdManager`` and :class:`BenchBroker`
    use it as one client."""

    def __init__(self, addresses: list[str], client_id: str, timeout: float) -> None:
        from kafka_rpc.client import KafkaRpcClient

        self.clients = [
            KafkaRpcClient(a, client_id=client_id, request_timeout=timeout,
                           connect_timeout=min(timeout, 1.0), max_backoff=0.2)
            for a in addresses
        ]  # fmt: skip
        self.current = 0

    async def request(self, req, timeout: float | None = None):
        resp, last = None, None
        for _ in range(len(self.clients)):
            try:
                resp = await self.clients[self.current].request(req, timeout=timeout)
            except Exception as exc:
                last = exc
            else:
                if getattr(resp, "error_code", 0) != NOT_CONTROLLER:
                    return resp
            self.current = (self.current + 1) % len(self.clients)
        if resp is not None:
            return resp
        raise last

    async def close(self) -> None:
        for c in self.clients:
            with contextlib.suppress(Exception):
                await c.close()


# --------------------------------------------------------------------------- broker <-> controller


class BenchBroker:
    """One ``broker`` role as a broker towards the KRaft controller at ``cfg["controller"]`` (one
    or more controller listeners, comma-separated: :class:`ControllerChannel` follows the active
    controller).

    Kafka's ``BrokerLifecycleManager`` for a broker that is no node (``kafka_rpc.broker.lifecycle``
    is bound to a node's server, its config, listeners and metadata replica), plus Kafka's
    ``RPCProducerIdManager`` (:attr:`producer_ids`, ``kafka_rpc/client/producer_ids.py``, KIP-730)
    for the producer ids of the role's idempotent producers. Two controller connections, as Kafka
    has a heartbeat channel and a forwarding channel: a throttled AllocateProducerIds (the server
    then reads nothing more from that connection for ThrottleTimeMs) never delays a heartbeat.

    - :meth:`start`: BrokerRegistration (BrokerId, ``cfg["cluster_id"]``, a uuid4 IncarnationId,
      Listeners = one fake PLAINTEXT endpoint ``bench-broker-<id>.invalid:9092``, Features =
      every range of ``kafka_rpc.controller.features.supported_features``), retried with backoff
      (50 ms doubling to 1 s) on NOT_CONTROLLER, DUPLICATE_BROKER_REGISTRATION (an earlier
      incarnation's session still runs), other errors and lost connections until
      ``cfg["startup_timeout"]`` seconds have passed (then ``RuntimeError``);
      INCONSISTENT_CLUSTER_ID and UNSUPPORTED_VERSION fail at once. Then the heartbeat task starts.
    - Heartbeats every ``cfg["heartbeat_interval_ms"]`` (``broker.heartbeat.interval.ms``) with
      the broker epoch, CurrentMetadataOffset -1 and WantFence true: this broker follows no
      metadata log, so it stays fenced (its fake endpoint is never in Metadata and gets no
      partitions); AllocateProducerIds checks only the epoch. STALE_BROKER_EPOCH: register again
      (``stats["reregistrations"]``).
    - :meth:`stop`: close the producer-id manager, stop heartbeating, then a controlled shutdown
      (WantShutDown heartbeats until ShouldShutDown, at most 3, each bounded by 2 s).

    Every request's latency and error code goes to ``rec`` under the API's name. :attr:`blocks`
    lists the ``(first, last)`` ids (inclusive) of every block the controller granted.
    """

    def __init__(self, cfg: dict, broker_id: int, rec: Recorder, stats: dict) -> None:
        from kafka_rpc.client.producer_ids import RPCProducerIdManager

        self.cfg = cfg
        self.broker_id = broker_id
        self.rec = rec
        self.stats = stats
        self.incarnation_id = uuid.uuid4()
        # its one log directory, kept across re-registrations like a real broker's
        self.directory_id = _directory_id()
        self.broker_epoch = -1
        self.registered = asyncio.Event()
        self.blocks: list[tuple[int, int]] = []
        timeout = cfg["request_timeout"]
        controllers = addresses_of(cfg["controller"])
        self._lifecycle = ControllerChannel(
            controllers, f"bench-broker-{broker_id}-heartbeat", timeout
        )
        self._forwarding = ControllerChannel(
            controllers, f"bench-broker-{broker_id}-producer-ids", timeout
        )
        self.producer_ids = RPCProducerIdManager(broker_id, self._allocate, self._epoch)
        self._heartbeat_task: asyncio.Task | None = None
        for k in ("registrations", "reregistrations", "heartbeats", "heartbeat_errors",
                  "controlled_shutdowns", "pid_throttled"):  # fmt: skip
            stats.setdefault(k, 0)

    async def _call(self, client, api: str, request):
        t0 = time.time()
        try:
            resp = await client.request(request)
        except Exception as exc:
            self.rec.error(api, t0, time.time(), type(exc).__name__)
            raise
        self.rec.record(api, t0, time.time(), [resp.error_code])
        return resp

    # ------------------------------------------------------------------ registration
    def registration_request(self):
        from kafka_rpc.broker.lifecycle import PLAINTEXT
        from kafka_rpc.controller.features import supported_features

        m = _codec().module("BrokerRegistrationRequest")
        return m.BrokerRegistrationRequest(
            broker_id=self.broker_id,
            cluster_id=self.cfg["cluster_id"],
            incarnation_id=self.incarnation_id,
            listeners=(
                m.Listener(
                    name="PLAINTEXT",
                    host=f"bench-broker-{self.broker_id}.invalid",
                    port=9092,
                    security_protocol=PLAINTEXT,
                ),
            ),
            features=tuple(
                m.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                for n, (lo, hi) in sorted(supported_features().items())
            ),
            rack=None,
            # one log directory, as a Kafka broker registers at metadata.version >= 3.7-IV2
            log_dirs=(self.directory_id,),
        )

    async def _register(self) -> None:
        from kafka_rpc.protocol.errors import ErrorCode

        fatal = (ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.UNSUPPORTED_VERSION)
        deadline = time.time() + self.cfg["startup_timeout"]
        delay = 0.05
        while True:
            try:
                resp = await self._call(self._lifecycle, "BrokerRegistration",
                                        self.registration_request())  # fmt: skip
            except Exception as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.error_code == 0:
                    self.broker_epoch = resp.broker_epoch
                    self.stats["registrations"] += 1
                    self.registered.set()
                    return
                last = ErrorCode.for_code(resp.error_code).name
                if resp.error_code in fatal:
                    raise RuntimeError(f"broker {self.broker_id}: BrokerRegistration: {last}")
            if time.time() + delay > deadline:
                raise RuntimeError(
                    f"broker {self.broker_id}: no registration with the controller at "
                    f"{self.cfg['controller']} within {self.cfg['startup_timeout']:g} s: {last}"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _epoch(self) -> int:
        """The broker epoch for AllocateProducerIds (Kafka's ``brokerEpochSupplier``): waits
        (bounded) while a re-registration is under way; never raises."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.registered.wait(), self.cfg["request_timeout"])
        return self.broker_epoch

    async def _allocate(self, request):
        from kafka_rpc.protocol.errors import ErrorCode

        resp = await self._call(self._forwarding, "AllocateProducerIds", request)
        if resp.error_code == 0 and resp.producer_id_len > 0:
            first = resp.producer_id_start
            self.blocks.append((first, first + resp.producer_id_len - 1))
        elif resp.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
            self.stats["pid_throttled"] += 1
        return resp

    # ------------------------------------------------------------------ heartbeats
    def heartbeat_request(self, want_shut_down: bool = False):
        return _codec().message_class("BrokerHeartbeatRequest")(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=-1,
            want_fence=True,
            want_shut_down=want_shut_down,
        )

    async def _heartbeats(self) -> None:
        from kafka_rpc.protocol.errors import ErrorCode

        interval = self.cfg["heartbeat_interval_ms"] / 1000.0
        while True:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                resp = await self._call(self._lifecycle, "BrokerHeartbeat",
                                        self.heartbeat_request())  # fmt: skip
                self.stats["heartbeats"] += 1
                if resp.error_code == ErrorCode.STALE_BROKER_EPOCH:
                    self.stats["reregistrations"] += 1
                    self.registered.clear()
                    self.broker_epoch = -1
                    continue
                if resp.error_code:
                    self.stats["heartbeat_errors"] += 1
            except asyncio.CancelledError:
                raise
            except Exception:  # lost connection, timeout, a registration that gave up
                self.stats["heartbeat_errors"] += 1
            await asyncio.sleep(interval)

    # ------------------------------------------------------------------ life
    async def start(self) -> None:
        await self._register()
        self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeats())

    async def stop(self) -> None:
        await self.producer_ids.close()
        task, self._heartbeat_task = self._heartbeat_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.broker_epoch >= 0:
            for _ in range(3):
                try:
                    resp = await asyncio.wait_for(
                        self._call(self._lifecycle, "BrokerHeartbeat",
                                   self.heartbeat_request(want_shut_down=True)), 2.0
                    )  # fmt: skip
                except Exception:
                    continue
                if resp.error_code == 0 and resp.should_shut_down:
                    self.stats["controlled_shutdowns"] = 1
                    break
        for client in (self._forwarding, self._lifecycle):
            with contextlib.suppress(Exception):
                await client.close()


# --------------------------------------------------------------------------- acks

# One ack = ACK_FIELDS int64: partition index, returned base offset, record count, producer id,
# producer epoch, base sequence, flags (1 = answered IsDuplicate, 2 = a retry that got a NEW
# offset, i.e. was written twice), original offset (for a retry: the offset of the first commit).
ACK_FIELDS = 8
FLAG_DUP = 1
FLAG_NEW_COPY = 2


def pack_acks(acks: array) -> bytes:
    return zlib.compress(acks.tobytes(), 1)


def pack_pids(pids) -> bytes:
    """Producer ids (int64, sorted) packed as :func:`pack_acks` does."""
    return zlib.compress(array("q", sorted(pids)).tobytes(), 1)


def unpack_pids(blob: bytes) -> array:
    a = array("q")
    if blob:
        a.frombytes(zlib.decompress(blob))
    return a


def unpack_acks(blob: bytes):
    a = array("q")
    a.frombytes(zlib.decompress(blob))
    for i in range(0, len(a), ACK_FIELDS):
        yield tuple(a[i : i + ACK_FIELDS])


# --------------------------------------------------------------------------- roles


class _Deadline:
    def __init__(self, cfg: dict) -> None:
        self.end = time.time() + cfg["duration"]
        self.max_requests = cfg["max_requests"]
        self.requests = 0

    def ok(self) -> bool:
        return self.requests < self.max_requests and time.time() < self.end


async def _wait_topics(cfg, client, tids, pidxs, rec) -> bool:
    """Consumers / retention start before the brokers created the topics: poll, bounded."""
    from kafka_rpc.protocol.errors import ErrorCode

    end = time.time() + cfg["startup_timeout"]
    while time.time() < end:
        try:
            resp = await client.request(list_offsets_request(cfg, tids, pidxs, -1))
            codes = [p.error_code for t in resp.responses for p in t.partitions]
            if all(c == 0 for c in codes):
                return True
            if any(c not in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for c in codes):
                return True
        except Exception:
            pass
        await asyncio.sleep(0.05)
    return False


def _write_marker(path: str, t: float) -> None:
    """``t`` (epoch s) into ``path``, atomically (a reader never sees it half written)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with contextlib.suppress(OSError):
        Path(tmp).write_text(f"{t}\n")
        os.replace(tmp, path)


async def run_broker(cfg: dict, b: int, rec: Recorder) -> dict:
    codec = _codec()
    m = codec.module("CommitBatchesRequest")
    Req = m.CommitBatchesRequest
    mi = codec.module("InitDisklessTopicsRequest")
    rng = random.Random(f"{cfg['seed']}/broker/{b}")
    tids = topic_ids(cfg)
    {t: i for i, t in enumerate(tids)}
    nparts = cfg["topics"] * cfg["partitions_per_topic"]
    d_batches = Dist(cfg["batches_per_object"])
    d_parts = Dist(cfg["partitions_per_object"])
    d_bytes = Dist(cfg["batch_bytes"])
    d_records = Dist(cfg["records_per_batch"])
    broker_id = cfg["broker_id_base"] + b
    stats = {
        "commits": 0,
        "objects_rejected": 0,
        "batches": 0,
        "records": 0,
        "bytes": 0,
        "retries": 0,
        "dup_ok": 0,
        "dup_offset_mismatch": 0,
        "dup_new_copy": 0,
        "retry_rejected": 0,
        "rejected": 0,
        "unexpected_dup": 0,
        "unknown_outcome_batches": 0,
        "epoch_bumps": 0,
        "producer_ids": 0,
        "producers_replaced": 0,
        "pid_not_ready": 0,
        "resent_batches": 0,
        "resent_dup": 0,
        "resent_fresh": 0,
        "gave_up_batches": 0,
    }

    # producers: slots [0, n_idem) are idempotent, with ids from the controller's blocks
    nprod = cfg["producers_per_broker"]
    n_idem = round(nprod * cfg["idempotent_fraction"])
    pids = [-1] * nprod
    epoch: dict[int, int] = {}
    parts_of: dict[int, set[int]] = defaultdict(set)  # pid -> partitions with a sequence
    used: set[int] = set()  # every producer id sent in a CommitBatches
    next_seq: dict[tuple[int, int], int] = {}  # (pid, pidx) -> next base sequence
    # (pid, pidx) -> window of the last 5 accepted batches: (epoch, base_seq, last_seq, offset, n)
    window: dict[tuple[int, int], deque] = {}
    recent: deque = deque(maxlen=4096)  # (pid, pidx) keys with a non-empty window, for retries
    acks = array("q")

    ok_series: dict[int, int] = defaultdict(int)  # epoch second -> acknowledged commits
    router = Router(cfg, f"bench-broker-{broker_id}", "write", rec, stats, first=b)
    ctl = BenchBroker(cfg, broker_id, rec, stats)
    churn: asyncio.Future | None = None

    def commit_request(todo: list[tuple], obj_key: str):
        """``(CommitBatchesRequest, {topic id: [((entry, resent), wire entry)]})`` for one
        object holding ``todo``'s entries back to back."""
        by_topic: dict[uuid.UUID, list] = {}
        offset_in_obj = 0
        now_ms = int(time.time() * 1000)
        for item in todo:
            pidx, pid, ep, bs, cnt, size, _ = item[0]
            tid, part = partition_ref(cfg, tids, pidx)
            by_topic.setdefault(tid, []).append((item, m.CommitBatchesTopicPartition(
                partition_index=part, object_key=obj_key, byte_offset=offset_in_obj, size=size,
                base_offset=0, last_offset=cnt - 1, batch_max_timestamp=now_ms,
                message_timestamp_type=0, producer_id=pid, producer_epoch=ep, base_sequence=bs,
                last_sequence=bs + cnt - 1 if pid >= 0 else -1,
            )))  # fmt: skip
            offset_in_obj += size
        topics = tuple(
            m.CommitBatchesTopic(topic_id=tid, partitions=tuple(p for _, p in items))
            for tid, items in by_topic.items()
        )
        return Req(broker_id=broker_id, batches=(m.Batches(topics=topics),)), by_topic

    try:
        await ctl.start()
        init = mi.InitDisklessTopicsRequest(
            topics=tuple(
                mi.InitDisklessTopic(topic_id=t, num_partitions=cfg["partitions_per_topic"])
                for t in tids
            )
        )
        t0 = time.time()
        resp = await router.request(init)
        rec.record("InitDisklessTopics", t0, time.time(), [r.error_code for r in resp.responses])

        def new_producer_id() -> int | None:
            """InitProducerId on a Kafka broker: the next id of the role's RPCProducerIdManager;
            None while no block is ready (COORDINATOR_LOAD_IN_PROGRESS)."""
            from kafka_rpc.protocol.errors import KafkaError

            try:
                pid = ctl.producer_ids.generate_producer_id()
            except KafkaError:
                return None
            stats["producer_ids"] += 1
            epoch[pid] = 0
            return pid

        def retire(pid: int) -> None:
            for pidx in parts_of.pop(pid, ()):
                next_seq.pop((pid, pidx), None)
                window.pop((pid, pidx), None)
            epoch.pop(pid, None)

        def bump(pid: int) -> None:
            epoch[pid] += 1
            stats["epoch_bumps"] += 1
            for pidx in parts_of.get(pid, ()):
                next_seq[(pid, pidx)] = 0
                window.pop((pid, pidx), None)

        # the first producers wait for the first block (the manager's first call always fails)
        ready_by = time.time() + cfg["startup_timeout"]
        for slot in range(n_idem):
            while (pid := new_producer_id()) is None:
                if time.time() > ready_by:
                    raise RuntimeError(
                        f"broker {broker_id}: no producer id block within "
                        f"{cfg['startup_timeout']:g} s (last: {ctl.producer_ids.last_error})"
                    )
                await asyncio.sleep(0.01)
            pids[slot] = pid

        async def producer_churn(rate: float) -> None:
            """InitProducerId traffic, apart from the commits: ``rate`` new idempotent
            producers per second get an id (into ``ready``); while no block is ready
            (COORDINATOR_LOAD_IN_PROGRESS) they retry every 10 ms and the producers they
            would replace keep writing."""
            t0, made = time.time(), 0
            while True:
                due = int(rate * (time.time() - t0)) - made
                while due > 0 and (pid := new_producer_id()) is not None:
                    ready.append(pid)
                    made += 1
                    due -= 1
                if due > 0:
                    stats["pid_not_ready"] += 1
                    await asyncio.sleep(0.01)
                else:
                    await asyncio.sleep(min(0.1, max(0.001, 1.0 / rate)))

        ready: deque[int] = deque()
        if n_idem and cfg["new_producers_per_s"] > 0:
            churn = asyncio.get_running_loop().create_task(
                producer_churn(cfg["new_producers_per_s"])
            )
        dl = _Deadline(cfg)
        start = time.time()
        last_ok, gap = start, (start, start)  # the longest time without an acknowledged commit
        next_at = start
        seq_no = 0
        interval = cfg["commit_interval_ms"] / 1000.0
        while dl.ok():
            now = time.time()
            if next_at > now:
                await asyncio.sleep(next_at - now)
            next_at = max(next_at + interval, time.time() - interval)  # no catch-up bursts
            seq_no += 1
            if churn is not None and churn.done():
                churn.result()  # a failure of the churn task fails the role
            # the producers that got an id since the last commit start now, each replacing a
            # random running idempotent producer (between commits: none has a batch in flight)
            while ready:
                slot = rng.randrange(n_idem)
                retire(pids[slot])
                pids[slot] = ready.popleft()
                stats["producers_replaced"] += 1
            key = f"{cfg['run_id']}/b{broker_id}/{seq_no:09d}"
            nb = max(1, d_batches.draw(rng))
            np_ = max(1, min(d_parts.draw(rng), nb, nparts))
            chosen = rng.sample(range(nparts), np_)
            targets = chosen + [rng.choice(chosen) for _ in range(nb - np_)]
            rng.shuffle(targets)

            # entries: (pidx, pid, epoch, base_seq, count, size, retry_of_offset or -1)
            entries = []
            n_retry = int(nb * cfg["retry_fraction"] + rng.random())
            tried = set()
            for _ in range(min(n_retry, len(recent))):
                k = recent[rng.randrange(len(recent))]
                w = window.get(k)
                if not w or k in tried:
                    continue
                tried.add(k)  # at most one retry per (producer, partition) per object
                ep, bs, _ls, off, cnt = w[rng.randrange(len(w))]
                if ep != epoch[k[0]]:
                    continue
                entries.append((k[1], k[0], ep, bs, cnt, d_bytes.draw(rng), off))
            pending: dict[tuple[int, int], int] = {}
            obj_bytes = sum(e[5] for e in entries)
            for pidx in targets:
                size = d_bytes.draw(rng)
                if obj_bytes + size > cfg["max_object_bytes"] and entries:
                    break
                obj_bytes += size
                cnt = max(1, d_records.draw(rng))
                pid = pids[rng.randrange(nprod)]
                if pid >= 0:
                    used.add(pid)
                    k = (pid, pidx)
                    bs = pending.get(k, next_seq.get(k, 0))
                    pending[k] = bs + cnt
                    entries.append((pidx, pid, epoch[pid], bs, cnt, size, -1))
                else:
                    entries.append((pidx, -1, -1, -1, cnt, size, -1))

            # The object, then (after an unknown outcome: a lost connection, a timeout,
            # NOT_COORDINATOR...) its idempotent entries again with the same producer ids,
            # epochs and sequences in a new object (a broker uploads again after a failed
            # commit), at the coordinator found again, until each is answered or
            # --failover-timeout passes. A resent entry that had landed is answered IsDuplicate
            # with its original offsets; a non-idempotent entry of unknown outcome is never
            # resent nor acknowledged (unknown_outcome_batches).
            todo = [(e, False) for e in entries]  # (entry, resent)
            bumped: set[int] = set()
            got_one = False
            attempt = 0
            give_up_at = time.time() + cfg["failover_timeout"]
            backoff = 0.05
            while todo:
                obj_key = key if attempt == 0 else f"{key}-r{attempt}"
                req, by_topic = commit_request(todo, obj_key)
                dl.requests += 1
                t0 = time.time()
                unknown: list[tuple] = []
                try:
                    client = await router.client()
                    resp = await client.request(req)
                except Exception as exc:
                    rec.error("CommitBatches", t0, time.time(), type(exc).__name__)
                    router.invalidate(failed=True)
                    unknown = todo
                else:
                    t1 = time.time()
                    results = {t.topic_id: t.partitions for t in resp.topics}
                    codes = []
                    for tid, items in by_topic.items():
                        res = results.get(tid, ())
                        unknown += [item for item, _ in items[len(res) :]]  # no answer
                        for ((e, resent), _), r in zip(items, res):
                            pidx, pid, ep, bs, cnt, size, orig = e
                            codes.append(r.error_code)
                            if r.error_code in UNKNOWN_OUTCOME_CODES:
                                unknown.append((e, resent))
                                continue
                            k = (pid, pidx)
                            if orig >= 0:  # a retry
                                stats["retries"] += 1
                                if r.error_code:
                                    stats["retry_rejected"] += 1
                                elif r.is_duplicate:
                                    if r.assigned_base_offset == orig:
                                        stats["dup_ok"] += 1
                                    else:
                                        stats["dup_offset_mismatch"] += 1
                                    acks.extend((pidx, r.assigned_base_offset, cnt, pid, ep, bs,
                                                 FLAG_DUP, orig))  # fmt: skip
                                else:  # written a second time
                                    stats["dup_new_copy"] += 1
                                    acks.extend((pidx, r.assigned_base_offset, cnt, pid, ep, bs,
                                                 FLAG_NEW_COPY, orig))  # fmt: skip
                                continue
                            if r.error_code:
                                stats["rejected"] += 1
                                if pid >= 0:
                                    bumped.add(pid)
                                continue
                            if r.is_duplicate and not resent:
                                stats["unexpected_dup"] += 1
                                continue
                            if resent:  # IsDuplicate: the earlier attempt landed, at that offset
                                stats["resent_dup" if r.is_duplicate else "resent_fresh"] += 1
                            got_one = True
                            stats["batches"] += 1
                            stats["records"] += cnt
                            stats["bytes"] += size
                            acks.extend((pidx, r.assigned_base_offset, cnt, pid, ep, bs, 0, -1))
                            if pid >= 0 and pid not in bumped:
                                next_seq[k] = bs + cnt
                                parts_of[pid].add(pidx)
                                w = window.get(k)
                                if w is None:
                                    w = window[k] = deque(maxlen=5)
                                w.append((ep, bs, bs + cnt - 1, r.assigned_base_offset, cnt))
                                recent.append(k)
                    rec.record("CommitBatches", t0, t1, codes)
                    stats["commits"] += 1
                    if any(c in REDISCOVER_CODES for c in codes):
                        router.invalidate()
                todo = []
                for e, _resent in unknown:
                    if e[1] >= 0:
                        todo.append((e, True))
                    else:
                        stats["unknown_outcome_batches"] += 1
                if todo and time.time() + backoff > give_up_at:
                    stats["unknown_outcome_batches"] += len(todo)
                    stats["gave_up_batches"] += len(todo)
                    bumped.update(e[1] for e, _ in todo)
                    break
                if todo:
                    attempt += 1
                    stats["resent_batches"] += len(todo)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
            for pid in bumped:
                bump(pid)
            if got_one:
                now = time.time()
                if not ok_series and b == 0 and cfg.get("started_marker"):
                    _write_marker(cfg["started_marker"], now)
                ok_series[int(now)] += 1
                if now - last_ok > gap[1] - gap[0]:
                    gap = (last_ok, now)
                last_ok = now
            else:
                stats["objects_rejected"] += 1
        end = time.time()
    finally:
        if churn is not None:
            churn.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await churn
        await ctl.stop()
        await router.close()
    if end - last_ok > gap[1] - gap[0]:
        gap = (last_ok, end)
    return {
        "stats": stats,
        "acks": pack_acks(acks),
        "start": start,
        "end": end,
        "blocks": list(ctl.blocks),
        "pids": pack_pids(used),
        "gap": list(gap),
        "ok_series": sorted(ok_series.items()),
    }


async def run_consumer(cfg: dict, c: int, rec: Recorder) -> dict:
    from kafka_rpc.protocol.errors import ErrorCode

    tids = topic_ids(cfg)
    tindex = {t: i for i, t in enumerate(tids)}
    nparts = cfg["topics"] * cfg["partitions_per_topic"]
    mine = [p for p in range(nparts) if p % cfg["consumers"] == c]
    stats = {
        "fetches": 0,
        "partition_lookups": 0,
        "batches_read": 0,
        "records_read": 0,
        "oor_resets": 0,
        "anomalies": 0,
        "max_lag": 0,
        "list_offsets": 0,
        "idle": 0,
    }
    # reads: any replica of the coordinator partition (followers serve them); consumer c asks
    # node c first, so the consumers spread over the nodes
    client = Router(cfg, f"bench-consumer-{c}", "read", rec, stats, first=c)
    if not mine or not await _wait_topics(cfg, client, tids, mine, rec):
        await client.close()
        return {"stats": stats, "start": time.time(), "end": time.time()}

    async def list_offsets(pidxs, ts):
        t0 = time.time()
        resp = await client.request(list_offsets_request(cfg, tids, pidxs, ts))
        out = {}
        codes = []
        for t in resp.responses:
            for p in t.partitions:
                codes.append(p.error_code)
                if p.error_code == 0:
                    out[pidx_of(cfg, tindex, t.topic_id, p.partition_index)] = p.offset
        rec.record("ListDisklessOffsets", t0, time.time(), codes)
        stats["list_offsets"] += 1
        return out

    dl = _Deadline(cfg)
    pos = await list_offsets(mine, -1)  # follow the tail: start at the high watermark
    for p in mine:
        pos.setdefault(p, 0)
    start = time.time()
    next_lag = start
    cursor = 0
    k = max(1, min(cfg["fetch_partitions"], len(mine)))
    while dl.ok():
        now = time.time()
        if now >= next_lag:
            next_lag = now + cfg["lag_interval_ms"] / 1000.0
            dl.requests += 1
            try:
                hws = await list_offsets(mine, -1)
            except Exception as exc:
                rec.error("ListDisklessOffsets", now, time.time(), type(exc).__name__)
                continue
            lag = sum(max(0, hws[p] - pos[p]) for p in hws)
            stats["max_lag"] = max(stats["max_lag"], lag)
        group = [mine[(cursor + i) % len(mine)] for i in range(k)]
        cursor = (cursor + k) % len(mine)
        req = find_request(
            cfg, tids, {p: pos[p] for p in group}, cfg["fetch_partition_bytes"], cfg["fetch_bytes"]
        )
        dl.requests += 1
        t0 = time.time()
        try:
            resp = await client.request(req)
        except Exception as exc:
            rec.error("FindDisklessBatches", t0, time.time(), type(exc).__name__)
            continue
        t1 = time.time()
        codes = []
        oor = []
        got = 0
        for t in resp.responses:
            for e in t.partitions:
                pidx = pidx_of(cfg, tindex, t.topic_id, e.partition_index)
                if e.error_code:
                    codes.append(e.error_code)
                    if e.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        oor.append(pidx)
                    continue
                if not e.object_key:  # caught up
                    continue
                if not e.base_offset <= pos[pidx] <= e.last_offset:
                    stats["anomalies"] += 1  # a batch that does not contain our position
                pos[pidx] = e.last_offset + 1
                got += 1
                stats["records_read"] += e.last_offset - e.base_offset + 1
        rec.record("FindDisklessBatches", t0, t1, codes)
        stats["fetches"] += 1
        stats["partition_lookups"] += len(group)
        stats["batches_read"] += got
        if oor:
            # below the log start (retention): the earliest offset; above the high watermark
            # (a replica behind the one read before): its high watermark
            stats["oor_resets"] += len(oor)
            with contextlib.suppress(Exception):
                earliest = await list_offsets(oor, -2)
                latest = await list_offsets(oor, -1)
                for p in oor:
                    if p in latest and pos[p] > latest[p]:
                        pos[p] = latest[p]
                    elif p in earliest:
                        pos[p] = earliest[p]
        if not got:
            stats["idle"] += 1
            await asyncio.sleep(cfg["consumer_idle_ms"] / 1000.0)
    end = time.time()
    await client.close()
    return {"stats": stats, "start": start, "end": end}


async def run_retention(cfg: dict, r: int, rec: Recorder) -> dict:
    codec = _codec()
    md = codec.module("DeleteDisklessRecordsRequest")
    tids = topic_ids(cfg)
    tindex = {t: i for i, t in enumerate(tids)}
    nparts = cfg["topics"] * cfg["partitions_per_topic"]
    allp = list(range(nparts))
    stats = {
        "cycles": 0,
        "delete_records_partitions": 0,
        "records_deleted": 0,
        "files_listed": 0,
        "files_deleted": 0,
        "delete_file_errors": 0,
        "unsafe_after_delete": 0,
    }
    # DeleteDisklessRecords is a write and the file-safety check is the leader's: the writer
    client = Router(cfg, f"bench-retention-{r}", "write", rec, stats)
    if not await _wait_topics(cfg, client, tids, allp, rec):
        await client.close()
        return {"stats": stats, "start": time.time(), "end": time.time()}
    lso = dict.fromkeys(allp, 0)
    deleted_last: list[str] = []
    dl = _Deadline(cfg)
    start = time.time()
    interval = cfg["retention_interval_ms"] / 1000.0
    while dl.ok():
        await asyncio.sleep(min(interval, max(0.0, dl.end - time.time())))
        if not dl.ok():
            break
        stats["cycles"] += 1
        try:
            # high watermarks
            dl.requests += 1
            t0 = time.time()
            resp = await client.request(list_offsets_request(cfg, tids, allp, -1))
            codes, hw = [], {}
            for t in resp.responses:
                for p in t.partitions:
                    codes.append(p.error_code)
                    if p.error_code == 0:
                        hw[pidx_of(cfg, tindex, t.topic_id, p.partition_index)] = p.offset
            rec.record("ListDisklessOffsets", t0, time.time(), codes)
            # delete records below a fraction of each log
            targets = {}
            for p, h in hw.items():
                want = int(h * (1.0 - cfg["retain_fraction"]))
                if want > lso[p]:
                    targets[p] = want
            if targets:
                by: dict[uuid.UUID, list] = {}
                for p, off in targets.items():
                    tid, part = partition_ref(cfg, tids, p)
                    by.setdefault(tid, []).append(
                        md.DeleteDisklessPartitionRecords(partition_index=part, offset=off)
                    )
                dl.requests += 1
                t0 = time.time()
                resp = await client.request(
                    md.DeleteDisklessRecordsRequest(
                        topics=tuple(
                            md.DeleteDisklessTopicRecords(topic_id=t, partitions=tuple(ps))
                            for t, ps in by.items()
                        )
                    )
                )
                codes = []
                for t in resp.responses:
                    for p in t.partitions:
                        codes.append(p.error_code)
                        if p.error_code == 0:
                            pidx = pidx_of(cfg, tindex, t.topic_id, p.partition_index)
                            stats["records_deleted"] += max(0, p.low_watermark - lso[pidx])
                            lso[pidx] = max(lso[pidx], p.low_watermark)
                rec.record("DeleteDisklessRecords", t0, time.time(), codes)
                stats["delete_records_partitions"] += len(targets)
            # files-to-delete / delete-files cycle; also check last cycle's deletions are safe
            for _ in range(cfg["max_file_pages"]):
                dl.requests += 1
                t0 = time.time()
                lst = await client.request(
                    codec.message_class("ListDisklessFilesToDeleteRequest")(
                        marked_for_deletion_before_ms=-1,
                        max_objects=cfg["files_per_cycle"],
                        object_keys=tuple(deleted_last),
                    )
                )
                rec.record(
                    "ListDisklessFilesToDelete",
                    t0,
                    time.time(),
                    [lst.error_code] + [s.error_code for s in lst.safe_to_delete],
                )
                stats["unsafe_after_delete"] += sum(
                    1 for s in lst.safe_to_delete if not s.is_safe_to_delete
                )
                deleted_last = []
                keys = tuple(f.object_key for f in lst.files)
                stats["files_listed"] += len(keys)
                if not keys:
                    break
                dl.requests += 1
                t0 = time.time()
                dr = await client.request(
                    codec.message_class("DeleteDisklessFilesRequest")(object_keys=keys)
                )
                codes = [dr.error_code] + [x.error_code for x in dr.results]
                rec.record("DeleteDisklessFiles", t0, time.time(), codes)
                ok = [x.object_key for x in dr.results if x.error_code == 0]
                stats["files_deleted"] += len(ok)
                stats["delete_file_errors"] += len(keys) - len(ok)
                deleted_last = ok
                if not lst.has_more:
                    break
        except Exception as exc:
            rec.error("retention-cycle", time.time(), time.time(), type(exc).__name__)
    end = time.time()
    await client.close()
    return {"stats": stats, "start": start, "end": end}


ROLE_FUNCS = {"broker": run_broker, "consumer": run_consumer, "retention": run_retention}


def build_plan(cfg: dict, ntasks: int) -> list[list[tuple[str, int]]]:
    """Roles spread round-robin over the tasks (kinds interleaved so each task gets a mix)."""
    roles = [("broker", b) for b in range(cfg["brokers"])]
    roles += [("consumer", c) for c in range(cfg["consumers"])]
    roles += [("retention", 0)] if cfg["retention"] else []
    plan: list[list[tuple[str, int]]] = [[] for _ in range(ntasks)]
    for i, role in enumerate(roles):
        plan[i % ntasks].append(role)
    return plan


def _new_loop():
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def run_task(cfg: dict, roles: list[tuple[str, int]], task: int) -> list[dict]:
    """Body of one load task: all its roles concurrently in one event loop."""
    sys.path.insert(0, cfg["repo"])

    async def one(kind, idx):
        rec = Recorder()
        base = {"task": task, "kind": kind, "role": f"{kind}-{idx}"}
        t0 = time.time()
        try:
            out = await ROLE_FUNCS[kind](cfg, idx, rec)
            failure = ""
        except Exception as exc:
            out = {"stats": {}, "start": t0, "end": time.time()}
            failure = f"{type(exc).__name__}: {exc}"
        return dict(
            base,
            failure=failure,
            stats=out["stats"],
            acks=out.get("acks", b""),
            blocks=out.get("blocks", []),
            pids=out.get("pids", b""),
            gap=out.get("gap"),
            ok_series=out.get("ok_series", []),
            start=out["start"],
            end=out["end"],
            rows=rec.rows(base, out["start"], out["end"]),
        )

    async def all_roles():
        return await asyncio.gather(*(one(k, i) for k, i in roles))

    loop = _new_loop()
    try:
        return loop.run_until_complete(all_roles())
    finally:
        loop.close()


# --------------------------------------------------------------------------- verification


def check_partition(lso: int, hw: int, batches: list[tuple], acks: list[tuple], owner=None) -> dict:
    """Pure check of one partition.

    ``batches``: (base, last, producer_id, producer_epoch, base_sequence) as read back from
    LSO to HW, in order. ``acks``: ACK_FIELDS tuples for this partition. ``owner(pid)``: the
    granted block holding a producer id, None when no block does (:func:`block_owner`); without
    it producer ids are not checked.
    """
    out = {
        "batches": len(batches),
        "acks": 0,
        "acks_checked": 0,
        "below_lso": 0,
        "lost": 0,
        "gaps": 0,
        "overlaps": 0,
        "duplicated": 0,
        "dup_offset_mismatch": 0,
        "dup_checked": 0,
        "phantoms": 0,
        "log_pid_outside_block": 0,
        "examples": [],
    }

    def bad(kind, detail):
        if len(out["examples"]) < 5:
            out["examples"].append(f"{kind}: {detail}")

    # coverage of [lso, hw)
    if lso > hw or lso < 0:
        out["gaps"] += 1
        bad("bounds", f"lso {lso} hw {hw}")
    if lso < hw:
        if not batches:
            out["gaps"] += 1
            bad("gap", f"no batches in [{lso}, {hw})")
        else:
            b0 = batches[0]
            if not b0[0] <= lso <= b0[1]:
                out["gaps" if b0[0] > lso else "overlaps"] += 1
                bad("start", f"first batch [{b0[0]}, {b0[1]}] does not hold lso {lso}")
            for prev, cur in itertools.pairwise(batches):
                if cur[0] > prev[1] + 1:
                    out["gaps"] += 1
                    bad("gap", f"[{prev[1] + 1}, {cur[0]})")
                elif cur[0] <= prev[1]:
                    out["overlaps"] += 1
                    bad("overlap", f"[{prev[0]}, {prev[1]}] and [{cur[0]}, {cur[1]}]")
            if batches[-1][1] != hw - 1:
                key = "gaps" if batches[-1][1] < hw - 1 else "overlaps"
                out[key] += 1
                bad("end", f"last batch ends at {batches[-1][1]}, hw {hw}")
    elif batches:
        out["overlaps"] += 1
        bad("extra", f"{len(batches)} batches in an empty log [{lso}, {hw})")

    by_base = {b[0]: b for b in batches}
    ident: dict[tuple, int] = {}
    for b in batches:
        if b[2] >= 0:
            k = (b[2], b[3], b[4])
            if k in ident:
                out["duplicated"] += 1
                bad("duplicated", f"producer {k} at {ident[k]} and {b[0]}")
            ident[k] = b[0]
            if owner is not None and owner(b[2]) is None:
                out["log_pid_outside_block"] += 1
                bad("producer id", f"batch [{b[0]}, {b[1]}] of producer {b[2]} in no granted block")

    acked_bases = set()
    for a in acks:
        _p, off, cnt, pid, ep, bseq, flags, orig = a
        out["acks"] += 1
        if flags & FLAG_DUP:
            out["dup_checked"] += 1
            if off != orig:
                out["dup_offset_mismatch"] += 1
                bad("dup-offset", f"duplicate answered {off}, original {orig}")
            continue
        if flags & FLAG_NEW_COPY:
            out["duplicated"] += 1
            bad("duplicated", f"retry of {orig} written again at {off}")
        acked_bases.add(off)
        if off + cnt - 1 < lso:
            out["below_lso"] += 1
            continue
        out["acks_checked"] += 1
        b = by_base.get(off)
        if (
            b is None
            or b[1] - b[0] + 1 != cnt
            or (pid >= 0 and (b[2], b[3], b[4]) != (pid, ep, bseq))
        ):
            out["lost"] += 1
            bad("lost", f"ack at {off} x{cnt} (producer {pid}/{ep}/{bseq}) read back as {b}")
    for b in batches:
        if b[0] not in acked_bases:
            out["phantoms"] += 1
            bad("phantom", f"batch [{b[0]}, {b[1]}] nobody acknowledged")
    return out


async def read_partition(cfg, client, tids, pidx) -> tuple[int, int, list[tuple], str]:
    from kafka_rpc.protocol.errors import ErrorCode

    resp = await client.request(list_offsets_request(cfg, tids, [pidx], (-2, -1)))
    ps = [p for t in resp.responses for p in t.partitions]
    if len(ps) != 2 or any(p.error_code for p in ps):
        return -1, -1, [], f"ListDisklessOffsets errors {[p.error_code for p in ps]}"
    lso, hw = ps[0].offset, ps[1].offset
    batches: list[tuple] = []
    off = lso
    for _ in range(cfg["verify_max_pages"]):
        if off >= hw:
            break
        resp = await client.request(
            find_request(cfg, tids, {pidx: off}, cfg["verify_page_bytes"], cfg["verify_page_bytes"])
        )
        es = [e for t in resp.responses for e in t.partitions]
        errs = [e.error_code for e in es if e.error_code]
        if errs:
            return lso, hw, batches, f"FindDisklessBatches {ErrorCode(errs[0]).name} at {off}"
        page = [
            (e.base_offset, e.last_offset, e.producer_id, e.producer_epoch, e.base_sequence)
            for e in es
            if e.object_key
        ]
        if not page:
            break
        batches.extend(page)
        if page[-1][1] + 1 <= off:
            return lso, hw, batches, f"no progress at {off}"
        off = page[-1][1] + 1
    return lso, hw, batches, ""


def verify_task(cfg: dict, items, table=None) -> list[dict]:
    """Body of one verification task: (pidx, iterable of acks or None) -> per-task summary.
    ``table``: the granted producer-id blocks (:func:`block_table`) the log's ids must lie in."""
    sys.path.insert(0, cfg["repo"])
    work = [(p, [a for a in vals if a is not None]) for p, vals in items]
    owner = None if table is None else (lambda pid: block_owner(table, pid))

    async def run():
        rec = Recorder()
        client = Router(cfg, "bench-verify", "read", rec, {})
        tids = topic_ids(cfg)
        sem = asyncio.Semaphore(cfg["verify_concurrency"])
        total: dict = defaultdict(int)
        examples: list[str] = []
        t0 = time.time()

        async def one(pidx, acks):
            # a follower answers from its applied state, which may lag the leader (or a restarted
            # replica may still catch up): while the high watermark is below the end of an
            # acknowledged commit, read again (bounded by --verify-catchup-s), then judge
            need = max((a[1] + a[2] for a in acks if not a[6] & FLAG_DUP), default=0)
            give_up = time.time() + cfg["verify_catchup_s"]
            async with sem:
                while True:
                    try:
                        lso, hw, batches, err = await read_partition(cfg, client, tids, pidx)
                    except Exception as exc:
                        lso, hw, batches, err = -1, -1, [], f"{type(exc).__name__}: {exc}"
                    if (not err and hw >= need) or time.time() >= give_up:
                        break
                    total["reread_behind"] += 1
                    client.invalidate()  # ask again: maybe another replica
                    await asyncio.sleep(0.2)
            if err:
                total["read_errors"] += 1
                examples.append(f"p{pidx}: {err}")
                # fall through: acks are judged against what could be read
            res = (
                check_partition(lso, hw, batches, acks, owner)
                if lso >= 0
                else {
                    "lost": sum(1 for a in acks if not a[6] & FLAG_DUP),
                    "acks": len(acks),
                    "examples": [],
                }
            )
            for k, v in res.items():
                if k == "examples":
                    examples.extend(f"p{pidx} {x}" for x in v)
                else:
                    total[k] += v
            total["partitions"] += 1
            total["records_in_logs"] += max(0, hw - lso)

        await asyncio.gather(*(one(p, a) for p, a in work))
        await client.close()
        total["seconds"] = time.time() - t0
        return dict(total, examples=examples[:20])

    loop = _new_loop()
    try:
        return [loop.run_until_complete(run())]
    finally:
        loop.close()


VERIFY_FAIL_KEYS = (
    "lost",
    "gaps",
    "overlaps",
    "duplicated",
    "dup_offset_mismatch",
    "read_errors",
    "pid_outside_block",
    "pid_shared",
    "log_pid_outside_block",
    "block_overlaps",
)


# --------------------------------------------------------------------------- producer-id checks


def block_table(grants) -> list[tuple[int, int, str]]:
    """``(role, first, last)`` grants -> ``(first, last, role)`` sorted by first id (ids
    inclusive), the table :func:`block_owner` searches."""
    return sorted((first, last, role) for role, first, last in grants)


def block_owner(table: list[tuple[int, int, str]], pid: int) -> tuple[int, int, str] | None:
    """The granted block ``(first, last, role)`` holding ``pid``; None when none does (with
    overlapping blocks, which :func:`check_blocks` reports, the one starting last)."""
    i = bisect.bisect_right(table, pid, key=lambda b: b[0]) - 1
    if i >= 0 and table[i][0] <= pid <= table[i][1]:
        return table[i]
    return None


def check_blocks(table: list[tuple[int, int, str]]) -> dict:
    """No id in two granted blocks (the controller never hands out a range twice, KIP-730):
    ``block_overlaps`` counts blocks that start inside the previous one."""
    out = {"producer_id_blocks": len(table), "block_overlaps": 0, "examples": []}
    for prev, cur in itertools.pairwise(table):
        if cur[0] <= prev[1]:
            out["block_overlaps"] += 1
            if len(out["examples"]) < 5:
                out["examples"].append(f"block overlap: {prev} and {cur}")
    return out


def check_pid_uses(table: list[tuple[int, int, str]], items) -> dict:
    """``items``: ``(producer id, roles that sent it)``. Every id must lie in a block granted to
    the role that used it (``pid_outside_block``, per role) and be used by one role only
    (``pid_shared``). ``blocks_used``: ``[role, first id]`` of every block an id was used from."""
    out: dict = {"pids_checked": 0, "pid_outside_block": 0, "pid_shared": 0, "examples": []}
    used: set[tuple[str, int]] = set()
    for pid, roles in items:
        roles = sorted(set(roles))
        out["pids_checked"] += 1
        if len(roles) > 1:
            out["pid_shared"] += 1
            if len(out["examples"]) < 5:
                out["examples"].append(f"producer id {pid} used by {roles}")
        blk = block_owner(table, pid)
        for role in roles:
            if blk is None or blk[2] != role:
                out["pid_outside_block"] += 1
                if len(out["examples"]) < 5:
                    out["examples"].append(f"producer id {pid} of {role} is in block {blk}")
            else:
                used.add((role, blk[0]))
    out["blocks_used"] = sorted(used)
    return out


def verdict(ver: dict, unknown_outcome: int) -> list[str]:
    """Reasons the run failed (empty = passed)."""
    why = [f"{k}={ver.get(k, 0)}" for k in VERIFY_FAIL_KEYS if ver.get(k, 0)]
    if ver.get("phantoms", 0) > unknown_outcome:
        why.append(f"phantoms={ver['phantoms']} > unknown-outcome batches {unknown_outcome}")
    return why


# --------------------------------------------------------------------------- driver


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--server",
        required=True,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="bootstrap broker listeners; the roles find their coordinator with FindCoordinator",
    )
    p.add_argument(
        "--controller",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="the controllers' controller listeners (the active one is followed through "
        "NOT_CONTROLLER), for BrokerRegistration, "
        "BrokerHeartbeat and AllocateProducerIds (default: the host of --server with the "
        "controller listener port of kafka_rpc.config's default listeners)",
    )
    p.add_argument("--out", help="output dir (default bench/results/<timestamp>)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load per role")
    p.add_argument("--max-requests", type=int, default=10_000_000, help="per role")
    p.add_argument("--tasks", type=int, default=0, help="load tasks (default: parallelism)")
    p.add_argument("--run-id", default="")
    p.add_argument("--seed", default="1")
    p.add_argument("--topics", type=int, default=16)
    p.add_argument("--partitions-per-topic", type=int, default=64)
    p.add_argument("--brokers", type=int, default=8)
    p.add_argument(
        "--broker-id-base",
        type=int,
        default=1_000_000,
        help="broker role i registers as this + i (far above any node.id; the driver refuses a "
        "range that holds a live broker's id)",
    )
    p.add_argument(
        "--heartbeat-interval-ms",
        type=float,
        default=None,
        help="BrokerHeartbeat interval of the broker roles (default: broker.heartbeat.interval.ms"
        " of kafka_rpc.config)",
    )
    p.add_argument("--commit-interval-ms", type=float, default=250.0)
    p.add_argument("--batches-per-object", default="lognormal:100:0.8:1:1600")
    p.add_argument("--partitions-per-object", default="lognormal:60:0.8:1:632")
    p.add_argument("--batch-bytes", default="lognormal:8192:1.0:100:1048576")
    p.add_argument("--records-per-batch", default="lognormal:16:1.0:1:1000")
    p.add_argument("--max-object-bytes", type=int, default=8 << 20)
    p.add_argument("--producers-per-broker", type=int, default=128)
    p.add_argument(
        "--new-producers-per-s",
        type=float,
        default=40.0,
        help="per broker role: idempotent producers that replace a running one per second, each "
        "with a new id from the role's RPCProducerIdManager",
    )
    p.add_argument("--idempotent-fraction", type=float, default=0.5)
    p.add_argument("--retry-fraction", type=float, default=0.02)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--fetch-partitions", type=int, default=16)
    p.add_argument("--fetch-partition-bytes", type=int, default=1 << 20)
    p.add_argument("--fetch-bytes", type=int, default=8 << 20)
    p.add_argument("--consumer-idle-ms", type=float, default=10.0)
    p.add_argument("--lag-interval-ms", type=float, default=500.0)
    p.add_argument("--no-retention", dest="retention", action="store_false")
    p.add_argument("--retention-interval-ms", type=float, default=1000.0)
    p.add_argument("--retain-fraction", type=float, default=0.5)
    p.add_argument("--files-per-cycle", type=int, default=1000)
    p.add_argument("--max-file-pages", type=int, default=10)
    p.add_argument("--request-timeout", type=float, default=30.0)
    p.add_argument("--startup-timeout", type=float, default=60.0)
    p.add_argument("--verify-page-bytes", type=int, default=4 << 20)
    p.add_argument("--verify-max-pages", type=int, default=100_000)
    p.add_argument("--verify-concurrency", type=int, default=8)
    p.add_argument(
        "--failover-timeout",
        type=float,
        default=30.0,
        help="seconds a role keeps finding the coordinator again and resending a request "
        "(a commit: its idempotent entries) after NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, "
        "a lost connection or a timeout",
    )
    p.add_argument(
        "--verify-catchup-s",
        type=float,
        default=15.0,
        help="seconds verification re-reads a partition whose replica is behind an "
        "acknowledged commit",
    )
    p.add_argument(
        "--cluster-events",
        metavar="FILE",
        help="JSON lines of cluster events (kill, restart...) written by `kafka-rpc bench "
        "--cluster`, read at the end into results.json and marked on the throughput plot",
    )
    p.add_argument("--no-plots", dest="plots", action="store_false")
    p.add_argument("--progress", choices=("auto", "rich", "plain", "none"), default="auto")
    args = p.parse_args(argv)
    for spec in (
        args.batches_per_object,
        args.partitions_per_object,
        args.batch_bytes,
        args.records_per_batch,
    ):
        Dist(spec)
    return args


def controller_defaults(server: str) -> tuple[str, float]:
    """``(--controller, --heartbeat-interval-ms)`` defaults from ``kafka_rpc.config``'s defaults:
    the host of each address of ``server`` (comma-separated) with the port of the default
    controller listener, and ``broker.heartbeat.interval.ms`` (ms)."""
    from kafka_rpc.config import load_config

    c = load_config()
    port = next(ep.port for ep in c.listeners if ep.name in c.controller_listener_names)
    hosts = dict.fromkeys(a.rpartition(":")[0] for a in addresses_of(server))
    return ",".join(f"{h}:{port}" for h in hosts), float(c.broker_heartbeat_interval_ms)


def make_cfg(args: argparse.Namespace) -> dict:
    skip = ("out", "plots", "progress", "tasks", "cluster_events")
    cfg = {k: v for k, v in vars(args).items() if k not in skip}
    cfg["run_id"] = args.run_id or time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
    cfg["repo"] = str(REPO)
    controller, heartbeat_ms = controller_defaults(args.server)
    cfg["controller"] = args.controller or controller
    cfg["heartbeat_interval_ms"] = args.heartbeat_interval_ms or heartbeat_ms
    cfg["cluster_id"] = None  # the driver asks the server (cluster_info)
    return cfg


class Progress:
    """rich progress bar on a TTY, plain lines otherwise; fed from the Spark status tracker."""

    def __init__(self, mode: str, sc) -> None:
        self.sc = sc
        if mode == "auto":
            mode = "rich" if sys.stdout.isatty() else "plain"
        self.mode = mode

    def run(self, label: str, expected_s: float, fn):
        box: dict = {}

        def target():
            try:
                box["result"] = fn()
            except BaseException as exc:  # re-raised in the driver thread
                box["error"] = exc

        th = threading.Thread(target=target, daemon=True)
        t0 = time.time()
        th.start()
        if self.mode == "rich":
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"),
            ) as bar:
                tid = bar.add_task(label, total=expected_s, info="")
                while th.is_alive():
                    th.join(0.25)
                    bar.update(tid, completed=min(time.time() - t0, expected_s), info=self._tasks())
                bar.update(tid, completed=expected_s, info=self._tasks())
        else:
            last = 0.0
            while th.is_alive():
                th.join(0.25)
                if self.mode == "plain" and time.time() - last >= 5:
                    last = time.time()
                    print(
                        f"[{label}] {time.time() - t0:5.1f}s / ~{expected_s:.0f}s {self._tasks()}",
                        flush=True,
                    )
        if "error" in box:
            raise box["error"]
        return box["result"]

    def _tasks(self) -> str:
        st = self.sc.statusTracker()
        active = done = total = 0
        for sid in st.getActiveStageIds():
            info = st.getStageInfo(sid)
            if info:
                active += info.numActiveTasks
                done += info.numCompletedTasks
                total += info.numTasks
        return f"tasks running {active}, done {done}/{total}" if total else ""


def merge_stats(spark, role_results: list[dict]) -> dict:
    """The per-role rows -> per-API summary, merged with Spark DataFrames."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("task", T.IntegerType()),
            T.StructField("kind", T.StringType()),
            T.StructField("role", T.StringType()),
            T.StructField("api", T.StringType()),
            T.StructField("n", T.LongType()),
            T.StructField("sum_us", T.DoubleType()),
            T.StructField("max_us", T.DoubleType()),
            T.StructField("start", T.DoubleType()),
            T.StructField("end", T.DoubleType()),
            T.StructField("hist", T.ArrayType(T.LongType())),
            T.StructField("errors", T.MapType(T.StringType(), T.LongType())),
            T.StructField("series_t0", T.LongType()),
            T.StructField("series", T.ArrayType(T.LongType())),
        ]
    )
    rows = [tuple(r[f.name] for f in schema.fields) for rr in role_results for r in rr["rows"]]
    df = spark.createDataFrame(rows, schema).cache()

    span = F.greatest(F.col("end") - F.col("start"), F.lit(1e-3))
    per_api = df.groupBy("api").agg(
        F.sum("n").alias("requests"),
        F.sum(F.col("n") / span).alias("rate_per_s"),
        F.countDistinct("role").alias("roles"),
        (F.sum("sum_us") / F.sum("n")).alias("mean_us"),
        F.max("max_us").alias("max_us"),
        F.min("start").alias("first_start"),
        F.max("end").alias("last_end"),
    )

    hist = (
        df.select("api", F.posexplode("hist").alias("bucket", "c"))
        .groupBy("api", "bucket")
        .agg(F.sum("c").alias("c"))
        .filter(F.col("c") > 0)
    )
    w = Window.partitionBy("api").orderBy("bucket").rowsBetween(Window.unboundedPreceding, 0)
    tot = Window.partitionBy("api")
    cum = hist.withColumn("cum", F.sum("c").over(w)).withColumn("total", F.sum("c").over(tot))
    q_cols = []
    for q in QUANTILES:
        name = f"p{q * 100:g}".replace(".", "_")
        q_cols.append(
            F.min(F.when(F.col("cum") >= F.col("total") * q, F.col("bucket"))).alias(name)
        )
    pct = cum.groupBy("api").agg(*q_cols)
    for c in pct.columns[1:]:
        pct = pct.withColumn(c, F.pow(F.lit(10.0), F.col(c) / BUCKETS_PER_DECADE))

    errors = (
        df.select("api", F.explode("errors").alias("code", "count"))
        .groupBy("api", "code")
        .agg(F.sum("count").alias("count"))
    )
    series = (
        df.select("api", "series_t0", F.posexplode("series").alias("i", "c"))
        .withColumn("second", F.col("series_t0") + F.col("i"))
        .groupBy("api", "second")
        .agg(F.sum("c").alias("requests"))
    )

    summary = {r["api"]: r.asDict() for r in per_api.join(pct, "api").collect()}
    for r in errors.collect():
        summary[r["api"]].setdefault("errors", {})[r["code"]] = r["count"]
    hists: dict[str, list[int]] = {api: [0] * NBUCKETS for api in summary}
    for r in hist.collect():
        hists[r["api"]][r["bucket"]] = r["c"]
    ts: dict[str, dict[int, int]] = defaultdict(dict)
    for r in series.collect():
        ts[r["api"]][r["second"]] = r["requests"]
    df.unpersist()
    for s in summary.values():
        s.setdefault("errors", {})
    return {
        "apis": summary,
        "histograms": hists,
        "throughput": {a: sorted(v.items()) for a, v in ts.items()},
    }


def main(argv=None) -> int:
    sys.path.insert(0, str(REPO))
    args = parse_args(argv)
    cfg = make_cfg(args)
    try:
        cfg["cluster_id"], live = asyncio.run(cluster_info(cfg))
    except Exception as exc:
        print(f"setup error: no cluster id from {cfg['server']}: {exc}", file=sys.stderr)
        return 2
    ours = range(cfg["broker_id_base"], cfg["broker_id_base"] + cfg["brokers"])
    if clash := sorted(set(live) & set(ours)):
        print(f"setup error: broker ids {clash} of --broker-id-base {cfg['broker_id_base']} "
              "are live brokers of the cluster", file=sys.stderr)  # fmt: skip
        return 2
    out = Path(args.out or REPO / "bench" / "results" / time.strftime("%Y%m%dT%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    # broker role 0 writes it at its first acknowledged commit; `kafka-rpc bench --cluster`
    # times the coordinator-leader kill from it (local masters: the tasks share the disk)
    from kafka_rpc.testbed.bench_cluster import LOAD_STARTED

    cfg["started_marker"] = str(out / LOAD_STARTED)
    from pyspark.sql import SparkSession

    from bench import report

    t_submit = time.time()
    spark = (
        SparkSession.builder.appName("kafka-rpc-diskless-load")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    sc = spark.sparkContext
    sc.setLogLevel("WARN")
    slots = sc.defaultParallelism
    ntasks = args.tasks or slots
    if ntasks > slots:
        print(
            f"warning: {ntasks} tasks on {slots} slots: tasks will not all run at once",
            file=sys.stderr,
        )
    plan = build_plan(cfg, ntasks)
    prog = Progress(args.progress, sc)
    print(
        f"run {cfg['run_id']}: {cfg['brokers']} brokers, {cfg['consumers']} consumers, "
        f"retention {'on' if cfg['retention'] else 'off'} on {ntasks} tasks "
        f"({sc.master}), {cfg['topics']}x{cfg['partitions_per_topic']} partitions, "
        f"{cfg['duration']:g}s against {cfg['server']} (controller {cfg['controller']}, "
        f"cluster {cfg['cluster_id']})",
        flush=True,
    )

    # ---- job 1: load
    t_load = time.time()
    load_rdd = sc.parallelize(range(ntasks), ntasks).mapPartitionsWithIndex(
        lambda i, _it: run_task(cfg, plan[i], i)
    )
    role_results = prog.run("load", cfg["duration"] + 3, load_rdd.collect)
    t_load_end = time.time()
    failures = [f"{r['role']}: {r['failure']}" for r in role_results if r["failure"]]
    merged = merge_stats(spark, role_results)
    t_merge_end = time.time()

    kinds: dict[str, dict] = {}
    for r in role_results:
        k = kinds.setdefault(r["kind"], defaultdict(float))
        for key, v in r["stats"].items():
            if key == "max_lag":
                k[key] = max(k[key], v)
            else:
                k[key] += v
        k["roles"] += 1
        k["rate_window_s"] = max(k["rate_window_s"], r["end"] - r["start"])
    unknown = int(kinds.get("broker", {}).get("unknown_outcome_batches", 0))
    grants = [(r["role"], first, last) for r in role_results for first, last in r["blocks"]]
    table = block_table(grants)

    # ---- job 2: verification
    t_ver = time.time()
    nparts = cfg["topics"] * cfg["partitions_per_topic"]
    blobs = [r["acks"] for r in role_results if r["acks"]]
    acks = sc.parallelize(blobs or [b""], max(1, len(blobs))).flatMap(
        lambda b: ((a[0], a) for a in unpack_acks(b)) if b else ()
    )
    keys = sc.parallelize([(p, None) for p in range(nparts)], ntasks)
    ver_rdd = (
        acks.union(keys)
        .groupByKey(numPartitions=ntasks)
        .mapPartitions(lambda it: verify_task(cfg, it, table))
    )
    # producer ids: (pid, role) for every id a role sent, grouped by id
    used = [(r["role"], r["pids"]) for r in role_results if r["pids"]]
    pid_rdd = (
        sc.parallelize(used or [("", b"")], max(1, len(used)))
        .flatMap(lambda rb: ((int(p), rb[0]) for p in unpack_pids(rb[1])))
        .groupByKey(numPartitions=ntasks)
        .mapPartitions(lambda it: [check_pid_uses(table, it)])
    )
    parts = prog.run("verify", 5, lambda: ver_rdd.collect() + pid_rdd.collect())
    parts.append(check_blocks(table))
    ver: dict = defaultdict(int)
    examples: list[str] = []
    blocks_used: set[tuple[str, int]] = set()
    for p in parts:
        for k, v in p.items():
            if k == "examples":
                examples.extend(v)
            elif k == "blocks_used":
                blocks_used.update((role, first) for role, first in v)
            elif k == "seconds":
                ver[k] = max(ver[k], v)
            else:
                ver[k] += v
    ver = dict(ver, examples=examples[:50])
    t_ver_end = time.time()
    why = verdict(ver, unknown)
    b = kinds.get("broker", {})
    for k in ("dup_offset_mismatch", "dup_new_copy", "unexpected_dup"):
        if b.get(k):
            why.append(f"broker {k}={int(b[k])}")
    why += [f"role failed: {f}" for f in failures]
    if not b.get("batches"):
        why.append("no batch was committed")
    spark.stop()
    broker_roles = sorted(r["role"] for r in role_results if r["kind"] == "broker")
    granted = defaultdict(int, ((role, 0) for role in broker_roles))
    for role, _first, _last in grants:
        granted[role] += 1
    used_from = defaultdict(int, ((role, 0) for role in broker_roles))
    for role, _first in blocks_used:
        used_from[role] += 1
    alloc = merged["apis"].get("AllocateProducerIds", {})
    producer_ids = {
        "blocks": len(grants),
        "blocks_per_role": dict(granted),
        "blocks_used_per_role": dict(used_from),
        "ids_generated": int(b.get("producer_ids", 0)),
        "ids_used": int(ver.get("pids_checked", 0)),
        "throttled": int(b.get("pid_throttled", 0)),
        "not_ready": int(b.get("pid_not_ready", 0)),
        "allocate_requests": int(alloc.get("requests", 0)),
        "allocate_p50_us": alloc.get("p50"),
        "allocate_p99_us": alloc.get("p99"),
    }

    ok_series: dict[int, int] = defaultdict(int)
    for r in role_results:
        for sec, n in r["ok_series"]:
            ok_series[sec] += n
    merged["throughput"][report.ACKED_COMMITS] = sorted(ok_series.items())
    events = []
    if args.cluster_events:
        from kafka_rpc.testbed.bench_cluster import read_events

        events = read_events(args.cluster_events)
    results = {
        "run_id": cfg["run_id"],
        "cluster_events": events,
        "commit_gaps": {r["role"]: r["gap"] for r in role_results if r.get("gap")},
        "passed": not why,
        "failures": why,
        "config": cfg,
        "master": sc.master,
        "tasks": ntasks,
        "plan": plan,
        "timing": {
            "spark_start_s": t_load - t_submit,
            "load_job_s": t_load_end - t_load,
            "merge_s": t_merge_end - t_load_end,
            "verify_job_s": t_ver_end - t_ver,
            "total_s": time.time() - t_submit,
        },
        "apis": merged["apis"],
        "kinds": {k: dict(v) for k, v in kinds.items()},
        "verification": ver,
        "producer_ids": producer_ids,
        "histograms": merged["histograms"],
        "throughput": merged["throughput"],
        "bucket_scheme": {
            "buckets_per_decade": BUCKETS_PER_DECADE,
            "decades": DECADES,
            "unit": "us",
            "note": "bucket i >= 1 holds [10**((i-1)/BPD), 10**(i/BPD))",
        },
    }
    paths = report.write_all(results, out, plots=args.plots)
    print(report.console_summary(results))
    for name, path in paths.items():
        print(f"{name}: {path}")
    if why:
        print("FAILED: " + "; ".join(why), file=sys.stderr)
        for e in ver["examples"][:20]:
            print(f"  {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
