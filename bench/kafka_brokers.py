"""``kafka-rpc bench --kafka-brokers N``: Apache Kafka brokers on three kafka-rpc controllers under
a PySpark load, with the active controller and one broker killed during the write.

1. Starts three ``kafka-rpc serve`` controllers (``process.roles=controller``) and ``N`` Apache
   Kafka brokers (the newest release of ``tests/kafka/peer.py``, from Maven Central jars) on
   loopback (``tests/kafka/cluster.py``), and creates the topic: ``--partitions`` partitions,
   replication factor ``min(3, N)``, ``min.insync.replicas`` ``min(2, RF)``.
2. Runs ``bench/spark_kafka_load.py`` with ``spark-submit --packages
   org.apache.spark:spark-sql-kafka-0-10_<scala>:<version>`` (Spark's own Kafka connector from
   Maven Central, resolved by Spark into ``~/.cache/kafka-rpc/spark-ivy``): keyed batches with
   ``acks=all`` and the idempotent producer for ``--duration`` seconds, then a Spark read that
   checks them (nothing acknowledged lost, no duplicates, order per key).
3. During the write, ``--kill-controller-at`` seconds after the first acknowledged batch: SIGKILL
   of the active controller (the Raft leader of the metadata quorum; the brokers move to the new
   one), restarted ``--restart-after`` seconds later; ``--kill-broker-at``: SIGKILL of the broker
   leading partition 0 (its partitions' leadership moves, the ISRs shrink), restarted
   ``--restart-after`` seconds later (it catches up and rejoins the ISRs).
4. Writes ``results.json`` (the job's batches and verification, the events), ``report.md`` and
   ``throughput.png`` (acknowledged records per second and each batch's write time, every kill
   and restart a vertical line) into ``--out`` (default ``bench/results/kafka-brokers-<time>``).

The connector's version is PySpark's when Maven Central has it, else the newest release there of
the same major version not above PySpark's (:func:`connector_version`; ``--connector-version``
overrides), with PySpark's Scala binary version (from its ``scala-library`` jar).

Exit code: the job's (0 passed, 1 a check failed), 1 also when a planned kill did not happen,
2 when the cluster or Spark could not start. Every process (the Spark job's process group, every
controller and broker) is killed on the way out, on an error, Ctrl-C or SIGTERM too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CENTRAL = "https://repo.maven.apache.org/maven2"
CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_{scala}:{version}"
IVY = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kafka-rpc" / "spark-ivy"
SESSION_MS = 6000  # broker.session.timeout.ms on the controllers: a killed broker is fenced in 6 s
#: event -> (color, line style, label) of the plots' vertical lines
EVENT_STYLE = {
    "kill_controller": ("red", "--", "SIGKILL active controller"),
    "new_controller": ("orange", ":", "new active controller"),
    "restart_controller": ("green", "-.", "restart killed controller"),
    "kill_broker": ("purple", "--", "SIGKILL broker"),
    "restart_broker": ("blue", "-.", "restart killed broker"),
    "broker_running": ("blue", ":", "killed broker running"),
}


# --------------------------------------------------------------------------- the connector
def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def connector_version(pyspark: str, available: list[str]) -> str | None:
    """The spark-sql-kafka-0-10 version for PySpark ``pyspark``: itself when ``available``
    (Maven Central's versions) lists it, else the newest release (no ``-preview``/``-rc``) of the
    same major version not above it; None when there is none."""
    if pyspark in available:
        return pyspark
    want = _version_key(pyspark)
    ok = [
        v
        for v in available
        if re.fullmatch(r"\d+\.\d+\.\d+", v)
        and _version_key(v)[0] == want[0]
        and _version_key(v) <= want
    ]
    return max(ok, key=_version_key, default=None)


def scala_binary_version(pyspark_dir: Path) -> str:
    """``2.13`` from PySpark's ``jars/scala-library-2.13.x.jar``."""
    for jar in (pyspark_dir / "jars").glob("scala-library-*.jar"):
        m = re.match(r"scala-library-(\d+\.\d+)\.", jar.name)
        if m:
            return m.group(1)
    raise RuntimeError(f"no scala-library jar under {pyspark_dir / 'jars'}")


def connector_package(override: str | None = None) -> tuple[str, str]:
    """(Maven coordinate of Spark's Kafka connector for the installed PySpark, PySpark's
    version); the versions Maven Central has are read from its ``maven-metadata.xml`` unless
    ``override`` names one."""
    import pyspark

    scala = scala_binary_version(Path(pyspark.__file__).parent)
    version = override
    if version is None:
        url = f"{CENTRAL}/org/apache/spark/spark-sql-kafka-0-10_{scala}/maven-metadata.xml"
        with urllib.request.urlopen(url, timeout=30) as r:
            available = re.findall(r"<version>([^<]+)</version>", r.read().decode())
        version = connector_version(pyspark.__version__, available)
        if version is None:
            raise RuntimeError(
                f"Maven Central has no spark-sql-kafka-0-10_{scala} for "
                f"PySpark {pyspark.__version__}"
            )
    return CONNECTOR.format(scala=scala, version=version), pyspark.__version__


# --------------------------------------------------------------------------- events
class Events:
    """The run's events, each ``{"event", "t" (epoch s), "node", ...}``, also appended to
    ``path`` (JSON lines) as they happen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[dict] = []
        path.unlink(missing_ok=True)

    def note(self, event: str, node: int | None, **extra) -> None:
        e = {"event": event, "t": time.time(), "node": node, **extra}
        self.items.append(e)
        with self.path.open("a") as f:
            f.write(json.dumps(e) + "\n")
        print(f"event {event} node {node}", flush=True)


def partition_leader(cluster, topic: str, partition: int = 0) -> int | None:
    """The leader of ``topic``'s ``partition`` as the first live broker answering says."""
    for b in cluster.broker_ids:
        if not cluster.brokers[b].alive():
            continue
        md = cluster.metadata(b, [topic])
        if md is None or not md.topics or md.topics[0].error_code:
            continue
        for p in md.topics[0].partitions:
            if p.partition_index == partition and p.leader_id >= 0:
                return p.leader_id
    return None


def _run_kills_logged(*args) -> None:
    try:
        run_kills(*args)
    except Exception as exc:  # a kill that could not be made: the summary shows it missing
        print(f"kafka-rpc: the kills stopped: {exc!r}", file=sys.stderr, flush=True)


def run_kills(cluster, topic: str, events: Events, t0: float, args, stop: threading.Event) -> None:
    """The kills, in time order, ``t0`` (epoch s of the first acknowledged batch) + each one's
    delay; each killed node restarted ``args.restart_after`` s after its kill."""
    plan = sorted([(args.kill_controller_at, "controller"), (args.kill_broker_at, "broker")])
    for at, what in plan:
        if at < 0:
            continue
        if stop.wait(max(0.0, t0 + at - time.time())):
            return
        if what == "controller":
            leader, epoch = cluster.active_controller(timeout=30)
            cluster.quorum.kill(leader)
            killed = time.time()
            events.note("kill_controller", leader, signal="SIGKILL", epoch=epoch)
            try:
                new, new_epoch = cluster.active_controller(timeout=30, exclude=(leader,))
                events.note("new_controller", new, epoch=new_epoch)
            except TimeoutError:
                events.note("new_controller", None)
            stop.wait(max(0.0, killed + args.restart_after - time.time()))
            cluster.quorum.start(leader)
            events.note("restart_controller", leader)
        else:
            victim = partition_leader(cluster, topic) or cluster.broker_ids[0]
            cluster.kill_broker(victim)
            events.note("kill_broker", victim, signal="SIGKILL")
            stop.wait(args.restart_after)
            since = cluster.log_size(victim)
            cluster.start_broker(victim)
            events.note("restart_broker", victim)
            try:
                cluster.wait_broker_running(victim, timeout=120, since=since)
                events.note("broker_running", victim)
            except (TimeoutError, RuntimeError) as exc:
                print(f"broker {victim} did not run again: {exc}", file=sys.stderr)


# --------------------------------------------------------------------------- report
#: a kill's stall: the longest write of the batches in flight at the kill or started up to this
#: many seconds after it
STALL_WINDOW_S = 10.0


def summarize(
    load: dict, events: list[dict], planned: tuple[str, ...] = ("kill_controller", "kill_broker")
) -> dict:
    """Figures of a run from the job's ``load`` (batches, verification) and the ``events``.
    The batches up to the first acknowledged one are the warm-up (Spark's executors and the
    producer start: ``warmup_s``); the write figures are those after it (the kills are timed
    from it too): ``records_per_s`` (records of acknowledged batches / seconds from the first
    acknowledgement to the last batch's end) and the batch write time p50/p99/max (s). For each
    kill: ``during_write`` (between the first batch's start and the last one's end),
    ``first_batch_after_s`` (from the kill to the next acknowledgement) and ``stall_s`` (the
    longest write of the batches in flight at the kill or started within
    :data:`STALL_WINDOW_S` after it). ``passed``: the verification passed, every batch was
    acknowledged and every kill of ``planned`` happened during the write."""
    bs = load.get("batches") or []
    ok = [b for b in bs if b["ok"]]
    first_ack = ok[0]["end"] if ok else None
    steady = [b for b in ok if first_ack is not None and b["start"] >= first_ack]
    took = sorted(b["end"] - b["start"] for b in steady)

    def pct(q: float) -> float | None:
        return took[min(len(took) - 1, round(q * (len(took) - 1)))] if took else None

    span = (steady[-1]["end"] - first_ack) if steady else 0.0
    kills = {}
    for name in ("kill_controller", "kill_broker"):
        e = next((x for x in events if x["event"] == name), None)
        if e is None:
            continue
        t = e["t"]
        nxt = [b for b in ok if b["end"] >= t][:1]
        hit = [b["end"] - b["start"] for b in steady
               if b["end"] >= t and b["start"] <= t + STALL_WINDOW_S]  # fmt: skip
        kills[name] = {
            "node": e["node"],
            "during_write": bool(bs) and bs[0]["start"] <= t <= bs[-1]["end"],
            "first_batch_after_s": (nxt[0]["end"] - t) if nxt else None,
            "stall_s": max(hit, default=None),
        }
    v = load.get("verification") or {}
    return {
        "batches": len(bs),
        "batches_failed": len(bs) - len(ok),
        "records_acked": sum(b["records"] for b in ok),
        "warmup_s": (first_ack - bs[0]["start"]) if first_ack is not None else None,
        "records_per_s": sum(b["records"] for b in steady) / span if span else 0.0,
        "batch_write_p50_s": pct(0.5),
        "batch_write_p99_s": pct(0.99),
        "batch_write_max_s": took[-1] if took else None,
        "kills": kills,
        "passed": bool(v.get("passed"))
        and len(ok) == len(bs)
        and all(k in kills and kills[k]["during_write"] for k in planned),
    }


def origin(load: dict) -> float:
    """The time origin of the plot and the report (epoch s): the first acknowledgement, from
    which the kills are timed (the first batch's start when none)."""
    bs = load.get("batches") or []
    ok = [b for b in bs if b["ok"]]
    return ok[0]["end"] if ok else bs[0]["start"] if bs else 0.0


def series(load: dict) -> list[tuple[int, int]]:
    """(epoch second, records acknowledged in it) for every second from the first batch's
    start to the last batch's end (a batch counts in the second its write returned)."""
    bs = [b for b in load.get("batches") or [] if b["ok"]]
    if not bs:
        return []
    per: dict[int, int] = {}
    for b in bs:
        per[int(b["end"])] = per.get(int(b["end"]), 0) + b["records"]
    return [(s, per.get(s, 0)) for s in range(int(bs[0]["start"]), int(bs[-1]["end"]) + 1)]


def plot(results: dict, path: Path) -> None:
    """Two panels over seconds since the first acknowledgement (:func:`origin`; the warm-up batch
    before it): records acknowledged so far, and each batch's write time; every event a
    vertical line on both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    load = results["load"]
    bs = load.get("batches") or []
    t0 = origin(load)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    ok = [b for b in bs if b["ok"]]
    total, xs, ys = 0, [], []
    for b in ok:
        total += b["records"]
        xs.append(b["end"] - t0)
        ys.append(total)
    top.plot(
        xs,
        ys,
        marker=".",
        color="black",
        label="records acknowledged (cumulative; flat: a stall)",
    )
    bad = [b for b in bs if not b["ok"]]
    ok = ok[1:]  # the warm-up batch (its write time is in the title)
    bottom.plot(
        [b["end"] - t0 for b in ok],
        [b["end"] - b["start"] for b in ok],
        marker=".",
        linestyle="-",
        color="tab:blue",
        label="batch write time (acknowledged)",
    )
    if bad:
        bottom.plot(
            [b["end"] - t0 for b in bad],
            [b["end"] - b["start"] for b in bad],
            "x",
            color="red",
            label="batch failed",
        )
    for ax in (top, bottom):
        for e in results["events"]:
            color, ls, label = EVENT_STYLE.get(e["event"], ("gray", ":", e["event"]))
            ax.axvline(
                e["t"] - t0,
                color=color,
                linestyle=ls,
                label=f"{label} (node {e.get('node')}) at {e['t'] - t0:.1f} s",
            )
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    top.set_ylabel("records acknowledged")
    bottom.set_ylabel("batch write time (s)")
    bottom.set_xlabel("seconds since the first acknowledged batch")
    s = results["summary"]
    top.set_title(
        f"Spark -> {results['cluster']['brokers']} Kafka brokers on 3 kafka-rpc "
        f"controllers: {s['records_acked']} acknowledged, lost "
        f"{results['load'].get('verification', {}).get('lost')}",
        fontsize=10,
    )
    bottom.set_title(
        "batches after the first acknowledged one (that one, with Spark's start: "
        + ("-" if s.get("warmup_s") is None else f"{s['warmup_s']:.1f} s")
        + ")",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(results: dict, plots: dict[str, str]) -> str:
    s = results["summary"]
    v = results["load"].get("verification") or {}
    c = results["cluster"]
    t0 = origin(results["load"])

    def num(x, fmt="{:.2f}"):
        return "-" if x is None else fmt.format(x)

    lines = [
        f"# Spark load on {c['brokers']} Apache Kafka {c['kafka']} brokers, 3 kafka-rpc "
        "controllers",
        "",
        f"Spark {results['load'].get('spark')} ({results['spark_master']}), connector "
        f"`{results['connector']}`; topic `{c['topic']}`: {c['partitions']} partitions, RF "
        f"{c['replication_factor']}, min.insync.replicas {c['min_insync_replicas']}; producer "
        + ", ".join(f"{k}={val}" for k, val in results["load"].get("producer", {}).items()),
        "",
        "| figure | value |",
        "|---|---|",
        f"| batches (failed) | {s['batches']} ({s['batches_failed']}) |",
        f"| records acknowledged | {s['records_acked']} |",
        f"| warm-up: first batch acknowledged after (s) | {num(s['warmup_s'])} |",
        f"| records/s after the warm-up | {s['records_per_s']:.0f} |",
        f"| batch write time after the warm-up p50 / p99 / max (s) | "
        f"{num(s['batch_write_p50_s'])} / {num(s['batch_write_p99_s'])} / "
        f"{num(s['batch_write_max_s'])} |",
    ]
    for name, k in s["kills"].items():
        lines.append(
            f"| {name.replace('_', ' ')} (node {k['node']}): next acknowledgement after it / "
            f"longest batch write around it (s) | "
            f"{num(k['first_batch_after_s'])} / {num(k['stall_s'])} |"
        )
    lines += [
        "",
        "## Verification (Spark read of the whole topic)",
        "",
        f"read {v.get('read')}, acknowledged {v.get('acked_records')}, lost {v.get('lost')}, "
        f"duplicates {v.get('duplicates')}, out of order per key {v.get('out_of_order')}, "
        f"unexpected {v.get('unexpected')}, keys in two partitions "
        f"{v.get('keys_in_two_partitions')}: **{'PASSED' if s['passed'] else 'FAILED'}**",
        "",
        "## Events (seconds since the first acknowledged batch)",
        "",
    ]
    lines += [
        f"- {e['t'] - t0:.1f} s: {e['event']} node {e.get('node')}" for e in results["events"]
    ]
    if plots:
        lines += ["", *(f"![{k}]({Path(p).name})" for k, p in plots.items())]
    return "\n".join(lines) + "\n"


def write_all(results: dict, out: Path, plots: bool = True) -> dict[str, str]:
    """results.json, report.md and (``plots``) throughput.png under ``out``; their paths."""
    pngs = {}
    if plots:
        pngs["throughput"] = str(out / "throughput.png")
        plot(results, Path(pngs["throughput"]))
    results = dict(results, plots=pngs)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / "report.md").write_text(markdown(results, pngs))
    return {"results": str(out / "results.json"), "report": str(out / "report.md"), **pngs}


# --------------------------------------------------------------------------- run
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", metavar="RESULTS_JSON",
                   help="only write report.md and the plot again from a run's results.json "
                   "(into its directory)")  # fmt: skip
    p.add_argument("--brokers", type=int, default=3, help="Kafka brokers (default 3)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of writing")
    p.add_argument("--out", help="default bench/results/kafka-brokers-<time>")
    p.add_argument("--topic", default="spark-load")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument(
        "--kill-controller-at",
        type=float,
        metavar="S",
        help="s after the first acknowledged batch (default duration/3; <0: none)",
    )
    p.add_argument(
        "--kill-broker-at",
        type=float,
        metavar="S",
        help="s after the first acknowledged batch (default 2*duration/3; <0: none)",
    )
    p.add_argument("--restart-after", type=float, default=5.0)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="1g")
    p.add_argument(
        "--connector-version", help="spark-sql-kafka-0-10 version (default: see connector_version)"
    )
    p.add_argument("--no-plots", dest="plots", action="store_false")
    p.add_argument(
        "load_args",
        nargs=argparse.REMAINDER,
        help="-- options for spark_kafka_load.py (--keys, --per-key, --batch-interval, --tasks)",
    )
    args = p.parse_args(argv)
    if args.brokers < 1:
        p.error("--brokers needs at least 1")
    if args.kill_controller_at is None:
        args.kill_controller_at = args.duration / 3
    if args.kill_broker_at is None:
        args.kill_broker_at = 2 * args.duration / 3
    if args.load_args[:1] == ["--"]:
        args.load_args = args.load_args[1:]
    return args


def _spark_env() -> dict:
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def spark_command(args, package: str, bootstrap: str, out: Path) -> list[str]:
    import pyspark

    submit = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    return [
        submit,
        "--master",
        args.master,
        "--driver-memory",
        args.driver_memory,
        "--packages",
        package,
        "--conf",
        f"spark.jars.ivy={IVY}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        "--conf",
        "spark.log.level=WARN",
        str(ROOT / "bench" / "spark_kafka_load.py"),
        "--bootstrap",
        bootstrap,
        "--topic",
        args.topic,
        "--duration",
        str(args.duration),
        "--out",
        str(out),
        *args.load_args,
    ]


def create_topic(cluster, name: str, partitions: int, rf: int, min_isr: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fut = admin.create_topics(
        [NewTopic(name, partitions, rf, config={"min.insync.replicas": str(min_isr)})],
        request_timeout=60,
    )
    fut[name].result(timeout=120)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # the finally below kills every process


def planned_kills(args: dict) -> tuple[str, ...]:
    """The kills a run's options asked for (a negative time: none)."""
    at = {"kill_controller": args["kill_controller_at"], "kill_broker": args["kill_broker_at"]}
    return tuple(name for name, t in at.items() if t is not None and t >= 0)


def regenerate(path: Path, plots: bool = True) -> dict[str, str]:
    """report.md, the plot and results.json again from a run's ``results.json`` (the summary
    recomputed from its batches and events)."""
    results = json.loads(Path(path).read_text())
    results.pop("plots", None)
    results["summary"] = summarize(
        results["load"], results["events"], planned_kills(results["args"])
    )
    return write_all(results, Path(path).parent, plots=plots)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        for name, p in regenerate(Path(args.report), args.plots).items():
            print(f"{name}: {p}")
        return 0
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    from tests.kafka import peer
    from tests.kafka.cluster import BrokerCluster

    out = Path(
        args.out or ROOT / "bench" / "results" / f"kafka-brokers-{time.strftime('%Y%m%dT%H%M%S')}"
    )
    out.mkdir(parents=True, exist_ok=True)
    for name in ("load_started", "load.json"):
        (out / name).unlink(missing_ok=True)
    try:
        package, pyspark_version = connector_package(args.connector_version)
        peer.java_binary()
        peer.resolve(peer.NEWEST)
    except Exception as exc:
        print(f"kafka-rpc: cannot set up the run: {exc}", file=sys.stderr)
        return 2
    rf = min(3, args.brokers)
    cluster = BrokerCluster(
        out / "cluster",
        "ours",
        n_brokers=args.brokers,
        version=peer.NEWEST,
        controller_props={"broker.session.timeout.ms": SESSION_MS},
    )
    events = Events(out / "events.jsonl")
    proc: subprocess.Popen | None = None
    stop = threading.Event()
    killer: threading.Thread | None = None
    rc = 2
    try:
        try:
            cluster.start()
            create_topic(cluster, args.topic, args.partitions, rf, min(2, rf))
        except Exception as exc:
            print(f"kafka-rpc: the cluster did not start: {exc}", file=sys.stderr)
            return 2
        leader, epoch = cluster.active_controller()
        print(
            f"cluster {cluster.cluster_id}: controllers {cluster.quorum.bootstrap()} (active "
            f"{leader}, epoch {epoch}), brokers {cluster.bootstrap}",
            flush=True,
        )
        cmd = spark_command(args, package, cluster.bootstrap, out)
        print("+ " + " ".join(cmd), flush=True)
        with (out / "spark.log").open("wb") as log:
            proc = subprocess.Popen(
                cmd, env=_spark_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + args.duration + 900  # Spark's start, the read, a JVM's GC
        while proc.poll() is None and time.monotonic() < deadline:
            if killer is None and (out / "load_started").exists():
                t0 = float((out / "load_started").read_text())
                killer = threading.Thread(
                    target=_run_kills_logged,
                    name="kills",
                    daemon=True,
                    args=(cluster, args.topic, events, t0, args, stop),
                )
                killer.start()
            time.sleep(0.2)
        rc = proc.returncode if proc.returncode is not None else 1
        if proc.returncode is None:
            print("kafka-rpc: the Spark job ran over its time", file=sys.stderr)
    finally:
        stop.set()
        if killer is not None:
            killer.join(timeout=180)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        if proc is not None:  # whatever of its group is left (the JVM, Python workers)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        cluster.close()
    load_path = out / "load.json"
    if not load_path.exists():
        print(
            f"kafka-rpc: the Spark job wrote no results (see {out / 'spark.log'})", file=sys.stderr
        )
        return rc or 2
    load = json.loads(load_path.read_text())
    results = {
        "connector": package,
        "pyspark": pyspark_version,
        "spark_master": args.master,
        "cluster": {
            "brokers": args.brokers,
            "kafka": peer.NEWEST,
            "controllers": 3,
            "topic": args.topic,
            "partitions": args.partitions,
            "replication_factor": rf,
            "min_insync_replicas": min(2, rf),
        },
        "args": vars(args),
        "events": events.items,
        "load": load,
    }
    results["summary"] = summarize(load, events.items, planned_kills(vars(args)))
    paths = write_all(results, out, plots=args.plots)
    s = results["summary"]
    print(
        f"acknowledged {s['records_acked']} records in {s['batches']} batches "
        f"({s['records_per_s']:.0f}/s), kills {sorted(s['kills'])}: "
        f"{'PASSED' if s['passed'] else 'FAILED'}"
    )
    for name, p in paths.items():
        print(f"{name}: {p}")
    if rc == 0 and not s["passed"]:
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
