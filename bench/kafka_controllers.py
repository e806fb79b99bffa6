"""The same three Apache Kafka brokers on our controller quorum and on Kafka's, side by side.

Each round starts a fresh cluster per kind — three controllers (``process.roles=controller``:
three ``kafka-rpc serve`` nodes, or three Apache Kafka controllers from the same jars as the
brokers) and three Kafka brokers (``tests/kafka/cluster.py``, newest release of
``tests/kafka/peer.py``), formatted at metadata.version 4.0-IV3 — runs the same client load
against it, then stops it. Kinds alternate which goes first from round to round. Phases:

1. **CreateTopics/s**: ``--topics`` topics of 10 partitions, RF=3, one per CreateTopics request,
   ``--window`` requests in flight, through the brokers (confluent-kafka AdminClient; Apache
   Kafka's brokers forward them to the active controller inside an Envelope).
2. **create-to-produce**: ``--latency-samples`` times in sequence, one such topic created, then
   one record produced to it with ``acks=all`` (confluent-kafka, metadata refresh every 10 ms
   while a topic is unknown); the time from the CreateTopics call to the acknowledgement.
3. **InitProducerId/s**: ``--pids`` new transactional ids (FindCoordinator batched, then
   InitProducerId v4 from ``--connections`` connections per coordinator broker, kafka-python's
   message classes on raw sockets). Each takes a producer id; every 1,000 take a new block from
   the active controller (AllocateProducerIds).
4. **failover**: ``--kills`` times, SIGKILL of the active controller, then CreateTopics of a
   1-partition RF=3 topic through a broker, retried (a new name each try, 5 s client timeout)
   until one succeeds: the time from the kill to that answer. The killed controller is started
   again and waits until it has caught up before the next kill.
5. **broker start to unfenced**: ``--broker-restarts`` times, a broker stopped cleanly and
   started again: from its spawn to its log line "Transitioning from RECOVERY to RUNNING"
   (log timestamps).
6. **resources**: the controllers' resident memory (``/proc/<pid>/status`` VmRSS at the end of
   the round, and VmHWM, the peak) and CPU seconds (``/proc/<pid>/stat`` utime + stime), summed
   over the three controller processes; CPU seconds per operation for phases 1 and 3.

Everything runs on this machine's CPUs, shared by the brokers, the controllers and the load
generator: a ratio is ours / Kafka's measured in the same run. Writes a JSON file (``--json``,
default ``bench/results/kafka-controllers-<time>.json``) and prints a Markdown table.

    python bench/kafka_controllers.py --rounds 2
    python bench/kafka_controllers.py --quick      # a small run (smoke)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import struct
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kafka import peer  # noqa: E402
from tests.kafka.cluster import BrokerCluster  # noqa: E402
from tests.kafka.mixed import describe_partition  # noqa: E402

KINDS = ("ours", "kafka")
PARTITIONS = 10
RF = 3
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# resources of the controller processes
def _group_pids(pgid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: the process group
            out.append(int(d))
    return out


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def _status_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Resources:
    """CPU seconds and memory of the controller processes of ``cluster`` (each node's process
    group; a killed node's CPU so far is kept)."""

    def __init__(self, cluster: BrokerCluster) -> None:
        self.cluster = cluster
        self.dead_cpu = 0.0  # CPU of controller processes that were killed
        self._last: dict[int, float] = {}

    def _pids(self) -> list[int]:
        pids = []
        for n in self.cluster.quorum.nodes.values():
            if n.alive():
                pids += _group_pids(n.pid)
        return pids

    def cpu(self) -> float:
        now = {pid: _cpu_s(pid) for pid in self._pids()}
        for pid, cpu in self._last.items():
            if pid not in now:
                self.dead_cpu += cpu
        self._last = now
        return self.dead_cpu + sum(now.values())

    def memory_mb(self) -> tuple[float, float]:
        pids = self._pids()
        rss = sum(_status_kb(p, "VmRSS") for p in pids) / 1024
        hwm = sum(_status_kb(p, "VmHWM") for p in pids) / 1024
        return rss, hwm


# ---------------------------------------------------------------------------------------------
# phases
def _admin(c: BrokerCluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": c.bootstrap})


def create_topics(c: BrokerCluster, prefix: str, n: int, window: int) -> dict:
    """``n`` topics of PARTITIONS x RF, one per request, ``window`` in flight."""
    from confluent_kafka.admin import NewTopic

    admin = _admin(c)
    t0 = time.monotonic()
    pending: list = []
    errors = 0
    for i in range(n):
        fut = admin.create_topics([NewTopic(f"{prefix}-{i}", PARTITIONS, RF)],
                                  request_timeout=60)  # fmt: skip
        pending.append(next(iter(fut.values())))
        while len(pending) >= window:
            try:
                pending.pop(0).result(timeout=120)
            except Exception:
                errors += 1
    for f in pending:
        try:
            f.result(timeout=120)
        except Exception:
            errors += 1
    took = time.monotonic() - t0
    return {"topics": n, "seconds": took, "per_s": (n - errors) / took, "errors": errors}


def create_to_produce(c: BrokerCluster, prefix: str, samples: int) -> list[float]:
    """Seconds from a CreateTopics call to the acknowledgement of the first record produced to
    the new topic, ``samples`` times in sequence."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    admin = _admin(c)
    prod = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0,
                     "enable.idempotence": True, "allow.auto.create.topics": False,
                     "topic.metadata.refresh.fast.interval.ms": 10,
                     "retry.backoff.ms": 10, "retry.backoff.max.ms": 50,
                     "message.timeout.ms": 60000})  # fmt: skip
    out = []
    for i in range(samples):
        name = f"{prefix}-{i}"
        done: list = []
        t0 = time.monotonic()
        admin.create_topics([NewTopic(name, PARTITIONS, RF)], request_timeout=60)[name].result(60)
        prod.produce(
            name, value=b"x", partition=0,
            on_delivery=lambda err, msg, done=done: done.append((err, time.monotonic())),
        )  # fmt: skip
        deadline = t0 + 60
        while not done and time.monotonic() < deadline:
            prod.poll(0.001)
        if done and done[0][0] is None:
            out.append(done[0][1] - t0)
    prod.flush(10)
    return out


async def _find_coordinators(c: BrokerCluster, ids: list[str]) -> dict[str, tuple[str, int]]:
    from kafka_rpc.client import KafkaRpcClient
    from kafka_rpc.protocol import codec

    FC = codec.message_class("FindCoordinatorRequest")
    out: dict[str, tuple[str, int]] = {}
    async with KafkaRpcClient(c.bootstrap, request_timeout=30) as client:
        todo = list(ids)
        deadline = time.monotonic() + 120
        while todo and time.monotonic() < deadline:
            batch, todo = todo[:200], todo[200:]
            resp = await client.request(FC(key_type=1, coordinator_keys=tuple(batch)), timeout=30)
            for x in resp.coordinators:
                if x.error_code == 0:
                    out[x.key] = (x.host, x.port)
                else:
                    todo.append(x.key)  # the coordinator is loading: ask again
            if todo:
                await asyncio.sleep(0.2)
    return out


async def _init_producer_ids(addr: tuple[str, int], ids: list[str], version: int = 4) -> int:
    """InitProducerId for each of ``ids`` over one connection, one at a time (a Kafka broker
    reads the next request of a connection only after answering the previous one); retried on
    retriable errors. Returns how many succeeded."""
    from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

    r, w = await asyncio.open_connection(*addr)
    ok = 0
    corr = 0
    try:
        for tid in ids:
            for _attempt in range(50):
                corr += 1
                req = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000,
                                            producer_id=-1, producer_epoch=-1)  # fmt: skip
                req.with_header(correlation_id=corr, client_id="bench")
                w.write(req.encode(version=version, header=True, framed=True))
                n = struct.unpack(">i", await r.readexactly(4))[0]
                resp = InitProducerIdResponse.decode(await r.readexactly(n), version=version,
                                                     header=True)  # fmt: skip
                if resp.error_code == 0:
                    ok += 1
                    break
                await asyncio.sleep(0.05)  # COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS
    finally:
        w.close()
    return ok


def init_producer_ids(c: BrokerCluster, prefix: str, n: int, connections: int) -> dict:
    ids = [f"{prefix}-{i}" for i in range(n)]
    coords = asyncio.run(_find_coordinators(c, ids))

    async def run() -> int:
        by_node: dict[tuple[str, int], list[str]] = {}
        for tid in ids:
            if tid in coords:
                by_node.setdefault(coords[tid], []).append(tid)
        jobs = []
        for addr, tids in by_node.items():
            for k in range(connections):
                part = tids[k::connections]
                if part:
                    jobs.append(_init_producer_ids(addr, part))
        return sum(await asyncio.gather(*jobs))

    t0 = time.monotonic()
    ok = asyncio.run(run())
    took = time.monotonic() - t0
    return {"ids": n, "ok": ok, "seconds": took, "per_s": ok / took}


def _caught_up(c: BrokerCluster, leader: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = describe_partition(c.quorum.address(leader))
        if p is not None and p.error_code == 0:
            ends = {v.replica_id: v.log_end_offset for v in p.current_voters}
            if len(ends) == 3 and min(ends.values()) >= p.high_watermark - 5:
                return
        time.sleep(0.3)
    raise TimeoutError("the restarted controller did not catch up")


def failovers(c: BrokerCluster, prefix: str, kills: int) -> list[float]:
    """Seconds from the SIGKILL of the active controller to the next successful CreateTopics,
    ``kills`` times."""
    from confluent_kafka.admin import NewTopic

    admin = _admin(c)
    out = []
    for k in range(kills):
        leader, _epoch = c.active_controller()
        _caught_up(c, leader)
        c.quorum.kill(leader)
        t0 = time.monotonic()
        attempt = 0
        while time.monotonic() - t0 < 120:
            attempt += 1
            name = f"{prefix}-{k}-{attempt}"
            try:
                admin.create_topics([NewTopic(name, 1, RF)], request_timeout=5)[name].result(10)
                out.append(time.monotonic() - t0)
                break
            except Exception:
                time.sleep(0.01)
        c.quorum.start(leader)
        c.quorum.wait_listening(leader)
        new, _ = c.active_controller()
        _caught_up(c, new)
    return out


_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] INFO .*Transitioning from "
                       r"RECOVERY to RUNNING", re.M)  # fmt: skip


def broker_restarts(c: BrokerCluster, n: int) -> list[float]:
    """Seconds from a broker's spawn to its RUNNING (unfenced) log line, ``n`` restarts."""
    out = []
    for k in range(n):
        b = c.broker_ids[k % len(c.broker_ids)]
        c.stop_broker(b, timeout=60)
        since = c.log_size(b)
        spawned = time.time()
        c.start_broker(b)
        c.wait_broker_running(b, since=since)
        m = _LOG_TIME.search(c.brokers[b].log_text()[since:])
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.append(t - spawned)
    return out


# ---------------------------------------------------------------------------------------------
def run_round(kind: str, r: int, args, workdir: Path) -> dict:
    c = BrokerCluster(workdir / f"{kind}-{r}", kind, version=peer.NEWEST)
    res = Resources(c)
    out: dict = {"kind": kind, "round": r}
    try:
        t0 = time.monotonic()
        c.start()
        out["start_s"] = time.monotonic() - t0
        time.sleep(2)
        cpu0 = res.cpu()
        out["create_topics"] = create_topics(c, f"ct{r}", args.topics, args.window)
        cpu1 = res.cpu()
        out["create_topics"]["cpu_s"] = cpu1 - cpu0
        out["create_to_produce_s"] = create_to_produce(c, f"lat{r}", args.latency_samples)
        cpu2 = res.cpu()
        out["init_producer_ids"] = init_producer_ids(c, f"tx{kind}{r}", args.pids, args.connections)
        cpu3 = res.cpu()
        out["init_producer_ids"]["cpu_s"] = cpu3 - cpu2
        out["memory_mb"] = dict(zip(("rss", "hwm"), res.memory_mb(), strict=True))
        out["broker_start_to_unfenced_s"] = broker_restarts(c, args.broker_restarts)
        out["failover_s"] = failovers(c, f"fo{r}", args.kills)
        out["cpu_s_total"] = res.cpu()
        out["seconds_total"] = time.monotonic() - t0
    finally:
        c.close()
    return out


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def summarize(rounds: list[dict]) -> dict:
    out = {}
    for kind in KINDS:
        rs = [x for x in rounds if x["kind"] == kind]
        lat = [v for x in rs for v in x["create_to_produce_s"]]
        fo = [v for x in rs for v in x["failover_s"]]
        bu = [v for x in rs for v in x["broker_start_to_unfenced_s"]]
        ct = [x["create_topics"] for x in rs]
        ip = [x["init_producer_ids"] for x in rs]
        out[kind] = {
            "create_topics_per_s": statistics.median(x["per_s"] for x in ct),
            "cpu_s_per_topic": sum(x["cpu_s"] for x in ct) / sum(x["topics"] for x in ct),
            "create_to_produce_p50_s": _pct(lat, 0.5),
            "create_to_produce_p99_s": _pct(lat, 0.99),
            "init_producer_ids_per_s": statistics.median(x["per_s"] for x in ip),
            "cpu_s_per_1000_pids": 1000 * sum(x["cpu_s"] for x in ip) / sum(x["ok"] for x in ip),
            "failover_p50_s": _pct(fo, 0.5),
            "failover_p99_s": _pct(fo, 0.99),
            "broker_start_to_unfenced_p50_s": _pct(bu, 0.5),
            "rss_mb": statistics.median(x["memory_mb"]["rss"] for x in rs),
            "peak_rss_mb": statistics.median(x["memory_mb"]["hwm"] for x in rs),
            "cpu_s_per_round": statistics.median(x["cpu_s_total"] for x in rs),
            "samples": {"create_to_produce": len(lat), "failover": len(fo), "broker": len(bu)},
        }
    return out


ROWS = [  # key, label, target (ratio ours/kafka), "max"/"min"
    ("create_topics_per_s", "CreateTopics/s (10 partitions, RF=3)", 0.5, "min"),
    ("cpu_s_per_topic", "controller CPU s per topic", None, None),
    ("create_to_produce_p50_s", "create-to-produce p50 (s)", None, None),
    ("create_to_produce_p99_s", "create-to-produce p99 (s)", 1.2, "max"),
    ("init_producer_ids_per_s", "InitProducerId/s (new transactional ids)", 0.5, "min"),
    ("cpu_s_per_1000_pids", "controller CPU s per 1000 InitProducerId", None, None),
    ("failover_p50_s", "failover p50 (s)", None, None),
    ("failover_p99_s", "failover p99 (s)", 1.2, "max"),
    ("broker_start_to_unfenced_p50_s", "broker start to unfenced p50 (s)", None, None),
    ("rss_mb", "controllers' resident memory (MB, 3 summed)", 0.5, "max"),
    ("peak_rss_mb", "controllers' peak resident memory (MB)", None, None),
    ("cpu_s_per_round", "controllers' CPU s per round", None, None),
]


def table(summary: dict) -> str:
    lines = ["| metric | ours | Kafka | ours / Kafka | target |", "|---|---|---|---|---|"]
    for key, label, target, how in ROWS:
        a, b = summary["ours"][key], summary["kafka"][key]
        ratio = a / b if b else float("nan")
        t = ""
        if target is not None:
            ok = ratio <= target if how == "max" else ratio >= target
            t = f"{'<=' if how == 'max' else '>='} {target} {'met' if ok else 'MISSED'}"
        lines.append(f"| {label} | {a:.3g} | {b:.3g} | {ratio:.2f} | {t} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--latency-samples", type=int, default=30)
    ap.add_argument("--pids", type=int, default=3000)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--broker-restarts", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a small run: 10 topics, 5 samples, "
                    "300 ids, 2 kills, 1 broker restart")  # fmt: skip
    ap.add_argument("--workdir", help="where the clusters live (default: a temporary dir)")
    ap.add_argument("--json", help="output file (default bench/results/kafka-controllers-*.json)")
    args = ap.parse_args(argv)
    if args.quick:
        args.topics, args.latency_samples, args.pids = 10, 5, 300
        args.kills, args.broker_restarts = 2, 1
    peer.java_binary()
    peer.resolve(peer.NEWEST)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kafka-controllers-"))
    load0 = os.getloadavg()
    rounds = []
    for r in range(args.rounds):
        order = KINDS if r % 2 == 0 else KINDS[::-1]
        for kind in order:
            print(f"round {r}: {kind} quorum (load {os.getloadavg()[0]:.2f})", flush=True)
            rounds.append(run_round(kind, r, args, workdir))
            print(json.dumps(rounds[-1], default=str)[:600], flush=True)
    summary = summarize(rounds)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = Path(args.json or ROOT / "bench" / "results" / f"kafka-controllers-{stamp}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"when": stamp, "kafka": peer.NEWEST, "args": vars(args), "load_before": load0,
              "load_after": os.getloadavg(), "cpus": os.cpu_count(), "rounds": rounds,
              "summary": summary, "table": table(summary)}  # fmt: skip
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(table(summary))
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
