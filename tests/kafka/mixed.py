"""A mixed KRaft quorum on loopback: Apache Kafka controllers and `kafka-rpc serve` nodes voting in
one static metadata quorum (kraft.version 0), for ``tests/kafka/test_mixed_quorum.py``,
``tests/kafka/test_mixed_quorum_failover.py`` and (one kind per quorum)
``tests/kafka/cluster.py``.

* :class:`MixedQuorum` formats every node with one cluster id (Kafka with `kafka-storage format
  --release-version`, without ``--standalone``/``--initial-controllers``; ours with `kafka-rpc
  storage format --kafka-compatible` at the same release version), starts, kills (SIGKILL of
  the process group) and restarts them, and finds the leader.
* :class:`QuorumWatch` asks every live voter DescribeQuorum (our asyncio client, on a thread of
  its own) every ``interval_s`` and records each answer; a voter answers NONE only while it leads,
  so two voters answering NONE for one epoch are two leaders in that epoch
  (:meth:`QuorumWatch.two_leaders`).
* :func:`segment_batches` reads a voter's ``__cluster_metadata-0/*.log`` files as they are (our
  decoder, no recovery, nothing written) and :func:`compare_logs` compares every batch the voters
  have in common below a committed offset, byte for byte.
* :func:`caught_up` waits until the leader's DescribeQuorum shows every voter at its log end
  offset (the high watermark there); :func:`replication_caught_up` runs `kafka-metadata-quorum
  describe --replication` until one answer shows every voter with Lag 0.
* :func:`replay_problems` finds the records our node's controller skipped.
* :func:`fatal_lines` finds a Kafka node's halt (``Exit.halt``, fatal fault handlers) in its log.

Every process is killed by the caller's ``procs`` fixture (or :meth:`MixedQuorum.close`), also on
failure; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import decode_batches
from tests.kafka import peer

__all__ = [
    "MixedQuorum",
    "Observation",
    "QuorumWatch",
    "caught_up",
    "compare_logs",
    "describe_all",
    "describe_partition",
    "fatal_lines",
    "replication",
    "replay_problems",
    "replication_caught_up",
    "segment_batches",
]

_DQ = codec.module("DescribeQuorumRequest")
START_S = 120.0  # a JVM or our node on a loaded 2-core machine

# Kafka's fatal paths: ProcessTerminatingFaultHandler / Exit.halt, the Raft thread dying
_FATAL = re.compile(
    r"Exit\.halt|Halting|halting|fatal fault|FATAL|Encountered fatal|Unexpected error in raft IO "
    r"thread|IllegalStateException|Received unexpected invalid request"
)


@dataclass(frozen=True)
class Observation:
    """One DescribeQuorum answer: at ``t`` (monotonic s), voter ``node`` said leader/epoch/high
    watermark; ``leading`` when it answered NONE (only a leader does)."""

    t: float
    node: int
    leader: int
    epoch: int
    high_watermark: int
    leading: bool


@dataclass
class MixedQuorum:
    """Voters ``1..n`` of kinds ``kinds`` ("kafka" or "ours") under ``workdir``; Kafka nodes run
    Apache Kafka ``version``. ``props``: extra settings for every node (Kafka keys; ours accepts
    the same ``controller.quorum.*`` / ``metadata.*`` keys); ``kafka_props`` / ``our_props``:
    for one kind only."""

    workdir: Path
    kinds: list[str]
    version: str = peer.NEWEST
    release_version: str = "4.0-IV3"
    props: dict = field(default_factory=dict)
    kafka_props: dict = field(default_factory=dict)
    our_props: dict = field(default_factory=dict)
    cluster_id: str = field(default_factory=peer.random_cluster_id)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.ids = list(range(1, len(self.kinds) + 1))
        self.kind = dict(zip(self.ids, self.kinds, strict=True))
        self.ports = {i: peer.free_port() for i in self.ids}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.ports.items())
        self.nodes: dict[int, peer.ManagedProcess] = {}
        for i in self.ids:
            props = {
                "process.roles": "controller",
                "node.id": i,
                "controller.quorum.voters": voters,
                "controller.listener.names": "CONTROLLER",
                "listeners": f"CONTROLLER://127.0.0.1:{self.ports[i]}",
                "log.dirs": str(self.data_dir(i)),
                **self.props,
            }
            if self.kind[i] == "kafka":
                props.update(self.kafka_props)
                self.nodes[i] = peer.KafkaNode(f"kafka{i}", self.version, self.workdir / f"n{i}",
                                               props)  # fmt: skip
            else:
                props.update(self.our_props)
                self.nodes[i] = peer.RpcNode(f"ours{i}", self.workdir / f"n{i}", props)
        self.kills: list[tuple[int, str, int]] = []  # (node, kind, epoch it led)

    def data_dir(self, node: int) -> Path:
        return self.workdir / f"n{node}" / "data"

    def metadata_dir(self, node: int) -> Path:
        return self.data_dir(node) / "__cluster_metadata-0"

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in self.ids)

    # ------------------------------------------------------------------ processes
    def format(self) -> None:
        for i, n in self.nodes.items():
            if self.kind[i] == "kafka":
                n.format(self.cluster_id, "--release-version", self.release_version)
            else:  # our features at 0 and Kafka's MV: records every Kafka voter parses
                n.format(self.cluster_id, "--kafka-compatible", "--release-version",
                         self.release_version)

    def start(self, *nodes: int) -> None:
        for i in nodes or self.ids:
            self.nodes[i].start()

    def wait_listening(self, *nodes: int, timeout: float = START_S) -> None:
        for i in nodes or self.ids:
            self.nodes[i].wait_for_port("127.0.0.1", self.ports[i], timeout)

    def kill(self, node: int) -> None:
        self.nodes[node].kill()

    def alive(self, node: int) -> bool:
        return self.nodes[node].alive()

    def close(self) -> None:
        for n in self.nodes.values():
            n.kill()

    # ------------------------------------------------------------------ leader
    def leader(self, timeout: float = 60.0, exclude: tuple[int, ...] = ()) -> tuple[int, int]:
        """(leader id, epoch): the live voter (not in ``exclude``) answering DescribeQuorum as
        leader of the highest epoch, seen in two polls in a row; bounded by ``timeout`` s
        (TimeoutError). A Kafka voter that does not lead answers without naming one."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            obs = describe_all({i: self.address(i) for i in self.ids
                                if self.alive(i) and i not in exclude})  # fmt: skip
            leading = [o for o in obs if o.leading]
            now = max(((o.epoch, o.node) for o in leading), default=None)
            if now is not None and now == last:
                return now[1], now[0]
            last = now
            if time.monotonic() > deadline:
                raise TimeoutError(f"no leader within {timeout}s: {obs}")
            time.sleep(0.3)


