"""A PySpark job writing keyed records to Apache Kafka brokers through Spark's own Kafka connector,
then checking them with a Spark read. Run by ``bench/kafka_brokers.py`` (``kafka-rpc bench
--kafka-brokers N``) through ``spark-submit --packages
org.apache.spark:spark-sql-kafka-0-10_<scala>:<version>``::

    spark-submit --master 'local[2]' --packages ... bench/spark_kafka_load.py \\
        --bootstrap 127.0.0.1:9092 --topic load --duration 60 --out DIR

**Write.** Batch ``b`` (one every ``--batch-interval`` seconds, for ``--duration`` seconds after the
first acknowledged one, which also starts Spark's executors and the producer) holds
``--per-key`` records for each of ``--keys`` keys: key ``k<i>``, value ``k<i>:<seq>`` with
``seq = b * per_key + j`` (:func:`batch_rows`; :func:`batch_frame` builds the same rows in the
JVM), so a key's sequence grows from batch to batch. The DataFrame is partitioned by key and
sorted by ``seq`` within each Spark partition, so one Spark task writes all of a key's records
in order, and written with ``df.write.format("kafka")``:
the connector's producer with ``acks=all``, ``enable.idempotence=true`` (at most 5 requests in
flight: Kafka keeps the order per partition through retries). A batch is *acknowledged* when the
write returns: Spark's Kafka writer flushes its producer and fails the task on any failed send.
Batches run one after another, so batch ``b + 1`` is sent only once every record of batch ``b``
was acknowledged. Under ``local[N]`` Spark does not retry a failed task (its Kafka sink is
at-least-once across task retries; here a failed batch is recorded, not retried). The time of
the first acknowledged batch (epoch s) goes to ``<out>/load_started``: the launcher times its
kills from it.

**Verify.** ``spark.read.format("kafka")`` of the whole topic (earliest to latest offsets, which
cover every acknowledged record: ``acks=all`` answers only once the high watermark passed it),
grouped by key in Spark, and per key :func:`check_key`: every record of an acknowledged batch read
(nothing acknowledged lost), no ``seq`` read twice (no duplicates from the idempotent producer),
``seq`` rising with the offset (order per key), the key in one partition only, and nothing read
that no batch sent. Records of a failed batch may or may not be there (unknown outcome).

Writes ``<out>/load.json`` (the batches with their times and outcome, the verification) and exits
0 when the verification passed, 1 when it did not (or nothing was acknowledged).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

#: the producer settings of the connector (``kafka.`` + a Kafka producer config)
PRODUCER = {
    "acks": "all",
    "enable.idempotence": "true",
    "max.in.flight.requests.per.connection": "5",
    "linger.ms": "5",
    "request.timeout.ms": "10000",
    "delivery.timeout.ms": "120000",
    "retry.backoff.ms": "100",
}


def batch_rows(batch: int, keys: int, per_key: int) -> list[tuple[str, int, str]]:
    """The records of batch ``batch``: (key, seq, value) for each of ``keys`` keys and ``per_key``
    sequence numbers ``batch * per_key .. (batch + 1) * per_key - 1``; value ``<key>:<seq>``."""
    out = []
    for j in range(per_key):
        seq = batch * per_key + j
        for k in range(keys):
            out.append((f"k{k}", seq, f"k{k}:{seq}"))
    return out


def check_key(rows, acked: set[int], attempted: set[int], per_key: int) -> dict:
    """Check what was read of one key against the batches. ``rows``: (partition, offset, seq) of
    every record of the key read back (any order); ``acked``: the acknowledged batches;
    ``attempted``: every batch sent (acknowledged or failed). Returns counts: ``read``,
    ``acked_records`` (records of acknowledged batches), ``lost`` (of those, not read),
    ``duplicates`` (reads of a seq beyond its first), ``out_of_order`` (records whose seq is not
    above the previous one at a lower offset of the same partition), ``unexpected`` (seq of no
    attempted batch), ``partitions`` (distinct partitions the key was read from)."""
    rows = sorted(rows)
    seqs = [s for _p, _o, s in rows]
    seen: set[int] = set()
    duplicates = 0
    for s in seqs:
        if s in seen:
            duplicates += 1
        seen.add(s)
    out_of_order = 0
    last: dict[int, int] = {}
    for p, _o, s in rows:
        if p in last and s <= last[p]:
            out_of_order += 1
        last[p] = s
    want = {b * per_key + j for b in acked for j in range(per_key)}
    return {
        "read": len(rows),
        "acked_records": len(want),
        "lost": len(want - seen),
        "duplicates": duplicates,
        "out_of_order": out_of_order,
        "unexpected": sum(1 for s in seen if s // per_key not in attempted),
        "partitions": len({p for p, _o, _s in rows}),
    }


def merge_checks(per_key: dict[str, dict]) -> dict:
    """Sum :func:`check_key`'s counts over the keys; ``keys_in_two_partitions`` counts keys read
    from more than one partition; ``passed`` when nothing was lost, duplicated, out of order,
    unexpected or split over partitions, and something was acknowledged."""
    counts = ("read", "acked_records", "lost", "duplicates", "out_of_order", "unexpected")
    total = dict.fromkeys(counts, 0)
    split = 0
    for c in per_key.values():
        for k in total:
            total[k] += c[k]
        split += c["partitions"] > 1
    total["keys"] = len(per_key)
    total["keys_in_two_partitions"] = split
    total["passed"] = (
        total["acked_records"] > 0
        and total["lost"] == total["duplicates"] == total["out_of_order"] == 0
        and total["unexpected"] == split == 0
    )
    return total


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="keyed acks=all writes to Kafka through Spark's "
        "Kafka connector, then a Spark read that checks them"
    )
    p.add_argument("--bootstrap", required=True, help="the brokers, HOST:PORT[,...]")
    p.add_argument("--topic", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of writing")
    p.add_argument("--batch-interval", type=float, default=0.5, help="s between batch starts")
    p.add_argument("--keys", type=int, default=24)
    p.add_argument("--per-key", type=int, default=20, help="records per key per batch")
    p.add_argument("--tasks", type=int, default=2, help="Spark partitions of each batch")
    p.add_argument("--startup-timeout", type=float, default=300.0,
                   help="s for the first batch to be acknowledged")  # fmt: skip
    return p.parse_args(argv)


def batch_frame(spark, batch: int, keys: int, per_key: int, tasks: int):
    """Batch ``batch`` as a DataFrame (key, value): the rows of :func:`batch_rows`, built in the
    JVM (``spark.range``, no Python worker), hash-partitioned by key into ``tasks`` Spark
    partitions and sorted by ``seq`` within each, so one task writes a key's records in order."""
    from pyspark.sql import functions as F

    return (
        spark.range(0, keys * per_key, 1, tasks)
        .select(
            F.concat(F.lit("k"), (F.col("id") % keys).cast("string")).alias("key"),
            (F.lit(batch * per_key) + F.floor(F.col("id") / keys)).cast("long").alias("seq"),
        )
        .repartition(tasks, "key")
        .sortWithinPartitions("seq")
        .select("key", F.concat("key", F.lit(":"), F.col("seq").cast("string")).alias("value"))
    )


