"""Per-record CPU of the metadata log's hot steps, in process: what a committed record costs the
node that decodes and applies it, beside what writing it costs (the raw fsync floor of
``bench/raft.py`` pays ``encode_batch`` too).

Method: 2,000 framed 100-byte FeatureLevelRecords (``bench/raft.py``'s ``record_value``) in
batches of 10; each step run 5 times, the best ``time.process_time`` kept, divided by 2,000:

* ``encode_batch`` (the leader, and the floor);
* ``decode_batches`` (a follower, on each Fetch answer: CRC32C and every record);
* ``codec.decode_record`` (every node, per record);
* ``QuorumController.handle_commit`` of the decoded batches (every node: decode and apply).

The last column is each step against ``encode_batch``, the per-record work the floor also does.

    python bench/metadata_apply.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from raft import CLUSTER_ID, record_value

from kafka_rpc.controller.quorum_controller import QuorumController
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import decode_batches, encode_batch

N = 2000
PER_BATCH = 10


def best_us_per_record(fn, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best / N * 1e6


def main() -> None:
    v = record_value(100)
    batches = [encode_batch(i * PER_BATCH, 1, [v] * PER_BATCH, 0) for i in range(N // PER_BATCH)]
    data = b"".join(b.data for b in batches)

    def commit() -> None:
        QuorumController(node_id=1, cluster_id=CLUSTER_ID).handle_commit(batches)

    def encode() -> None:
        for _ in range(N // PER_BATCH):
            encode_batch(0, 1, [v] * PER_BATCH, 0)

    cells = [
        ("encode_batch", encode),
        ("decode_batches", lambda: decode_batches(data)),
        ("codec.decode_record", lambda: [codec.decode_record(v) for _ in range(N)]),
        ("QuorumController.handle_commit", commit),
    ]
    res = {name: best_us_per_record(fn) for name, fn in cells}
    floor = res["encode_batch"]
    print(f"# bench/metadata_apply.py: {N} records of 100 B, batches of {PER_BATCH}, best of 5 "
          f"(process_time), Python {sys.version.split()[0]}\n")  # fmt: skip
    print("| step | us per record | vs encode_batch |")
    print("|---|---:|---:|")
    for name, us in res.items():
        print(f"| {name} | {us:.2f} | {us / floor:.2f} |")


if __name__ == "__main__":
    main()
