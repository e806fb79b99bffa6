"""Controller benchmark: CreateTopics and AllocateProducerIds per second on 1 node and
on 3 nodes, each against raw Raft appends of the same records (the floor: what the controller
adds on top of the metadata log), side by side in one run.

Parts (``--parts ab``; each prints one Markdown table, the method above it):

(a) CreateTopics: one topic of 10 partitions per request, a unique name each time, replication
    factor 1 on 1 node and 3 on 3 nodes (placement needs unfenced brokers: the nodes' own broker
    roles, registered with the active controller in combined mode). The controller writes a
    TopicRecord and 10 PartitionRecords as one batch (``replication.create_topics``, no configs).
(b) AllocateProducerIds: C fake brokers (ids 1000..1000+C-1), registered by the load process
    with BrokerRegistration and kept unfenced by BrokerHeartbeats every
    ``broker.heartbeat.interval.ms``; each client asks for blocks for its own broker id and
    epoch (Kafka's RPCProducerIdManager keeps one request in flight per broker, so C clients =
    C brokers). ``producer.ids.allocation.max.per.second=0`` (no limit: the QuorumController
    throttles only when it is > 0), so the rate limit is not what is measured. One
    ProducerIdsRecord per block.

Each cell (1 node / 3 nodes, per ``controller.quorum.append.linger.ms``) is run as:

* **ours**: 1 or 3 ``kafka-rpc serve`` processes on loopback (combined roles, the config of
  ``bench/raft.py`` (b)/(c): ``node_overrides``), fresh data directories. A load process finds
  the leader with DescribeQuorum, waits until CreateTopics ``validateOnly`` with the replication
  factor of the cell succeeds on its controller listener (active, every node's broker
  unfenced; NOT_CONTROLLER = ask DescribeQuorum again), then runs a closed loop of C clients,
  each its own TCP connection (``KafkaRpcClient``) to the active controller's controller
  listener: send, await the response (answered once the records are committed), repeat.
* **floor**: 1 or 3 processes running the same ``Node`` with the same overrides, set up as
  ``kafka-rpc serve`` sets itself up (uvloop, MALLOC_* env, ``_tune_gc``, INFO logging to
  stderr); the leader, once its controller is active and every node's broker is unfenced, runs
  the same closed loop in-process: ``driver.wait_committed(driver.append(records))`` with the
  records the controller would have written for the command (same types, same field values
  and sizes; encoded with ``codec.encode_record`` before the timed loop, so the floor pays no
  encoding). There is no raw-append RPC in Kafka's protocol, so the floor is in-process: it
  pays the Raft log (linger, batch, fsync, replication, commit) and ``handle_commit`` of the
  QuorumController (the replay of the committed records and the image publishers, which every
  node runs for every committed batch, whoever wrote it), but no network hop
  from the client, no request decode, no command, no response.

Latency is send (append) -> response (commit). Ops count when they complete in [warm,
warm+dur]; latencies are of ops started in it. Rounds alternate ours/floor (the order flips
every round); every number is the median over rounds. Pinning (``taskset``, >= 2 CPUs): on 1
node the server (or the floor process) on CPU 1 and the load process on CPU 0; 3 nodes
unpinned (the ours load process then shares the 2 cores with the 3 servers).

    python bench/controller.py [--quick] [--parts ab] [--lingers 25,0] [--dir DIR] [--json FILE]
                               [--profile DIR]
    python bench/controller.py --load SPEC | --floor SPEC     (the child processes)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kafka_rpc.cli.serve import MALLOC_ENV  # what kafka-rpc serve re-executes with; the floor too

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _load_raft_bench():
    """bench/raft.py as a module (child processes, serve_child, node_overrides, DescribeQuorum
    poller, pinning)."""
    spec = importlib.util.spec_from_file_location("bench_raft", HERE / "raft.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_raft"] = mod
    spec.loader.exec_module(mod)
    return mod


rb = _load_raft_bench()
CLUSTER_ID = rb.CLUSTER_ID
PINNED = rb.PINNED
Child, emit, log, med, pct = rb.Child, rb.emit, rb.log, rb.med, rb.pct

PARTITIONS = 10
FAKE_BROKER_BASE = 1000
KINDS = {"a": "create", "b": "pids"}
#: floor ops encoded in advance per second of a cell (beyond: encoded in the loop, reported)
POOL_PER_S = {"create": 1500, "pids": 10000}
TITLES = {"create": "CreateTopics (10 partitions)", "pids": "AllocateProducerIds"}


# ============================================================================ the records


def broker_dir(broker_id: int) -> uuid.UUID:
    """The one log directory a bench broker registers (a Kafka broker registers its directory
    ids at metadata.version >= 3.7-IV2): fixed per broker id, so the floor writes the same
    PartitionRecord.Directories as the controller; never one of Kafka's reserved ids (the
    high 64 bits are not zero)."""
    return uuid.UUID(int=((broker_id + 1) << 64) | 0xB0)


def topic_records(name: str, brokers: list[int], rf: int, rng: random.Random) -> list[bytes]:
    """The framed records ``replication.create_topics`` writes for one CreateTopics entry
    {name, NumPartitions=10, ReplicationFactor=rf, no configs} when ``brokers`` (sorted ids) are
    the unfenced brokers, each registered with the one directory :func:`broker_dir`:
    TopicRecord, then one PartitionRecord per partition (replicas by StripedReplicaPlacer order
    from a random start, ISR = replicas, leader = first replica, epochs 0, Directories = each
    replica's directory). ``rng`` is consumed as the controller consumes it (the placement
    start, then the topic id), so the same seed gives the same bytes."""
    from kafka_rpc.controller.image import EMPTY
    from kafka_rpc.controller.placement import place_replicas
    from kafka_rpc.controller.replay import replay
    from kafka_rpc.controller.replication import new_topic_id
    from kafka_rpc.protocol import codec

    image = EMPTY  # the brokers as the controller's image has them: registered, unfenced
    for off, bid in enumerate(brokers):
        image = replay(image, codec.message_class("RegisterBrokerRecord")(
            broker_id=bid, incarnation_id=uuid.UUID(int=bid + 1), broker_epoch=off,
            fenced=False, log_dirs=(broker_dir(bid),)), off)  # fmt: skip
    assignment = place_replicas(image, PARTITIONS, rf, rng)  # the controller's own placer
    tid = new_topic_id(EMPTY, rng)  # Kafka's Uuid.randomUuid rules, as the controller
    recs = [codec.message_class("TopicRecord")(name=name, topic_id=tid)]
    part = codec.message_class("PartitionRecord")
    for i, replicas in enumerate(assignment):
        recs.append(part(partition_id=i, topic_id=tid, replicas=replicas, isr=replicas,
                         leader=replicas[0], leader_epoch=0, partition_epoch=0,
                         directories=tuple(broker_dir(b) for b in replicas)))  # fmt: skip
    return [codec.encode_record(r) for r in recs]


def producer_ids_records(broker_id: int, broker_epoch: int, first: int) -> list[bytes]:
    """The framed record ``producer_ids.allocate_producer_ids`` writes for the block [first, first +
    999]: one ProducerIdsRecord{BrokerId, BrokerEpoch, NextProducerId = first + 1000}."""
    from kafka_rpc.controller.producer_ids import PRODUCER_ID_BLOCK_SIZE
    from kafka_rpc.protocol import codec

    rec = codec.message_class("ProducerIdsRecord")(
        broker_id=broker_id, broker_epoch=broker_epoch,
        next_producer_id=first + PRODUCER_ID_BLOCK_SIZE)  # fmt: skip
    return [codec.encode_record(rec)]


def topic_name(worker: int, i: int) -> str:
    """16 characters, unique per (worker, i) (worker < 100)."""
    return f"bench-{worker:02d}-{i:07d}"


class FloorRecords:
    """Record lists for op ``n`` (0, 1, ...), the first ``pool`` encoded in advance; beyond the
    pool they are encoded when asked for (counted in ``late``)."""

    def __init__(self, kind: str, brokers: list[int], rf: int, pool: int, conc: int) -> None:
        self.kind, self.brokers, self.rf, self.conc = kind, brokers, rf, conc
        self.rng = random.Random()
        self.late = 0
        self.pool = [self.make(n) for n in range(pool)]

    def make(self, n: int) -> list[bytes]:
        w, i = n % self.conc, n // self.conc
        if self.kind == "create":
            return topic_records(topic_name(w, i), self.brokers, self.rf, self.rng)
        # a plausible broker epoch (an offset) per fake broker; the controller checks it, the
        # log does not; every int64 is 8 bytes on the wire, so the size is the same
        return producer_ids_records(FAKE_BROKER_BASE + w, 40 + 2 * w, n * 1000)

    def get(self, n: int) -> list[bytes]:
        if n < len(self.pool):
            return self.pool[n]
        self.late += 1
        return self.make(n)


# ============================================================================ the load


async def closed_loop(op, conc: int, warm: float, dur: float) -> dict:
    """C workers, each ``await op(worker, i)`` in a loop (i = its own count). An op counts when
    it returns True and completes in [warm, warm+dur]; a False return or an exception is an
    error (an exception also sleeps 10 ms). Latencies (ms) of successful ops started in the
    window."""
    lat: list[float] = []
    count = errors = 0
    start = time.perf_counter() + warm
    end = start + dur

    async def worker(w: int) -> None:
        nonlocal count, errors
        i = 0
        while True:
            t = time.perf_counter()
            if t >= end:
                return
            try:
                ok = await op(w, i)
            except Exception:  # counted, the loop goes on
                errors += 1
                await asyncio.sleep(0.01)
                continue
            i += 1
            done = time.perf_counter()
            if not ok:
                errors += 1
                continue
            if t >= start:
                lat.append(done - t)
            if start <= done <= end:
                count += 1

    await asyncio.gather(*(worker(w) for w in range(conc)))
    return {"ops_per_s": count / dur, "p50_ms": pct(lat, 0.5) * 1e3,
            "p99_ms": pct(lat, 0.99) * 1e3, "ops": len(lat), "errors": errors}  # fmt: skip


def _registration(broker_id: int, port: int):
    from kafka_rpc.broker.lifecycle import PLAINTEXT
    from kafka_rpc.controller.features import supported_features
    from kafka_rpc.protocol import codec

    m = codec.module("BrokerRegistrationRequest")
    return m.BrokerRegistrationRequest(
        broker_id=broker_id, cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4(),
        listeners=(m.Listener(name="PLAINTEXT", host="127.0.0.1", port=port,
                              security_protocol=PLAINTEXT),),
        features=tuple(m.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                       for n, (lo, hi) in sorted(supported_features().items())),
        rack=None, log_dirs=(broker_dir(broker_id),))  # fmt: skip


def _create_request(name: str, rf: int, validate_only: bool = False):
    from kafka_rpc.protocol import codec

    m = codec.module("CreateTopicsRequest")
    topic = m.CreatableTopic(name=name, num_partitions=PARTITIONS, replication_factor=rf)
    return m.CreateTopicsRequest(topics=(topic,), timeout_ms=30000, validate_only=validate_only)


async def load_main(spec: dict) -> None:
    """The load process of an "ours" cell: find the active controller, wait until it can place
    the cell's replication factor, (b) register the fake brokers, then the closed loop over C
    connections to its controller listener; prints ``window`` (the leader id) before the loop
    and ``result`` after."""
    from kafka_rpc.client import KafkaRpcClient
    from kafka_rpc.protocol import codec
    from kafka_rpc.protocol.errors import ErrorCode

    ports = {int(k): v for k, v in spec["ports"].items()}
    kind, conc, rf = spec["kind"], spec["conc"], spec["rf"]
    poller = rb.Poller()
    clients: list = []
    hb_task = None
    try:
        deadline = time.monotonic() + 60
        leader = port = None
        probes: dict[int, KafkaRpcClient] = {}
        while time.monotonic() < deadline:  # the active controller, able to place rf replicas
            p = await rb.until(lambda: poller.leader(list(ports.values())), 120, "a leader")
            leader, port = p.leader_id, ports[p.leader_id]
            if port not in probes:
                probes[port] = KafkaRpcClient(f"127.0.0.1:{port}", client_id="bench-probe",
                                              request_timeout=5, connect_timeout=5)  # fmt: skip
                clients.append(probes[port])
            try:
                resp = await probes[port].request(_create_request("bench-probe", rf, True))
                code = resp.topics[0].error_code
            except Exception:  # not ready / moved: ask DescribeQuorum again
                code = ErrorCode.NOT_CONTROLLER
            if code == 0:
                break
            await asyncio.sleep(0.05)  # NOT_CONTROLLER, or not every broker unfenced yet
        else:
            raise TimeoutError(f"no active controller placing {rf} replicas")
        ctl = probes[port]
        fake: dict[int, int] = {}  # fake broker id -> broker epoch
        if kind == "pids":
            hb = codec.message_class("BrokerHeartbeatRequest")
            ids = [FAKE_BROKER_BASE + w for w in range(conc)]
            regs = await asyncio.gather(
                *(ctl.request(_registration(b, 19000 + b % 1000), raise_on_error=True) for b in ids)
            )
            fake = {bid: r.broker_epoch for bid, r in zip(ids, regs, strict=True)}
            # caught up to its own registration (answered after its commit): unfenced
            hbs = await asyncio.gather(*(ctl.request(hb(
                broker_id=bid, broker_epoch=e, current_metadata_offset=e), raise_on_error=True)
                for bid, e in fake.items()))  # fmt: skip
            assert not any(r.is_fenced for r in hbs), hbs
            interval = spec["heartbeat_ms"] / 1000

            async def heartbeats() -> None:
                while True:
                    await asyncio.sleep(interval)
                    await asyncio.gather(*(ctl.request(hb(
                        broker_id=bid, broker_epoch=e, current_metadata_offset=e))
                        for bid, e in fake.items()))  # fmt: skip

            hb_task = asyncio.ensure_future(heartbeats())
        for _ in range(conc):
            clients.append(await KafkaRpcClient.connect(
                f"127.0.0.1:{port}", client_id="bench", request_timeout=30))  # fmt: skip
        workers = clients[-conc:]
        alloc = codec.message_class("AllocateProducerIdsRequest")

        async def op(w: int, i: int) -> bool:
            if kind == "create":
                resp = await workers[w].request(_create_request(topic_name(w, i), rf))
                return resp.topics[0].error_code == 0
            bid = FAKE_BROKER_BASE + w
            resp = await workers[w].request(alloc(broker_id=bid, broker_epoch=fake[bid]))
            return resp.error_code == 0

        emit(event="window", leader=leader)
        res = await closed_loop(op, conc, spec["warm"], spec["dur"])
        emit(event="result", leader=leader, **res)
    finally:
        if hb_task is not None:
            hb_task.cancel()
        await poller.close()
        for c in clients:
            with contextlib.suppress(Exception):
                await c.close()


async def floor_main(spec: dict) -> None:
    """A floor node: the Server of ``kafka-rpc serve`` on the cell's overrides; when it leads
    (active controller, every node's broker unfenced) it runs the closed loop of raw appends of
    the command's records in-process and prints ``window`` / ``result``; serves until killed."""
    from kafka_rpc.cli.serve import _tune_gc
    from kafka_rpc.config import load_config
    from kafka_rpc.node import Node, handlers_registry

    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)  # fmt: skip
    n = spec["nodes"]
    # encoded before the server starts: a leader busy encoding would starve its followers
    recs = FloorRecords(spec["kind"], list(range(1, n + 1)), spec["rf"], spec["pool"],
                        spec["conc"])  # fmt: skip
    server = Node(load_config(overrides=spec["overrides"]), handlers_registry())
    task = asyncio.ensure_future(server.serve())
    started = asyncio.ensure_future(server.started.wait())
    await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    _tune_gc()
    emit(event="started")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st, driver = server.controller, server.raft
            if (driver is not None and driver.core.is_leader and st.is_active
                    and "metadata.version" in st.image.features
                    and len(st.image.unfenced_brokers()) >= n):  # fmt: skip
                seq = iter(range(1 << 62))

                async def op(w: int, i: int, driver=driver, recs=recs, seq=seq) -> bool:
                    await driver.wait_committed(driver.append(recs.get(next(seq))), 30.0)
                    return True

                emit(event="window", pid=os.getpid())
                res = await closed_loop(op, spec["conc"], spec["warm"], spec["dur"])
                emit(event="result", late_encoded=recs.late, **res)
                break
            await asyncio.sleep(0.01)
        await task
    finally:
        server.should_exit.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)


