"""A soak of the replicated Batch Coordinator under a random schedule of real network faults.

    sudo python bench/nemesis.py --seconds 600 --seed 1 [--out DIR] [--kinds isolate-leader,loss]

Three combined nodes, each ``kafka-rpc serve`` in its own network namespace behind a Toxiproxy
(``kafka_rpc.testbed.netns``, ``netns_cluster``), three idempotent writers, a reader on every node
and a DescribeQuorum poller, all from a client namespace (``kafka_rpc.testbed.nemesis``). From the
seed, a schedule of faults (each 2-8 s, then 2-5 s of healed network): the coordinator leader
isolated, any node isolated, the leader's input cut (it sends but does not receive), a bridge (two
nodes cut, the third sees both), 5 % random loss, 100 ms +- 50 ms of delay, a link down. At the
end the network heals and the run is checked as the netns scenarios are (history rules, one
leader per epoch, committed Raft entries on every node, replicas' SQLite states row by row).

Printed: the operations acknowledged, failed (certainly not applied) and left unknown (attempts,
and writes no attempt resolved, with how many of those ended present), the check result, and per
fault kind how often it ran and the longest write unavailability (the longest time without an
acknowledged commit from a fault's start until the first acknowledged commit after its heal).
The history (``history.jsonl``), the schedule and the nodes' logs stay in ``--out``. Root only.
Exit status 1 when a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafka_rpc.testbed.history import INFO, OK
from kafka_rpc.testbed.nemesis import FAULT_KINDS, Run, random_schedule, unavailability
from kafka_rpc.testbed.netns import NetBed, cleanup_stale, require_root, run_in_netns


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="length of the fault schedule")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="run directory (default: a new temp dir)")
    ap.add_argument("--kinds", default=",".join(FAULT_KINDS),
                    help=f"fault kinds to draw from (default: all of {FAULT_KINDS})")  # fmt: skip
    return ap.parse_args(argv)


def summary(run: Run, wall: float) -> dict:
    ops = run.rec.ops
    commits = [op for op in ops if op.kind == "commit"]
    by = Counter(op.outcome for op in commits)
    keys: dict[str, list] = defaultdict(list)
    for op in commits:
        for e in op.entries:
            keys[e.key].append(op.outcome)
    final_keys = {b[2] for p in (run.outcome.final if run.outcome else {}).values()
                  for b in p.batches}  # fmt: skip
    unresolved = [k for k, outs in keys.items() if OK not in outs and INFO in outs]
    end = max((op.complete or op.invoke for op in ops), default=run.t0)
    unavail = unavailability(ops, run.faults, end)
    kinds = Counter(f.kind for f in run.faults)
    o = run.outcome
    return {
        "seconds": round(wall, 1),
        "commit_attempts": {"acknowledged": by[OK], "failed": by["fail"], "unknown": by[INFO]},
        "batches_acknowledged": sum(1 for outs in keys.values() if OK in outs),
        "writes_left_unknown": len(unresolved),
        "unknown_writes_present": sum(1 for k in unresolved if k in final_keys),
        "reads": Counter(op.outcome for op in ops if op.kind == "read"),
        "check": "valid" if o is not None and o.ok else "INVALID",
        "faults": {
            k: {"count": kinds[k], "longest_write_unavailability_s": round(unavail.get(k, 0.0), 2)}
            for k in sorted(kinds)
        },
    }


def table(s: dict) -> str:
    c = s["commit_attempts"]
    lines = [
        f"run: {s['seconds']} s, check: {s['check']}",
        f"commit attempts: {c['acknowledged']} acknowledged, {c['failed']} failed, "
        f"{c['unknown']} unknown",
        f"batches acknowledged: {s['batches_acknowledged']}; writes left unknown: "
        f"{s['writes_left_unknown']} ({s['unknown_writes_present']} of them present at the end)",
        f"reads: {dict(s['reads'])}",
        "",
        "| fault kind | times | longest write unavailability (s) |",
        "|---|---:|---:|",
    ]
    for k, v in s["faults"].items():
        lines.append(f"| {k} | {v['count']} | {v['longest_write_unavailability_s']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    require_root()
    cleanup_stale()
    out = Path(args.out or tempfile.mkdtemp(prefix="nemesis-"))
    out.mkdir(parents=True, exist_ok=True)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    schedule = random_schedule(random.Random(args.seed), args.seconds, kinds)
    bed = NetBed([1, 2, 3], out / "bed")
    box: dict[str, Run] = {}
    started = time.monotonic()

    async def soak() -> None:
        run = box["run"] = Run(bed, out, seed=args.seed)
        try:
            await drive(run)
        finally:
            await run.abort()

    async def drive(run: Run) -> None:
        await run.start()
        await run.wait_commits(run.t0, 5, timeout=30)
        t0 = time.monotonic()
        print(f"cluster up in {t0 - run.t0:.1f} s; {len(schedule)} steps over "
              f"{args.seconds:g} s (seed {args.seed})", flush=True)  # fmt: skip
        for at, kind in schedule:
            await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
            if kind == "heal":
                run.heal()
            else:
                what = await run.fault(kind)
                print(f"+{time.monotonic() - t0:7.1f}s {kind}: {what}", flush=True)
        await asyncio.sleep(max(0.0, t0 + args.seconds - time.monotonic()))
        await run.finish()

    rc = 0
    try:
        bed.create()
        run_in_netns(bed.client_ns, soak, args.seconds + 240)
    except BaseException as exc:
        print(f"the soak failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        rc = 1
    finally:
        bed.close()
    run = box.get("run")
    if run is None:
        return 1
    s = summary(run, time.monotonic() - started)
    (out / "summary.json").write_text(json.dumps(s, indent=2, default=dict) + "\n")
    (out / "report.txt").write_text(run.report() + "\n")
    print(table(s))
    if run.outcome is None or not run.outcome.ok:
        print(run.report(), file=sys.stderr)
        rc = 1
    print(f"history, report and logs in {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
