"""A/B of the PostgreSQL coordinator's lookup path: servers of several source trees side by side.

One throw-away cluster (``tests/pg_cluster.py``, ``fsync=on``) and ONE database: the first tree's
server fills it (``--fill`` s of the CommitBatches of ``bench/coordinator.py``: 100 batches over
50 partitions), then one ``kafka-rpc serve`` per tree runs on that database at the same time
(``cwd`` and ``PYTHONPATH`` = the tree, so each runs its own code), 16 client connections each.
Round r runs, for each tree in turn (order reversed every other round), FindDisklessBatches
16 x 1 in flight (and 16 x 8 with ``--pipelined``) for ``--seconds``, then the asyncpg-alone
find floor (``coordinator_floor.pg_find_floor``, 16 connections). Per cell: lookups/s, the
server's CPU us per lookup, the cluster's CPU us per lookup (``bench/coordinator.py``'s /proc
readings); the floor's own client CPU us per lookup. Prints the per-round figures and the
medians (min, max) per tree, and writes them as JSON.

    python bench/pg_find_ab.py --tree new=/path/to/worktree --tree old=/path/to/other \\
        [--rounds 6] [--seconds 3] [--pipelined] [--json out.json]

A tree needs the built extension modules (``kafka_rpc/protocol/*.so``) in place.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import coordinator as bench  # noqa: E402  (bench/coordinator.py)
import coordinator_floor as floor  # noqa: E402

from kafka_rpc.client import KafkaRpcClient  # noqa: E402
from kafka_rpc.protocol import codec  # noqa: E402

CONNS = 16


def serve(tree: str, dsn: str, data_dir: str) -> tuple[subprocess.Popen, int]:
    """``kafka-rpc serve`` of ``tree`` on ``dsn`` (``bench/coordinator.py``'s server, run with
    the tree's code); (process, PLAINTEXT port)."""
    return bench._serve_pg(
        dsn, data_dir, start_timeout_s=60, env=dict(os.environ, PYTHONPATH=tree), cwd=tree
    )


async def cell(clients, pid: int, seconds: float, window: int, targets) -> dict:
    """``bench/coordinator.py``'s find cell on one tree's server (its CPU and the cluster's)."""
    bench.SERVER_PID = pid
    return await bench.find_cell(clients, seconds, window, targets, 1 << 20)


async def run(args) -> dict:
    from tests.pg_cluster import PgCluster

    base = tempfile.mkdtemp(prefix="kafka-rpc-pg-ab-")
    cluster = PgCluster(fsync=True).start()
    bench.PG_DATA_DIR = str(cluster.base / "data")
    servers: dict[str, tuple[subprocess.Popen, int]] = {}
    clients: dict[str, list[KafkaRpcClient]] = {}
    try:
        dsn = await bench._create_db(cluster.dsn(), "ab")
        for label, tree in args.tree:
            servers[label] = serve(tree, dsn, os.path.join(base, label))
        labels = [label for label, _ in args.tree]
        for label in labels:
            port = servers[label][1]
            clients[label] = [
                await KafkaRpcClient.connect(f"127.0.0.1:{port}", client_id=f"ab-{k}")
                for k in range(CONNS)
            ]
        first = clients[labels[0]]
        init = await first[0].request(
            codec.message_class("InitDisklessTopicsRequest")(
                topics=(
                    bench._elem(bench._im, "topics")(
                        topic_id=bench.TOPIC, num_partitions=bench.PARTITIONS
                    ),
                )
            )
        )
        assert [r.error_code for r in init.responses] == [0], init
        await bench.commit_closed(first, args.fill, "fill")
        targets = await floor.pg_lookup_targets(dsn, 5, 10_000)
        for label in labels:  # warm-up: connections opened, statements prepared
            await bench.find_cell(clients[label], 1.0, 1, targets, 1 << 20)
        windows = [1, 8] if args.pipelined else [1]
        res: dict = {label: {f"x{w}": [] for w in windows} for label in labels}
        res["floor"] = {"x1": []}
        for rnd in range(args.rounds):
            for label in labels if rnd % 2 == 0 else labels[::-1]:
                for w in windows:
                    r = await cell(clients[label], servers[label][0].pid, args.seconds, w, targets)
                    res[label][f"x{w}"].append(r)
            g0, c0 = bench.pg_cpu_s(), time.process_time()
            f = await floor.pg_find_floor(dsn, args.seconds, targets, 1 << 20, CONNS, 1)
            f["client_cpu_us_per_lookup"] = (time.process_time() - c0) / f["lookups"] * 1e6
            f["pg_cpu_us_per_lookup"] = (
                None if g0 is None else (bench.pg_cpu_s() - g0) / f["lookups"] * 1e6
            )
            res["floor"]["x1"].append(f)
            line = {k: {w: round(v[w][-1]["lookups_per_s"]) for w in v} for k, v in res.items()}
            print(f"round {rnd}: {line}", flush=True)
        return res
    finally:
        for cs in clients.values():
            for c in cs:
                await c.close()
        bench._stop([proc for proc, _ in servers.values()])
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def summary(res: dict) -> str:
    def med(cells: list[dict], key: str) -> str:
        vals = [c[key] for c in cells if c.get(key) is not None]
        if not vals:
            return "-"
        return f"{statistics.median(vals):,.0f} ({min(vals):,.0f}-{max(vals):,.0f})"

    floor_rates = [c["lookups_per_s"] for c in res["floor"]["x1"]]
    out = [
        "| tree | cell | lookups/s median (min-max) | ratio to the floor, per round"
        " | server CPU us/lookup | PostgreSQL CPU us/lookup |",
        "|---|---|---|---|---|---|",
    ]
    for label, cells in res.items():
        for w, cs in cells.items():
            if label == "floor":
                out.append(
                    f"| floor (asyncpg alone, 16 conns) | find_first | {med(cs, 'lookups_per_s')}"
                    f" | - | client {med(cs, 'client_cpu_us_per_lookup')}"
                    f" | {med(cs, 'pg_cpu_us_per_lookup')} |"
                )
                continue
            ratios = [c["lookups_per_s"] / f for c, f in zip(cs, floor_rates)]
            out.append(
                f"| {label} | 16 x {w[1:]} | {med(cs, 'lookups_per_s')}"
                f" | {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
                f" | {med(cs, 'server_cpu_us_per_lookup')} | {med(cs, 'pg_cpu_us_per_lookup')} |"
            )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, type=lambda s: tuple(s.split("=", 1)),
                    help="label=path of a source tree (repeat; at least one)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=3.0, help="per cell")
    ap.add_argument("--fill", type=float, default=3.0, help="seconds of commits before")
    ap.add_argument("--pipelined", action="store_true", help="also 16 x 8 in flight")
    ap.add_argument("--json", default=None, help="JSON path (default bench/results/...)")
    args = ap.parse_args()
    import uvloop

    res = uvloop.run(run(args))
    print()
    print(summary(res))
    res["meta"] = {"trees": dict(args.tree), "rounds": args.rounds, "seconds": args.seconds}
    out = Path(args.json) if args.json else (
        HERE / "results" / f"coordinator-pg-ab-{time.strftime('%Y%m%dT%H%M%S')}.json"
    )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()
