"""``bench/coordinator.py --replicated``: the topic-based Batch Coordinator (the default) side by
side with the raw-sqlite3 floor and the standalone SQLite server, in ONE run (each cell
``--seconds``).

* **floor** - ``coordinator_floor.commit_floor`` (stdlib sqlite3, the coordinator's migrations,
  WAL FULL, 16 commits per transaction) BEFORE and AFTER the server cells; ``find_floor`` (one
  thread) on the 1-node replicated server's own database after its cells. In this process, CPU 0.
* **sqlite, 1 node** - ``kafka-rpc serve`` with ``diskless.coordinator.url=sqlite://...`` (the
  standalone coordinator, SQLite FULL), on CPU 1.
* **replicated, 1 node** - ``kafka-rpc serve`` with no coordinator setting (the default: one
  ``__diskless-metadata`` partition, a single voter: each write is a Raft record, fsynced in the
  log, applied to SQLite with ``synchronous=NORMAL``; ``--replicated-sync`` other than NORMAL
  sets ``raft://<dir>?synchronous=...``), on CPU 1.
* **topic-based, 3 nodes** - three ``kafka-rpc serve`` processes, each a replica of the same
  partition (voters = their controller listeners), NOT pinned (the three and this load generator
  share the machine's CPUs): commits go to the leader; lookups on the leader and on a follower.
  Their CPU per commit (``/proc/<pid>/stat``, the three summed, the lag probe's work included)
  and the load generator's are in the table: on two CPUs, their sum bounds the rate.
  **Follower lag**: during the 3-node commit cell a probe commits one batch to the leader every
  ``--probe-ms`` (20) and polls a follower's ListDisklessOffsets (LATEST) until its high
  watermark covers the batch: lag = first poll seeing it - the leader's acknowledgement (poll
  round trips included, so an upper bound).

Cells per server: CommitBatches closed loop (16 connections, 100 batches over 50 partitions per
request, a new object each) -> commits/s, p50/p99; FindDisklessBatches 16 x ``--window`` in flight
(single partition among the last 5 batches) -> lookups/s, p50/p99.

    python bench/coordinator.py --replicated [--seconds 5] [--quick] [--replicated-sync NORMAL]
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

import coordinator as bench  # bench/coordinator.py (run as a script: its directory is on sys.path)
import coordinator_floor as floor
from server import _start

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.uuids import uuid_text

CONNS = bench.CONNS
_lm = codec.module("ListDisklessOffsetsRequest")
_L_TOPIC = bench._elem(_lm, "topics")
_L_PART = bench._elem(_lm, "partitions", _L_TOPIC)
PROBE_TOPIC = uuid.UUID("6f1c2b7e-0000-4000-8000-0000000000fe")


def _serve_cmd(data_dir: str, url: str | None, controller_port: int = 0, node_id: int = 1):
    cmd = [sys.executable, "-m", "kafka_rpc.cli", "--log-level", "WARNING", "serve",
           "--override",
           f"listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{controller_port}",
           "--override", f"log.dirs={data_dir}", "--override", f"node.id={node_id}"]  # fmt: skip
    if controller_port:
        cmd += ["--override", f"controller.quorum.voters={node_id}@127.0.0.1:{controller_port}"]
    if url:
        cmd += ["--override", f"diskless.coordinator.url={url}"]
    return cmd


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _init(clients, deadline_s: float = 30.0) -> int:
    """InitDisklessTopics (bench topic + probe topic) through whichever client's node leads;
    returns its index."""
    req = codec.message_class("InitDisklessTopicsRequest")(
        topics=(
            bench._elem(bench._im, "topics")(topic_id=bench.TOPIC, num_partitions=bench.PARTITIONS),
            bench._elem(bench._im, "topics")(topic_id=PROBE_TOPIC, num_partitions=1),
        )
    )
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for i, c in enumerate(clients):
            resp = await c.request(req)
            if all(r.error_code == 0 for r in resp.responses):
                return i
        await asyncio.sleep(0.1)
    raise RuntimeError("no coordinator leader took InitDisklessTopics")


def _probe_commit(key: str):
    m = bench._cm
    part = m.CommitBatchesTopicPartition(
        partition_index=0, object_key=key, byte_offset=0, size=100, base_offset=0, last_offset=0,
        batch_max_timestamp=int(time.time() * 1000), message_timestamp_type=0, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, last_sequence=-1,
    )  # fmt: skip
    return bench._CommitReq(
        broker_id=1,
        batches=(
            m.Batches(topics=(m.CommitBatchesTopic(topic_id=PROBE_TOPIC, partitions=(part,)),)),
        ),
    )


_LATEST = codec.message_class("ListDisklessOffsetsRequest")(
    topics=(_L_TOPIC(topic_id=PROBE_TOPIC, partitions=(_L_PART(partition_index=0, timestamp=-1),)),)
)


async def follower_lag(leader: KafkaRpcClient, follower: KafkaRpcClient, stop_at: float,
                       every_s: float) -> dict:  # fmt: skip
    """Probe commits on the leader; time until the follower's HW covers each (see docstring)."""
    lags: list[float] = []
    i = 0
    while time.perf_counter() < stop_at:
        t_send = time.perf_counter()
        resp = await leader.request(_probe_commit(f"probe/{i}"))
        i += 1
        acked = time.perf_counter()
        bench.check_commit(resp)
        offset = resp.topics[0].partitions[0].assigned_base_offset
        give_up = acked + 5.0
        while time.perf_counter() < give_up:
            r = await follower.request(_LATEST)
            if r.responses[0].partitions[0].offset > offset:
                lags.append(time.perf_counter() - acked)
                break
        else:
            raise RuntimeError(f"the follower did not see offset {offset} within 5 s")
        await asyncio.sleep(max(0.0, every_s - (time.perf_counter() - t_send)))
    return {
        "probes": len(lags),
        "lag_p50_ms": floor.pct(lags, 0.5) * 1e3 if lags else None,
        "lag_p99_ms": floor.pct(lags, 0.99) * 1e3 if lags else None,
        "lag_max_ms": max(lags) * 1e3 if lags else None,
    }


