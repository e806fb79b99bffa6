"""Membership changes of a dynamic KRaft quorum (KIP-853), our controllers beside Apache Kafka's,
in one run.

Each round builds a fresh three-controller quorum per kind (three ``kafka-rpc serve`` nodes, or
three Apache Kafka controllers of the newest pinned release, ``tests/kafka/peer.py``): node 1
formatted ``--standalone``, nodes 2 and 3 ``--no-initial-controllers``, all with
``controller.quorum.bootstrap.servers`` (``tests/kafka/dynamic.py``). Kinds alternate which goes
first from round to round. Measured:

1. **add to counted**: for node 2, then node 3, the time from the start of Kafka's
   ``kafka-metadata-quorum add-controller`` (one tool JVM, whose own start-up is in the number,
   the same for both kinds) until the leader's DescribeQuorum lists the new voter at the high
   watermark (it is counted in the majority that moves the high watermark). Also the tool's own
   wall time (it returns once the VotersRecord is committed: AddRaftVoter v1
   ``AckWhenCommitted``).
2. **failover after the change**: ``--kills`` times, SIGKILL of the leader of the grown quorum,
   then DescribeQuorum to the survivors every 50 ms until one leads a higher epoch: the time from
   the kill to that answer. The killed node is restarted and caught up before the next kill.
3. **remove to gone**: ``remove-controller`` of a follower until the leader no longer lists it.

Everything shares this machine's two CPUs: a ratio is ours / Kafka's in the same run. The load
average before and after is recorded. Writes JSON (``--json``, default
``bench/results/quorum-membership-<time>.json``) and prints a Markdown table.

    python bench/quorum_membership.py --rounds 2 --kills 3
    python bench/quorum_membership.py --quick     # one round, one kill
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kafka import peer  # noqa: E402
from tests.kafka.dynamic import DynamicQuorum  # noqa: E402
from tests.kafka.mixed import describe_all  # noqa: E402

KINDS = ("ours", "kafka")


def _until_counted(q: DynamicQuorum, node: int, timeout: float = 120.0) -> float:
    """Poll the leader's DescribeQuorum until ``node`` is a voter at the high watermark; the
    monotonic time it was first seen so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            leader, _ = q.leader(timeout=5)
            seen = q.voters(leader)
        except TimeoutError:
            seen = None
        if seen is not None:
            views, hwm = seen
            if any(v.node == node and v.log_end_offset >= hwm for v in views):
                return time.monotonic()
        time.sleep(0.02)
    raise TimeoutError(f"node {node} never counted")


def _until_gone(q: DynamicQuorum, node: int, timeout: float = 120.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leader, _ = q.leader(timeout=10)
        seen = q.voters(leader)
        if seen is not None and node not in {v.node for v in seen[0]}:
            return time.monotonic()
        time.sleep(0.02)
    raise TimeoutError(f"node {node} never removed")


def _failover(q: DynamicQuorum, voters: set[int]) -> float:
    leader, epoch = q.leader()
    q.kill(leader)
    t0 = time.monotonic()
    survivors = {i: q.address(i) for i in voters - {leader}}
    while True:
        obs = describe_all(survivors, timeout=1.0)
        if any(o.leading and o.epoch > epoch for o in obs):
            took = time.monotonic() - t0
            break
        if time.monotonic() - t0 > 60:
            raise TimeoutError("no new leader within 60 s")
        time.sleep(0.05)
    q.start(leader)
    q.wait_listening(leader)
    q.wait_voters(voters)
    return took


def run_round(kind: str, r: int, args, workdir: Path) -> dict:
    q = DynamicQuorum(workdir / f"r{r}-{kind}", [kind] * 3)
    try:
        q.format(1, "standalone")
        q.format(2, "none")
        q.format(3, "none")
        q.start(1, 2, 3)
        q.wait_listening(1, 2, 3)
        q.wait_voters({1})
        adds, tools = [], []
        for new in (2, 3):
            q.wait_observer(new)  # caught up first, as an operator checks (not timed)
            t0 = time.monotonic()
            q.add_controller(new, via=1, caught_up=False)
            tools.append(time.monotonic() - t0)
            adds.append(_until_counted(q, new) - t0)
            q.wait_voters(set(range(1, new + 1)))
        kills = [_failover(q, {1, 2, 3}) for _ in range(args.kills)]
        gone = q.leader()[0] % 3 + 1
        t0 = time.monotonic()
        q.remove_controller(gone, q.directory_id(gone), via=(gone % 3) + 1)
        removed = _until_gone(q, gone) - t0
        return {"kind": kind, "round": r, "add_to_counted_s": adds, "add_tool_s": tools,
                "failover_s": kills, "remove_to_gone_s": removed}  # fmt: skip
    finally:
        q.close()


def summarize(rounds: list[dict]) -> dict:
    out: dict = {}
    for kind in KINDS:
        rs = [x for x in rounds if x["kind"] == kind]
        if not rs:
            continue
        adds = [a for x in rs for a in x["add_to_counted_s"]]
        fo = [f for x in rs for f in x["failover_s"]]
        out[kind] = {
            "add_to_counted_median_s": statistics.median(adds),
            "add_tool_median_s": statistics.median(t for x in rs for t in x["add_tool_s"]),
            "failover_median_s": statistics.median(fo) if fo else None,
            "failover_max_s": max(fo) if fo else None,
            "remove_to_gone_median_s": statistics.median(x["remove_to_gone_s"] for x in rs),
            "samples": {"adds": len(adds), "failovers": len(fo)},
        }
    return out


def table(summary: dict) -> str:
    rows = [("add-controller to counted in the HWM, median", "add_to_counted_median_s"),
            ("add-controller tool wall time, median", "add_tool_median_s"),
            ("failover after the change, median", "failover_median_s"),
            ("failover after the change, max", "failover_max_s"),
            ("remove-controller to gone, median", "remove_to_gone_median_s")]  # fmt: skip
    lines = ["| measure (s) | ours | Kafka | ours / Kafka |", "|---|---|---|---|"]
    for label, key in rows:
        a = summary.get("ours", {}).get(key)
        b = summary.get("kafka", {}).get(key)
        ratio = f"{a / b:.2f}" if a is not None and b else "-"
        fa = f"{a:.3f}" if a is not None else "-"
        fb = f"{b:.3f}" if b is not None else "-"
        lines.append(f"| {label} | {fa} | {fb} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one round, one kill")
    ap.add_argument("--workdir", help="where the quorums live (default: a temporary dir)")
    ap.add_argument("--json", help="output file (default bench/results/quorum-membership-*.json)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.kills = 1, 1
    peer.java_binary()
    peer.resolve(peer.NEWEST)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="quorum-membership-"))
    load0 = os.getloadavg()
    rounds = []
    for r in range(args.rounds):
        for kind in KINDS if r % 2 == 0 else KINDS[::-1]:
            print(f"round {r}: {kind} (load {os.getloadavg()[0]:.2f})", flush=True)
            rounds.append(run_round(kind, r, args, workdir))
            print(json.dumps(rounds[-1]), flush=True)
    summary = summarize(rounds)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = Path(args.json or ROOT / "bench" / "results" / f"quorum-membership-{stamp}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"when": stamp, "kafka": peer.NEWEST, "args": vars(args), "load_before": load0,
              "load_after": os.getloadavg(), "cpus": os.cpu_count(), "rounds": rounds,
              "summary": summary, "table": table(summary)}  # fmt: skip
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(table(summary))
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
