"""Diskless coordinator RPCs over the wire: `kafka-rpc serve` with its default coordinator and
with the standalone SQLite one, against a raw-sqlite3 floor.

Side by side in ONE run (each cell ``--seconds``, default 5; ``--quick``: 1 s):

* **servers**, one after the other, each ``kafka-rpc serve`` as a subprocess pinned to CPU 1
  (``taskset -c 1``) with a fresh data directory; this process is the load generator, pinned to
  CPU 0, asyncio on uvloop with :class:`~kafka_rpc.client.KafkaRpcClient`, 16 connections:

  - **standalone SQLite** - ``diskless.coordinator.url=sqlite://<dir>/coordinator.db`` (WAL,
    ``synchronous=FULL``, group commit);
  - **default** - no coordinator setting: the topic-based coordinator on a one-replica
    ``__diskless-metadata`` (each write a record of its Raft log, fsynced, applied to SQLite
    with ``synchronous=NORMAL``).
* **commit, closed loop** - every connection sends CommitBatches back to back: one new object per
  request (unique key) holding 100 plain batches of 10 records x 10,000 B, 2 on each of 50
  partitions (the floor's request shape) -> commits/s, p50/p99 per request.
* **commit, open loop** - ``--rate`` (1,000) CommitBatches/s started on a fixed schedule,
  round-robin over the 16 connections (pipelined when a connection has several in flight) ->
  achieved commits/s, p50/p99 measured from the scheduled send time.
* **find** - single-partition FindDisklessBatches (random partition, offset among the last 5
  batches, partition MaxBytes 1 MiB) on the logs the commit cells filled, from 16 connections with
  up to ``--window`` (8) requests in flight each, and with 1 -> lookups/s, p50/p99.
* **floor** - ``bench/coordinator_floor.py``'s ``commit_floor`` (stdlib sqlite3, the coordinator's
  own migrations, WAL FULL, the same 1 + 100 + 50 rows per commit, 16 commits per transaction as
  the server groups 16 concurrent callers) run BEFORE and AFTER the server cells, and its
  ``find_floor`` (same two statements, one thread) on the default server's database after the
  server cells. Both in this process, on CPU 0, database in the same directory as the servers'.

Ratio = ours / floor (commits/s vs the mean of the two commit floors; lookups/s vs find floor).
Latencies include the client's encode/decode. The load generator's CPU use (process time /
wall time on CPU 0) is reported per cell: near 100 % means the generator, not the server, was
the limit. So is the server's CPU time per operation (user + system from ``/proc/<pid>/stat``,
10 ms ticks, over the cell): where the server's time goes, per commit or lookup. On this shared
VM it is inflated by other load too (cache and steal), though less than the rates.

    python bench/coordinator.py [--seconds 5] [--quick] [--dir DIR]

``--replicated`` runs the topic-based coordinator's cells instead (1 and 3 nodes, the follower
lag, with the floor and the standalone SQLite server in the same run; see
``bench/coordinator_replicated.py``).

``--postgres`` runs the PostgreSQL cells instead, side by side in ONE run, on a
throw-away cluster (``tests/pg_cluster.py``: ``fsync=on``, ``synchronous_commit=on``, loopback
TCP) or on the server named by ``--pg-dsn`` (a database per cell is created there). Nothing is
pinned: the PostgreSQL backends, the server process(es) and this load generator share the CPUs.

* **pgbench** (context) - ``pgbench -i -s 10`` then ``pgbench -c 16 -j 2 -T <seconds>`` (TPC-B
  like) on the same cluster: its transactions/s.
* **floor** - ``coordinator_floor.pg_commit_floor``: the coordinator's own commit SQL
  (``pg/queries.sql``: insert_file_lock_logs, write_commit in one transaction) run by asyncpg
  alone from 16 connections in a closed loop, same request shape (100 plain batches, 2 on each
  of 50 partitions); run BEFORE and AFTER the server cells. ``pg_find_floor``: the coordinator's
  one-statement ``find_first`` from 16 connections on the 1-server cell's database.
* **1 server** - ``kafka-rpc serve`` with ``diskless.coordinator.url=postgresql://...``
  (``pool_max_size=16&read_pool_size=16``: as many database connections as the floors use),
  16 client connections: CommitBatches closed loop, then
  FindDisklessBatches 16 x ``--window`` in flight and 16 x 1.
* **2 servers** - two ``kafka-rpc serve`` processes on ONE fresh database, 8 client connections
  each (16 in all): the same commit cell (all commits touch the same 50 partitions, so they
  serialise on those rows in the database as one server's do), then find 16 x ``--window``.
* **a topic per connection** - the same commit requests, but connection k commits to its own
  topic of 50 partitions, so concurrent commits share no row (floor: ``pg_commit_floor(...,
  disjoint=True)``, lane k on topic k): where the servers, not the row locks, set the rate.

* **floors in 2 processes** - each floor run again right after its 1-process run by two worker
  processes (``--pg-floor-worker``) of 8 connections each, started together, with their own
  lanes (object keys; topics for the disjoint floor): "floor: 2 processes / 1" is what the
  driver alone gains from a second process on this machine in this run, the ceiling to read
  "2 vs 1 server" against.

Ratio = ours / floor (commits/s vs the mean of the two commit floors; lookups/s vs the find
floor); "2 vs 1" = the 2-server rate / the 1-server rate. Per cell also: the servers' CPU per
operation (the sum of both in the 2-server cells), the throw-away cluster's CPU per operation
(postmaster, backends, and the backends it reaped) for ours and for the floor, and the
machine's busy share (``/proc/stat``, all processes of all users: near 100% means the two
vCPUs, not the code, set the rate).

Prints a Markdown table; writes JSON to bench/results/coordinator-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import coordinator_floor as floor  # noqa: E402  (bench/coordinator_floor.py)
from server import _start  # noqa: E402  (bench/server.py: taskset -c 1 + port from its output)

from kafka_rpc.client import KafkaRpcClient  # noqa: E402
from kafka_rpc.protocol import codec  # noqa: E402

CONNS = 16
#: the servers of the default run, in order: (result key, name in the table)
SERVERS = (
    ("sqlite", "standalone SQLite (sqlite://, FULL)"),
    ("default", "default: topic-based, 1 replica"),
)
TOPIC = floor.TOPIC  # the floor's lookup targets read this topic's logs
PARTITIONS = floor.PARTITIONS
BATCHES = floor.BATCHES
RECORDS = floor.RECORDS
BATCH_SIZE = floor.BATCH_SIZE
pct = floor.pct

_cm = codec.module("CommitBatchesRequest")
_CommitReq = codec.message_class("CommitBatchesRequest")
_FindReq = codec.message_class("FindDisklessBatchesRequest")
_lo = codec.module("ListDisklessOffsetsRequest")


def _elem(module, name, cls=None):
    import typing

    hint = typing.get_type_hints(cls or module.MESSAGE)[name]
    arg = typing.get_args(hint)[0]
    inner = typing.get_args(arg) if typing.get_origin(arg) is tuple else (arg,)
    return inner[0]


_fm = codec.module("FindDisklessBatchesRequest")
_F_TOPIC = _elem(_fm, "topics")
_F_PART = _elem(_fm, "partitions", _F_TOPIC)
_im = codec.module("InitDisklessTopicsRequest")


def commit_request(key: str, topic=TOPIC):
    """100 plain batches, 2 on each of the 50 partitions, in object ``key`` (as the floor)."""
    now = int(time.time() * 1000)
    per = BATCHES // PARTITIONS
    parts = tuple(
        _cm.CommitBatchesTopicPartition(
            partition_index=i // per,
            object_key=key,
            byte_offset=i * BATCH_SIZE,
            size=BATCH_SIZE,
            base_offset=0,
            last_offset=RECORDS - 1,
            batch_max_timestamp=now,
            message_timestamp_type=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            last_sequence=-1,
        )
        for i in range(BATCHES)
    )
    return _CommitReq(
        broker_id=1,
        batches=(_cm.Batches(topics=(_cm.CommitBatchesTopic(topic_id=topic, partitions=parts),)),),
    )


def check_commit(resp) -> None:
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                raise RuntimeError(f"CommitBatches error {p.error_code} on p{p.partition_index}")


SERVER_PID: int | list[int] | None = None  # the server process(es); CPU time read from /proc
PG_DATA_DIR: str | None = None  # --postgres on a throw-away cluster: its data directory


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def server_cpu_s() -> float | None:
    """CPU time (user + system, s) of the server process(es) so far; None off Linux."""
    pids = SERVER_PID if isinstance(SERVER_PID, list) else [SERVER_PID]
    try:
        ticks = sum(int(f[11]) + int(f[12]) for f in map(_stat_fields, pids))
    except (OSError, TypeError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def pg_cpu_s() -> float | None:
    """CPU time (s) of the throw-away PostgreSQL cluster so far: the postmaster, its live
    children (backends, WAL writer, ...) and the children it has reaped (closed connections);
    None when the cluster is not ours (``--pg-dsn``) or off Linux."""
    if PG_DATA_DIR is None:
        return None
    try:
        with open(os.path.join(PG_DATA_DIR, "postmaster.pid")) as f:
            pm = int(f.readline())
        ticks = 0
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                f = _stat_fields(int(d))
            except OSError:  # exited meanwhile
                continue
            if int(d) == pm:
                ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
            elif int(f[1]) == pm:
                ticks += int(f[11]) + int(f[12])
    except (OSError, ValueError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine so far (``/proc/stat``; every process of
    every user counts: the other jobs on this VM too)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    return sum(v) - idle, sum(v)


class Cpu:
    """This process's CPU time over a cell, as a share of wall time, and the server's CPU time
    (s, from /proc; 10 ms resolution): the server's CPU per operation is less sensitive to other
    load on the machine than its rate. Also the throw-away PostgreSQL cluster's CPU time and the
    machine's busy share (1.0 = every CPU busy: the machine, not the code, set the rate)."""

    def __enter__(self):
        self.s0 = server_cpu_s()
        self.g0 = pg_cpu_s()
        self.m0 = machine_ticks()
        self.c0, self.w0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.share = (time.process_time() - self.c0) / (time.perf_counter() - self.w0)
        s1, g1, m1 = server_cpu_s(), pg_cpu_s(), machine_ticks()
        self.server_s = None if s1 is None or self.s0 is None else s1 - self.s0
        self.pg_s = None if g1 is None or self.g0 is None else g1 - self.g0
        self.busy = (
            None
            if m1 is None or self.m0 is None or m1[1] == self.m0[1]
            else (m1[0] - self.m0[0]) / (m1[1] - self.m0[1])
        )

    def per_op_us(self, n: int) -> float | None:
        """Server CPU us per operation over the cell."""
        return None if self.server_s is None or not n else self.server_s / n * 1e6

    def pg_per_op_us(self, n: int) -> float | None:
        """PostgreSQL CPU us per operation over the cell."""
        return None if self.pg_s is None or not n else self.pg_s / n * 1e6


