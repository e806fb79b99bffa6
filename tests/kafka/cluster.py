"""Apache Kafka brokers (``process.roles=broker``) on a quorum of three controllers on loopback —
ours (`kafka-rpc serve`, ``process.roles=controller``) or Apache Kafka's from the same jars — for
``tests/kafka/test_kafka_cluster.py``, ``bench/kafka_controllers.py`` and the Spark load of
``kafka-rpc bench --kafka-brokers``.

* :class:`BrokerCluster`: the controller quorum (:class:`~tests.kafka.mixed.MixedQuorum`, one
  kind for all three voters) and ``n`` Kafka brokers (node ids 11, 12, ...) formatted with the
  same cluster id; start, SIGKILL, SIGTERM (Kafka's controlled shutdown) and restart of any
  node; the active controller; the brokers' Metadata.
* :class:`MetadataWatch`: Metadata for the watched topics from every live broker every
  ``interval_s`` (our asyncio client, on a thread of its own); :meth:`MetadataWatch.regressions`
  lists each partition whose leader epoch went back on a broker.
* :class:`AckedWriter`: an idempotent ``acks=all`` confluent-kafka producer on a thread, keyed
  records with a sequence number per key; it keeps what was acknowledged (partition, offset)
  and :func:`check_read_back` compares a full read of the topic with it: every acknowledged
  record exactly once, at its offset, and each key's sequence in order.

Every process is killed by :meth:`BrokerCluster.close` (the callers' ``finally``); every wait is
bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from kafka_rpc.protocol import codec
from tests.kafka import peer
from tests.kafka.mixed import MixedQuorum

__all__ = ["AckedWriter", "BrokerCluster", "MetadataWatch", "check_read_back", "metadata"]

START_S = 120.0  # a JVM on a loaded 2-core machine
BROKER_BASE_ID = 11
_MD = codec.module("MetadataRequest")
#: Kafka's default G1 heap for a broker here (peer.SERVER_JVM_OPTS) is 768 MB max; the brokers
#: keep it, the Kafka controllers get the same as a node of ours would use at most
BROKER_PROPS = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "replica.lag.time.max.ms": 5000,
    "log.retention.check.interval.ms": 60000,
}


@dataclass
class BrokerCluster:
    """Three controllers of kind ``controllers`` ("ours" or "kafka"; or a list of one kind per
    voter, a mixed quorum) and ``n_brokers`` Apache Kafka ``version`` brokers under
    ``workdir``. ``controller_props`` go to every controller (Kafka keys; ours accepts the
    same), ``our_controller_props`` to our controllers only, ``broker_props`` to every
    broker."""

    workdir: Path
    controllers: str | list[str] = "ours"
    n_brokers: int = 3
    version: str = peer.NEWEST
    release_version: str = "4.0-IV3"
    controller_props: dict = field(default_factory=dict)
    broker_props: dict = field(default_factory=dict)
    our_controller_props: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        kinds = ([self.controllers] * 3 if isinstance(self.controllers, str)
                 else list(self.controllers))  # fmt: skip
        self.quorum = MixedQuorum(
            self.workdir / "quorum", kinds, version=self.version,
            release_version=self.release_version, props=dict(self.controller_props),
            our_props=dict(self.our_controller_props),
        )  # fmt: skip
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.quorum.ports.items())
        self.broker_ids = [BROKER_BASE_ID + k for k in range(self.n_brokers)]
        self.broker_ports = {b: peer.free_port() for b in self.broker_ids}
        self.brokers: dict[int, peer.KafkaNode] = {}
        for b in self.broker_ids:
            self.brokers[b] = peer.KafkaNode(f"broker{b}", self.version, self.workdir / f"b{b}", {
                "process.roles": "broker", "node.id": b,
                "controller.quorum.voters": voters,
                "controller.listener.names": "CONTROLLER",
                "listeners": f"PLAINTEXT://127.0.0.1:{self.broker_ports[b]}",
                "inter.broker.listener.name": "PLAINTEXT",
                "log.dirs": self.workdir / f"b{b}" / "data",
                **BROKER_PROPS, **self.broker_props,
            })  # fmt: skip

    # ------------------------------------------------------------------ addresses
    @property
    def cluster_id(self) -> str:
        return self.quorum.cluster_id

    def address(self, broker: int) -> str:
        return f"127.0.0.1:{self.broker_ports[broker]}"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(b) for b in self.broker_ids)

    # ------------------------------------------------------------------ processes
    def format(self) -> None:
        self.quorum.format()
        for n in self.brokers.values():
            n.format(self.cluster_id)

    def start_controllers(self, timeout: float = START_S) -> None:
        self.quorum.start()
        self.quorum.wait_listening(timeout=timeout)

    def start_broker(self, b: int) -> None:
        self.brokers[b].start()

    def wait_broker_running(self, b: int, timeout: float = START_S, since: int = 0) -> float:
        """Until broker ``b`` logs that it is unfenced and serving (RECOVERY -> RUNNING); the
        seconds it took."""
        t0 = time.monotonic()
        self.brokers[b].wait_for_log(
            r"Transitioning from RECOVERY to RUNNING", timeout, since=since
        )
        return time.monotonic() - t0

    def start(self, timeout: float = START_S) -> None:
        """Format, start the controllers, then the brokers, and wait until every broker runs."""
        self.format()
        self.start_controllers(timeout)
        for b in self.broker_ids:
            self.start_broker(b)
        for b in self.broker_ids:
            self.wait_broker_running(b, timeout)

    def log_size(self, b: int) -> int:
        """The broker's log length now (``since`` for a wait on what it logs next)."""
        return len(self.brokers[b].log_text())

    def kill_broker(self, b: int) -> None:
        self.brokers[b].kill()

    def stop_broker(self, b: int, timeout: float = 60.0) -> int | None:
        """SIGTERM: Kafka's controlled shutdown; the exit code (None: killed after ``timeout``)."""
        return self.brokers[b].stop(timeout)

    def restart_broker(self, b: int, timeout: float = START_S) -> float:
        """Start a stopped broker again and wait until it runs; the seconds it took."""
        since = self.log_size(b)
        self.start_broker(b)
        return self.wait_broker_running(b, timeout, since=since)

    def close(self) -> None:
        for n in self.brokers.values():
            n.kill()
        self.quorum.close()

    # ------------------------------------------------------------------ queries
    def active_controller(self, timeout: float = 60.0, exclude: tuple[int, ...] = ()):
        """(node id, epoch) of the Raft leader (the active controller), seen twice in a row."""
        return self.quorum.leader(timeout, exclude=exclude)

    def metadata(self, b: int, topics: list[str] | None = None, timeout: float = 5.0):
        """Broker ``b``'s Metadata answer for ``topics`` (all when None), or None when it cannot
        be asked."""
        return asyncio.run(metadata(self.address(b), topics, timeout))


