"""SQLite Batch Coordinator vs a raw-sqlite3 floor, side by side in ONE run.

Cells (each bounded by ``--seconds``):

* **commit floor** - stdlib ``sqlite3`` on a fresh database built from the coordinator's own
  migration files (``kafka_rpc/coordinator/migrations``), WAL, ``synchronous=FULL``, the same
  rows per CommitBatches as the coordinator writes: 1 ``files`` row + 100 ``batches`` rows
  (``executemany``) + one high-watermark ``UPDATE logs`` per touched partition (50), with the
  high watermarks and batch ids kept in Python (the batch id counter written once per
  transaction, as the coordinator does). ``G`` (default 16) commits per ``BEGIN IMMEDIATE ..
  COMMIT``, i.e. grouped as the coordinator groups 16 concurrent callers. No asyncio, no
  validation, no response objects: the floor of this schema on this disk.
* **commit coordinator** - ``SqliteBatchCoordinator.commit_file`` (same schema, WAL, FULL) from
  ``--callers`` (16) concurrent asyncio tasks in a closed loop; commits/s, p50/p99 latency per
  call, mean group size. Same request shape: 100 non-idempotent batches, 2 on each of 50
  partitions.
* **commit @ offered rate** - open loop: ``--rate`` (1000) commit_file calls/s started on a
  fixed schedule regardless of completion; p50/p99 latency, measured from the scheduled start.
* **find floor / coordinator** - single-partition ``find_batches`` on the database the
  coordinator cell filled; random partition, offset among the last ``--tail`` batches of the
  partition, ``max_partition_fetch_bytes`` = ``--fetch-bytes``. The floor runs the same two
  statements (log bounds, then the batch range scan with the same fetch-budget stop) with
  stdlib ``sqlite3`` on one connection in one thread; the coordinator is called from 1 and from
  16 concurrent tasks.

Ratio = coordinator / floor of the same kind (commits/s or lookups/s) in the same run.

Usage: ``python bench/coordinator_floor.py [--seconds 5] [--dir /tmp] [--json out.json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka_rpc.coordinator.api import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    FindBatchRequest,
    TopicIdPartition,
)
from kafka_rpc.coordinator.sqlite import SqliteBatchCoordinator, load_migrations

PARTITIONS = 50
BATCHES = 100
RECORDS = 10  # per batch
BATCH_SIZE = 10_000  # bytes per batch; file = BATCHES * BATCH_SIZE
FILE_SIZE = BATCHES * BATCH_SIZE
TOPIC = uuid.UUID("6f1c2b7e-0000-4000-8000-000000000001")

# The floor knows every batch is accepted, so the file row carries its batch count at once
# (the coordinator sets it after the batches are decided: one more UPDATE per commit).
INSERT_FILE = (
    "INSERT INTO files (object_key, state, uploader_broker_id, committed_at_ms, size, batch_count)"
    " VALUES (?, 'uploaded', ?, ?, ?, ?)"
)
INSERT_BATCH = (
    "INSERT INTO batches (batch_id, log_id, base_offset, last_offset, file_id, byte_offset,"
    " byte_size, magic, timestamp_type, log_append_timestamp, batch_max_timestamp, producer_id,"
    " producer_epoch, base_sequence, last_sequence) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
UPDATE_BATCH_ID = "UPDATE batch_id_seq SET next_batch_id = ?"
UPDATE_HW = "UPDATE logs SET high_watermark = ?, byte_size = ? WHERE log_id = ?"
SELECT_BOUNDS = (
    "SELECT log_id, log_start_offset, high_watermark FROM logs WHERE topic_id = ? AND partition = ?"
)
FIND = (
    "SELECT b.batch_id, f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset,"
    " b.log_append_timestamp, b.batch_max_timestamp, b.timestamp_type, b.magic, b.producer_id,"
    " b.producer_epoch, b.base_sequence, b.last_sequence"
    " FROM batches AS b JOIN files AS f ON f.file_id = b.file_id"
    " WHERE b.log_id = ? AND b.last_offset >= ? ORDER BY b.last_offset"
)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


# -- (a) raw sqlite3 commit floor --------------------------------------------------------------


def schema_db(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    for _, _, script in load_migrations():
        conn.executescript(script)
    conn.executemany(
        "INSERT INTO logs (topic_id, partition, topic_name) VALUES (?, ?, 't')",
        [(TOPIC.bytes, p) for p in range(PARTITIONS)],
    )
    return conn


def commit_floor(path: str, seconds: float, group: int) -> dict:
    conn = schema_db(path)
    log_ids = [
        conn.execute(
            "SELECT log_id FROM logs WHERE topic_id = ? AND partition = ?", (TOPIC.bytes, p)
        ).fetchone()[0]
        for p in range(PARTITIONS)
    ]
    hw = dict.fromkeys(log_ids, 0)
    size = dict.fromkeys(log_ids, 0)
    per_part = BATCHES // PARTITIONS
    commits = 0
    seq = 0
    batch_id = conn.execute("SELECT next_batch_id FROM batch_id_seq").fetchone()[0]
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        conn.execute("BEGIN IMMEDIATE")
        for _ in range(group):
            now = int(time.time() * 1000)
            seq += 1
            fid = conn.execute(INSERT_FILE, (f"floor/{seq}", 1, now, FILE_SIZE, BATCHES)).lastrowid
            rows = []
            i = 0
            for lid in log_ids:
                for _ in range(per_part):
                    base = hw[lid]
                    hw[lid] = base + RECORDS
                    size[lid] += BATCH_SIZE
                    rows.append(
                        (batch_id, lid, base, base + RECORDS - 1, fid, i * BATCH_SIZE,
                         BATCH_SIZE, 2, 0, now, now, -1, -1, -1, -1)
                    )  # fmt: skip
                    batch_id += 1
                    i += 1
            conn.executemany(INSERT_BATCH, rows)
            conn.executemany(UPDATE_HW, [(hw[lid], size[lid], lid) for lid in log_ids])
        conn.execute(UPDATE_BATCH_ID, (batch_id,))
        conn.execute("COMMIT")
        commits += group
    elapsed = time.perf_counter() - t0
    conn.close()
    return {"commits_per_s": commits / elapsed, "commits": commits}


# -- (b) coordinator commits -------------------------------------------------------------------


def commit_requests() -> list[CommitBatchRequest]:
    tps = [TopicIdPartition(TOPIC, p) for p in range(PARTITIONS)]
    now = int(time.time() * 1000)
    reqs = []
    i = 0
    for tp in tps:
        for _ in range(BATCHES // PARTITIONS):
            reqs.append(CommitBatchRequest(tp, i * BATCH_SIZE, BATCH_SIZE, 0, RECORDS - 1, now, 0))
            i += 1
    return reqs


async def new_coordinator(path: str) -> SqliteBatchCoordinator:
    c = SqliteBatchCoordinator(path, synchronous="FULL")
    await c.start()
    await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(TOPIC, "t", PARTITIONS)])
    return c


async def commit_closed_loop(c: SqliteBatchCoordinator, seconds: float, callers: int) -> dict:
    reqs = commit_requests()
    lat: list[float] = []
    counter = iter(range(1 << 62))
    g0, o0 = c.group_stats
    deadline = time.perf_counter() + seconds

    async def caller(k: int) -> None:
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            res = await c.commit_file(f"c/{k}/{next(counter)}", 1, FILE_SIZE, reqs)
            lat.append(time.perf_counter() - t)
            assert res[0].error == 0, res[0]

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(callers)))
    elapsed = time.perf_counter() - t0
    g1, o1 = c.group_stats
    return {
        "commits_per_s": len(lat) / elapsed,
        "commits": len(lat),
        "p50_ms": pct(lat, 0.50) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3,
        "mean_group": (o1 - o0) / max(1, g1 - g0),
    }


async def commit_open_loop(c: SqliteBatchCoordinator, seconds: float, rate: float) -> dict:
    reqs = commit_requests()
    lat: list[float] = []
    tasks: list[asyncio.Task] = []
    g0, o0 = c.group_stats

    async def one(key: str, scheduled: float) -> None:
        res = await c.commit_file(key, 1, FILE_SIZE, reqs)
        lat.append(time.perf_counter() - scheduled)
        assert res[0].error == 0, res[0]

    t0 = time.perf_counter()
    n = int(seconds * rate)
    for i in range(n):
        scheduled = t0 + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(f"o/{i}", scheduled)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    g1, o1 = c.group_stats
    return {
        "offered_per_s": rate,
        "commits_per_s": len(lat) / elapsed,
        "commits": len(lat),
        "p50_ms": pct(lat, 0.50) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3,
        "mean_group": (o1 - o0) / max(1, g1 - g0),
    }


# -- (c) find_batches ----------------------------------------------------------------------------


def lookup_targets(path: str, tail: int, n: int, seed: int = 7) -> list[tuple[int, int]]:
    conn = sqlite3.connect(path)
    hws = [
        conn.execute(
            "SELECT high_watermark FROM logs WHERE topic_id = ? AND partition = ?",
            (TOPIC.bytes, p),
        ).fetchone()[0]
        for p in range(PARTITIONS)
    ]
    conn.close()
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        p = rnd.randrange(PARTITIONS)
        back = rnd.randint(1, tail) * RECORDS
        out.append((p, max(0, hws[p] - back)))
    return out


def find_floor(path: str, seconds: float, targets, fetch_bytes: int) -> dict:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA query_only=ON")
    tid = TOPIC.bytes
    n = 0
    rows = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        for p, off in targets[n % len(targets) : n % len(targets) + 100]:
            conn.execute("BEGIN")
            log_id, _lso, _hw = conn.execute(SELECT_BOUNDS, (tid, p)).fetchone()
            got = 0
            budget = 0
            for b in conn.execute(FIND, (log_id, off)):
                if budget and budget >= fetch_bytes:
                    break
                budget += b[3]
                got += 1
            conn.execute("COMMIT")
            rows += got
            n += 1
    elapsed = time.perf_counter() - t0
    conn.close()
    return {"lookups_per_s": n / elapsed, "batches_per_lookup": rows / max(1, n)}


async def find_coordinator(
    c: SqliteBatchCoordinator, seconds: float, callers: int, targets, fetch_bytes: int
) -> dict:
    tps = [TopicIdPartition(TOPIC, p) for p in range(PARTITIONS)]
    reqs = [[FindBatchRequest(tps[p], off, fetch_bytes)] for p, off in targets]
    counts = [0] * callers
    rows = [0]
    lat: list[float] = []
    deadline = time.perf_counter() + seconds

    async def caller(k: int) -> None:
        i = k * 997
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            res = await c.find_batches(reqs[i % len(reqs)], 50 * 1024 * 1024)
            lat.append(time.perf_counter() - t)
            assert res[0].error == 0, res[0]
            rows[0] += len(res[0].batches)
            counts[k] += 1
            i += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(callers)))
    elapsed = time.perf_counter() - t0
    n = sum(counts)
    return {
        "lookups_per_s": n / elapsed,
        "batches_per_lookup": rows[0] / max(1, n),
        "p50_ms": pct(lat, 0.5) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3,
    }


# -- main ----------------------------------------------------------------------------------------


async def run(args) -> dict:
    base = tempfile.mkdtemp(prefix="coordfloor-", dir=args.dir)
    try:
        res: dict = {}
        res["commit_floor"] = commit_floor(os.path.join(base, "floor.db"), args.seconds, args.group)
        path = os.path.join(base, "coord.db")
        c = await new_coordinator(path)
        try:
            res["commit_coord"] = await commit_closed_loop(c, args.seconds, args.callers)
            res["commit_open"] = await commit_open_loop(c, args.seconds, args.rate)
            targets = lookup_targets(path, args.tail, 10_000)
            res["find_floor"] = find_floor(path, args.seconds, targets, args.fetch_bytes)
            res["find_coord_1"] = await find_coordinator(
                c, args.seconds, 1, targets, args.fetch_bytes
            )
            res["find_coord_n"] = await find_coordinator(
                c, args.seconds, args.callers, targets, args.fetch_bytes
            )
        finally:
            await c.close()
        return res
    finally:
        shutil.rmtree(base, ignore_errors=True)


def table(res: dict, args) -> str:
    cf, cc, co = res["commit_floor"], res["commit_coord"], res["commit_open"]
    ff, f1, fn = res["find_floor"], res["find_coord_1"], res["find_coord_n"]
    lines = [
        "| cell | method | rate | p50 / p99 ms | ratio coord/floor |",
        "|---|---|---|---|---|",
        f"| commit floor | raw sqlite3, G={args.group} commits/tx, 1+{BATCHES}+{PARTITIONS} rows"
        f" per commit, WAL FULL | **{cf['commits_per_s']:,.0f}** commits/s | - | 1.00 |",
        f"| commit coordinator | commit_file x {args.callers} asyncio tasks, closed loop"
        f" (mean group {cc['mean_group']:.1f}) | **{cc['commits_per_s']:,.0f}** commits/s"
        f" | {cc['p50_ms']:.2f} / {cc['p99_ms']:.2f}"
        f" | **{cc['commits_per_s'] / cf['commits_per_s']:.2f}** |",
        f"| commit @ {co['offered_per_s']:,.0f}/s offered | open loop, latency from schedule"
        f" (mean group {co['mean_group']:.1f}) | {co['commits_per_s']:,.0f} commits/s"
        f" | {co['p50_ms']:.2f} / **{co['p99_ms']:.2f}** | - |",
        f"| find floor | raw sqlite3, 1 thread, bounds + range scan in one read tx"
        f" ({ff['batches_per_lookup']:.1f} batches/lookup) | **{ff['lookups_per_s']:,.0f}**"
        f" lookups/s | - | 1.00 |",
        f"| find coordinator, 1 caller | find_batches, 1 partition"
        f" ({f1['batches_per_lookup']:.1f} batches/lookup) | {f1['lookups_per_s']:,.0f} lookups/s"
        f" | {f1['p50_ms']:.2f} / {f1['p99_ms']:.2f}"
        f" | {f1['lookups_per_s'] / ff['lookups_per_s']:.2f} |",
        f"| find coordinator, {args.callers} callers | find_batches, 1 partition, concurrent"
        f" | **{fn['lookups_per_s']:,.0f}** lookups/s | {fn['p50_ms']:.2f} / {fn['p99_ms']:.2f}"
        f" | **{fn['lookups_per_s'] / ff['lookups_per_s']:.2f}** |",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each cell")
    ap.add_argument("--group", type=int, default=16, help="floor: commits per transaction")
    ap.add_argument("--callers", type=int, default=16)
    ap.add_argument("--rate", type=float, default=1000.0, help="open-loop offered commits/s")
    ap.add_argument("--tail", type=int, default=5, help="lookups start within the last N batches")
    ap.add_argument("--fetch-bytes", type=int, default=1 << 20, help="max_partition_fetch_bytes")
    ap.add_argument("--dir", default=None, help="directory for the database files")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    args = ap.parse_args()
    res = asyncio.run(run(args))
    print(
        f"sqlite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs,"
        f" {args.seconds:g} s per cell, {BATCHES} batches x {BATCH_SIZE} B over {PARTITIONS}"
        f" partitions per commit\n"
    )
    print(table(res, args))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()


# -- PostgreSQL floors (bench/coordinator.py --postgres) -----------------------------------------


LANE_TOPICS = [uuid.UUID(int=TOPIC.int + 1 + k) for k in range(16)]
"""One topic per connection for the PostgreSQL cells without shared rows."""


async def pg_setup(dsn: str) -> None:
    """The coordinator's own migrations and the benchmark topics (``PARTITIONS`` partitions
    each)."""
    import asyncpg

    from kafka_rpc.coordinator.postgres import Q, apply_migrations

    conn = await asyncpg.connect(dsn)
    try:
        await apply_migrations(conn, int(time.time() * 1000))
        for t in (TOPIC, *LANE_TOPICS):
            await conn.execute(Q.insert_logs, t, "bench", PARTITIONS)
    finally:
        await conn.close()


async def pg_commit_floor(
    dsn: str, seconds: float, conns: int, disjoint: bool = False, first_lane: int = 0
) -> dict:
    """The SQL of ``PostgresBatchCoordinator.commit_file`` run by asyncpg alone: per commit, on
    one of ``conns`` connections in a closed loop, ``BEGIN``; ``insert_file_lock_logs`` (the
    object row, then the 50 partitions FOR UPDATE in key order); ``write_commit`` (100 batches,
    50 new heads, the file's batch count); ``COMMIT``; with the same request shape as the
    server cells (2 plain batches of ``RECORDS`` records on each partition). No wire, no
    validation, no response objects: the floor of this schema and this SQL on this server.
    ``disjoint``: lane k commits to ``LANE_TOPICS[k]`` (no row shared between concurrent
    commits). ``first_lane``: the lanes are ``first_lane .. first_lane + conns - 1`` (several
    processes running this floor at once on one database take distinct lanes: distinct object
    keys and, with ``disjoint``, distinct topics). The database must be set up by
    ``pg_setup`` first (once, not by each process)."""
    import asyncpg

    from kafka_rpc.coordinator.postgres import Q
    from kafka_rpc.coordinator.postgres import _pg_array as pg_array

    pool = await asyncpg.create_pool(
        dsn, min_size=conns, max_size=conns, server_settings={"jit": "off"}
    )
    parts = list(range(PARTITIONS))
    parts_arg = pg_array(parts)
    per = BATCHES // PARTITIONS
    lat: list[float] = []
    deadline = time.perf_counter() + seconds

    async def lane(k: int) -> None:
        tids = pg_array([str(LANE_TOPICS[k] if disjoint else TOPIC)] * PARTITIONS)
        async with pool.acquire() as conn:
            i = 0
            while time.perf_counter() < deadline:
                i += 1
                now = int(time.time() * 1000)
                t = time.perf_counter()
                async with conn.transaction():
                    locked = await conn.fetch(
                        Q.insert_file_lock_logs, f"floor/{k}/{i}", 1, now,
                        BATCHES * BATCH_SIZE, tids, parts_arg,
                    )  # fmt: skip
                    fid = locked[0][0]
                    st = {o - 1: [lid, hw, size] for _, lid, o, _lso, hw, size in locked}
                    cols: list[list[int]] = [[] for _ in range(12)]
                    for b in range(BATCHES):
                        s = st[b // per]
                        row = (s[0], s[1], s[1] + RECORDS - 1, b * BATCH_SIZE, BATCH_SIZE, 2, 0,
                               now, -1, -1, -1, -1)  # fmt: skip
                        s[1] += RECORDS
                        s[2] += BATCH_SIZE
                        for col, v in zip(cols, row):
                            col.append(v)
                    heads = [st[p] for p in parts]
                    await conn.execute(
                        Q.write_commit, fid, now, *map(pg_array, cols),
                        pg_array([h[0] for h in heads]), pg_array([h[1] for h in heads]),
                        pg_array([h[2] for h in heads]), BATCHES, "{}", *(["{}"] * 7),
                    )  # fmt: skip
                lat.append(time.perf_counter() - t)

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(lane(k) for k in range(first_lane, first_lane + conns)))
        elapsed = time.perf_counter() - t0
    finally:
        await pool.close()
    return {
        "commits_per_s": len(lat) / elapsed,
        "commits": len(lat),
        "p50_ms": pct(lat, 0.5) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3,
    }


async def pg_lookup_targets(dsn: str, tail: int, n: int, seed: int = 7) -> list[tuple[int, int]]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        hws = dict(
            await conn.fetch(
                "SELECT partition, high_watermark FROM logs WHERE topic_id = $1", TOPIC
            )
        )
    finally:
        await conn.close()
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        p = rnd.randrange(PARTITIONS)
        out.append((p, max(0, hws[p] - rnd.randint(1, tail) * RECORDS)))
    return out


async def pg_find_floor(
    dsn: str, seconds: float, targets, fetch_bytes: int, conns: int, window: int
) -> dict:
    """The coordinator's one-partition ``find_batches`` statement (``find_first``: bounds and
    the first page of batches in one statement) run by asyncpg alone from ``conns`` x
    ``window`` concurrent lanes (a connection each), with the same fetch-budget stop."""
    import asyncpg

    from kafka_rpc.coordinator.postgres import Q

    lanes = conns * window
    pool = await asyncpg.create_pool(
        dsn, min_size=lanes, max_size=lanes, server_settings={"jit": "off"}
    )
    lat: list[float] = []
    rows = [0]
    deadline = time.perf_counter() + seconds

    async def lane(start: int) -> None:
        async with pool.acquire() as conn:
            i = start
            while time.perf_counter() < deadline:
                p, off = targets[i % len(targets)]
                i += 1
                t = time.perf_counter()
                got = budget = 0
                for r in await conn.fetch(Q.find_first, TOPIC, p, off, 64):
                    if r[3] is None or (budget and budget >= fetch_bytes):
                        break
                    budget += r[6]
                    got += 1
                lat.append(time.perf_counter() - t)
                rows[0] += got

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(lane(k * 997) for k in range(lanes)))
        elapsed = time.perf_counter() - t0
    finally:
        await pool.close()
    n = len(lat)
    return {
        "lookups_per_s": n / elapsed,
        "lookups": n,
        "batches_per_lookup": rows[0] / max(1, n),
        "p50_ms": pct(lat, 0.5) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3,
    }
