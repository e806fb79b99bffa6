"""The load roles of bench/diskless_load.py against a real 3-node cluster with a SIGKILL of the
coordinator leader (``kafka_rpc.testbed.bench_cluster``, what ``kafka-rpc bench
--cluster 3`` starts).

Three ``kafka-rpc serve`` processes (combined broker+controller, the replicated Batch Coordinator
from the metadata log); two broker roles, two consumers and retention run in process (no Spark)
with the comma-separated bootstrap list; the coordinator leader is SIGKILLed in the middle of the
load and restarted two seconds later. Then the verification reads every partition back from
whichever node answers and must find nothing lost or duplicated, every resent idempotent batch
committed once (IsDuplicate with its first offsets or written fresh), the brokers committing
again after the kill, through the new leader, and the restarted node's replica answering every
partition as the leader does.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import diskless_load as dl  # noqa: E402
from kafka_rpc.client import KafkaRpcClient  # noqa: E402
from kafka_rpc.testbed.bench_cluster import BenchCluster, read_events  # noqa: E402
from tests.bench.test_diskless_load import TINY  # noqa: E402
from tests.waiting import until  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LOAD_S = 8.0  # per role
KILL_AT_S = 3.0  # after the roles start
RESTART_AFTER_S = 2.0
#: a bound on the roles together (each runs LOAD_S, a failover stalls one for up to its 20 s
#: failover timeout); past it the test fails naming the roles still running, with their stacks
ROLES_S = 150.0
BUDGET_S = 300.0  # the whole test, processes included (a bound: ~25 s alone; three starts
# and a coordinator election take minutes beside the Kafka lanes)


async def _all_within(roles: dict, seconds: float) -> list:
    """The results of the ``roles`` coroutines (name -> coroutine), in order, once all finished;
    after ``seconds``, the unfinished ones print their stacks, are cancelled and the test fails
    naming them."""
    tasks = {name: asyncio.ensure_future(c) for name, c in roles.items()}
    _done, pending = await asyncio.wait(tasks.values(), timeout=seconds)
    if pending:
        stuck = [name for name, t in tasks.items() if t in pending]
        for name in stuck:
            print(f"--- {name} still running after {seconds:.0f} s:")
            tasks[name].print_stack()
        for t in tasks.values():
            t.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        pytest.fail(f"roles still running after {seconds:.0f} s: {stuck}")
    return [t.result() for t in tasks.values()]


async def test_roles_survive_a_sigkill_of_the_coordinator_leader(tmp_path):
    cluster = BenchCluster(tmp_path / "cluster", 3)
    try:
        async with asyncio.timeout(BUDGET_S):
            await cluster.start()
            await cluster.wait_coordinator_leader()
            args = dl.parse_args([
                "--server", cluster.bootstrap(), "--controller", cluster.controllers(),
                "--duration", str(LOAD_S), "--request-timeout", "5", "--failover-timeout", "20",
                "--heartbeat-interval-ms", "200", *TINY, "--consumers", "2",
            ])  # fmt: skip
            cfg = dl.make_cfg(args)
            cfg["cluster_id"], live = await dl.cluster_info(cfg)
            assert sorted(live) == [1, 2, 3]
            recs = [dl.Recorder() for _ in range(5)]
            events = tmp_path / "events.jsonl"
            t0 = time.time()
            roles = {
                "broker 0": dl.run_broker(cfg, 0, recs[0]),
                "broker 1": dl.run_broker(cfg, 1, recs[1]),
                "consumer 0": dl.run_consumer(cfg, 0, recs[2]),
                "consumer 1": dl.run_consumer(cfg, 1, recs[3]),
                "retention 0": dl.run_retention(cfg, 0, recs[4]),
                "failover": cluster.failover(KILL_AT_S, RESTART_AFTER_S, events, t0=t0),
            }
            outs = await _all_within(roles, ROLES_S)
            ev = {e["event"]: e for e in read_events(events)}
            # the leader at the kill (usually the first one, but it may have moved meanwhile)
            victim = ev["kill"]["node"]
            assert victim in (1, 2, 3)
            assert ev["new_leader"]["node"] not in (None, victim)
            assert ev["restarted"]["node"] == victim and cluster.live() == [1, 2, 3]
            kill_t = ev["kill"]["t"]

            brokers = [o["stats"] for o in outs[:2]]
            for b, o in zip(brokers, outs[:2], strict=True):
                assert b["commits"] > 0 and b["batches"] > 0
                assert b["dup_offset_mismatch"] == b["dup_new_copy"] == 0, b
                assert b["unexpected_dup"] == b["gave_up_batches"] == 0, b
                # committing again after the kill, through the new leader
                assert any(sec > kill_t + 1 for sec, _ in o["ok_series"]), (kill_t, o)
            # the kill was felt: a coordinator lookup after the first, and resent batches
            assert sum(b["rediscoveries"] for b in brokers) >= 1, brokers
            assert sum(b["resent_batches"] for b in brokers) >= 1, brokers
            assert sum(b["resent_dup"] + b["resent_fresh"] for b in brokers) >= 1, brokers
            assert all(o["stats"]["anomalies"] == 0 for o in outs[2:4])
            assert sum(o["stats"]["batches_read"] for o in outs[2:4]) > 0

            # verification from whichever node answers (a separate loop, as in a Spark task)
            grants = [(f"broker-{i}", f, last) for i, o in enumerate(outs[:2])
                      for f, last in o["blocks"]]  # fmt: skip
            table = dl.block_table(grants)
            acks: dict[int, list] = {
                p: [] for p in range(cfg["topics"] * cfg["partitions_per_topic"])
            }
            for o in outs[:2]:
                for a in dl.unpack_acks(o["acks"]):
                    acks[a[0]].append(a)
            (ver,) = await asyncio.to_thread(dl.verify_task, cfg, list(acks.items()), table)
            unknown = sum(b["unknown_outcome_batches"] for b in brokers)
            assert dl.verdict(ver, unknown) == [], (ver, unknown)
            assert ver["partitions"] == len(acks) and ver["acks_checked"] > 0, ver
            assert ver["lost"] == ver["duplicated"] == ver["dup_offset_mismatch"] == 0

            # the restarted node rejoined and caught up: its replica answers every partition
            # as the leader does (bounded wait)
            leader = await cluster.wait_coordinator_leader(timeout=20)
            if leader == victim:  # elected again since: compare with another replica
                leader = next(i for i in cluster.nodes if i != victim)
            tids = dl.topic_ids(cfg)
            clients = {}
            try:
                for i in (leader, victim):
                    clients[i] = await KafkaRpcClient.connect(
                        cluster.nodes[i].address, connect_timeout=5, request_timeout=5
                    )

                async def state(i):
                    return [await dl.read_partition(cfg, clients[i], tids, p) for p in acks]

                want = await state(leader)
                assert all(not err for *_, err in want), want

                async def caught_up():
                    return await state(victim) == want

                await until(caught_up, f"node {victim} to answer every partition as {leader} does",
                            timeout=20, interval=0.2)  # fmt: skip
            finally:
                for c in clients.values():
                    await c.close()
    finally:
        cluster.close()
    for n in cluster.nodes.values():
        for run in range(1, n.runs + 1):
            err = (n.home / f"stderr.{run}").read_text(errors="replace")
            assert "Traceback" not in err, f"node {n.node_id} run {run}:\n{err[-6000:]}"