async def metadata(address: str, topics: list[str] | None, timeout: float = 5.0):
    """One Metadata request (the highest version both sides serve) to ``address``; None when it
    fails."""
    from kafka_rpc.client import KafkaRpcClient

    req = _MD.MetadataRequest(
        topics=None if topics is None else tuple(_MD.MetadataRequestTopic(name=t) for t in topics),
        allow_auto_topic_creation=False,
    )
    try:
        async with KafkaRpcClient(address, request_timeout=timeout, connect_timeout=timeout) as c:
            return await c.request(req, timeout=timeout)
    except (OSError, TimeoutError, ConnectionError):
        return None


@dataclass(frozen=True)
class PartitionView:
    """What broker ``broker`` said of partition ``(topic, index)`` at ``t`` (monotonic s)."""

    t: float
    broker: int
    topic: str
    index: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


class MetadataWatch:
    """Metadata for ``topics`` from every broker of ``cluster`` every ``interval_s`` on a thread
    of its own, from :meth:`start` to :meth:`stop`; a dead broker simply answers nothing."""

    def __init__(self, cluster: BrokerCluster, topics: list[str], interval_s: float = 0.3):
        self.cluster = cluster
        self.topics = topics
        self.interval_s = interval_s
        self.views: list[PartitionView] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> MetadataWatch:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._loop()), daemon=True,
                                        name="metadata-watch")  # fmt: skip
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    async def _loop(self) -> None:
        from kafka_rpc.client import KafkaRpcClient

        clients = {b: KafkaRpcClient(self.cluster.address(b), request_timeout=1.0,
                                     connect_timeout=1.0)
                   for b in self.cluster.broker_ids}  # fmt: skip
        req = _MD.MetadataRequest(
            topics=tuple(_MD.MetadataRequestTopic(name=t) for t in self.topics),
            allow_auto_topic_creation=False,
        )

        async def ask(b: int) -> None:
            try:
                resp = await clients[b].request(req, timeout=1.0)
            except Exception:  # noqa: BLE001 - a dead or restarting broker answers nothing
                return
            now = time.monotonic()
            for t in resp.topics:
                if t.error_code:
                    continue
                for p in t.partitions:
                    self.views.append(PartitionView(now, b, t.name, p.partition_index,
                                                    p.leader_id, p.leader_epoch,
                                                    tuple(p.isr_nodes)))  # fmt: skip

        try:
            while not self._stop.is_set():
                await asyncio.gather(*(ask(b) for b in self.cluster.broker_ids))
                await asyncio.sleep(self.interval_s)
        finally:
            for c in clients.values():
                with contextlib.suppress(Exception):
                    await c.close()

    def regressions(self) -> list[tuple[PartitionView, PartitionView]]:
        """Pairs (earlier, later) of one broker's answers where a partition's leader epoch went
        down."""
        last: dict[tuple[int, str, int], PartitionView] = {}
        bad = []
        for v in self.views:
            key = (v.broker, v.topic, v.index)
            prev = last.get(key)
            if prev is not None and v.leader_epoch < prev.leader_epoch:
                bad.append((prev, v))
            last[key] = v
        return bad


