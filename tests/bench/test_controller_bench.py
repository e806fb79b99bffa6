"""bench/controller.py: ``--quick`` runs both parts end to end (``kafka-rpc serve`` processes, a
load process and floor processes on loopback) and prints a parsable Markdown table for each, with
a closing note and ``--json``; and the floor appends the very bytes the controller would write
(the records of ``replication.create_topics`` / ``producer_ids.allocate_producer_ids``)."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kafka_rpc.controller import producer_ids, replication
from kafka_rpc.controller.base import ControllerContext
from kafka_rpc.controller.image import EMPTY
from kafka_rpc.controller.replay import replay
from kafka_rpc.protocol import codec
from tests.bench.tables import number, tables

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "controller.py"
R = codec.message_class


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_controller", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def image_with_brokers(ids):
    """An image where ``ids`` are registered and unfenced (as the nodes' own brokers are)."""
    img = R("FeatureLevelRecord")(name="metadata.version", feature_level=25)
    image = replay(EMPTY, img, 0)
    off = 1
    for bid in ids:
        reg = R("RegisterBrokerRecord")(broker_id=bid, incarnation_id=uuid.uuid4(),
                                        broker_epoch=off, fenced=True,
                                        log_dirs=(bench_module().broker_dir(bid),))  # fmt: skip
        image = replay(image, reg, off)
        image = replay(image, R("UnfenceBrokerRecord")(id=bid, epoch=off), off + 1)
        off += 2
    return image


@pytest.mark.parametrize("brokers", [[1], [1, 2, 3]])
def test_floor_topic_records_are_the_controllers(brokers):
    cb = bench_module()
    rf = len(brokers)
    image = image_with_brokers(brokers)
    m = codec.module("CreateTopicsRequest")
    for seed in range(20):
        name = cb.topic_name(seed % 16, seed)
        req = m.CreateTopicsRequest(
            topics=(m.CreatableTopic(name=name, num_partitions=10, replication_factor=rf),),
            timeout_ms=30000,
        )
        ctx = ControllerContext(now_ms=0, next_offset=100, cluster_id="c",
                                  rng=random.Random(seed))  # fmt: skip
        res = replication.create_topics(image, req, ctx)
        assert res.response.topics[0].error_code == 0
        want = [codec.encode_record(r) for r in res.records]
        got = cb.topic_records(name, brokers, rf, random.Random(seed))
        assert got == want
        assert len(got) == 11


def test_floor_producer_ids_record_is_the_controllers():
    cb = bench_module()
    image = image_with_brokers([1000])
    epoch = image.brokers[1000].epoch
    req = R("AllocateProducerIdsRequest")(broker_id=1000, broker_epoch=epoch)
    for _ in range(3):
        ctx = ControllerContext(now_ms=0, next_offset=100, cluster_id="c")
        res = producer_ids.allocate_producer_ids(image, req, ctx)
        first = res.response.producer_id_start
        assert cb.producer_ids_records(1000, epoch, first) == [
            codec.encode_record(r) for r in res.records
        ]
        (rec,) = res.records
        image = replay(image, rec, image.last_offset + 1)


@pytest.mark.slow
@pytest.mark.integration
def test_quick_runs_and_prints_tables(tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--dir", str(tmp_path), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=400,  # a bound; ~45 s alone, far more beside other tests
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    t = tables(proc.stdout)
    assert sorted(t) == ["a", "b"], proc.stdout
    assert proc.stdout.count("Method:") == 2
    for part in "ab":
        names = [r[0] for r in t[part]]
        assert [n.split(",")[0] for n in names] == ["1 node", "3 nodes"], names
        for row in t[part]:
            assert "errors" not in row[0], row
            ours, floor, ratio, o50, o99, f50, f99 = (number(c) for c in row[1:8])
            assert ours > 0 and floor > 0 and ratio > 0, row
            assert 0 < o50 <= o99 and 0 < f50 <= f99, row
    note = proc.stdout.split("### Closing note", 1)[1]
    assert len(re.findall(r"of the floor .*; p99 [\d.]+ ms \(floor [\d.]+ ms\)", note)) == 4
    raw = json.loads(out.read_text())
    for part in "ab":
        assert len(raw[part]) == 2
        for sides in raw[part].values():
            for side in ("ours", "floor"):
                (x,) = sides[side]
                assert x["ops"] > 0 and x["errors"] == 0, x
    # every process the bench started is gone (the scratch directory is removed at the end)
    assert not list(tmp_path.glob("controller-bench-*"))
