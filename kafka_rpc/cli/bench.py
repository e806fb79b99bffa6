"""``kafka-rpc bench``: bench/diskless_load.py through ``spark-submit`` against a server given,
one it starts, or a ``--cluster`` of nodes (``kafka_rpc.testbed.bench_cluster``); with
``--kafka-brokers``, bench/kafka_brokers.py."""

from __future__ import annotations

import argparse
import os
import sys


def _bench_spark_submit() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")


def _bench_start_server(args: argparse.Namespace, data_dir: str):
    """`kafka-rpc serve` on ephemeral loopback ports, optionally pinned with taskset."""
    import re
    import shutil
    import subprocess
    import threading

    cmd = [sys.executable, "-m", "kafka_rpc.cli", "serve",
           "--override", "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
           "--override", f"log.dirs={data_dir}"]  # fmt: skip
    for o in args.server_override or ():
        cmd += ["--override", o]
    if args.server_cpus and args.server_cpus != "none" and shutil.which("taskset"):
        have = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        want = {int(c) for c in args.server_cpus.split(",") if c.isdigit()}
        if want and want <= have and len(have) > 1:
            cmd = ["taskset", "-c", args.server_cpus, *cmd]
        else:
            args.server_cpus = "none"  # not pinned: then Spark is not pinned either
            print(f"kafka-rpc: not pinning the server (cpus {sorted(have)})", file=sys.stderr)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
    found: dict[str, str] = {}
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            print(f"[server] {line}", end="", flush=True)
            m = re.match(r"listening PLAINTEXT \(\w+\) on ([\d.]+):(\d+)", line)
            if m:
                found["addr"] = f"{m.group(1)}:{m.group(2)}"
            m = re.match(r"listening \S+ \(controller\) on ([\d.]+):(\d+)", line)
            if m:
                found["controller"] = f"{m.group(1)}:{m.group(2)}"
            if line.startswith("cluster id"):
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(30) or "addr" not in found:
        proc.kill()
        proc.wait()
        raise RuntimeError("kafka-rpc serve did not start")
    return proc, found["addr"], found.get("controller")


def _bench_kafka_brokers(args: argparse.Namespace, repo) -> int:
    """``--kafka-brokers N``: bench/kafka_brokers.py (three kafka-rpc controllers, N Apache Kafka
    brokers, the PySpark job through Spark's Kafka connector, the kills), in this process group
    so that Ctrl-C reaches it; options after -- go to bench/spark_kafka_load.py."""
    import subprocess

    if args.kafka_brokers < 1:
        print("kafka-rpc: --kafka-brokers needs at least 1 broker", file=sys.stderr)
        return 2
    cmd = [sys.executable, str(repo / "bench" / "kafka_brokers.py"),
           "--brokers", str(args.kafka_brokers), "--duration", str(args.duration),
           "--master", args.master, "--driver-memory", args.driver_memory,
           "--restart-after", str(args.restart_after)]  # fmt: skip
    if args.out:
        cmd += ["--out", args.out]
    if args.no_kill:
        cmd += ["--kill-controller-at", "-1", "--kill-broker-at", "-1"]
    elif args.kill_at is not None:
        cmd += ["--kill-controller-at", str(args.kill_at)]
    extra = list(args.load_args or ())
    if extra[:1] == ["--"]:
        extra = extra[1:]
    if extra:
        cmd += ["--", *extra]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH")) if p)
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd, env=env)


def _cmd_bench(args: argparse.Namespace, argv: list[str]) -> int:
    """Build and run the spark-submit command for bench/diskless_load.py."""
    import shutil
    import subprocess
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    script = repo / "bench" / "diskless_load.py"
    if not script.exists():
        print(f"kafka-rpc: {script} not found (run from a source checkout)", file=sys.stderr)
        return 2
    try:
        submit = _bench_spark_submit()
    except ImportError:
        print("kafka-rpc: pyspark is not installed (pip install -e '.[bench]')", file=sys.stderr)
        return 2
    if args.kafka_brokers is not None:
        return _bench_kafka_brokers(args, repo)
    if not args.server and not args.start_server and not args.cluster:
        print("kafka-rpc: give --server HOST:PORT, --start-server, --cluster N or "
              "--kafka-brokers N", file=sys.stderr)  # fmt: skip
        return 2
    out = Path(args.out or repo / "bench" / "results" / time.strftime("%Y%m%dT%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    extra = list(args.load_args or ())
    if extra[:1] == ["--"]:
        extra = extra[1:]
    env = dict(os.environ)
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)  # fmt: skip
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH")) if p)
    proc = None
    server, controller = args.server, args.controller

    def spark_cmd(server: str, controller: str | None, events: str | None = None) -> list[str]:
        cmd = [submit, "--master", args.master, "--driver-memory", args.driver_memory,
               "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
               "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.log.level=WARN",
               str(script), "--server", server, "--duration", str(args.duration),
               "--out", str(out)]  # fmt: skip
        if controller:
            cmd += ["--controller", controller]
        if events:
            cmd += ["--cluster-events", events]
        return cmd + extra

    if args.cluster is not None and args.cluster < 1:
        print("kafka-rpc: --cluster needs at least 1 node", file=sys.stderr)
        return 2
    if args.cluster:  # kafka_rpc/testbed/bench_cluster.py: nodes, kill and restart, cleanup
        from kafka_rpc.testbed.bench_cluster import run_load

        kill_at = (
            None if args.no_kill else args.duration / 2 if args.kill_at is None else args.kill_at
        )
        props = dict(o.split("=", 1) for o in args.server_override or () if "=" in o)
        return run_load(spark_cmd, env, out, n=args.cluster, kill_at=kill_at,
                        restart_after=args.restart_after, props=props, layout=args.layout,
                        replace_node=args.replace_node)  # fmt: skip
    try:
        if args.start_server:
            proc, server, controller = _bench_start_server(args, str(out / "server-data"))
        cmd = spark_cmd(server, controller)
        pin = args.spark_cpus
        if pin == "rest" and args.start_server and args.server_cpus not in (None, "", "none"):
            cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
            pinned = {int(c) for c in args.server_cpus.split(",") if c.isdigit()}
            rest = [c for c in cpus if c not in pinned]
            pin = ",".join(map(str, rest)) if rest and pinned and len(rest) < len(cpus) else ""
        elif pin == "rest":
            pin = ""
        if pin and pin != "none" and shutil.which("taskset"):
            cmd = ["taskset", "-c", pin, *cmd]
        print("+ " + " ".join(cmd), flush=True)
        return subprocess.call(cmd, env=env)
    except RuntimeError as e:
        print(f"kafka-rpc: {e}", file=sys.stderr)
        return 2
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
