"""The Spark load pipeline (bench/diskless_load.py, bench/report.py, `kafka-rpc bench`).

Fast tests check the pieces without Spark (histograms, distributions, the per-partition verifier,
the roles against an in-process server, the report); one slow test runs the whole pipeline through
real spark-submit against a `kafka-rpc serve` subprocess on ephemeral ports.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import diskless_load as dl  # noqa: E402
from bench import report  # noqa: E402
from kafka_rpc.protocol import codec  # noqa: E402

COMMIT_BATCHES_KEY = codec.message_class("CommitBatchesRequest").__api_key__

# A tiny load: a few seconds, 2 topics x 4 partitions, small objects, many retries.
TINY = [
    "--topics",
    "2",
    "--partitions-per-topic",
    "4",
    "--brokers",
    "2",
    "--consumers",
    "1",
    "--commit-interval-ms",
    "50",
    "--batches-per-object",
    "lognormal:6:0.5:1:20",
    "--partitions-per-object",
    "lognormal:4:0.5:1:8",
    "--batch-bytes",
    "uniform:100:2000",
    "--records-per-batch",
    "uniform:1:10",
    "--producers-per-broker",
    "100",
    "--new-producers-per-s",
    "600",
    "--retry-fraction",
    "0.2",
    "--retention-interval-ms",
    "300",
    "--progress",
    "plain",
]


# ------------------------------------------------------------------ pieces


def test_histogram_buckets_and_quantiles():
    assert dl.bucket_of(0.5) == 0
    assert dl.bucket_of(1.0) == 1
    assert dl.bucket_of(1e12) == dl.NBUCKETS - 1
    for us in (3.0, 47.0, 999.0, 12_345.0, 2.5e6):
        i = dl.bucket_of(us)
        assert dl.bucket_upper_us(i - 1) <= us < dl.bucket_upper_us(i)
    rec = dl.Recorder()
    for k in range(1, 1001):  # 1..1000 ms
        rec.record("X", 0.0, k / 1000.0, [0, 3] if k == 5 else ())
    s = rec.apis["X"]
    assert s.n == 1000 and s.errors == {"3": 1}
    for q, want_ms in ((0.5, 500), (0.99, 990), (0.999, 999)):
        got = dl.quantile_from_counts(s.hist, q) / 1000
        assert want_ms <= got <= want_ms * 1.05
    assert dl.quantile_from_counts([0] * 5, 0.5) is None
    (row,) = rec.rows({"role": "r"}, 0.0, 1.0)
    assert sum(row["series"]) == 1000 and sum(row["hist"]) == 1000


def test_distributions():
    rng = random.Random(1)
    assert dl.Dist("const:7").draw(rng) == 7
    assert all(3 <= dl.Dist("uniform:3:5").draw(rng) <= 5 for _ in range(100))
    d = dl.Dist("lognormal:100:0.8:1:1600")
    xs = sorted(d.draw(rng) for _ in range(2001))
    assert 80 <= xs[1000] <= 120 and xs[0] >= 1 and xs[-1] <= 1600
    with pytest.raises(ValueError):
        dl.Dist("pareto:1")


def test_acks_roundtrip():
    a = array("q", [3, 10, 5, 100, 0, 7, 0, -1, 3, 10, 5, 100, 0, 7, dl.FLAG_DUP, 10])
    assert list(dl.unpack_acks(dl.pack_acks(a))) == [
        (3, 10, 5, 100, 0, 7, 0, -1),
        (3, 10, 5, 100, 0, 7, dl.FLAG_DUP, 10),
    ]


def _ack(off, cnt, pid=-1, ep=-1, seq=-1, flags=0, orig=-1):
    return (0, off, cnt, pid, ep, seq, flags, orig)


def test_check_partition_clean_log_with_retention_and_duplicates():
    # batches [0,4] [5,9] [10,11]; LSO 3 (inside the first batch), HW 12
    batches = [(0, 4, 7, 0, 0), (5, 9, -1, -1, -1), (10, 11, 7, 0, 5)]
    acks = [
        _ack(0, 5, 7, 0, 0),
        _ack(5, 5),
        _ack(10, 2, 7, 0, 5),
        _ack(0, 5, 7, 0, 0, dl.FLAG_DUP, 0),
    ]
    r = dl.check_partition(3, 12, batches, acks)
    bad = {k: v for k, v in r.items() if k in dl.VERIFY_FAIL_KEYS + ("phantoms",) and v}
    assert bad == {} and r["acks_checked"] == 3 and r["dup_checked"] == 1
    # everything below the LSO is skipped, not lost
    r = dl.check_partition(10, 12, batches[2:], acks)
    assert r["lost"] == 0 and r["below_lso"] == 2
    # an empty log
    assert dl.check_partition(12, 12, [], [])["gaps"] == 0


@pytest.mark.parametrize(
    ("lso", "hw", "batches", "acks", "key"),
    [
        (0, 10, [(0, 4, -1, -1, -1), (6, 9, -1, -1, -1)], [_ack(0, 5), _ack(6, 4)], "gaps"),
        (0, 10, [(0, 4, -1, -1, -1)], [_ack(0, 5)], "gaps"),  # short of the HW
        (0, 10, [(0, 5, -1, -1, -1), (5, 9, -1, -1, -1)], [_ack(0, 6), _ack(5, 5)], "overlaps"),
        (0, 5, [(0, 4, -1, -1, -1)], [_ack(0, 5), _ack(5, 3)], "lost"),  # acked, not there
        (0, 5, [(0, 4, -1, -1, -1)], [_ack(0, 4)], "lost"),  # wrong record count
        (0, 5, [(0, 4, 9, 0, 0)], [_ack(0, 5, 9, 0, 1)], "lost"),  # another producer's batch
        (
            0,
            10,
            [(0, 4, 9, 0, 0), (5, 9, 9, 0, 0)],
            [_ack(0, 5, 9, 0, 0), _ack(5, 5, 9, 0, 0)],
            "duplicated",
        ),  # one producer batch written twice
        (
            0,
            5,
            [(0, 4, 9, 0, 0)],
            [_ack(0, 5, 9, 0, 0), _ack(3, 5, 9, 0, 0, dl.FLAG_DUP, 0)],
            "dup_offset_mismatch",
        ),
        (0, 5, [(0, 4, -1, -1, -1)], [], "phantoms"),
    ],
)
def test_check_partition_detects(lso, hw, batches, acks, key):
    r = dl.check_partition(lso, hw, batches, acks)
    assert r[key] >= 1, r
    assert r["examples"]


def test_verdict():
    assert dl.verdict({"lost": 0, "phantoms": 2}, unknown_outcome=2) == []
    assert dl.verdict({"phantoms": 3}, unknown_outcome=2)
    assert dl.verdict({"lost": 1}, 0) == ["lost=1"]


def test_producer_id_checks():
    grants = [("broker-1", 1000, 1999), ("broker-0", 0, 999), ("broker-0", 2000, 2999)]
    table = dl.block_table(grants)
    assert [b[0] for b in table] == [0, 1000, 2000]
    assert dl.block_owner(table, 0) == (0, 999, "broker-0")
    assert dl.block_owner(table, 1999)[2] == "broker-1"
    assert dl.block_owner(table, 3000) is None and dl.block_owner(table, -1) is None
    assert dl.block_owner([], 5) is None
    assert dl.check_blocks(table)["block_overlaps"] == 0
    # a range handed out twice
    r = dl.check_blocks(dl.block_table(grants + [("broker-2", 1500, 2499)]))
    assert r["block_overlaps"] == 2 and r["producer_id_blocks"] == 4 and r["examples"]

    ok = dl.check_pid_uses(table, [(5, ["broker-0"]), (2001, ["broker-0"]), (1000, ["broker-1"])])
    assert (ok["pids_checked"], ok["pid_outside_block"], ok["pid_shared"]) == (3, 0, 0)
    assert ok["blocks_used"] == [("broker-0", 0), ("broker-0", 2000), ("broker-1", 1000)]
    # an id in another role's block, an id in no block, an id used by two roles
    bad = dl.check_pid_uses(table, [(1001, ["broker-0"]), (4000, ["broker-1"])])
    assert bad["pid_outside_block"] == 2 and bad["pid_shared"] == 0
    shared = dl.check_pid_uses(table, [(7, ["broker-0", "broker-1", "broker-0"])])
    assert shared["pid_shared"] == 1 and shared["pid_outside_block"] == 1
    assert shared["examples"]
    assert list(dl.unpack_pids(dl.pack_pids({3, 1, 2}))) == [1, 2, 3]
    assert list(dl.unpack_pids(b"")) == []

    # a producer id read back from the log that lies in no granted block
    batches = [(0, 4, 5, 0, 0), (5, 9, 4000, 0, 0), (10, 11, -1, -1, -1)]
    acks = [_ack(0, 5, 5, 0, 0), _ack(5, 5, 4000, 0, 0), _ack(10, 2)]
    owner = lambda pid: dl.block_owner(table, pid)  # noqa: E731
    r = dl.check_partition(0, 12, batches, acks, owner)
    assert r["log_pid_outside_block"] == 1 and r["lost"] == 0 and r["examples"]
    assert dl.check_partition(0, 12, batches, acks)["log_pid_outside_block"] == 0
    assert dl.verdict({"pid_shared": 1}, 0) == ["pid_shared=1"]


def test_plan_spreads_kinds():
    cfg = {"brokers": 3, "consumers": 2, "retention": True}
    plan = dl.build_plan(cfg, 2)
    assert sorted(r for t in plan for r in t) == sorted(
        [
            ("broker", 0),
            ("broker", 1),
            ("broker", 2),
            ("consumer", 0),
            ("consumer", 1),
            ("retention", 0),
        ]
    )
    assert all({k for k, _ in t} & {"broker"} for t in plan)


# ------------------------------------------------------------------ roles, in process


def _cfg(running, **kw):
    args = dl.parse_args(
        [
            "--server",
            f"127.0.0.1:{running.port()}",
            "--controller",
            f"127.0.0.1:{running.port('CONTROLLER')}",
            "--duration",
            "1.5",
            *TINY,
        ]
    )
    cfg = dl.make_cfg(args)
    cfg.update(kw)
    return cfg


async def _with_cluster_id(cfg):
    """What the driver does before the load job: the cluster id, and no clash of broker ids."""
    cfg["cluster_id"], live = await dl.cluster_info(cfg)
    ours = range(cfg["broker_id_base"], cfg["broker_id_base"] + cfg["brokers"])
    assert live and not set(live) & set(ours)
    return cfg


@pytest.mark.integration
async def test_roles_then_verification_in_process(tmp_path):
    """Brokers, a consumer and retention against an in-process server; every acknowledged
    commit reads back; a forged ack is reported lost. The brokers register with the controller
    and take their producer ids from it; the server grants one block per second per broker, and
    broker 1 starts producers fast enough to hit that limit: it is throttled, goes on committing,
    and uses ids from a second block. Every id used lies in a block granted to its role."""
    import asyncio

    from tests.integration.conftest import start_server

    running = await start_server(tmp_path, **{"producer.ids.allocation.max.per.second": "1"})
    try:
        cfg = await _with_cluster_id(_cfg(running))
        recs = [dl.Recorder() for _ in range(4)]
        outs = await asyncio.gather(
            dl.run_broker(cfg, 0, recs[0]),
            dl.run_broker(dict(cfg, new_producers_per_s=4000), 1, recs[1]),
            dl.run_consumer(cfg, 0, recs[2]),
            dl.run_retention(cfg, 0, recs[3]),
        )
        b = outs[0]["stats"]
        assert b["commits"] > 5 and b["batches"] > 0 and b["dup_ok"] > 0
        assert b["dup_offset_mismatch"] == b["dup_new_copy"] == b["rejected"] == 0
        assert outs[2]["stats"]["batches_read"] > 0 and outs[2]["stats"]["anomalies"] == 0
        assert outs[3]["stats"]["records_deleted"] > 0
        assert "CommitBatches" in recs[0].apis and "FindDisklessBatches" in recs[2].apis

        # producer ids: registered brokers, blocks granted, ids only from them
        image = running.server.controller.image
        grants = []
        for i, o in enumerate(outs[:2]):
            st = o["stats"]
            bid = cfg["broker_id_base"] + i
            assert st["registrations"] == 1 and st["heartbeats"] >= 1
            assert st["controlled_shutdowns"] == 1 and st["heartbeat_errors"] == 0
            assert bid in image.brokers and image.brokers[bid].fenced  # WantFence: never unfenced
            assert o["blocks"] and st["producer_ids"] > 0 and st["producers_replaced"] > 0
            assert "AllocateProducerIds" in recs[i].apis
            grants += [(f"broker-{i}", first, last) for first, last in o["blocks"]]
        assert image.producer_ids.next_producer_id > max(last for _, _, last in grants)
        hot = outs[1]["stats"]
        assert hot["pid_throttled"] >= 1 and hot["pid_not_ready"] >= 1, hot
        assert recs[1].apis["AllocateProducerIds"].errors.get("89", 0) >= 1  # THROTTLING_QUOTA
        table = dl.block_table(grants)
        assert dl.check_blocks(table)["block_overlaps"] == 0
        uses: dict[int, list[str]] = {}
        for i, o in enumerate(outs[:2]):
            for pid in dl.unpack_pids(o["pids"]):
                uses.setdefault(pid, []).append(f"broker-{i}")
        chk = dl.check_pid_uses(table, uses.items())
        assert chk["pids_checked"] > 0 and chk["pid_outside_block"] == chk["pid_shared"] == 0, chk
        # the throttled broker survived the limit: ids from more than one block went out
        assert len([u for u in chk["blocks_used"] if u[0] == "broker-1"]) >= 2, chk

        acks: dict[int, list] = {}
        for o in outs[:2]:
            for a in dl.unpack_acks(o["acks"]):
                acks.setdefault(a[0], []).append(a)
        client = await dl.connect(cfg, "verify")
        tids = dl.topic_ids(cfg)
        totals = {
            "lost": 0,
            "acks_checked": 0,
            "gaps": 0,
            "overlaps": 0,
            "phantoms": 0,
            "log_pid_outside_block": 0,
        }
        for p in range(cfg["topics"] * cfg["partitions_per_topic"]):
            lso, hw, batches, err = await dl.read_partition(cfg, client, tids, p)
            assert not err
            r = dl.check_partition(
                lso, hw, batches, acks.get(p, []), lambda pid: dl.block_owner(table, pid)
            )
            for k in totals:
                totals[k] += r[k]
        assert totals["acks_checked"] > 0
        assert {k: v for k, v in totals.items() if k != "acks_checked"} == {
            "lost": 0,
            "gaps": 0,
            "overlaps": 0,
            "phantoms": 0,
            "log_pid_outside_block": 0,
        }
        # a forged acknowledgement past the high watermark is reported lost
        lso, hw, batches, _ = await dl.read_partition(cfg, client, tids, 0)
        assert dl.check_partition(lso, hw, batches, [_ack(hw + 1, 3)])["lost"] == 1
        await client.close()
    finally:
        await running.stop()


@pytest.mark.integration
async def test_bench_broker_registers_heartbeats_and_registers_again(tmp_path):
    """A bench broker against the real controller: registered (fenced, with its fake
    endpoint), heartbeats go on, a broker with another incarnation is refused while its session
    is valid (Kafka's DUPLICATE_BROKER_REGISTRATION), an UnregisterBroker makes the next
    heartbeat STALE_BROKER_EPOCH and it registers again with a new epoch; its producer-id
    manager then gets a block with that epoch; stop() ends with a controlled shutdown."""
    import uuid

    from kafka_rpc.protocol.errors import ErrorCode, KafkaError
    from tests.integration.conftest import start_server
    from tests.waiting import until

    running = await start_server(tmp_path)
    try:
        cfg = await _with_cluster_id(_cfg(running, heartbeat_interval_ms=20))
        stats: dict = {}
        ctl = dl.BenchBroker(cfg, cfg["broker_id_base"], dl.Recorder(), stats)
        try:
            await ctl.start()
            first_epoch = ctl.broker_epoch
            reg = running.server.controller.image.brokers[ctl.broker_id]
            assert reg.epoch == first_epoch and reg.fenced
            assert reg.incarnation_id == ctl.incarnation_id
            assert [e.host for e in reg.endpoints] == [f"bench-broker-{ctl.broker_id}.invalid"]

            await until(lambda: stats["heartbeats"] >= 3, "heartbeats", timeout=10.0)
            # another incarnation cannot take the id while ours heartbeats (fenced or not)
            from kafka_rpc.client import KafkaRpcClient

            other = dl.BenchBroker(cfg, ctl.broker_id, dl.Recorder(), {})
            other.incarnation_id = uuid.uuid4()
            client = await KafkaRpcClient.connect(cfg["controller"])
            try:
                resp = await client.request(other.registration_request())
                assert resp.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
                # the operator unregisters it: the next heartbeat is stale, it registers again
                unreg = dl._codec().message_class("UnregisterBrokerRequest")
                assert (await client.request(unreg(broker_id=ctl.broker_id))).error_code == 0
            finally:
                await client.close()
            await until(lambda: stats["reregistrations"] >= 1, "re-registration", timeout=10.0)
            await until(lambda: ctl.broker_epoch > first_epoch, "new epoch", timeout=10.0)
            assert running.server.controller.image.brokers[ctl.broker_id].epoch == (
                ctl.broker_epoch
            )
            # producer ids with the current epoch
            with pytest.raises(KafkaError) as exc:  # the first call always fails
                ctl.producer_ids.generate_producer_id()
            assert exc.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            await until(lambda: ctl.blocks, "a producer-id block", timeout=10.0)
            assert ctl.producer_ids.generate_producer_id() == ctl.blocks[0][0]
        finally:
            await ctl.stop()
        assert stats["controlled_shutdowns"] == 1
    finally:
        await running.stop()


class DroppingProxy:
    """A loopback TCP proxy in front of a server that loses the answers of chosen CommitBatches
    (``drop``: 1-based numbers, counted over all connections): instead of forwarding such a
    response it closes both sides, after the server committed. Requests are forwarded as they
    are; responses are matched to their request's API key by correlation id."""

    def __init__(self, drop: set[int]) -> None:
        self.drop = drop
        self.upstream = 0
        self.commits = 0
        self.dropped = 0
        self._server = None

    async def start(self) -> int:
        import asyncio

        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader, writer) -> None:
        import asyncio

        ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.upstream)
        apis: dict[int, int] = {}

        async def frame(r) -> bytes:
            head = await r.readexactly(4)
            return head + await r.readexactly(int.from_bytes(head, "big"))

        async def requests() -> None:
            while True:
                f = await frame(reader)
                apis[int.from_bytes(f[8:12], "big", signed=True)] = int.from_bytes(f[4:6], "big")
                uwriter.write(f)
                await uwriter.drain()

        async def responses() -> None:
            while True:
                f = await frame(ureader)
                key = apis.pop(int.from_bytes(f[4:8], "big", signed=True), None)
                if key == COMMIT_BATCHES_KEY:
                    self.commits += 1
                    if self.commits in self.drop:
                        self.dropped += 1
                        return  # the answer is lost with the connection
                writer.write(f)
                await writer.drain()

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(responses())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            for w in (writer, uwriter):
                w.close()