# ============================================================================ the cells


def py_child(mode: str, spec: dict, log_path: Path, cpu: int | None = None,
             env: dict[str, str] | None = None) -> Child:  # fmt: skip
    pre = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
    argv = [*pre, sys.executable, str(HERE / "controller.py"), mode, json.dumps(spec)]
    return Child(argv, log_path, cpu)


def overrides(d: Path, i: int, ports: dict[int, int], linger: int) -> dict:
    o = rb.node_overrides(d, i, ports, linger)
    o["producer.ids.allocation.max.per.second"] = "0"
    return o


class Profiler:
    """``py-spy record --format raw`` of one process for the measured window (``--profile``)."""

    def __init__(self, out_dir: Path | None) -> None:
        self.out_dir = out_dir
        self.exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.proc: subprocess.Popen | None = None

    def start(self, pid: int, name: str, seconds: float) -> None:
        if self.out_dir is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [self.exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "250",
             "--nonblocking", "--duration", str(max(1, int(seconds))), "--output",
             str(self.out_dir / f"{name}.txt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def wait_events(kids: list[Child], timeout: float, on_window) -> dict:
    """The first ``result`` line any of ``kids`` prints; ``on_window(kid, event)`` at a
    ``window`` line. Raises if a kid exits or nothing arrives in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in kids:
            with contextlib.suppress(queue.Empty):
                line = c.lines.get(timeout=0.02)
                if line is None:
                    raise RuntimeError(f"child exited ({c.proc.wait()}): see {c.log}:\n"
                                       + c.log.read_text()[-3000:])  # fmt: skip
                if line.startswith("{"):
                    ev = json.loads(line)
                    if ev.get("event") == "window":
                        on_window(c, ev)
                    elif ev.get("event") == "result":
                        return ev
    raise TimeoutError(f"no result from {[c.log for c in kids]}")


def run_cell(root: Path, side: str, kind: str, n: int, linger: int, args, tag: str,
             prof: Profiler) -> dict:  # fmt: skip
    d = Path(tempfile.mkdtemp(prefix=f"{side}-{kind}-{n}-{tag}-", dir=root))
    ports = {i: rb.free_port() for i in range(1, n + 1)}
    rf = 1 if n == 1 else 3
    base = {"kind": kind, "conc": args.conc, "warm": args.warm, "dur": args.duration, "rf": rf}
    kids: list[Child] = []
    pinned = 1 if n == 1 else None
    name = f"{kind}-{n}node-linger{linger}-{side}-{tag}"
    try:
        if side == "ours":
            by_id: dict[int, Child] = {}
            for i in ports:
                by_id[i] = rb.serve_child(overrides(d, i, ports, linger), d / f"n{i}",
                                          d / f"n{i}.log", cpu=pinned)  # fmt: skip
                kids.append(by_id[i])
            # the load process starts with the servers: it polls DescribeQuorum until a leader
            spec = dict(base, ports=ports, heartbeat_ms=2000)
            kids.append(py_child("--load", spec, d / "load.log", cpu=0 if n == 1 else None))
            for c in by_id.values():
                rb.wait_serving(c, 60)

            def window(_kid, ev):
                prof.start(by_id[ev["leader"]].proc.pid, name, args.warm + args.duration)
        else:
            per_s = args.pool_per_s or POOL_PER_S[kind]
            pool = int(per_s * (args.warm + args.duration))
            for i in ports:
                spec = dict(base, overrides=overrides(d, i, ports, linger), nodes=n, pool=pool)
                kids.append(py_child("--floor", spec, d / f"n{i}.log", cpu=pinned,
                                     env=MALLOC_ENV))  # fmt: skip

            def window(_kid, ev):
                prof.start(ev["pid"], name, args.warm + args.duration)

        res = wait_events(kids, args.warm + args.duration + 120, window)
        prof.stop()
        return res
    finally:
        for c in kids:
            c.kill()
        prof.stop()
        shutil.rmtree(d, ignore_errors=True)


# ============================================================================ tables


PIN_NOTE = (
    "1 node: server / floor process on CPU 1, load process on CPU 0; 3 nodes unpinned "
    "(ours: 3 servers + the load process on 2 cores). "
)


def print_part(part: str, res: dict, args) -> None:
    kind = KINDS[part]
    if kind == "create":
        what = ("CreateTopics of one new topic (unique 16-char name, NumPartitions=10, "
                "ReplicationFactor 1 on 1 node / 3 on 3 nodes; the nodes' own brokers are the "
                "replicas): 11 records (TopicRecord + 10 PartitionRecords) per batch")  # fmt: skip
        floor_recs = "the same TopicRecord + 10 PartitionRecords (same field values and sizes)"
    else:
        what = (f"AllocateProducerIds for C={args.conc} fake brokers (registered by the load "
                f"process, heartbeats every 2000 ms so they stay unfenced), one request in "
                f"flight per broker; producer.ids.allocation.max.per.second=0 (the "
                f"QuorumController's throttle is off when <= 0): 1 ProducerIdsRecord per "
                f"block")  # fmt: skip
        floor_recs = "one ProducerIdsRecord (NextProducerId going up by 1000)"
    print(f"\n### ({part}) {TITLES[kind]} per second vs raw Raft appends of the same records\n"
          f"\nMethod: {what}. Ours: 1 or 3 `kafka-rpc serve` processes on loopback (combined "
          f"roles, fresh directories each round, `controller.quorum.append.linger.ms` as in the "
          f"row, fsync per flush); a load process finds the leader (DescribeQuorum), waits until "
          f"CreateTopics validateOnly with the row's replication factor succeeds there, then a "
          f"closed loop of C={args.conc} clients, one TCP connection each (KafkaRpcClient), to "
          f"the active controller's controller listener; latency = send -> response (the "
          f"controller answers after commit). Floor: the same Server and config in 1 or 3 "
          f"processes set up as `kafka-rpc serve` is (uvloop, MALLOC env, gc tuning, logging); "
          f"the leader runs the same C closed loop in-process, `driver.append(records)` -> "
          f"`wait_committed`, with {floor_recs}, encoded before the loop (Raft log, fsync, "
          f"replication and handle_commit's replay + publishers, no client network, no request or "
          f"command). {PIN_NOTE if PINNED else ''}"
          f"{args.duration} s after {args.warm} s warm-up; {args.rounds} round(s) alternating "
          f"ours/floor; medians. Target: ours >= 0.5 x floor ops/s.\n")  # fmt: skip
    print(
        "| cell | ours ops/s | floor ops/s | ours/floor | ours p50 ms | ours p99 ms | "
        "floor p50 ms | floor p99 ms | meets |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for cell, sides in res.items():
        o, f = sides["ours"], sides["floor"]
        ro, rf_ = med(o, "ops_per_s"), med(f, "ops_per_s")
        ratio = ro / rf_ if rf_ > 0 else float("nan")
        errs = sum(r["errors"] for r in o) + sum(r["errors"] for r in f)
        print(f"| {cell}{f' ({errs} errors)' if errs else ''} | {ro:,.0f} | {rf_:,.0f} | "
              f"{ratio:.2f} | {med(o, 'p50_ms'):.2f} | {med(o, 'p99_ms'):.2f} | "
              f"{med(f, 'p50_ms'):.2f} | {med(f, 'p99_ms'):.2f} | "
              f"{'yes' if ratio >= 0.5 else 'NO'} (>= 0.5) |")  # fmt: skip


def print_closing(out: dict) -> None:
    print("\n### Closing note\n")
    for part in sorted(KINDS):
        if part not in out:
            continue
        for cell, sides in out[part].items():
            o, f = sides["ours"], sides["floor"]
            ratio = med(o, "ops_per_s") / med(f, "ops_per_s")
            print(f"- {TITLES[KINDS[part]]}, {cell}: {ratio:.2f} of the floor "
                  f"({'meets' if ratio >= 0.5 else 'MISSES'} >= 0.5); p99 {med(o, 'p99_ms'):.1f}"
                  f" ms (floor {med(f, 'p99_ms'):.1f} ms)")  # fmt: skip


# ============================================================================ main


def git_head() -> str:
    """The checkout's commit (``-dirty`` with local changes): the code measured."""
    with contextlib.suppress(Exception):
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, text=True,
                              capture_output=True, timeout=10).stdout.strip() or "?"  # fmt: skip
    return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short cells (the smoke test)")
    ap.add_argument("--parts", default="ab", help="a: CreateTopics, b: AllocateProducerIds")
    ap.add_argument("--nodes", default="1,3", help="cluster sizes, comma-separated")
    ap.add_argument("--lingers", help="controller.quorum.append.linger.ms values "
                    "(default 25,0; --quick 25)")  # fmt: skip
    ap.add_argument("--dir", help="scratch directory on the disk to measure (default: under "
                    "bench/results)")  # fmt: skip
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--duration", type=float)
    ap.add_argument("--warm", type=float)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--pool-per-s", type=float, help="floor ops encoded in advance per "
                    "second of a cell (default: POOL_PER_S)")  # fmt: skip
    ap.add_argument("--profile", help="py-spy raw profiles of every measured process go here")
    for mode in ("--load", "--floor"):
        ap.add_argument(mode, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load or args.floor:
        from kafka_rpc.server import install_uvloop

        install_uvloop()
        fn = load_main if args.load else floor_main
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(fn(json.loads(args.load or args.floor)))
        return 0
    if args.conc > 100:
        ap.error("--conc: at most 100 (topic names and fake broker ids)")
    q = args.quick
    args.duration = args.duration or (0.8 if q else 8.0)
    args.warm = args.warm if args.warm is not None else (0.3 if q else 1.0)
    args.rounds = args.rounds or (1 if q else 3)
    lingers = [int(x) for x in (args.lingers or ("25" if q else "25,0")).split(",")]
    sizes = [int(x) for x in args.nodes.split(",")]
    base = Path(args.dir) if args.dir else HERE / "results"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="controller-bench-", dir=base))
    prof = Profiler(Path(args.profile) if args.profile else None)
    out: dict = {"args": {k: v for k, v in vars(args).items() if k not in ("load", "floor")}}
    print(
        f"# bench/controller.py{' --quick' if q else ''} at {git_head()}: {os.cpu_count()} CPUs, "
        f"taskset {'used' if PINNED else 'not available'}, scratch dir {root} "
        f"({'quick' if q else 'full'} cells; the machine is shared: compare ratios only)"
    )
    cells = [(n, lg) for n in sizes for lg in lingers]
    try:
        for part in args.parts:
            kind = KINDS[part]
            res: dict[str, dict[str, list]] = {}
            for r in range(args.rounds):
                for n, lg in cells if r % 2 == 0 else cells[::-1]:
                    cell = f"{n} node{'s' if n > 1 else ''}, linger {lg} ms"
                    sides = res.setdefault(cell, {"ours": [], "floor": []})
                    for side in ("ours", "floor") if r % 2 == 0 else ("floor", "ours"):
                        t0 = time.monotonic()
                        x = run_cell(root, side, kind, n, lg, args, f"r{r}", prof)
                        sides[side].append(x)
                        log(f"({part}) round {r} {cell} {side} ({time.monotonic() - t0:.1f} s): "
                            f"{x}")  # fmt: skip
            res = {f"{n} node{'s' if n > 1 else ''}, linger {lg} ms": res[
                f"{n} node{'s' if n > 1 else ''}, linger {lg} ms"] for n, lg in cells}  # fmt: skip
            out[part] = res
            print_part(part, res, args)
        print_closing(out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