def _write_batches(spark, args, out: Path) -> list[dict]:
    """Write batches until ``--duration`` seconds after the first acknowledged one (the first
    batch also starts Spark's executors and the producer: at most ``--startup-timeout`` s for
    one to be acknowledged); each batch's outcome and times."""
    kafka = {f"kafka.{k}": v for k, v in PRODUCER.items()}
    kafka["kafka.bootstrap.servers"] = args.bootstrap
    batches: list[dict] = []
    begun = time.time()
    first_ack: float | None = None
    acked_at = 0  # the batch number due at first_ack + 0
    b = 0
    while True:
        now = time.time()
        if first_ack is None and now - begun > args.startup_timeout:
            print(f"no batch acknowledged in {args.startup_timeout:g} s", flush=True)
            break
        if first_ack is not None:
            if now - first_ack >= args.duration:
                break
            due = first_ack + (b - acked_at) * args.batch_interval
            if due > now:
                time.sleep(due - now)
        df = batch_frame(spark, b, args.keys, args.per_key, args.tasks)
        t0 = time.time()
        error = None
        try:
            df.write.format("kafka").options(**kafka).option("topic", args.topic).save()
        except Exception as exc:
            error = str(exc).strip().splitlines()[0][:400] if str(exc).strip() else repr(exc)
        t1 = time.time()
        n = args.keys * args.per_key
        batches.append({"batch": b, "records": n, "start": t0, "end": t1, "ok": error is None,
                        "error": error})  # fmt: skip
        if error is None and first_ack is None:
            first_ack, acked_at = t1, b + 1
            tmp = out / "load_started.tmp"
            tmp.write_text(f"{t1}\n")
            tmp.rename(out / "load_started")
        print(f"batch {b}: {n} records in {t1 - t0:.2f} s"
              + ("" if error is None else f" FAILED: {error}"), flush=True)  # fmt: skip
        b += 1
    return batches


def _verify(spark, args, batches: list[dict]) -> dict:
    from pyspark.sql import functions as F

    acked = {x["batch"] for x in batches if x["ok"]}
    attempted = {x["batch"] for x in batches}
    per_key = args.per_key
    read = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .select(
            F.col("key").cast("string").alias("key"),
            F.col("value").cast("string").alias("value"),
            "partition",
            "offset",
        )
    )
    pairs = read.rdd.map(lambda r: (r.key, (r.partition, r.offset, int(r.value.rsplit(":", 1)[1]))))
    keys = spark.sparkContext.parallelize([(f"k{k}", 0) for k in range(args.keys)])
    checked = (
        pairs.groupByKey()
        .rightOuterJoin(keys)
        .map(lambda kv: (kv[0], check_key(kv[1][0] or (), acked, attempted, per_key)))
        .collectAsMap()
    )
    # records under a key no batch wrote (none expected) count as unexpected
    stray = pairs.filter(lambda kv: kv[0] not in {f"k{k}" for k in range(args.keys)}).count()
    out = merge_checks(checked)
    out["unexpected"] += stray
    out["passed"] = out["passed"] and stray == 0
    out["partitions_read"] = read.select("partition").distinct().count()
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("kafka-rpc kafka brokers load").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    result: dict = {"config": vars(args), "spark": spark.version, "producer": PRODUCER}
    try:
        t0 = time.time()
        result["batches"] = _write_batches(spark, args, out)
        result["write_s"] = time.time() - t0
        t1 = time.time()
        result["verification"] = _verify(spark, args, result["batches"])
        result["verify_s"] = time.time() - t1
    finally:
        (out / "load.json").write_text(json.dumps(result, indent=1) + "\n")
        spark.stop()
    v = result["verification"]
    failed = sum(1 for x in result["batches"] if not x["ok"])
    print(
        f"batches {len(result['batches'])} (failed {failed}); read {v['read']}, acknowledged "
        f"{v['acked_records']}, lost {v['lost']}, duplicates {v['duplicates']}, out of order "
        f"{v['out_of_order']}, unexpected {v['unexpected']}: "
        f"{'PASSED' if v['passed'] else 'FAILED'}",
        flush=True,
    )
    return 0 if v["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