async def single_node_cells(port: int, db_path: str, args, tag: str) -> dict:
    clients = [
        await KafkaRpcClient.connect(f"127.0.0.1:{port}", client_id=f"bench-{k}")
        for k in range(CONNS)
    ]
    try:
        await _init(clients[:1])
        await bench.commit_closed(clients, args.warmup, f"{tag}-warm")
        res = {"commit": await bench.commit_closed(clients, args.seconds, tag)}
        bench.say(f"{tag}: commit {res['commit']['commits_per_s']:,.0f}/s")
        # the targets are read from the server's file: a read request first, so that the
        # replicated coordinator commits what it applied (its reads do; another process's don't)
        await clients[0].request(_LATEST)
        targets = floor.lookup_targets(db_path, args.tail, 10_000)
        await bench.find_cell(clients, args.warmup, 1, targets, args.fetch_bytes)
        res["find"] = await bench.find_cell(
            clients, args.seconds, args.window, targets, args.fetch_bytes
        )
        bench.say(f"{tag}: find {res['find']['lookups_per_s']:,.0f}/s")
        res["targets"] = targets
        return res
    finally:
        for c in clients:
            await c.close()


async def three_node_cells(ports: dict[int, int], db_paths: dict[int, str], args) -> dict:
    ids = sorted(ports)
    probes = {
        i: await KafkaRpcClient.connect(f"127.0.0.1:{ports[i]}", client_id=f"probe-{i}")
        for i in ids
    }
    lead = ids[await _init([probes[i] for i in ids])]
    follower = next(i for i in ids if i != lead)
    bench.say(f"3 nodes: leader {lead}, follower probed {follower}")
    on_leader = [
        await KafkaRpcClient.connect(f"127.0.0.1:{ports[lead]}", client_id=f"bench-{k}")
        for k in range(CONNS)
    ]
    on_follower = [
        await KafkaRpcClient.connect(f"127.0.0.1:{ports[follower]}", client_id=f"bench-f{k}")
        for k in range(CONNS)
    ]
    try:
        await bench.commit_closed(on_leader, args.warmup, "r3-warm")
        stop_at = time.perf_counter() + args.seconds
        commit, lag = await asyncio.gather(
            bench.commit_closed(on_leader, args.seconds, "r3"),
            follower_lag(probes[lead], probes[follower], stop_at, args.probe_ms / 1000),
        )
        res = {"commit": commit, "lag": lag, "leader": lead, "follower": follower}
        bench.say(f"3 nodes: commit {commit['commits_per_s']:,.0f}/s, lag p99 {lag['lag_p99_ms']}")
        # the follower caught up before its lookups (same targets as the leader's)
        hw = None
        for _ in range(500):
            a = await probes[lead].request(_LATEST)
            b = await probes[follower].request(_LATEST)
            hw = a.responses[0].partitions[0].offset
            if b.responses[0].partitions[0].offset == hw:
                break
            await asyncio.sleep(0.01)
        targets = floor.lookup_targets(db_paths[lead], args.tail, 10_000)
        for name, clients in (("find_leader", on_leader), ("find_follower", on_follower)):
            await bench.find_cell(clients, args.warmup, 1, targets, args.fetch_bytes)
            res[name] = await bench.find_cell(
                clients, args.seconds, args.window, targets, args.fetch_bytes
            )
            bench.say(f"3 nodes: {name} {res[name]['lookups_per_s']:,.0f}/s")
        return res
    finally:
        for c in [*on_leader, *on_follower, *probes.values()]:
            await c.close()