# -- cells ---------------------------------------------------------------------------------------


async def commit_closed(clients, seconds: float, tag: str, topics=None) -> dict:
    """Closed loop; connection k commits to ``topics[k]`` when given (else the shared TOPIC)."""
    lat: list[float] = []
    seq = iter(range(1 << 62))
    deadline = time.perf_counter() + seconds

    async def conn(k: int, c: KafkaRpcClient) -> None:
        while time.perf_counter() < deadline:
            req = commit_request(f"{tag}/{k}/{next(seq)}", topics[k] if topics else TOPIC)
            t = time.perf_counter()
            resp = await c.request(req)
            lat.append(time.perf_counter() - t)
            check_commit(resp)

    with Cpu() as cpu:
        t0 = time.perf_counter()
        await asyncio.gather(*(conn(k, c) for k, c in enumerate(clients)))
        elapsed = time.perf_counter() - t0
    return {
        "commits_per_s": len(lat) / elapsed,
        "commits": len(lat),
        "p50_ms": pct(lat, 0.5) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3,
        "loadgen_cpu": cpu.share,
        "server_cpu_us_per_commit": cpu.per_op_us(len(lat)),
        "pg_cpu_us_per_commit": cpu.pg_per_op_us(len(lat)),
        "machine_busy": cpu.busy,
    }


