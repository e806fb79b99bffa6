"""A kafka-rpc cluster on the network-namespace test bed (``kafka_rpc.testbed.netns``,
``docs/network-faults.md``).

:class:`NetnsCluster` runs ``n`` combined broker+controller nodes (``process.roles=broker,
controller``, every node a voter of the metadata quorum and a replica of ``__diskless-metadata``
partition 0, the replicated Batch Coordinator), each ``kafka-rpc serve``
in its own namespace. A node's listeners are on 127.0.0.1 inside its namespace
(:data:`LOCAL_BROKER_PORT`, :data:`LOCAL_CONTROLLER_PORT`); the node's address
``10.77.0.<id>`` (:data:`BROKER_PORT`, :data:`CONTROLLER_PORT`) is its Toxiproxy, which forwards
to them: ``controller.quorum.voters`` and ``advertised.listeners`` name those addresses, so
every byte between two nodes, and between the client and a node, crosses the bridge and the
proxies, where the faults are.

Timing (:data:`NODE_PROPS`): half of Kafka's ``controller.quorum.*`` defaults, ratios kept
(election 500 ms, fetch 1000 ms, so check quorum resigns after 1500 ms; request 1000 ms;
election backoff max 500 ms), for the metadata log and the coordinator partition alike, so a
scenario's elections fit its budget.

After a run: :meth:`NetnsCluster.state_rows` reads a node's coordinator SQLite state row by row
(``ReplicatedBatchCoordinator.state_rows``' shape, through a read-only connection to the running
node's file), and :func:`log_batches` a node's Raft log from its segment files, for comparing
replicas.
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

from kafka_rpc.config import load_config
from kafka_rpc.coordinator.replicated import DISKLESS_METADATA_TOPIC_NAME, partition_dir_name
from kafka_rpc.protocol.uuids import random_uuid_text
from kafka_rpc.raft.api import METADATA_TOPIC_NAME
from kafka_rpc.storage.formatter import format_storage
from kafka_rpc.testbed.bench_cluster import write_properties
from kafka_rpc.testbed.netns import NetBed

__all__ = [
    "COORDINATOR_PROPS",
    "NODE_PROPS",
    "NetnsCluster",
    "NetnsNode",
    "log_batches",
]

BROKER_PORT, CONTROLLER_PORT = 9092, 9093
LOCAL_BROKER_PORT, LOCAL_CONTROLLER_PORT = 19092, 19093
START_TIMEOUT = 30.0  # s, one node to its "cluster id" line

#: Half of Kafka's quorum timing, ratios kept (module docstring).
NODE_PROPS = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.request.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "500",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    "shutdown.timeout.ms": "2000",
    "diskless.metadata.topic.replication.factor": "3",
}
#: The Batch Coordinator under test is the default one, chosen by no setting at all: the
#: topic-based coordinator on ``__diskless-metadata`` from the metadata log, its partitions in
#: ``<node dir>/data/__diskless-metadata-<p>/``, with the metadata quorum's ``controller.quorum.*``
#: timing (:data:`NODE_PROPS`). Kept as the one place a scenario could name another.
COORDINATOR_PROPS: dict[str, str] = {}
COORDINATOR_DIR = "data"


class NetnsNode:
    """One node: its directory (``<root>/node<id>``), config and process."""

    def __init__(self, root: Path, node_id: int, voters: str, props: dict[str, str],
                 module: str) -> None:  # fmt: skip
        self.node_id = node_id
        self.address = NetBed.address(node_id)
        self.home = root / f"node{node_id}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.config = self.home / "server.properties"
        self.module = module
        write_properties(self.config, {**NODE_PROPS, **COORDINATOR_PROPS}, node_id,
                         LOCAL_BROKER_PORT, LOCAL_CONTROLLER_PORT, voters, self.home / "data",
                         {"advertised.listeners": f"PLAINTEXT://{self.address}:{BROKER_PORT}",
                          **props})  # fmt: skip
        self.proc: subprocess.Popen | None = None
        self.runs = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.address}:{BROKER_PORT}"

    @property
    def log_path(self) -> Path:
        return self.home / f"server.{self.runs}.log"

    @property
    def coordinator_dir(self) -> Path:
        return self.home / COORDINATOR_DIR / partition_dir_name(0)

    @property
    def metadata_dir(self) -> Path:
        return self.home / "data" / f"{METADATA_TOPIC_NAME}-0"

    def log_dir(self, log: str) -> Path:
        return self.coordinator_dir if log == DISKLESS_METADATA_TOPIC_NAME else self.metadata_dir

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def state_rows(self) -> dict[str, list[tuple]] | None:
        """Every row of every table of this node's coordinator SQLite file, sorted (None while
        it does not exist), read through a read-only connection: what the node has COMMITTed."""
        db = self.coordinator_dir / "coordinator.db"
        if not db.exists():
            return None
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
        try:
            names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]  # fmt: skip
            return {n: sorted(conn.execute(f'SELECT * FROM "{n}"').fetchall(), key=repr)
                    for n in names}  # fmt: skip
        finally:
            conn.close()


class NetnsCluster:
    """``n`` nodes on ``bed`` (created by the caller), under ``root``. ``module``: the Python
    module the nodes run (``kafka_rpc.cli``; a test may name a wrapper that patches something
    first and then runs it)."""

    def __init__(self, bed: NetBed, root: Path, props: dict[str, str] | None = None,
                 module: str = "kafka_rpc.cli", log_level: str = "INFO") -> None:  # fmt: skip
        self.bed = bed
        self.root = Path(root)
        voters = ",".join(f"{i}@{NetBed.address(i)}:{CONTROLLER_PORT}" for i in bed.nodes)
        self.nodes = {i: NetnsNode(self.root, i, voters, dict(props or {}), module)
                      for i in bed.nodes}  # fmt: skip
        self.log_level = log_level
        self.cluster_id: str | None = None
        # the repository root first, so a wrapper module (tests/...) imports as from here
        repo_root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH")) if p)
        self.env = dict(os.environ, KAFKA_RPC_NO_REEXEC="1", PYTHONPATH=path)

    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def format(self) -> None:
        """A new cluster id and every node's directories formatted with it (what ``kafka-rpc
        storage format --cluster-id ID --config FILE`` does, in this process)."""
        self.cluster_id = random_uuid_text()
        for n in self.nodes.values():
            format_storage(load_config(str(n.config)), self.cluster_id)

    def start_node(self, node_id: int) -> None:
        n = self.nodes[node_id]
        n.runs += 1
        cmd = [sys.executable, "-m", n.module, "--log-level", self.log_level, "serve",
               "--config", str(n.config)]  # fmt: skip
        n.proc = self.bed.popen(node_id, cmd, n.log_path, cwd=n.home, env=self.env)

    async def start(self) -> None:
        """Format, start the proxies and the nodes, wait (bounded) for every node's
        ``cluster id`` line and every proxy's API. Call from the client namespace."""
        self.format()
        for i in self.nodes:
            a = NetBed.address(i)
            self.bed.start_toxiproxy(i, {
                "broker": (f"{a}:{BROKER_PORT}", f"127.0.0.1:{LOCAL_BROKER_PORT}"),
                "controller": (f"{a}:{CONTROLLER_PORT}", f"127.0.0.1:{LOCAL_CONTROLLER_PORT}"),
            }, seed=i)  # fmt: skip
        for i in self.nodes:
            self.start_node(i)
        for tp in self.bed.toxiproxies.values():
            await tp.wait_ready()
        for i in self.nodes:
            await self.started(i)

    async def started(self, node_id: int, timeout: float = START_TIMEOUT) -> None:
        n = self.nodes[node_id]
        deadline = time.monotonic() + timeout
        while True:
            text = n.log_path.read_text(errors="replace") if n.log_path.exists() else ""
            if "cluster id" in text:
                return
            assert n.proc is not None  # start() ran it
            if n.proc.poll() is not None or time.monotonic() > deadline:
                what = "exited" if n.proc.poll() is not None else f"did not start in {timeout:g} s"
                raise RuntimeError(f"node {node_id} {what}:\n{text[-4000:]}")
            await asyncio.sleep(0.05)

    def tails(self, lines: int = 40) -> str:
        return "\n".join(f"----- node {i} ({n.log_path}) -----\n{n.tail(lines)}"
                         for i, n in self.nodes.items())  # fmt: skip


_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")


def log_batches(directory: Path) -> dict[int, tuple[int, int, bytes]]:
    """A Raft log's whole batches from its segment files: base offset -> (last offset,
    partition leader epoch, the batch's whole frame). A torn tail is dropped."""
    out: dict[int, tuple[int, int, bytes]] = {}
    if not directory.exists():
        return out
    for p in sorted(directory.iterdir()):
        if not _SEGMENT_RE.match(p.name):
            continue
        data = p.read_bytes()
        pos = 0
        while len(data) - pos >= 27:
            base, length, epoch = struct.unpack_from(">qii", data, pos)
            size = 12 + length
            if length <= 0 or pos + size > len(data):
                break
            (delta,) = struct.unpack_from(">i", data, pos + 23)
            out[base] = (base + delta, epoch, data[pos : pos + size])
            pos += size
    return out
