"""Run the seeded Raft cluster simulation over many seeds and print how many failed.

    python bench/raft_simulation.py [--seeds 10000] [--workers 2] [--start 0]

Each seed is one run of ``tests/raft/simulation.py`` (real RaftCores on memory logs; drops,
delays, duplicates, partitions, crashes losing unflushed writes; Kafka's RaftEventSimulationTest
invariants checked after every event). The mix per seed: 7 in 10 are 3 voters, 2 in 10 are 5
voters with 2 observers, 1 in 10 sends every message through the codec at its negotiated
version with one observer. 15 s of faults then up to 20 s to heal. A failure prints its seed
and the violated invariant; ``tests/raft/simulation.py``'s ``run_seed`` replays it exactly. The
exit status is 1 if any seed failed.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def kind(seed: int) -> dict:
    k = seed % 10
    if k in (7, 8):
        return {"voters": 5, "observers": 2}
    if k == 9:
        return {"wire": True, "observers": 1}
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