async def commit_open(clients, seconds: float, rate: float) -> dict:
    lat: list[float] = []
    failed = [0]

    async def one(c: KafkaRpcClient, key: str, scheduled: float) -> None:
        try:
            resp = await c.request(commit_request(key))
            check_commit(resp)
        except Exception:
            failed[0] += 1
            raise
        lat.append(time.perf_counter() - scheduled)

    tasks: list[asyncio.Task] = []
    n = int(seconds * rate)
    with Cpu() as cpu:
        t0 = time.perf_counter()
        for i in range(n):
            scheduled = t0 + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(clients[i % len(clients)], f"o/{i}", scheduled)))
        offered_for = time.perf_counter() - t0
        # bounded drain: what has not completed 10 s after the last send counts as not achieved
        done, pending = await asyncio.wait(tasks, timeout=max(10.0, seconds))
        for t in pending:
            t.cancel()
        elapsed = time.perf_counter() - t0
    for t in done:
        if t.exception() is not None:
            raise t.exception()
    return {
        "offered_per_s": rate,
        "offered_for_s": offered_for,
        "commits_per_s": len(lat) / elapsed,
        "commits": len(lat),
        "unfinished": len(pending),
        "p50_ms": pct(lat, 0.5) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3,
        "loadgen_cpu": cpu.share,
        "server_cpu_us_per_commit": cpu.per_op_us(len(lat)),
    }


async def find_cell(clients, seconds: float, window: int, targets, fetch_bytes: int) -> dict:
    reqs = [
        _FindReq(
            topics=(
                _F_TOPIC(
                    topic_id=TOPIC,
                    partitions=(_F_PART(partition_index=p, offset=off, max_bytes=fetch_bytes),),
                ),
            ),
            max_bytes=50 * 1024 * 1024,
        )
        for p, off in targets
    ]
    lat: list[float] = []
    rows = [0]
    deadline = time.perf_counter() + seconds

    async def lane(c: KafkaRpcClient, start: int) -> None:
        i = start
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            resp = await c.request(reqs[i % len(reqs)])
            lat.append(time.perf_counter() - t)
            entries = [e for tr in resp.responses for e in tr.partitions]
            if entries[0].error_code:
                raise RuntimeError(f"FindDisklessBatches error {entries[0].error_code}")
            rows[0] += sum(1 for e in entries if e.object_key)
            i += 1

    with Cpu() as cpu:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(lane(c, (k * window + w) * 997) for k, c in enumerate(clients) for w in range(window))
        )
        elapsed = time.perf_counter() - t0
    n = len(lat)
    return {
        "lookups_per_s": n / elapsed,
        "lookups": n,
        "in_flight": len(clients) * window,
        "batches_per_lookup": rows[0] / max(1, n),
        "p50_ms": pct(lat, 0.5) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3,
        "loadgen_cpu": cpu.share,
        "server_cpu_us_per_lookup": cpu.per_op_us(n),
        "pg_cpu_us_per_lookup": cpu.pg_per_op_us(n),
        "machine_busy": cpu.busy,
    }


async def server_cells(port: int, db_path: str, args) -> dict:
    res: dict = {}
    clients = [
        await KafkaRpcClient.connect(f"127.0.0.1:{port}", client_id=f"bench-{k}")
        for k in range(CONNS)
    ]
    try:
        init = await clients[0].request(
            codec.message_class("InitDisklessTopicsRequest")(
                topics=(_elem(_im, "topics")(topic_id=TOPIC, num_partitions=PARTITIONS),)
            )
        )
        assert [r.error_code for r in init.responses] == [0], init
        await commit_closed(clients, args.warmup, "warm")
        res["commit_closed"] = await commit_closed(clients, args.seconds, "c")
        say(f"commit closed loop: {res['commit_closed']['commits_per_s']:,.0f}/s")
        res["commit_open"] = await commit_open(clients, args.seconds, args.rate)
        say(f"commit open loop: {res['commit_open']['commits_per_s']:,.0f}/s")
        # the open loop's unfinished commits are still queued in the server: wait (<= 60 s)
        # until partition 0's high watermark stops moving, so the lookups run on an idle server
        # and their targets are the last batches; that read also makes the topic-based
        # coordinator COMMIT what it applied (another process sees only committed transactions)
        prev = None
        for _ in range(300):
            hw = (await clients[0].request(_LATEST)).responses[0].partitions[0].offset
            if hw == prev:
                break
            prev = hw
            await asyncio.sleep(0.2)
        targets = floor.lookup_targets(db_path, args.tail, 10_000)
        await find_cell(clients, args.warmup, 1, targets, args.fetch_bytes)
        res["find_pipelined"] = await find_cell(
            clients, args.seconds, args.window, targets, args.fetch_bytes
        )
        say(f"find {CONNS}x{args.window}: {res['find_pipelined']['lookups_per_s']:,.0f}/s")
        res["find_unpipelined"] = await find_cell(
            clients, args.seconds, 1, targets, args.fetch_bytes
        )
        say(f"find {CONNS}x1: {res['find_unpipelined']['lookups_per_s']:,.0f}/s")
        res["targets"] = targets
    finally:
        for c in clients:
            await c.close()
    return res


_LATEST = _lo.ListDisklessOffsetsRequest(topics=(_lo.ListDisklessOffsetsTopic(
    topic_id=TOPIC,
    partitions=(_lo.ListDisklessOffsetsTopicPartition(partition_index=0, timestamp=-1),)),))


