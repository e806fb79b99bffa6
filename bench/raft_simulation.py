"""Run the seeded Raft cluster simulation over many seeds and print how many failed.

    python bench/raft_simulation.py [--seeds 10000] [--workers 2] [--start 0]

Each seed is one run of ``tests/raft/simulation.py`` (real RaftCores on memory logs; drops,
delays, duplicates, partitions, crashes losing unflushed writes; Kafka's RaftEventSimulationTest
invariants and the Kafka 4.x rules of ``KafkaRules`` checked after every event). The mix per
20 seeds (``kind``): 10 are 3 voters; 2 are 5 voters with 2 observers; 1 sends every message
through the codec at our versions with one observer; 1 through the codec at Kafka 4.4's versions
(Vote 2, BeginQuorumEpoch 1, EndQuorumEpoch 1), its follower voters sending UpdateRaftVoter to
each new leader as Kafka 4.1+ voters do; 1 cuts half of the leaders' Fetch answers
inside a batch (as Kafka's byte-sliced reads do) and requires every replica to catch up; 1 gives
the voters different controller listener names; 2 are "churn" (5 voters, a crash every second
or so with short downtimes, 20 % drops, 30 % duplicates, delays up to 200 ms: Resigned and
Prospective voters meet pre-votes and votes); 1 combines Kafka's versions, sliced answers,
listener names and UpdateRaftVoter; 1 is 5 voters with observers, sliced answers, metadata
transactions (leaders open and close them; no snapshot may fall inside one) and every replica
caught up. 15 s of faults then up to 20 s to heal. A failure prints its seed and the violated
invariant; ``tests/raft/simulation.py``'s ``run_seed(seed, **kind(seed))`` replays it exactly.
The exit status is 1 if any seed failed.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHURN = {
    "voters": 5, "crash_every_ms": 1000, "down_ms": (100, 800), "drop": 0.2, "duplicate": 0.3,
    "max_delay_ms": 200,
}  # fmt: skip


def kind(seed: int) -> dict:
    k = seed % 20
    if k in (10, 11):
        return {"voters": 5, "observers": 2}
    if k == 12:
        return {"wire": True, "observers": 1}
    if k == 13:
        return {"wire": True, "kafka_versions": True, "observers": 1, "update_voter": True}
    if k == 14:
        return {"slice_fetch": 0.5, "followers_converge": True}
    if k == 15:
        return {"listener_names": True}
    if k in (16, 17):
        return dict(CHURN)
    if k == 18:
        return {"wire": True, "kafka_versions": True, "slice_fetch": 0.5,
                "listener_names": True, "followers_converge": True,
                "update_voter": True}  # fmt: skip
    if k == 19:
        return {"voters": 5, "observers": 2, "slice_fetch": 0.3, "followers_converge": True,
                "transactions": 0.3}  # fmt: skip
    return {}


def one(seed: int) -> tuple[int, str | None]:
    from tests.raft.simulation import InvariantViolation, run_seed

    try:
        run_seed(seed, duration_ms=15_000, heal_ms=10_000, **kind(seed))
    except InvariantViolation as e:
        return seed, f"violation: {e}"
    except Exception as e:  # a crash of the core is a failure too
        return seed, f"error: {type(e).__name__}: {e}"
    return seed, None


def _init() -> None:
    logging.disable(logging.CRITICAL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10_000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    t0 = time.monotonic()
    failed = []
    seeds = range(args.start, args.start + args.seeds)
    with multiprocessing.Pool(args.workers, initializer=_init) as pool:
        for i, (seed, err) in enumerate(pool.imap_unordered(one, seeds, chunksize=20), 1):
            if err:
                failed.append(seed)
                print(f"seed {seed}: {err}", flush=True)
            if i % 1000 == 0:
                print(f"{i} seeds, {len(failed)} failed, {time.monotonic() - t0:.0f} s", flush=True)
    print(f"seeds {args.seeds} (from {args.start}), failed {len(failed)}, "
          f"{time.monotonic() - t0:.0f} s with {args.workers} workers")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
