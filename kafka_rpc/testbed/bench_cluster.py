"""A local multi-node cluster for ``kafka-rpc bench --cluster N`` and its tests.

:class:`BenchCluster` runs ``N`` ``kafka-rpc serve`` processes on loopback, each a combined
broker+controller (``process.roles=broker,controller``, every node a voter of the metadata quorum)
with no coordinator setting: the default topic-based Batch Coordinator
(``kafka_rpc.coordinator.assigned``: the replica of ``__diskless-metadata`` partition 0 starts once
the controller created the topic, replication factor ``min(3, N)``; its Raft group times out as
the metadata quorum's ``controller.quorum.*`` settings say). Every node directory is formatted
with ``kafka-rpc storage format`` and one cluster id
(``kafka_rpc.protocol.uuids.random_uuid_text``, what ``kafka-rpc storage random-uuid`` prints).
Ports are picked free on 127.0.0.1 before the first start and kept, so a restarted node is at
the same addresses (the bench's bootstrap list stays valid). Each process runs in its own process
group, in its own directory
(``<root>/node<i>/``), with stdout/stderr in ``stdout.<run>`` / ``stderr.<run>``.

* :meth:`BenchCluster.start`: format, start every node, wait (bounded) for each one's
  ``cluster id`` line.
* :meth:`BenchCluster.coordinator_leader`: the node every live node names for FindCoordinator v7
  key type BATCH ``write:<topic>:0`` (docs/batch-coordinator.md: the Raft leader of coordinator
  partition 0, where every partition not mapped elsewhere belongs), or None while they disagree or
  one answers an error (an election, a replica still starting).
* :meth:`BenchCluster.wait_coordinator_leader`: that, polled until ``timeout`` seconds.
* :meth:`BenchCluster.kill` (SIGKILL of the node's process group, reaped) and
  :meth:`BenchCluster.restart` (same config, directory and ports).
* :meth:`BenchCluster.failover`: the bench's scenario, SIGKILL of the coordinator leader at a
  given time, restart a few seconds later, every step appended to a JSON-lines events file.
* :meth:`BenchCluster.close`: SIGKILL every process group still running; idempotent, for a
  ``finally``.

Every wait is bounded; nothing here retries forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kafka_rpc.protocol.uuids import random_uuid_text, uuid_text

#: the quorum's timing (the coordinator's Raft groups follow it): Kafka's defaults (election
#: 1000 ms, fetch 2000 ms), shorter broker sessions so a killed node's broker is fenced in seconds;
#: no coordinator setting: the default
NODE_PROPS = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "controller.quorum.request.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    "shutdown.timeout.ms": "2000",
}
START_TIMEOUT = 60.0  # s, one process to its "cluster id" line
CLI_TIMEOUT = 60.0  # s, one `kafka-rpc storage` call
BATCH = 3  # FindCoordinator key type BATCH (KIP-1164)
_ENV = dict(os.environ, KAFKA_RPC_NO_REEXEC="1")  # the pid is the server itself


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now (bound to port 0, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def write_properties(path: Path, base: dict[str, str], node_id: int, broker_port: int,
                     controller_port: int, voters: str, log_dir: Path,
                     props: dict[str, str], roles: str = "broker,controller") -> None:  # fmt: skip
    """A node's ``server.properties`` at ``path``: ``base``, then ``node.id``, its listeners on
    127.0.0.1 (broker port 0: any; ``roles`` "broker,controller": both, "broker": PLAINTEXT
    only, "controller": CONTROLLER only, with ``process.roles`` set to ``roles``),
    ``controller.quorum.voters`` and ``log.dirs``, then ``props`` (which win)."""
    listeners = []
    if "broker" in roles:
        listeners.append(f"PLAINTEXT://127.0.0.1:{broker_port}")
    if "controller" in roles:
        listeners.append(f"CONTROLLER://127.0.0.1:{controller_port}")
    all_props = {
        **base,
        "process.roles": roles,
        "node.id": str(node_id),
        "listeners": ",".join(listeners),
        "controller.quorum.voters": voters,
        "log.dirs": str(log_dir),
        **props,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in all_props.items()))


def batch_key(mode: str, topic_id: uuid.UUID, partition: int) -> str:
    """A FindCoordinator BATCH key, ``read:`` or ``write:`` + Kafka's 22-char URL-safe base64
    topic id + ``:partition`` (``kafka_rpc.handlers.find_coordinator``)."""
    return f"{mode}:{uuid_text(topic_id)}:{partition}"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", *args],
        capture_output=True, text=True, timeout=CLI_TIMEOUT, env=_ENV,
    )  # fmt: skip


class BenchNode:
    """One ``kafka-rpc serve`` process with its directory and fixed ports; ``roles`` its
    ``process.roles`` ("broker,controller", "broker" or "controller")."""

    def __init__(self, root: Path, node_id: int, ports: tuple[int, int], voters: str,
                 props: dict[str, str], cpus: str | None,
                 log_level: str = "WARNING", roles: str = "broker,controller") -> None:  # fmt: skip
        self.node_id = node_id
        self.roles = roles
        self.broker_port, self.controller_port = ports
        self.home = root / f"node{node_id}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.config = self.home / "server.properties"
        write_properties(self.config, NODE_PROPS, node_id, self.broker_port,
                         self.controller_port, voters, self.home / "data", props,
                         roles)  # fmt: skip
        self.cpus = cpus
        self.log_level = log_level
        self.proc: subprocess.Popen | None = None
        self.runs = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def controller_address(self) -> str:
        return f"127.0.0.1:{self.controller_port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def out_path(self) -> Path:
        return self.home / f"stdout.{self.runs}"

    def err_path(self) -> Path:
        return self.home / f"stderr.{self.runs}"

    def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"node {self.node_id} is running")
        self.runs += 1
        cmd = [sys.executable, "-m", "kafka_rpc.cli", "--log-level", self.log_level, "serve",
               "--config", str(self.config)]  # fmt: skip
        if self.cpus:
            cmd = ["taskset", "-c", self.cpus, *cmd]
        with self.out_path().open("wb") as out, self.err_path().open("wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=_ENV, cwd=self.home,
                                         start_new_session=True)  # fmt: skip

    async def started(self, timeout: float = START_TIMEOUT) -> None:
        """Wait for this run's ``cluster id`` line; RuntimeError when the process exits first or
        after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.out_path().read_text(errors="replace")
            if "cluster id" in text:
                return
            if not self.alive or time.monotonic() > deadline:
                err = self.err_path().read_text(errors="replace")[-4000:]
                what = "exited" if not self.alive else f"did not start in {timeout:g} s"
                raise RuntimeError(f"node {self.node_id} {what}: {text[-2000:]}\n{err}")
            await asyncio.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the node's process group (it leads its own session) and reap it."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(30)