def say(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


def table(res: dict, args) -> str:
    """The Markdown table of the default run: each server's four cells against the floors."""
    f0, f1 = res["commit_floor_before"], res["commit_floor_after"]
    cf = (f0["commits_per_s"] + f1["commits_per_s"]) / 2
    ff = res["find_floor"]

    def us(cell: dict) -> str:
        v = cell.get("server_cpu_us_per_commit", cell.get("server_cpu_us_per_lookup"))
        return "-" if v is None else f"{v:,.0f}"

    rows = [
        "| server | cell | method | ours | p50 / p99 ms | floor | ratio ours/floor | loadgen CPU"
        " | server CPU us/op |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, name in SERVERS:
        r = res[key]
        cc, co, fp, fu = (r["commit_closed"], r["commit_open"], r["find_pipelined"],
                          r["find_unpipelined"])  # fmt: skip
        rows += [
            f"| {name} | commit, closed loop | {CONNS} conns x 1 in flight, CommitBatches of"
            f" {BATCHES} batches over {PARTITIONS} partitions, new object each |"
            f" **{cc['commits_per_s']:,.0f}** commits/s | {cc['p50_ms']:.1f} /"
            f" {cc['p99_ms']:.1f} | {cf:,.0f} commits/s (before {f0['commits_per_s']:,.0f}, after"
            f" {f1['commits_per_s']:,.0f}; raw sqlite3, G=16/tx) |"
            f" **{cc['commits_per_s'] / cf:.2f}** | {cc['loadgen_cpu']:.0%} | {us(cc)} |",
            f"| {name} | commit, open loop | {co['offered_per_s']:,.0f} commits/s offered"
            f" round-robin over {CONNS} conns, latency from scheduled send |"
            f" {co['commits_per_s']:,.0f} commits/s achieved ({co['unfinished']} unfinished) |"
            f" {co['p50_ms']:.1f} / **{co['p99_ms']:.1f}** | - |"
            f" {co['commits_per_s'] / co['offered_per_s']:.2f} of offered"
            f" | {co['loadgen_cpu']:.0%} | {us(co)} |",
            f"| {name} | find, pipelined | {CONNS} conns x {args.window} in flight, 1 partition"
            f" per request ({fp['batches_per_lookup']:.1f} batches/lookup) |"
            f" **{fp['lookups_per_s']:,.0f}** lookups/s | {fp['p50_ms']:.2f} / {fp['p99_ms']:.2f}"
            f" | {ff['lookups_per_s']:,.0f} lookups/s (raw sqlite3, 1 thread, same schema) |"
            f" **{fp['lookups_per_s'] / ff['lookups_per_s']:.2f}** | {fp['loadgen_cpu']:.0%}"
            f" | {us(fp)} |",
            f"| {name} | find, unpipelined | {CONNS} conns x 1 in flight |"
            f" {fu['lookups_per_s']:,.0f} lookups/s | {fu['p50_ms']:.2f} / {fu['p99_ms']:.2f} |"
            f" {ff['lookups_per_s']:,.0f} lookups/s |"
            f" {fu['lookups_per_s'] / ff['lookups_per_s']:.2f} | {fu['loadgen_cpu']:.0%}"
            f" | {us(fu)} |",
        ]  # fmt: skip
    return "\n".join(rows)


# -- PostgreSQL cells (--postgres) -----------------------------------------------------------------


def _start_unpinned(cmd: list[str], start_timeout_s: float = 30.0, **popen: Any) -> tuple:
    """Start a server on every CPU (``popen``: more ``subprocess.Popen`` arguments, e.g. ``env``,
    ``cwd``); return (process, PLAINTEXT port) once it printed its listener. A child inherits
    this process's CPU affinity, and the load generator may be pinned to CPU 0: the server's is
    reset to all CPUs before it starts its threads."""
    import re
    import subprocess

    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **popen
    )
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(proc.pid, range(os.cpu_count() or 1))
    deadline = time.monotonic() + start_timeout_s
    for line in proc.stdout:
        m = re.search(r"listening PLAINTEXT \(broker\) on [\d.]+:(\d+)", line)
        if m:
            return proc, int(m.group(1))
        if time.monotonic() > deadline:
            break
    proc.kill()
    proc.wait(15)
    raise RuntimeError(f"{cmd} did not start")


def _serve_pg(dsn: str, data_dir: str, **start: Any) -> tuple:
    """``kafka-rpc serve`` on the PostgreSQL ``dsn`` (16 write and 16 read connections);
    ``start``: ``_start_unpinned``'s options. (process, PLAINTEXT port)."""
    return _start_unpinned(
        [sys.executable, "-m", "kafka_rpc.cli", "--log-level", "WARNING", "serve",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
         "--override", f"log.dirs={data_dir}",
         "--override", f"diskless.coordinator.url={dsn}?pool_max_size=16&read_pool_size=16"],
        **start,
    )  # fmt: skip


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(15)
        except Exception:
            p.kill()
            p.wait(15)


def _with_db(dsn: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(dsn)
    return urlunsplit((u.scheme, u.netloc, "/" + name, u.query, u.fragment))


async def _create_db(admin_dsn: str, name: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return _with_db(admin_dsn, name)


def _pgbench(bin_dir: str | None, dsn: str, seconds: float) -> dict | None:
    import re
    import subprocess

    exe = os.path.join(bin_dir, "pgbench") if bin_dir else shutil.which("pgbench")
    if not exe or not os.path.exists(exe):
        return None
    subprocess.run([exe, "-i", "-s", "10", "-q", dsn], check=True, capture_output=True,
                   timeout=300)  # fmt: skip
    out = subprocess.run(
        [exe, "-c", str(CONNS), "-j", "2", "-T", str(max(1, round(seconds))), "-n", dsn],
        check=True, capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    m = re.search(r"tps = ([\d.]+)", out)
    lat = re.search(r"latency average = ([\d.]+) ms", out)
    return {"tps": float(m.group(1)) if m else None,
            "latency_avg_ms": float(lat.group(1)) if lat else None}  # fmt: skip


async def _connect_clients(ports: list[int], total: int) -> list[KafkaRpcClient]:
    return [
        await KafkaRpcClient.connect(f"127.0.0.1:{ports[k % len(ports)]}", client_id=f"bench-{k}")
        for k in range(total)
    ]


class PgWaits:
    """What the database's backends do during a cell: ``pg_stat_activity`` of one database
    sampled every 20 ms from a connection of its own; ``result`` = the mean number of backends in
    each "state / wait event type:wait event" (``active / -`` = running, on a CPU or waiting for
    one; ``active / Lock:transactionid`` = waiting for another transaction's row lock;
    ``idle in transaction / Client:ClientRead`` = a transaction waiting for its client's next
    statement, with its row locks held; ``idle / Client:ClientRead`` = waiting for a new call;
    ``active / IO:WALSync`` or ``LWLock:WALWrite`` = COMMIT flushing the WAL)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.result: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._samples = 0

    async def __aenter__(self) -> PgWaits:
        import asyncpg

        self._conn = await asyncpg.connect(self.dsn)
        self._task = asyncio.get_running_loop().create_task(self._sample())
        return self

    async def _sample(self) -> None:
        while True:
            for state, wtype, wevent in await self._conn.fetch(
                "SELECT state, wait_event_type, wait_event FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'"
            ):
                key = f"{state} / {f'{wtype}:{wevent}' if wtype else '-'}"
                self._counts[key] = self._counts.get(key, 0) + 1
            self._samples += 1
            await asyncio.sleep(0.02)

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        await self._conn.close()
        n = max(1, self._samples)
        self.result = {
            k: round(v / n, 2) for k, v in sorted(self._counts.items(), key=lambda kv: -kv[1])
        }


async def _measured(coro, dsn: str | None = None, start_at: float | None = None) -> dict:
    """Run a floor (in this process or in workers) and add the cluster's CPU per operation, the
    machine's busy share and this process's CPU share over it (and, given its database ``dsn``,
    what the backends did: ``PgWaits``), measured from ``start_at`` (epoch s; the workers' common
    start) or from now."""
    task = asyncio.ensure_future(coro)
    try:
        if start_at is not None:
            await asyncio.wait({task}, timeout=max(0.0, start_at - time.time()))
        waits = PgWaits(dsn) if dsn else None
        if waits is not None:
            await waits.__aenter__()
        try:
            with Cpu() as cpu:
                r = await task
        finally:
            if waits is not None:
                await waits.__aexit__(None, None, None)
    finally:
        if not task.done():
            task.cancel()
    n = r.get("commits", r.get("lookups", 0))
    r["pg_cpu_us_per_op"] = cpu.pg_per_op_us(n)
    r["machine_busy"] = cpu.busy
    r["this_process_cpu"] = cpu.share
    if waits is not None:
        r["pg_backends"] = waits.result
    return r


async def _floor_processes(spec: dict, procs: int) -> dict:
    """The floor ``spec`` (see ``floor_worker``) run by ``procs`` worker processes at once, each
    with ``spec["conns"]`` connections and its own lanes; started together (each waits for
    ``spec["start_at"]``, epoch s, after importing: see ``_start_at``). Returns the sum of
    their rates, the mean of their p50/p99 and each one's result."""
    import subprocess

    workers = []
    try:
        for i in range(procs):
            w = dict(spec, first_lane=i * spec["conns"])
            p = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--pg-floor-worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            workers.append((p, json.dumps(w)))
        outs = await asyncio.gather(
            *(
                asyncio.to_thread(p.communicate, data, timeout=spec["seconds"] + 120)
                for p, data in workers
            )
        )
    finally:
        for p, _ in workers:
            if p.poll() is None:
                p.kill()
                p.wait(15)
    per = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    rate_key = "commits_per_s" if spec["kind"] == "commit" else "lookups_per_s"
    n_key = "commits" if spec["kind"] == "commit" else "lookups"
    return {
        rate_key: sum(r[rate_key] for r in per),
        n_key: sum(r[n_key] for r in per),
        "p50_ms": sum(r["p50_ms"] for r in per) / len(per),
        "p99_ms": sum(r["p99_ms"] for r in per) / len(per),
        "processes": procs,
        "per_process": per,
    }


def _start_at() -> float:
    """A common start time for floor workers: by then every one has imported and is waiting."""
    return time.time() + 3.0


def floor_worker() -> None:
    """``--pg-floor-worker``: one floor process of ``_floor_processes``; reads its spec (JSON) on
    stdin, waits for ``start_at`` (epoch s), runs, prints its result as JSON."""
    import uvloop

    spec = json.loads(sys.stdin.read())
    time.sleep(max(0.0, spec["start_at"] - time.time()))
    if spec["kind"] == "commit":
        coro = floor.pg_commit_floor(
            spec["dsn"], spec["seconds"], spec["conns"], spec["disjoint"], spec["first_lane"]
        )
    else:
        targets = [tuple(t) for t in spec["targets"]]
        coro = floor.pg_find_floor(
            spec["dsn"], spec["seconds"], targets, spec["fetch_bytes"], spec["conns"], 1
        )
    print(json.dumps(uvloop.run(coro)), flush=True)


async def _commit_floor(
    admin_dsn: str, name: str, args, disjoint: bool = False, procs: int = 1
) -> dict:
    """``pg_commit_floor`` on a new database ``name`` (set up by ``pg_setup`` before the
    measured window), ``CONNS`` connections in all: in this process, or split over ``procs``
    worker processes started together (``_floor_processes``); ``_measured``."""
    dsn = await _create_db(admin_dsn, name)
    await floor.pg_setup(dsn)
    if procs == 1:
        return await _measured(floor.pg_commit_floor(dsn, args.seconds, CONNS, disjoint), dsn)
    t0 = _start_at()
    spec = {"kind": "commit", "dsn": dsn, "seconds": args.seconds, "conns": CONNS // procs,
            "disjoint": disjoint, "start_at": t0}  # fmt: skip
    return await _measured(_floor_processes(spec, procs), dsn, t0)


async def pg_cells(admin_dsn: str, bin_dir: str | None, base: str, args) -> dict:
    global SERVER_PID
    res: dict = {}
    say("pgbench (TPC-B like)")
    res["pgbench"] = _pgbench(bin_dir, await _create_db(admin_dsn, "bench_pgbench"), args.seconds)
    say("commit floor (before)")
    res["floor_before"] = await _commit_floor(admin_dsn, "bench_floor_before", args)
    say(f"floor: {res['floor_before']['commits_per_s']:,.0f}/s")
    for n in (1, 2):
        dsn = await _create_db(admin_dsn, f"bench_ours{n}")
        procs = []
        clients: list[KafkaRpcClient] = []
        try:
            ports = []
            for i in range(n):
                proc, port = _serve_pg(dsn, os.path.join(base, f"data{n}-{i}"))
                procs.append(proc)
                ports.append(port)
            SERVER_PID = [p.pid for p in procs]  # CPU per op: the sum of the servers
            clients = await _connect_clients(ports, CONNS)
            init = await clients[0].request(
                codec.message_class("InitDisklessTopicsRequest")(
                    topics=tuple(
                        _elem(_im, "topics")(topic_id=t, num_partitions=PARTITIONS)
                        for t in (TOPIC, *floor.LANE_TOPICS)
                    )
                )
            )
            assert {r.error_code for r in init.responses} == {0}, init
            await commit_closed(clients, args.warmup, "warm")
            async with PgWaits(dsn) as waits:
                res[f"commit_{n}"] = await commit_closed(clients, args.seconds, "c")
            res[f"commit_{n}"]["pg_backends"] = waits.result
            say(f"{n} server(s) commit: {res[f'commit_{n}']['commits_per_s']:,.0f}/s")
            async with PgWaits(dsn) as waits:
                res[f"commit_disjoint_{n}"] = await commit_closed(
                    clients, args.seconds, "d", floor.LANE_TOPICS
                )
            res[f"commit_disjoint_{n}"]["pg_backends"] = waits.result
            say(f"{n} server(s) commit, a topic per connection:"
                f" {res[f'commit_disjoint_{n}']['commits_per_s']:,.0f}/s")  # fmt: skip
            targets = await floor.pg_lookup_targets(dsn, args.tail, 10_000)
            await find_cell(clients, args.warmup, 1, targets, args.fetch_bytes)
            res[f"find_pipelined_{n}"] = await find_cell(
                clients, args.seconds, args.window, targets, args.fetch_bytes
            )
            say(f"{n} server(s) find: {res[f'find_pipelined_{n}']['lookups_per_s']:,.0f}/s")
            if n == 1:
                res["find_unpipelined_1"] = await find_cell(
                    clients, args.seconds, 1, targets, args.fetch_bytes
                )
                res["targets"] = targets
                res["find_db"] = dsn
        finally:
            for c in clients:
                await c.close()
            _stop(procs)
            SERVER_PID = None
    # Each floor in 1 process (16 connections) and right after in 2 processes (8 each, their own
    # lanes): what the driver alone gains from a second process on this machine, in this run.
    find_db, targets = res.pop("find_db"), res.pop("targets")
    say("find floor")
    res["find_floor"] = await _measured(
        floor.pg_find_floor(find_db, args.seconds, targets, args.fetch_bytes, CONNS, 1)
    )
    say("find floor, 2 processes")
    t0 = _start_at()
    res["find_floor_2p"] = await _measured(
        _floor_processes(
            {"kind": "find", "dsn": find_db, "seconds": args.seconds, "conns": CONNS // 2,
             "targets": targets, "fetch_bytes": args.fetch_bytes, "start_at": t0}, 2,
        ), None, t0,
    )  # fmt: skip
    say("commit floor (after)")
    res["floor_after"] = await _commit_floor(admin_dsn, "bench_floor_after", args)
    say("commit floor, 2 processes")
    res["floor_2p"] = await _commit_floor(admin_dsn, "bench_floor_2p", args, procs=2)
    say("commit floor, a topic per connection")
    res["floor_disjoint"] = await _commit_floor(
        admin_dsn, "bench_floor_disjoint", args, disjoint=True
    )
    say("commit floor, a topic per connection, 2 processes")
    res["floor_disjoint_2p"] = await _commit_floor(
        admin_dsn, "bench_floor_disjoint_2p", args, disjoint=True, procs=2
    )
    return res


def pg_table(res: dict, args) -> str:
    f0, f1 = res["floor_before"], res["floor_after"]
    cf = (f0["commits_per_s"] + f1["commits_per_s"]) / 2
    c1, c2 = res["commit_1"], res["commit_2"]
    d1, d2, fd = res["commit_disjoint_1"], res["commit_disjoint_2"], res["floor_disjoint"]
    f2, fd2 = res["floor_2p"], res["floor_disjoint_2p"]
    ff, ff2 = res["find_floor"], res["find_floor_2p"]
    fp1, fu1, fp2 = res["find_pipelined_1"], res["find_unpipelined_1"], res["find_pipelined_2"]
    pgb = res.get("pgbench") or {}
    tps = f"{pgb['tps']:,.0f} tps" if pgb.get("tps") else "not available"

    def lat(cell: dict) -> str:
        return f"{cell['p50_ms']:.1f} / {cell['p99_ms']:.1f}"

    def num(v: float | None, fmt: str = ",.0f") -> str:
        return "-" if v is None else format(v, fmt)

    def cpu(cell: dict, floor_cell: dict) -> str:
        """server CPU us/op | PG CPU us/op (ours; the floor's) | machine busy (ours; floor's)"""
        srv = cell.get("server_cpu_us_per_commit", cell.get("server_cpu_us_per_lookup"))
        pg = cell.get("pg_cpu_us_per_commit", cell.get("pg_cpu_us_per_lookup"))
        return (
            f"{num(srv)} | {num(pg)}; {num(floor_cell.get('pg_cpu_us_per_op'))}"
            f" | {num(cell.get('machine_busy'), '.0%')};"
            f" {num(floor_cell.get('machine_busy'), '.0%')}"
        )

    rows = [
        "| cell | method | ours | p50 / p99 ms | floor (asyncpg alone, same SQL) | ratio ours/floor"
        " | 2 vs 1 server | floor: 2 processes / 1 | server CPU us/op | PostgreSQL CPU us/op"
        " (ours; floor) | machine busy (ours; floor) | loadgen CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| commit, 1 server | {CONNS} conns x 1 in flight, CommitBatches of {BATCHES} batches"
        f" over {PARTITIONS} partitions, new object each | **{c1['commits_per_s']:,.0f}**"
        f" commits/s | {lat(c1)} | {cf:,.0f} commits/s (before {f0['commits_per_s']:,.0f},"
        f" p50/p99 {lat(f0)}; after {f1['commits_per_s']:,.0f})"
        f" | **{c1['commits_per_s'] / cf:.2f}** | - | - | {cpu(c1, f1)}"
        f" | {c1['loadgen_cpu']:.0%} |",
        f"| commit, 2 servers | the same, 8 conns to each of 2 servers on one database (both"
        f" commit to the same {PARTITIONS} partitions, interleaved)"
        f" | **{c2['commits_per_s']:,.0f}** commits/s | {lat(c2)} | {cf:,.0f} commits/s; 2"
        f" processes x 8 conns: {f2['commits_per_s']:,.0f}"
        f" | {c2['commits_per_s'] / cf:.2f} | **{c2['commits_per_s'] / c1['commits_per_s']:.2f}**"
        f" | {f2['commits_per_s'] / f1['commits_per_s']:.2f} | {cpu(c2, f2)}"
        f" | {c2['loadgen_cpu']:.0%} |",
        f"| commit, 1 server, a topic per connection | the same requests, connection k on its"
        f" own topic (50 partitions each): no row shared between concurrent commits"
        f" | **{d1['commits_per_s']:,.0f}** commits/s | {lat(d1)} | {fd['commits_per_s']:,.0f}"
        f" commits/s (p50/p99 {lat(fd)}) | **{d1['commits_per_s'] / fd['commits_per_s']:.2f}**"
        f" | - | - | {cpu(d1, fd)} | {d1['loadgen_cpu']:.0%} |",
        f"| commit, 2 servers, a topic per connection | 8 conns to each of 2 servers on one"
        f" database (no row shared) | **{d2['commits_per_s']:,.0f}** commits/s | {lat(d2)}"
        f" | {fd['commits_per_s']:,.0f} commits/s; 2 processes x 8 conns:"
        f" {fd2['commits_per_s']:,.0f} | {d2['commits_per_s'] / fd['commits_per_s']:.2f}"
        f" | **{d2['commits_per_s'] / d1['commits_per_s']:.2f}**"
        f" | {fd2['commits_per_s'] / fd['commits_per_s']:.2f} | {cpu(d2, fd2)}"
        f" | {d2['loadgen_cpu']:.0%} |",
        f"| find, 1 server, pipelined | {CONNS} conns x {args.window} in flight, 1 partition per"
        f" request ({fp1['batches_per_lookup']:.1f} batches/lookup)"
        f" | **{fp1['lookups_per_s']:,.0f}** lookups/s"
        f" | {fp1['p50_ms']:.2f} / {fp1['p99_ms']:.2f} | {ff['lookups_per_s']:,.0f}"
        f" lookups/s ({CONNS} conns, p50/p99 {ff['p50_ms']:.2f} / {ff['p99_ms']:.2f})"
        f" | **{fp1['lookups_per_s'] / ff['lookups_per_s']:.2f}** | - | - | {cpu(fp1, ff)}"
        f" | {fp1['loadgen_cpu']:.0%} |",
        f"| find, 1 server, unpipelined | {CONNS} conns x 1 in flight"
        f" | **{fu1['lookups_per_s']:,.0f}** lookups/s | {fu1['p50_ms']:.2f} / {fu1['p99_ms']:.2f}"
        f" | {ff['lookups_per_s']:,.0f} lookups/s"
        f" | **{fu1['lookups_per_s'] / ff['lookups_per_s']:.2f}** | - | - | {cpu(fu1, ff)}"
        f" | {fu1['loadgen_cpu']:.0%} |",
        f"| find, 2 servers, pipelined | 8 conns to each x {args.window} in flight"
        f" | **{fp2['lookups_per_s']:,.0f}** lookups/s | {fp2['p50_ms']:.2f} / {fp2['p99_ms']:.2f}"
        f" | {ff['lookups_per_s']:,.0f} lookups/s; 2 processes x 8 conns:"
        f" {ff2['lookups_per_s']:,.0f} | {fp2['lookups_per_s'] / ff['lookups_per_s']:.2f}"
        f" | **{fp2['lookups_per_s'] / fp1['lookups_per_s']:.2f}**"
        f" | {ff2['lookups_per_s'] / ff['lookups_per_s']:.2f} | {cpu(fp2, ff2)}"
        f" | {fp2['loadgen_cpu']:.0%} |",
        f"| context: pgbench | TPC-B like, -s 10 -c {CONNS} -j 2, same cluster | - | - | {tps}"
        f" | - | - | - | - | - | - | - |",
    ]  # fmt: skip
    return "\n".join(rows)


def pg_waits_table(res: dict) -> str:
    """The commit cells' ``PgWaits``: mean number of backends of the cell's database in each
    state (the 16 connections of the servers' pools or of the floor)."""
    cols = [
        ("running", lambda k: k == "active / -"),
        ("row lock wait", lambda k: k.startswith("active / Lock:")),
        ("WAL flush", lambda k: k.startswith("active / IO:WAL") or "WAL" in k.split(" / ")[1]),
        ("in a transaction, waiting for its client (its next statement)",
         lambda k: k.startswith("idle in transaction")),
        ("idle (between calls)", lambda k: k.startswith("idle / ")),
    ]  # fmt: skip
    cells = [
        ("commit, 1 server", "commit_1"),
        ("commit, 2 servers", "commit_2"),
        ("commit floor, 1 process (after)", "floor_after"),
        ("commit floor, 2 processes", "floor_2p"),
        ("commit, 1 server, a topic per connection", "commit_disjoint_1"),
        ("commit, 2 servers, a topic per connection", "commit_disjoint_2"),
        ("commit floor, a topic per connection, 1 process", "floor_disjoint"),
        ("commit floor, a topic per connection, 2 processes", "floor_disjoint_2p"),
    ]
    rows = [
        "| cell | " + " | ".join(c for c, _ in cols) + " | other |",
        "|---|" + "---|" * (len(cols) + 1),
    ]
    for label, key in cells:
        waits = res.get(key, {}).get("pg_backends")
        if waits is None:
            continue
        seen: set[str] = set()
        vals = []
        for _, match in cols:
            ks = [k for k in waits if k not in seen and match(k)]
            seen.update(ks)
            vals.append(f"{sum(waits[k] for k in ks):.1f}")
        other = {k: v for k, v in waits.items() if k not in seen and v >= 0.1}
        rows.append(f"| {label} | " + " | ".join(vals) + f" | {other or '-'} |")
    return "\n".join(rows)


def main_postgres(args) -> None:
    import uvloop

    base = tempfile.mkdtemp(prefix="kafka-rpc-coord-bench-", dir=args.dir)
    cluster = None
    try:
        if args.pg_dsn:
            admin_dsn, bin_dir = args.pg_dsn, None
        else:
            from tests.pg_cluster import PgCluster

            cluster = PgCluster(fsync=True).start()
            admin_dsn, bin_dir = cluster.dsn(), str(cluster.bin_dir)
            global PG_DATA_DIR
            PG_DATA_DIR = str(cluster.base / "data")
        res = uvloop.run(pg_cells(admin_dsn, bin_dir, base, args))
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    import asyncpg

    env = (
        f"PostgreSQL {'at --pg-dsn' if args.pg_dsn else 'throw-away cluster, fsync on'}, asyncpg"
        f" {asyncpg.__version__}, Python {sys.version.split()[0]}, {platform.machine()},"
        f" {os.cpu_count()} CPUs, nothing pinned; {args.seconds:g} s per cell"
    )
    print(f"\n{env}\n")
    print(pg_table(res, args))
    print(
        "\nWhat the database's backends did in the commit cells (pg_stat_activity every 20 ms,"
        " mean number of backends in each state):\n"
    )
    print(pg_waits_table(res))
    res["meta"] = {"env": env, "seconds": args.seconds, "conns": CONNS, "window": args.window,
                   "batches_per_commit": BATCHES, "partitions": PARTITIONS}  # fmt: skip
    out = Path(args.json) if args.json else (
        HERE / "results" / f"coordinator-pg-{time.strftime('%Y%m%dT%H%M%S')}.json"
    )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"\nJSON: {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each cell")
    ap.add_argument("--quick", action="store_true", help="1 s per cell")
    ap.add_argument("--rate", type=float, default=1000.0, help="open loop: offered commits/s")
    ap.add_argument("--window", type=int, default=8, help="find: requests in flight per conn")
    ap.add_argument("--tail", type=int, default=5, help="lookups start within the last N batches")
    ap.add_argument("--fetch-bytes", type=int, default=1 << 20, help="partition MaxBytes")
    ap.add_argument("--dir", default=None, help="parent directory of the databases")
    ap.add_argument("--json", default=None, help="JSON path (default bench/results/...)")
    ap.add_argument("--inline-read-max-partitions", type=int, default=None,
                    help="server coordinator option (default: the server's, 4; 0 = every read "
                         "on the reader thread), for A/B runs of the two read paths")  # fmt: skip
    ap.add_argument(
        "--postgres",
        action="store_true",
        help="the PostgreSQL cells instead of the SQLite ones",
    )
    ap.add_argument("--pg-dsn", default=None,
                    help="--postgres on this server (a superuser URL; databases bench_* are "
                         "created there) instead of a throw-away cluster")  # fmt: skip
    ap.add_argument("--replicated", action="store_true",
                    help="the replicated coordinator cells (raft://): 1 and 3 nodes, "
                         "beside the floor and the default SQLite server "
                         "(bench/coordinator_replicated.py)")  # fmt: skip
    ap.add_argument(
        "--replicated-sync",
        default="NORMAL",
        help="--replicated: SQLite synchronous of the replicas (OFF/NORMAL/FULL)",
    )
    ap.add_argument(
        "--probe-ms", type=float, default=20.0, help="--replicated: follower-lag probe interval, ms"
    )
    ap.add_argument("--pg-floor-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.pg_floor_worker:
        floor_worker()
        return
    if args.quick:
        args.seconds = 1.0
    args.warmup = 0.3 if args.quick else 1.0
    if args.replicated:
        from coordinator_replicated import main_replicated

        main_replicated(args)
        return
    if args.postgres:
        main_postgres(args)
        return
    pinned = shutil.which("taskset") is not None and (os.cpu_count() or 1) > 1
    if pinned and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    import uvloop

    base = tempfile.mkdtemp(prefix="kafka-rpc-coord-bench-", dir=args.dir)
    res: dict = {}
    proc = None
    query = ("" if args.inline_read_max_partitions is None
             else f"inline_read_max_partitions={args.inline_read_max_partitions}")  # fmt: skip
    try:
        say("commit floor (before)")
        res["commit_floor_before"] = floor.commit_floor(
            os.path.join(base, "floor-before.db"), args.seconds, CONNS
        )
        targets = None
        for key, name in SERVERS:
            data_dir = os.path.join(base, key)
            if key == "sqlite":  # the standalone SQLite coordinator, by URL
                db_path = os.path.join(data_dir, "coordinator.db")
                url = f"sqlite://{db_path}" + (f"?{query}" if query else "")
            else:  # the default: the topic-based coordinator, one replica on this node
                db_path = os.path.join(data_dir, "__diskless-metadata-0", "coordinator.db")
                url = f"raft://{data_dir}?{query}" if query else None
            extra = ["--override", f"diskless.coordinator.url={url}"] if url else []
            say(f"server: {name}")
            proc, port = _start(
                [sys.executable, "-m", "kafka_rpc.cli", "--log-level", "WARNING", "serve",
                 "--override", "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                 "--override", f"log.dirs={data_dir}", *extra],
                r"listening PLAINTEXT \(broker\) on [\d.]+:(\d+)",
            )  # fmt: skip
            global SERVER_PID
            SERVER_PID = proc.pid  # taskset execs the server: same pid
            res[key] = uvloop.run(server_cells(port, db_path, args))
            targets = res[key].pop("targets")
            proc.terminate()
            proc.wait(15)
            proc = None
        say("find floor (the default server's database, after)")
        res["find_floor"] = floor.find_floor(db_path, args.seconds, targets, args.fetch_bytes)
        say("commit floor (after)")
        res["commit_floor_after"] = floor.commit_floor(
            os.path.join(base, "floor-after.db"), args.seconds, CONNS
        )
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(15)
        shutil.rmtree(base, ignore_errors=True)

    inline = args.inline_read_max_partitions
    env = (
        f"sqlite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {platform.machine()},"
        f" {os.cpu_count()} CPUs; server {'on CPU 1 (taskset)' if pinned else 'unpinned'}, load"
        f" generator + floors {'on CPU 0' if pinned else 'unpinned'}; {args.seconds:g} s per"
        f" cell; databases under {args.dir or tempfile.gettempdir()}; servers"
        f" inline_read_max_partitions={'default' if inline is None else inline}"
    )
    print(f"\n{env}\n")
    print(table(res, args))
    res["meta"] = {
        "env": env,
        "seconds": args.seconds,
        "conns": CONNS,
        "window": args.window,
        "rate": args.rate,
        "batches_per_commit": BATCHES,
        "partitions": PARTITIONS,
        "floor_group": CONNS,
        "inline_read_max_partitions": args.inline_read_max_partitions,  # None = server default
    }
    out = Path(args.json) if args.json else (
        HERE / "results" / f"coordinator-{time.strftime('%Y%m%dT%H%M%S')}.json"
    )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()