@pytest.mark.integration
async def test_a_lost_commit_answer_is_resent_and_answered_is_duplicate(tmp_path):
    """Two CommitBatches answers are lost after the server committed them (a proxy closes the
    connection instead of forwarding them): the broker role finds the coordinator again and
    resends the idempotent batches of those objects with the same producer ids, epochs and
    sequences in a new object; every one is answered IsDuplicate (none written twice), and is
    acknowledged at the offsets the lost answer carried; the non-idempotent ones are of unknown
    outcome, never acknowledged, and are exactly the unacknowledged batches verification finds."""
    import asyncio

    from tests.integration.conftest import start_server

    proxy = DroppingProxy(drop={4, 9})
    port = await proxy.start()
    running = await start_server(
        tmp_path, **{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"}
    )
    proxy.upstream = running.port()
    try:
        cfg = await _with_cluster_id(_cfg(running, server=f"127.0.0.1:{port}", duration=1.5))
        rec = dl.Recorder()
        out = await dl.run_broker(cfg, 0, rec)
        st = out["stats"]
        assert proxy.dropped == 2 and proxy.commits > 9, (proxy.commits, st)
        assert rec.apis["CommitBatches"].errors.get("KafkaConnectionError") == 2
        assert st["rediscoveries"] == 2 and st["resent_dup"] > 0, st
        assert st["resent_fresh"] == st["gave_up_batches"] == st["epoch_bumps"] == 0, st
        assert st["unknown_outcome_batches"] > 0 and st["unexpected_dup"] == 0, st
        assert st["dup_offset_mismatch"] == st["dup_new_copy"] == 0, st

        grants = [("broker-0", first, last) for first, last in out["blocks"]]
        nparts = cfg["topics"] * cfg["partitions_per_topic"]
        acks: dict[int, list] = {p: [] for p in range(nparts)}
        for a in dl.unpack_acks(out["acks"]):
            acks[a[0]].append(a)
        (ver,) = await asyncio.to_thread(
            dl.verify_task, dict(cfg, retention=False), list(acks.items()),
            dl.block_table(grants),
        )  # fmt: skip
        assert ver["lost"] == ver["duplicated"] == ver["gaps"] == ver["overlaps"] == 0, ver
        # the lost commits landed: their non-idempotent batches are in the logs, unacknowledged
        assert ver["phantoms"] == st["unknown_outcome_batches"], (ver, st)
        assert dl.verdict(ver, st["unknown_outcome_batches"]) == []
    finally:
        await running.stop()
        await proxy.close()


def test_report_from_synthetic_results(tmp_path):
    hist = [0] * dl.NBUCKETS
    hist[dl.bucket_of(1500)] = 90
    hist[dl.bucket_of(9000)] = 10
    api = {
        "requests": 100,
        "rate_per_s": 10.0,
        "roles": 1,
        "mean_us": 2000.0,
        "max_us": 9000.0,
        "first_start": 0.0,
        "last_end": 10.0,
        "p50": 1500.0,
        "p95": 9000.0,
        "p99": 9000.0,
        "p99_9": 9000.0,
        "errors": {"3": 1},
    }
    results = {
        "run_id": "t",
        "passed": True,
        "failures": [],
        "master": "local[2]",
        "tasks": 2,
        "plan": [],
        "config": vars(dl.parse_args(["--server", "x:1"])) | {"run_id": "t"},
        "timing": {"total_s": 1.0},
        "apis": {"CommitBatches": api},
        "kinds": {"broker": {"batches": 50, "rate_window_s": 10.0}},
        "verification": {"lost": 0, "duplicated": 0, "examples": []},
        "histograms": {"CommitBatches": hist},
        "throughput": {"CommitBatches": [[100, 5], [101, 5]]},
        "bucket_scheme": {"buckets_per_decade": dl.BUCKETS_PER_DECADE},
    }
    paths = report.write_all(results, tmp_path)
    for p in paths.values():
        assert Path(p).stat().st_size > 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["headline"]["commits_per_s"] == 10.0 and data["headline"]["batches_per_s"] == 5.0
    md = (tmp_path / "report.md").read_text()
    assert "| CommitBatches | 100 | 10.0 |" in md and "latency_cdf.png" in md
    assert "PASSED" in report.console_summary(results)


def test_failover_summary_and_report_of_a_cluster_run(tmp_path):
    """The figures of a --cluster run's kill: before/after rates, the commit gap spanning the
    kill, seconds with no acknowledged commit, errors summed per code; written into
    results.json and report.md."""
    acked = [[100 + s, 0 if 5 <= s < 8 else 20] for s in range(12)]  # kill at 104.5
    results = {
        "run_id": "f",
        "passed": True,
        "failures": [],
        "master": "local[2]",
        "tasks": 2,
        "plan": [],
        "config": vars(dl.parse_args(["--server", "a:1,b:2"])) | {"run_id": "f"},
        "timing": {"total_s": 1.0},
        "apis": {
            "CommitBatches": {
                "requests": 200,
                "rate_per_s": 17.0,
                "mean_us": 1.0,
                "max_us": 1.0,
                "errors": {"16": 3, "KafkaConnectionError": 1},
            },
            "FindCoordinator": {
                "requests": 9,
                "rate_per_s": 1.0,
                "mean_us": 1.0,
                "max_us": 1.0,
                "errors": {"15": 2, "KafkaConnectionError": 2},
            },
        },  # fmt: skip
        "kinds": {"broker": {"batches": 50, "rate_window_s": 10.0, "resent_batches": 4}},
        "verification": {"lost": 0, "duplicated": 0, "examples": []},
        "histograms": {"CommitBatches": [0, 1] + [0] * (dl.NBUCKETS - 2)},
        "throughput": {"CommitBatches": acked, report.ACKED_COMMITS: acked},
        "bucket_scheme": {"buckets_per_decade": dl.BUCKETS_PER_DECADE},
        "cluster_events": [
            {"event": "kill", "t": 104.5, "node": 2},
            {"event": "new_leader", "t": 106.0, "node": 3},
            {"event": "restart", "t": 109.5, "node": 2},
            {"event": "restarted", "t": 111.0, "node": 2},
        ],
        "commit_gaps": {"broker-0": [104.2, 108.1], "broker-1": [100.0, 100.5]},
    }
    f = report.failover_summary(results)
    assert f["kill_s"] == 4.5 and f["killed_node"] == 2 and f["new_leader"] == 3
    assert f["new_leader_s"] == 6.0 and f["restarted_s"] == 11.0
    assert f["acked_commits_per_s_before"] == 20 and f["acked_commits_per_s_after"] == 20
    assert f["gap_s"] == pytest.approx(3.9) and f["recovered_s"] == pytest.approx(3.6)
    assert f["zero_seconds"] == 3
    assert f["errors"] == {"15": 2, "16": 3, "KafkaConnectionError": 3}
    assert report.failover_summary(dict(results, cluster_events=[])) is None
    report.write_all(results, tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["failover"]["zero_seconds"] == 3
    md = (tmp_path / "report.md").read_text()
    assert "## Failover" in md and "SIGKILLed at 4.5 s" in md and "16: 3" in md
    assert (tmp_path / "throughput.png").stat().st_size > 0


def test_error_codes_walks_nested_entries():
    from kafka_rpc.protocol import codec

    m = codec.module("ListDisklessOffsetsResponse")
    resp = m.ListDisklessOffsetsResponse(responses=(m.ListDisklessOffsetsTopicResult(
        topic_id=dl.topic_ids({"run_id": "x", "topics": 1})[0],
        partitions=(
            m.ListDisklessOffsetsTopicPartitionResult(partition_index=0, error_code=16),
            m.ListDisklessOffsetsTopicPartitionResult(partition_index=1, error_code=0),
        )),))  # fmt: skip
    assert dl.error_codes(resp) == [16, 0]
    assert dl.addresses_of(" a:1, b:2 ,") == ["a:1", "b:2"]
    assert dl.controller_defaults("h1:1,h2:2,h1:3")[0].count(",") == 1


# ------------------------------------------------------------------ end to end through Spark


@pytest.mark.slow
@pytest.mark.integration
def test_spark_pipeline_end_to_end(tmp_path):
    """`kafka-rpc bench --start-server`: a few seconds of load on local[2] through real
    spark-submit, then the verification job; exit 0, report files, nothing lost/duplicated."""
    # No skip: CI must install the bench extra (pip install -e '.[test,bench]') and have Java 17.
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafka_rpc.cli",
            "bench",
            "--master",
            "local[2]",
            "--duration",
            "3",
            "--start-server",
            "--server-cpus",
            "none",
            "--out",
            str(out),
            "--",
            *TINY,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    log = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.returncode == 0, log
    for name in ("results.json", "report.md", "latency_cdf.png", "throughput.png"):
        assert (out / name).stat().st_size > 0, name
    r = json.loads((out / "results.json").read_text())
    assert r["passed"], r["failures"]
    v = r["verification"]
    assert v["lost"] == v["duplicated"] == v["dup_offset_mismatch"] == 0
    assert v["gaps"] == v["overlaps"] == 0 and v["partitions"] == 8
    assert v["acks_checked"] > 0 and v["dup_checked"] > 0
    assert r["apis"]["CommitBatches"]["requests"] > 0 and r["headline"]["commits_per_s"] > 0
    assert r["apis"]["FindDisklessBatches"]["requests"] > 0
    assert r["apis"]["CommitBatches"]["p99"] > 0
    assert r["kinds"]["broker"]["dup_ok"] > 0
    # producer ids: every broker role registered and got blocks; ids only from them
    pid = r["producer_ids"]
    assert sorted(pid["blocks_per_role"]) == ["broker-0", "broker-1"]
    assert all(n >= 1 for n in pid["blocks_per_role"].values()), pid
    assert pid["blocks"] == sum(pid["blocks_per_role"].values()) == v["producer_id_blocks"]
    assert pid["ids_used"] == v["pids_checked"] > 0 and pid["ids_generated"] >= pid["ids_used"]
    assert v["pid_outside_block"] == v["pid_shared"] == v["block_overlaps"] == 0
    assert v["log_pid_outside_block"] == 0
    assert r["apis"]["AllocateProducerIds"]["requests"] >= pid["blocks"]
    assert r["apis"]["AllocateProducerIds"]["p99"] > 0 and pid["allocate_p99_us"] > 0
    assert r["kinds"]["broker"]["registrations"] >= 2
    assert "BrokerHeartbeat" in r["apis"]
    assert "producer ids (KIP-730)" in (out / "report.md").read_text()