def table(res: dict, args) -> str:
    f0, f1 = res["commit_floor_before"], res["commit_floor_after"]
    cf = (f0["commits_per_s"] + f1["commits_per_s"]) / 2
    ff = res["find_floor"]["lookups_per_s"]

    def commit_row(name: str, cell: dict, where: str) -> str:
        us = cell.get("server_cpu_us_per_commit")
        if us is not None:  # the servers' CPU and the load generator's, per commit
            gen = cell["loadgen_cpu"] / cell["commits_per_s"] * 1e6
            where += f"; CPU per commit: server(s) {us:,.0f} us, load generator {gen:,.0f} us"
        return (
            f"| {name} | commit closed loop, {CONNS} conns | **{cell['commits_per_s']:,.0f}**"
            f" commits/s | {cell['p50_ms']:.1f} / {cell['p99_ms']:.1f} | {cf:,.0f} (before"
            f" {f0['commits_per_s']:,.0f}, after {f1['commits_per_s']:,.0f}) |"
            f" **{cell['commits_per_s'] / cf:.2f}** | {where} |"
        )

    def find_row(name: str, cell: dict, where: str) -> str:
        return (
            f"| {name} | find {CONNS} x {args.window} in flight | **{cell['lookups_per_s']:,.0f}**"
            f" lookups/s | {cell['p50_ms']:.2f} / {cell['p99_ms']:.2f} | {ff:,.0f} |"
            f" {cell['lookups_per_s'] / ff:.2f} | {where} |"
        )

    s1, r1, r3 = res["sqlite_1"], res["replicated_1"], res["replicated_3"]
    lag = r3["lag"]
    rows = [
        "| server | cell | ours | p50 / p99 ms | floor | ours/floor | where |",
        "|---|---|---|---|---|---|---|",
        commit_row("standalone sqlite, 1 node (FULL)", s1["commit"], "server on CPU 1"),
        commit_row(f"default (topic-based), 1 node ({args.replicated_sync})", r1["commit"],
                   "server on CPU 1"),
        commit_row("topic-based, 3 nodes", r3["commit"], "3 servers unpinned"),
        find_row("standalone sqlite, 1 node", s1["find"], "server on CPU 1"),
        find_row("default (topic-based), 1 node", r1["find"], "server on CPU 1"),
        find_row("topic-based, 3 nodes: leader", r3["find_leader"], "unpinned"),
        find_row("topic-based, 3 nodes: follower", r3["find_follower"], "unpinned"),
        f"| topic-based, 3 nodes | follower lag ({lag['probes']} probes during the commit cell)"
        f" | p50 {lag['lag_p50_ms']:.1f} ms | p99 **{lag['lag_p99_ms']:.1f}** ms (max"
        f" {lag['lag_max_ms']:.1f}) | - | - | unpinned |",
    ]
    return "\n".join(rows)