class BenchCluster:
    """``n`` nodes under ``root`` (module docstring). ``layout`` "combined": ``n`` broker +
    controller nodes 1..n, every one a voter; "dedicated": three controller-only nodes 1-3 (the
    voters) and ``n`` broker-only nodes 4..3+n, which hold the coordinator replicas (Kafka's
    production layout). ``props`` override :data:`NODE_PROPS` on every node; ``cpus``: a
    ``taskset -c`` list for every node (None: not pinned); ``log_level``: the nodes'
    ``--log-level``."""

    def __init__(self, root: Path | str, n: int = 3, props: dict[str, str] | None = None,
                 cpus: str | None = None, log_level: str = "WARNING",
                 layout: str = "combined") -> None:  # fmt: skip
        if n < 1:
            raise ValueError("a cluster needs at least one node")
        if layout not in ("combined", "dedicated"):
            raise ValueError(f"layout must be combined or dedicated, not {layout!r}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.layout = layout
        n_ctl = n if layout == "combined" else 3
        total = n if layout == "combined" else 3 + n
        ports = free_ports(2 * total)
        ids = list(range(1, total + 1))
        voters = ",".join(f"{i}@127.0.0.1:{ports[2 * k + 1]}" for k, i in enumerate(ids)
                          if i <= n_ctl)  # fmt: skip
        props = dict(props or {})
        props.setdefault("diskless.metadata.topic.replication.factor", str(min(3, n)))
        self._voters = voters
        self._props = props
        self._cpus = cpus
        self._log_level = log_level

        def roles(i: int) -> str:
            if layout == "combined":
                return "broker,controller"
            return "controller" if i <= n_ctl else "broker"

        self.nodes = {
            i: BenchNode(
                self.root, i, (ports[2 * k], ports[2 * k + 1]), voters, props, cpus, log_level,
                roles(i),
            )
            for k, i in enumerate(ids)
        }
        self.cluster_id: str | None = None
        self._probe_topic = uuid.uuid4()  # unmapped: belongs to coordinator partition 0

    # ------------------------------------------------------------------ addresses
    def brokers(self) -> list[int]:
        """The ids of the nodes with the broker role."""
        return [i for i, n in self.nodes.items() if "broker" in n.roles]

    def bootstrap(self) -> str:
        """Every broker's listener, comma-separated (the bench's ``--server``)."""
        return ",".join(self.nodes[i].address for i in self.brokers())

    def controllers(self) -> str:
        """Every controller's listener, comma-separated (the bench's ``--controller``)."""
        return ",".join(n.controller_address for n in self.nodes.values()
                        if "controller" in n.roles)  # fmt: skip

    def live(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.alive]

    def live_brokers(self) -> list[int]:
        return [i for i in self.live() if "broker" in self.nodes[i].roles]

    # ------------------------------------------------------------------ life
    def format(self) -> None:
        """A new cluster id (what ``kafka-rpc storage random-uuid`` prints), then ``kafka-rpc
        storage format`` of every node."""
        self.cluster_id = random_uuid_text()
        for n in self.nodes.values():
            r = _cli("storage", "format", "--cluster-id", self.cluster_id, "--config",
                     str(n.config))  # fmt: skip
            if r.returncode:
                raise RuntimeError(f"storage format of node {n.node_id} failed: {r.stderr}")

    async def start(self) -> None:
        self.format()
        for n in self.nodes.values():
            n.start()
        for n in self.nodes.values():
            await n.started()

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    async def add_broker(self) -> int:
        """A new broker-only node (the next id), formatted with the cluster id and started;
        returns its id."""
        if self.cluster_id is None:
            raise RuntimeError("the cluster was not started")
        i = max(self.nodes) + 1
        bp, cp = free_ports(2)
        node = BenchNode(self.root, i, (bp, cp), self._voters, self._props, self._cpus,
                         self._log_level, "broker")  # fmt: skip
        r = _cli("storage", "format", "--cluster-id", self.cluster_id, "--config",
                 str(node.config))  # fmt: skip
        if r.returncode:
            raise RuntimeError(f"storage format of node {i} failed: {r.stderr}")
        self.nodes[i] = node
        node.start()
        await node.started()
        return i

    async def replace(self, dead: int, new: int, timeout: float = 120.0) -> None:
        """Move every ``__diskless-metadata`` replica of node ``dead`` to node ``new`` with
        AlterPartitionReassignments (what ``kafka-reassign-partitions --execute`` sends), then
        wait until no reassignment is left and every partition's ISR equals its replicas
        (RuntimeError after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                parts = await self._metadata_partitions()
                moves = {p: tuple(new if r == dead else r for r in reps)
                         for p, (reps, _isr) in parts.items() if dead in reps}  # fmt: skip
                if not moves:
                    if all(sorted(reps) == sorted(isr) for reps, isr in parts.values()) and (
                        not await self._reassigning()
                    ):
                        return
                else:
                    await self._reassign(moves)
            except (OSError, TimeoutError, ConnectionError, RuntimeError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {dead} was not replaced by node {new} in {timeout:g} s")
            await asyncio.sleep(0.2)

    async def _admin(self):
        from kafka_rpc.client import KafkaRpcClient

        for i in self.live_brokers():
            try:
                return await KafkaRpcClient.connect(self.nodes[i].address, connect_timeout=2.0,
                                                    request_timeout=10.0)  # fmt: skip
            except (OSError, TimeoutError, ConnectionError):
                continue
        raise RuntimeError("no live broker")

    async def _metadata_partitions(self) -> dict[int, tuple[list[int], list[int]]]:
        from kafka_rpc.protocol import codec

        c = await self._admin()
        try:
            md = await c.request(codec.message_class("MetadataRequest")(topics=None), version=12)
        finally:
            await c.close()
        for t in md.topics:
            if t.name == "__diskless-metadata":
                return {p.partition_index: (list(p.replica_nodes), list(p.isr_nodes))
                        for p in t.partitions}  # fmt: skip
        raise RuntimeError("no __diskless-metadata yet")

    async def _reassign(self, moves: dict[int, tuple[int, ...]]) -> None:
        from kafka_rpc.protocol import codec

        m = codec.module("AlterPartitionReassignmentsRequest")
        req = m.AlterPartitionReassignmentsRequest(timeout_ms=10_000, topics=(
            m.ReassignableTopic(name="__diskless-metadata", partitions=tuple(
                m.ReassignablePartition(partition_index=p, replicas=reps)
                for p, reps in sorted(moves.items()))),))  # fmt: skip
        c = await self._admin()
        try:
            resp = await c.request(req)
        finally:
            await c.close()
        if resp.error_code:
            raise RuntimeError(f"AlterPartitionReassignments answered {resp.error_code}")

    async def _reassigning(self) -> bool:
        from kafka_rpc.protocol import codec

        m = codec.module("ListPartitionReassignmentsRequest")
        c = await self._admin()
        try:
            resp = await c.request(m.ListPartitionReassignmentsRequest(timeout_ms=5000,
                                                                       topics=None))  # fmt: skip
        finally:
            await c.close()
        return bool(resp.error_code) or bool(resp.topics)

    async def restart(self, node_id: int) -> None:
        self.nodes[node_id].start()
        await self.nodes[node_id].started()

    def close(self) -> None:
        """SIGKILL every node still running (process groups, reaped). Safe to call twice."""
        for n in self.nodes.values():
            with contextlib.suppress(Exception):
                n.kill()

    # ------------------------------------------------------------------ coordinator
    async def _write_coordinator_of(self, node_id: int) -> int | None:
        from kafka_rpc.client import KafkaRpcClient
        from kafka_rpc.protocol import codec

        fc = codec.module("FindCoordinatorRequest")
        key = batch_key("write", self._probe_topic, 0)
        req = fc.FindCoordinatorRequest(key_type=BATCH, coordinator_keys=(key,))
        try:
            async with KafkaRpcClient(self.nodes[node_id].address, connect_timeout=2.0,
                                      request_timeout=3.0) as c:  # fmt: skip
                resp = await c.request(req, version=7)
        except (OSError, TimeoutError, ConnectionError):
            return None
        (k,) = resp.coordinators
        return k.node_id if k.error_code == 0 and k.node_id >= 0 else None

    async def coordinator_leader(self, among: list[int] | None = None) -> int | None:
        """The coordinator (Raft) leader of ``__diskless-metadata`` partition 0 that every node
        of ``among`` (default: the live ones) names, itself live; else None."""
        among = self.live_brokers() if among is None else among
        named = {await self._write_coordinator_of(i) for i in among}
        if len(named) != 1:
            return None
        (leader,) = named
        return leader if leader is not None and leader in self.live_brokers() else None

    async def wait_coordinator_leader(self, timeout: float = START_TIMEOUT,
                                      exclude: int | None = None) -> int:  # fmt: skip
        """Poll :meth:`coordinator_leader` (every 0.1 s) until a node other than ``exclude``
        is named; RuntimeError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = await self.coordinator_leader()
            if leader is not None and leader != exclude:
                return leader
            await asyncio.sleep(0.1)
        raise RuntimeError(f"no coordinator leader of __diskless-metadata-0 in {timeout:g} s")

    async def failover(self, kill_at: float, restart_after: float, events: Path | None = None,
                       t0: float | None = None, replace: bool = False) -> list[dict]:  # fmt: skip
        """SIGKILL the coordinator leader ``kill_at`` seconds after ``t0`` (epoch seconds,
        default now), restart it ``restart_after`` seconds after the kill, and wait until it is
        up. Returns (and appends to ``events``, JSON lines) the events, each
        ``{"event", "t" (epoch s), "node"}``: ``kill``, ``new_leader`` (the first time the live
        nodes agree on another coordinator leader; ``null`` node if not within 30 s),
        ``restart``, ``restarted`` (its ``cluster id`` line). With ``replace``, the killed
        node stays dead: ``restart_after`` seconds after the kill a new broker starts
        (``add_node``, its id as ``node``) and takes over its replicas through a reassignment
        (:meth:`replace`), then ``replaced``."""
        out: list[dict] = []

        def note(event: str, node: int | None, **extra) -> None:
            e = {"event": event, "t": time.time(), "node": node, **extra}
            out.append(e)
            if events is not None:
                with events.open("a") as f:
                    f.write(json.dumps(e) + "\n")

        start = time.time() if t0 is None else t0
        await asyncio.sleep(max(0.0, start + kill_at - time.time()))
        victim = await self.wait_coordinator_leader(timeout=30.0)
        self.kill(victim)
        note("kill", victim, signal="SIGKILL")
        restart_at = time.time() + restart_after
        try:
            new = await self.wait_coordinator_leader(timeout=30.0, exclude=victim)
        except RuntimeError:
            new = None
        note("new_leader", new)
        await asyncio.sleep(max(0.0, restart_at - time.time()))
        if replace:
            new_id = await self.add_broker()
            note("add_node", new_id, replaces=victim)
            await self.replace(victim, new_id)
            note("replaced", new_id, replaces=victim)
            return out
        note("restart", victim)
        await self.restart(victim)
        note("restarted", victim)
        return out


def read_events(path: Path | str) -> list[dict]:
    """The events :meth:`BenchCluster.failover` appended to ``path`` ([] when there is none)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


#: written by bench/diskless_load.py (epoch seconds) at the load's first acknowledged commit
LOAD_STARTED = "load_started"
#: the events :meth:`BenchCluster.failover` appends, read back by bench/diskless_load.py
EVENTS = "cluster_events.jsonl"


def run_load(
    load_cmd,
    env: dict,
    out: Path,
    n: int = 3,
    kill_at: float | None = None,
    restart_after: float = 5.0,
    load_timeout: float | None = None,
    props: dict[str, str] | None = None,
    layout: str = "combined",
    replace_node: bool = False,
) -> int:
    """``kafka-rpc bench --cluster N``: start a :class:`BenchCluster` of ``n`` nodes under
    ``out/cluster``, wait for its coordinator leader, run ``load_cmd(bootstrap, controllers,
    events_path)`` (the spark-submit command line) in its own process group and, when
    ``kill_at`` is not None, ``kill_at`` seconds after the load's first acknowledged commit
    (the time in ``out/load_started``)
    SIGKILL the coordinator leader and restart it ``restart_after`` seconds later
    (:meth:`BenchCluster.failover`, events in ``out/cluster_events.jsonl``). The load's process
    group (SIGTERM, then SIGKILL after 10 s) and every node are killed on the way out, on an
    error or Ctrl-C too. Returns the load's exit code; 2 when the cluster did not start, 1 when
    the kill did not happen although asked (the load ended first or the failover failed).
    ``props``: server properties of every node (over :data:`NODE_PROPS`); ``layout``: the
    :class:`BenchCluster` layout ("dedicated": three controllers and ``n`` brokers);
    ``replace_node``: the killed node is replaced by a new one through a reassignment instead
    of restarted (:meth:`BenchCluster.failover`)."""
    out.mkdir(parents=True, exist_ok=True)
    cluster = BenchCluster(out / "cluster", n, props=props, layout=layout)
    events = out / EVENTS
    marker = out / LOAD_STARTED
    for p in (events, marker):
        p.unlink(missing_ok=True)
    proc: subprocess.Popen | None = None

    async def schedule() -> list[dict]:
        # main() starts the load first, and schedules this only with a kill_at
        assert proc is not None and kill_at is not None
        while not marker.exists():
            if proc.poll() is not None:
                raise RuntimeError("the load ended before its first acknowledged commit")
            await asyncio.sleep(0.2)
        t0 = float(marker.read_text().strip())
        return await cluster.failover(kill_at, restart_after, events, t0=t0,
                                      replace=replace_node)  # fmt: skip

    async def main() -> int:
        nonlocal proc
        try:
            await cluster.start()
            leader = await cluster.wait_coordinator_leader()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"kafka-rpc: the {n}-node cluster did not start: {exc}", file=sys.stderr)
            return 2
        print(f"cluster {cluster.cluster_id}: {len(cluster.nodes)} nodes ({layout}), "
              f"brokers {cluster.bootstrap()}, "
              f"controllers {cluster.controllers()}, coordinator leader node {leader}",
              flush=True)  # fmt: skip
        cmd = load_cmd(cluster.bootstrap(), cluster.controllers(), str(events))
        print("+ " + " ".join(cmd), flush=True)
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        task = asyncio.get_running_loop().create_task(schedule()) if kill_at is not None else None
        deadline = None if load_timeout is None else time.monotonic() + load_timeout
        while proc.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                print(f"kafka-rpc: the load ran over {load_timeout:g} s", file=sys.stderr)
                break
            await asyncio.sleep(0.2)
        rc = proc.returncode if proc.returncode is not None else 1
        if task is not None:
            if not task.done():
                task.cancel()
            try:
                await task
            except (asyncio.CancelledError, RuntimeError) as exc:
                if not any(e["event"] == "kill" for e in read_events(events)):
                    print(f"kafka-rpc: no coordinator-leader kill: "
                          f"{exc or 'the load ended first'}", file=sys.stderr)  # fmt: skip
                    rc = rc or 1
        return rc

    try:
        return asyncio.run(main())
    finally:
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
            # whatever of its group is left (the JVM, Spark's Python workers)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        cluster.close()