class AckedWriter:
    """An idempotent ``acks=all`` producer (confluent-kafka) writing ``keys`` keys round-robin
    to ``topic`` from a thread, value ``key:seq`` (``seq`` counting per key), at most
    ``rate`` records/s; :attr:`acked` maps (partition, offset) -> (key, value) of every
    acknowledged record, :attr:`failed` lists the records whose delivery failed."""

    def __init__(self, bootstrap: str, topic: str, keys: int = 12, rate: float = 200.0,
                 **conf: object) -> None:  # fmt: skip
        from confluent_kafka import Producer

        self.topic = topic
        self.keys = keys
        self.rate = rate
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 180000, "request.timeout.ms": 10000,
            **conf,
        })  # fmt: skip
        self.acked: dict[tuple[int, int], tuple[str, str]] = {}
        self.failed: list[tuple[str, str, str]] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ack_times: list[float] = []  # monotonic s of each acknowledgement

    def _delivered(self, err, msg) -> None:
        key, value = msg.key().decode(), msg.value().decode()
        if err is not None:
            self.failed.append((key, value, str(err)))
        else:
            self.acked[(msg.partition(), msg.offset())] = (key, value)
            self.ack_times.append(time.monotonic())

    def start(self) -> AckedWriter:
        self._thread = threading.Thread(target=self._run, daemon=True, name="acked-writer")
        self._thread.start()
        return self

    def _run(self) -> None:
        seq: dict[int, int] = defaultdict(int)
        period = 1.0 / self.rate
        nxt = time.monotonic()
        while not self._stop.is_set():
            k = self.sent % self.keys
            value = f"k{k}:{seq[k]}"
            try:
                self.producer.produce(self.topic, key=f"k{k}".encode(), value=value.encode(),
                                      on_delivery=self._delivered)  # fmt: skip
            except BufferError:
                self.producer.poll(0.1)
                continue
            seq[k] += 1
            self.sent += 1
            self.producer.poll(0)
            nxt += period
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                nxt = time.monotonic()

    def acked_since(self, t: float) -> int:
        return sum(1 for x in self.ack_times if x >= t)

    def stop(self, flush_s: float = 120.0) -> int:
        """Stop writing and wait (at most ``flush_s``) for every record's outcome; returns how
        many are still undelivered (0 when all were acknowledged or failed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        return self.producer.flush(flush_s)


def check_read_back(bootstrap: str, topic: str, acked: dict, timeout: float = 120.0) -> dict:
    """Read ``topic`` from the start to its high watermarks (a fresh consumer, no group) and
    compare with ``acked`` ((partition, offset) -> (key, value)). Returns a summary with the
    problems found: acknowledged records missing or different at their offset, values read
    twice, keys whose sequence goes back along a partition; ``read`` counts records read."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed"})  # fmt: skip
    try:
        md = c.list_topics(topic, timeout=30)
        parts = sorted(md.topics[topic].partitions)
        ends = {}
        for p in parts:
            _lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            ends[p] = hi
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        got: dict[tuple[int, int], tuple[str, str]] = {}
        done = {p for p in parts if ends[p] == 0}
        deadline = time.monotonic() + timeout
        while len(done) < len(parts) and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None or m.error() is not None:
                continue
            got[(m.partition(), m.offset())] = (m.key().decode(), m.value().decode())
            if m.offset() >= ends[m.partition()] - 1:
                done.add(m.partition())
    finally:
        c.close()
    missing = [k for k, v in acked.items() if got.get(k) != v]
    counts: dict[str, int] = defaultdict(int)
    for _key, value in got.values():
        counts[value] += 1
    dupes = [v for v, n in counts.items() if n > 1]
    out_of_order = []
    last: dict[tuple[int, str], int] = {}
    for p, off in sorted(got):
        key, value = got[(p, off)]
        s = int(value.rsplit(":", 1)[1])
        if (p, key) in last and s <= last[(p, key)]:
            out_of_order.append((p, off, value))
        last[(p, key)] = s
    return {"read": len(got), "acked": len(acked), "missing": missing, "duplicates": dupes,
            "out_of_order": out_of_order, "complete": len(done) == len(parts)}  # fmt: skip