async def _describe(node: int, address: str, timeout: float) -> Observation | None:
    from kafka_rpc.client import KafkaRpcClient

    req = _DQ.DescribeQuorumRequest(topics=(_DQ.TopicData(
        topic_name="__cluster_metadata", partitions=(_DQ.PartitionData(partition_index=0),)),))
    try:
        async with KafkaRpcClient(address, request_timeout=timeout,
                                  connect_timeout=timeout) as c:  # fmt: skip
            resp = await c.request(req, timeout=timeout)
    except (OSError, TimeoutError, ConnectionError):
        return None
    if resp.error_code or not resp.topics or not resp.topics[0].partitions:
        return None
    p = resp.topics[0].partitions[0]
    return Observation(time.monotonic(), node, p.leader_id, p.leader_epoch, p.high_watermark,
                       p.error_code == 0)  # fmt: skip


def describe_partition(address: str, timeout: float = 5.0):
    """The DescribeQuorum partition answer of the voter at ``address`` (its leader's view: high
    watermark, each voter's log end offset), None when it cannot be asked."""

    async def run():
        from kafka_rpc.client import KafkaRpcClient

        req = _DQ.DescribeQuorumRequest(topics=(_DQ.TopicData(
            topic_name="__cluster_metadata", partitions=(_DQ.PartitionData(partition_index=0),)),))
        try:
            async with KafkaRpcClient(address, request_timeout=timeout,
                                      connect_timeout=timeout) as c:  # fmt: skip
                resp = await c.request(req, timeout=timeout)
        except (OSError, TimeoutError, ConnectionError):
            return None
        if resp.error_code or not resp.topics or not resp.topics[0].partitions:
            return None
        return resp.topics[0].partitions[0]

    return asyncio.run(run())