def main_replicated(args) -> None:
    import uvloop

    pinned = shutil.which("taskset") is not None and (os.cpu_count() or 1) > 1
    if pinned and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    base = tempfile.mkdtemp(prefix="kafka-rpc-coord-repl-bench-", dir=args.dir)
    res: dict = {}
    procs: list = []
    try:
        bench.say("commit floor (before)")
        res["commit_floor_before"] = floor.commit_floor(
            os.path.join(base, "floor-before.db"), args.seconds, CONNS
        )
        # sqlite, 1 node (the default server)
        d = os.path.join(base, "sqlite")
        proc, port = _start(_serve_cmd(d, f"sqlite://{d}/coordinator.db"),
                            r"listening PLAINTEXT \(broker\) on [\d.]+:(\d+)")  # fmt: skip
        procs.append(proc)
        bench.SERVER_PID = proc.pid
        res["sqlite_1"] = uvloop.run(
            single_node_cells(port, os.path.join(d, "coordinator.db"), args, "sqlite")
        )
        res["sqlite_1"].pop("targets")
        bench._stop([proc])
        # replicated, 1 node
        d = os.path.join(base, "r1")
        sync = args.replicated_sync.upper()
        url = None if sync == "NORMAL" else f"raft://{d}?synchronous={sync}"  # None: the default
        proc, port = _start(_serve_cmd(d, url), r"listening PLAINTEXT \(broker\) on [\d.]+:(\d+)")
        procs.append(proc)
        bench.SERVER_PID = proc.pid
        db1 = os.path.join(d, "__diskless-metadata-0", "coordinator.db")
        res["replicated_1"] = uvloop.run(single_node_cells(port, db1, args, "replicated-1"))
        targets = res["replicated_1"].pop("targets")
        bench._stop([proc])
        bench.say("find floor (the 1-node replicated server's database)")
        res["find_floor"] = floor.find_floor(db1, args.seconds, targets, args.fetch_bytes)
        # replicated, 3 nodes
        bench.SERVER_PID = None
        cports = {i: _free_port() for i in (1, 2, 3)}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in cports.items())
        topic = uuid_text(uuid.uuid4())
        ports, dbs = {}, {}
        for i in cports:
            d = os.path.join(base, f"r3-{i}")
            url = (
                f"raft://{d}/coordinator?node_id={i}&voters={voters}&topic_id={topic}"
                f"&synchronous={args.replicated_sync}"
            )
            proc, ports[i] = bench._start_unpinned(_serve_cmd(d, url, cports[i], i))
            procs.append(proc)
            dbs[i] = os.path.join(d, "coordinator", "__diskless-metadata-0", "coordinator.db")
        bench.SERVER_PID = [p.pid for p in procs[-3:]]  # CPU per commit: the three in all
        res["replicated_3"] = uvloop.run(three_node_cells(ports, dbs, args))
        bench._stop(procs)
        bench.say("commit floor (after)")
        res["commit_floor_after"] = floor.commit_floor(
            os.path.join(base, "floor-after.db"), args.seconds, CONNS
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(15)
        shutil.rmtree(base, ignore_errors=True)
    env = (
        f"sqlite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {platform.machine()},"
        f" {os.cpu_count()} CPUs; 1-node servers {'on CPU 1' if pinned else 'unpinned'}, 3-node"
        f" servers unpinned, load generator + floors {'on CPU 0' if pinned else 'unpinned'};"
        f" {args.seconds:g} s per cell; replicated SQLite synchronous={args.replicated_sync}"
    )
    print(f"\n{env}\n")
    print(table(res, args))
    res["meta"] = {"env": env, "seconds": args.seconds, "conns": CONNS, "window": args.window,
                   "replicated_sync": args.replicated_sync}  # fmt: skip
    out = Path(args.json) if args.json else (
        bench.HERE / "results" / f"coordinator-replicated-{time.strftime('%Y%m%dT%H%M%S')}.json"
    )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"\nJSON: {out}")