def describe_all(addresses: dict[int, str], timeout: float = 2.0) -> list[Observation]:
    """DescribeQuorum to every voter of ``addresses`` (node id -> host:port), in parallel."""

    async def run() -> list[Observation]:
        got = await asyncio.gather(*(_describe(i, a, timeout) for i, a in addresses.items()))
        return [o for o in got if o is not None]

    return asyncio.run(run())


class QuorumWatch:
    """DescribeQuorum to every voter of ``quorum`` every ``interval_s`` on a thread of its own
    (one persistent connection per voter), from :meth:`start` until :meth:`stop`."""

    def __init__(self, quorum: MixedQuorum, interval_s: float = 0.25) -> None:
        self.quorum = quorum
        self.interval_s = interval_s
        self.observations: list[Observation] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> QuorumWatch:
        self._thread = threading.Thread(target=self._run, name="quorum-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def __enter__(self) -> QuorumWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        from kafka_rpc.client import KafkaRpcClient

        q = self.quorum
        clients = {i: KafkaRpcClient(q.address(i), request_timeout=1.0, connect_timeout=1.0)
                   for i in q.ids}  # fmt: skip
        req = _DQ.DescribeQuorumRequest(topics=(_DQ.TopicData(
            topic_name="__cluster_metadata", partitions=(_DQ.PartitionData(partition_index=0),)),))

        async def ask(i: int) -> None:
            try:
                resp = await clients[i].request(req, timeout=1.0)
            except Exception:  # noqa: BLE001 - a dead or restarting voter answers nothing
                return
            if resp.error_code or not resp.topics or not resp.topics[0].partitions:
                return
            p = resp.topics[0].partitions[0]
            self.observations.append(Observation(time.monotonic(), i, p.leader_id,
                                                 p.leader_epoch, p.high_watermark,
                                                 p.error_code == 0))  # fmt: skip

        try:
            while not self._stop.is_set():
                await asyncio.gather(*(ask(i) for i in q.ids))
                await asyncio.sleep(self.interval_s)
        finally:
            for c in clients.values():
                with contextlib.suppress(Exception):
                    await c.close()

    def two_leaders(self) -> dict[int, set[int]]:
        """Epochs in which more than one voter answered as leader: epoch -> voters."""
        by_epoch: dict[int, set[int]] = {}
        for o in self.observations:
            if o.leading:
                by_epoch.setdefault(o.epoch, set()).add(o.node)
        return {e: ns for e, ns in by_epoch.items() if len(ns) > 1}

    def leaders(self) -> dict[int, int]:
        """epoch -> the voter that answered as its leader."""
        return {o.epoch: o.node for o in self.observations if o.leading}


def segment_batches(metadata_dir: Path) -> dict[int, bytes]:
    """Every whole batch in ``metadata_dir``'s ``*.log`` segments, base offset -> its bytes, as
    the files hold them (a torn tail is left out; nothing is written)."""
    out: dict[int, bytes] = {}
    for seg in sorted(Path(metadata_dir).glob("*.log")):
        data = seg.read_bytes()
        for b in decode_batches(data, allow_partial_tail=True):
            out[b.base_offset] = bytes(b.data)
    return out


@dataclass
class Comparison:
    batches: int = 0  # batches compared (a batch present on two or more voters counts once)
    bytes: int = 0  # their bytes (one copy each)
    pairs: int = 0  # voter pairs compared, summed over batches
    mismatches: list[tuple[int, list[int]]] = field(default_factory=list)  # offset, voters
    partial: list[tuple[int, list[int]]] = field(default_factory=list)  # not on every voter


def compare_logs(dirs: dict[int, Path], below: int) -> Comparison:
    """Compare the batches the voters' logs share, base offset below ``below`` (a committed
    offset, exclusive), byte for byte; ``partial`` lists the base offsets some voter lacks."""
    logs = {i: segment_batches(d) for i, d in dirs.items()}
    c = Comparison()
    offsets = sorted({o for batches in logs.values() for o in batches if o < below})
    for off in offsets:
        have = {i: b[off] for i, b in logs.items() if off in b}
        if len(have) < len(logs):
            c.partial.append((off, sorted(have)))
        if len(have) < 2:
            continue
        values = list(have.values())
        c.batches += 1
        c.bytes += len(values[0])
        c.pairs += len(values) - 1
        if any(v != values[0] for v in values[1:]):
            c.mismatches.append((off, sorted(have)))
    return c


def caught_up(q: MixedQuorum, leader: int, timeout: float = 60.0) -> int:
    """Wait until the leader's DescribeQuorum shows every voter at the leader's log end offset,
    with the high watermark there; returns that offset (TimeoutError after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        p = describe_partition(q.address(leader))
        if p is not None and p.error_code == 0:
            ends = {v.replica_id: v.log_end_offset for v in p.current_voters}
            mine = ends.get(leader, -1)
            if len(ends) == len(q.ids) and set(ends.values()) == {mine} == {p.high_watermark}:
                return mine
        if time.monotonic() > deadline:
            raise TimeoutError(f"voters not caught up with leader {leader}: {p}")
        time.sleep(0.5)


def replication(q: MixedQuorum, node: int) -> dict[int, dict]:
    """`kafka-metadata-quorum describe --replication` asked through voter ``node`` (one tool
    JVM of ``q.version``): its rows (column name -> cell) by node id."""
    out = peer.run_tool(q.version, "kafka-metadata-quorum", "--bootstrap-controller",
                        q.address(node), "describe", "--replication",
                        timeout=90).stdout  # fmt: skip
    rows = {}
    lines = [ln.split() for ln in out.strip().splitlines()]
    head = lines[0]
    for cells in lines[1:]:
        row = dict(zip(head, cells, strict=False))
        rows[int(row["NodeId"])] = row
    return rows


def replication_caught_up(q: MixedQuorum, node: int, timeout: float = START_S) -> dict[int, dict]:
    """`kafka-metadata-quorum describe --replication` asked through voter ``node``, run again
    until one answer shows every voter of ``q`` with Lag 0 (its LogEndOffset equal to the
    leader's at that instant); that answer's rows by node id (observers, e.g. brokers, too).
    The active controller appends a NoOp every ``metadata.max.idle.interval.ms`` (500 ms), so
    one answer may catch a follower a batch behind; a voter that stays behind fails after
    ``timeout`` s (AssertionError with the last answer; default: a voter just started may take
    a whole start bound on a loaded machine). Each run is one tool JVM."""
    deadline = time.monotonic() + timeout
    while True:
        rows = replication(q, node)
        if set(q.ids) <= set(rows) and all(rows[i]["Lag"] == "0" for i in q.ids):
            return rows
        assert time.monotonic() < deadline, f"voters not caught up within {timeout}s: {rows}"
        time.sleep(0.5)


def replay_problems(node: peer.ManagedProcess) -> list[str]:
    """Lines of one of our nodes' log where its controller skipped a committed record it could
    not decode or replay (a record type or rule of Kafka's we lack)."""
    return [ln for ln in node.log_text().splitlines()
            if "metadata log: skipping" in ln or "metadata log: cannot replay" in ln]  # fmt: skip


def fatal_lines(node: peer.ManagedProcess) -> list[str]:
    """Lines of a node's log showing that it halted or its Raft thread died."""
    return [ln for ln in node.log_text().splitlines() if _FATAL.search(ln)]
