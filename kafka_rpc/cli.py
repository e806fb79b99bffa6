"""``kafka-rpc`` command line.

    kafka-rpc serve [--config server.properties] [--override key=value ...]
    kafka-rpc api-versions --bootstrap-server HOST:PORT
    kafka-rpc storage random-uuid
    kafka-rpc storage format --cluster-id ID --config server.properties [--override k=v]
                             [--ignore-formatted] [--release-version V] [--feature F=L ...]
                             [--kafka-compatible] [--add-scram SCRAM ...]
    kafka-rpc metadata-quorum --bootstrap-controller HOST:PORT describe (--status|--replication)
    kafka-rpc dump-log --files F[,F...] [--cluster-metadata-decoder] [--print-data-log]
    kafka-rpc topics --bootstrap-server HOST:PORT (--create|--delete|--list|--describe) ...
    kafka-rpc cluster cluster-id (--bootstrap-server|--bootstrap-controller) HOST:PORT
    kafka-rpc cluster unregister (--bootstrap-server|--bootstrap-controller) HOST:PORT --id N
    kafka-rpc chunks (create|alter) --bootstrap-server HOST:PORT
                     (--create-chunk-json-file F|--alter-chunk-json-file F)
    kafka-rpc diskless assign --bootstrap-controller HOST:PORT --topic T --partition P
                              --coordinator-partition N [--bootstrap-server HOST:PORT]
    kafka-rpc bench [--master local[2]] [--duration 60]
                    [--server HOST:PORT[,...] | --start-server | (--cluster N | --kafka-brokers N)
                    [--kill-at S | --no-kill] [--restart-after S]] [--controller HOST:PORT[,...]]
                    ...

``serve`` re-executes itself once with glibc's ``MALLOC_MMAP_THRESHOLD_=33554432`` and
``MALLOC_TRIM_THRESHOLD_=67108864`` when they are not set (they only take effect at process start;
see ``MALLOC_ENV``), unless ``KAFKA_RPC_NO_REEXEC=1``. Configuration errors exit with 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from kafka_rpc.config import ConfigError, load_config
from kafka_rpc.protocol.uuids import uuid_text
from kafka_rpc.tools import add_command_config, secured

#: Fixed glibc thresholds (setting them also turns off glibc's sliding mmap threshold).
#: Buffers below 32 MiB (8 MiB Fetch and FetchSnapshot frames, their decoded records, snapshot
#: reads) come from the heap and reuse warm pages; up to 64 MiB of free heap is kept rather than
#: returned. With the former 1 MiB / 8 MiB, every such buffer was a fresh mmap whose pages fault
#: in on first touch, several ms per 8 MiB buffer on this VM (``bench/raft.py`` part (d),
#: FetchSnapshot in 8 MiB pieces, shows the effect; the figures are in the issue notes).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "67108864"}


def _reexec_with_malloc_env(argv: list[str]) -> None:
    if os.environ.get("KAFKA_RPC_NO_REEXEC") == "1":
        return
    if all(k in os.environ for k in MALLOC_ENV):
        return
    env = dict(os.environ)
    for k, v in MALLOC_ENV.items():
        env.setdefault(k, v)
    env["KAFKA_RPC_NO_REEXEC"] = "1"  # exactly once
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "kafka_rpc.cli", *argv], env)  # noqa: S606


def _tune_gc() -> None:
    """Make Python's cyclic garbage collector cheap for the long-running server; called once it
    listens. ``KAFKA_RPC_DEFAULT_GC=1`` keeps the interpreter's defaults (for A/B runs).

    A CommitBatches request of 100 batches allocates ~600 container objects (decoded entries,
    domain requests and responses, batch rows, wire results), all freed by reference counting.
    With the default thresholds (700, 10, 10) they still trigger about one young collection per
    request, and because the objects of requests in flight survive into the old generation,
    full collections follow that walk every object loaded at start-up (modules, generated codec
    classes). Measured in the server (gc.callbacks, ``bench/coordinator.py --quick``, ~5 s of
    commits and lookups): 1,018 + 93 + 9 collections taking 0.47 s in all, each full one ~30
    ms (the commit p99 was 43-52 ms). With ``gc.freeze()`` (the start-up heap moves to the
    permanent generation, which collections skip) and a young threshold of 10,000 allocations:
    21 + 1 + 0 collections, 0.09 s; commit p99 28-30 ms. Cyclic garbage is still collected,
    in larger, rarer batches; only objects that exist at start-up are exempt."""
    if os.environ.get("KAFKA_RPC_DEFAULT_GC") == "1":
        return
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def _cmd_serve(args: argparse.Namespace, argv: list[str]) -> int:
    try:
        config = load_config(args.config, args.override or ())
    except ConfigError as e:
        print(f"kafka-rpc: configuration error: {e}", file=sys.stderr)
        return 2
    _reexec_with_malloc_env(argv)

    from kafka_rpc.server.server import Server, handlers_registry, install_uvloop

    uv = install_uvloop()

    async def run() -> None:
        server = Server(config, handlers_registry())
        task = asyncio.ensure_future(server.serve(install_signals=True))
        started = asyncio.ensure_future(server.started.wait())
        await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        if server.started.is_set():
            for ls in server.listeners.values():
                print(f"listening {ls.name} ({ls.role}) on {ls.host}:{ls.port}", flush=True)
            adv = server.advertised()
            if adv.port >= 0:
                print(f"advertised {adv.name} as {adv.host}:{adv.port}", flush=True)
            if server.metrics_port is not None:
                print(f"metrics on http://{config.metrics_host}:{server.metrics_port}/metrics",
                      flush=True)  # fmt: skip
            print(f"data directory {config.data_dir.resolve()}", flush=True)
            print(f"cluster id {server.cluster_id}, node id {server.node_id}, "
                  f"event loop {'uvloop' if uv else 'asyncio'}", flush=True)  # fmt: skip
        started.cancel()
        if server.started.is_set():
            _tune_gc()
        await task

    try:
        asyncio.run(run())
    except ConfigError as e:
        print(f"kafka-rpc: configuration error: {e}", file=sys.stderr)
        return 2
    except TimeoutError as e:  # server.max.startup.time.ms (an OSError: before the next)
        print(f"kafka-rpc: start failed: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"kafka-rpc: cannot listen: {e}", file=sys.stderr)
        return 1
    return 0


def _cmd_api_versions(args: argparse.Namespace, argv: list[str]) -> int:
    from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
    from kafka_rpc.protocol import codec

    async def run() -> int:
        try:
            client = await secured(KafkaRpcClient.connect, args)(
                args.bootstrap_server, client_id="kafka-rpc-api-versions",
                connect_timeout=args.timeout, request_timeout=args.timeout,
            )  # fmt: skip
        except (KafkaConnectionError, OSError) as e:
            print(f"kafka-rpc: {e}", file=sys.stderr)
            return 1
        host, port = client.connected_to
        print(f"{host}:{port} (id: unknown) -> (")
        lines = []
        for key, (lo, hi) in sorted(client.server_versions.items()):
            name = codec.REQUESTS_BY_KEY.get(key, f"Unknown{key}Request")[: -len("Request")]
            usable = client.versions.get(key)
            use = f"[usable: {usable}]" if usable is not None else "[unusable]"
            lines.append(f"\t{name}({key}): {lo} to {hi} {use}")
        print(",\n".join(lines))
        print(")")
        await client.close()
        return 0

    return asyncio.run(run())


def _cmd_storage(args: argparse.Namespace, argv: list[str]) -> int:
    """Kafka's ``kafka-storage.sh``: ``random-uuid`` prints a new cluster id; ``format`` writes
    ``bootstrap.checkpoint`` and ``meta.properties`` into every log directory and the metadata
    log directory (``kafka_rpc.storage.formatter.format_storage``). The bootstrap's feature levels
    are Kafka's ``Formatter`` rules (``--release-version`` parsed as Kafka's
    ``MetadataVersion.fromVersionString``, ``--feature NAME=LEVEL`` repeatable, every other
    feature at its default for that version) with our features (``kafka_rpc.*``) at their max,
    or at 0 with ``--kafka-compatible``; ``--add-scram`` credentials follow them
    (docs/features.md). Exit 1 with Kafka's message when a directory is already formatted
    (unless ``--ignore-formatted``) or a feature setting is refused, 2 on a configuration
    error."""
    from kafka_rpc.controller.features import (
        BOOTSTRAP_METADATA_VERSION,
        FeatureError,
        default_feature_levels,
        metadata_version,
        parse_release_version,
    )
    from kafka_rpc.protocol.uuids import random_uuid_text
    from kafka_rpc.storage.bootstrap import bootstrap_from
    from kafka_rpc.storage.errors import StorageFormattedError
    from kafka_rpc.storage.formatter import format_storage

    if args.storage_command == "random-uuid":
        print(random_uuid_text())
        return 0
    try:
        config = load_config(args.config, args.override or ())
        kafka_compatible = args.kafka_compatible or config.kafka_compatible
        mv = BOOTSTRAP_METADATA_VERSION
        if args.release_version is not None:
            mv = parse_release_version(args.release_version).level
        overrides = _feature_levels(args.feature or ())
        levels = default_feature_levels(mv, overrides, kafka_compatible)
        scram = _scram_credentials(args.add_scram or ())
        if scram is not None:
            from kafka_rpc.controller.scram import scram_records

            scram = scram_records(scram)
        bootstrap = bootstrap_from(levels, scram or ())
    except ConfigError as e:
        print(f"kafka-rpc: configuration error: {e}", file=sys.stderr)
        return 2
    except (FeatureError, ValueError) as e:
        print(e, file=sys.stderr)
        return 1
    try:
        formatted = format_storage(config, args.cluster_id, args.ignore_formatted, bootstrap)
    except StorageFormattedError as e:
        print(e, file=sys.stderr)
        return 1
    except ConfigError as e:
        print(f"kafka-rpc: configuration error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kafka-rpc: cannot format: {e}", file=sys.stderr)
        return 1
    if not formatted:
        print("All of the log directories are already formatted.")
        return 0
    print("Bootstrap metadata: " + ", ".join(f"{k}={v}" for k, v in sorted(levels.items())))
    name = metadata_version(mv).name
    meta_dir = Path(config.metadata_log_dir).resolve()
    for d in formatted:
        kind = "metadata" if d.resolve() == meta_dir else "data"
        print(f"Formatting {kind} directory {d} with metadata.version {name}.")
    return 0


def _feature_levels(items) -> dict[str, int]:
    """``--feature NAME=LEVEL`` arguments (Kafka's ``StorageTool.parseNameAndLevel``: the name
    and level trimmed, the level a short); ValueError with Kafka's message otherwise."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"Can't parse feature=level string {item}: equals sign not found.")
        try:
            lvl = int(text.strip())
            if not -32768 <= lvl <= 32767:
                raise ValueError
        except ValueError:
            raise ValueError(f"Can't parse feature=level string {item}: unable to parse "
                             f"{text.strip()} as a short.") from None  # fmt: skip
        out[name.strip()] = lvl
    return out


def _scram_credentials(items) -> Any:
    """``--add-scram`` arguments (Kafka's syntax) salted into a ``ScramCredentials`` store, or
    None without any (ConfigError on a malformed one)."""
    if not items:
        return None
    from kafka_rpc.security.sasl import ScramCredentials, parse_add_scram

    store = ScramCredentials()
    for item in items:
        mech, name, password, iterations, salt = parse_add_scram(item)
        store.add(mech, name, password, iterations, salt)
    return store


def _quorum_status_lines(cluster_id: str, p, nodes) -> list[str]:
    """Kafka's ``kafka-metadata-quorum describe --status`` lines for DescribeQuorum partition
    data ``p`` (MaxFollowerLag = high watermark - the smallest voter log end offset, and its
    time lag from the leader's last caught-up time, as ``MetadataQuorumCommand``)."""
    import json

    endpoints = {n.node_id: [f"{li.name}://{li.host}:{li.port}" for li in n.listeners]
                 for n in nodes}  # fmt: skip

    def replicas(states, with_endpoints: bool) -> str:
        out = []
        for r in states:
            d = {"id": r.replica_id, "directoryId": uuid_text(r.replica_directory_id)}
            if with_endpoints and r.replica_id in endpoints:
                d["endpoints"] = endpoints[r.replica_id]
            out.append(json.dumps(d))
        return "[" + ", ".join(out) + "]"

    leader = next((r for r in p.current_voters if r.replica_id == p.leader_id), None)
    laggard = min(p.current_voters, key=lambda r: r.log_end_offset, default=None)
    lag = p.high_watermark - laggard.log_end_offset if laggard is not None else 0
    if laggard is None or laggard is leader:
        lag_ms = 0
    elif leader is not None and leader.last_caught_up_timestamp >= 0 <= (
        laggard.last_caught_up_timestamp
    ):
        lag_ms = leader.last_caught_up_timestamp - laggard.last_caught_up_timestamp
    else:
        lag_ms = -1
    rows = [
        ("ClusterId:", cluster_id),
        ("LeaderId:", p.leader_id),
        ("LeaderEpoch:", p.leader_epoch),
        ("HighWatermark:", p.high_watermark),
        ("MaxFollowerLag:", lag),
        ("MaxFollowerLagTimeMs:", lag_ms),
        ("CurrentVoters:", replicas(p.current_voters, True)),
        ("CurrentObservers:", replicas(p.observers, False)),
    ]
    return [f"{k:<24}{v}" for k, v in rows]


def _quorum_replication_lines(p) -> list[str]:
    """Kafka's ``describe --replication`` table (Lag = high watermark - log end offset)."""
    header = ("NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
              "LastCaughtUpTimestamp", "Status")  # fmt: skip
    rows = [header]
    for states, kind in ((p.current_voters, "Follower"), (p.observers, "Observer")):
        for r in states:
            status = "Leader" if r.replica_id == p.leader_id else kind
            lag = max(0, p.high_watermark - r.log_end_offset)
            rows.append((str(r.replica_id), uuid_text(r.replica_directory_id),
                         str(r.log_end_offset), str(lag), str(r.last_fetch_timestamp),
                         str(r.last_caught_up_timestamp), status))  # fmt: skip
    leader_first = rows[:1] + sorted(rows[1:], key=lambda r: r[6] != "Leader")
    widths = [max(len(r[i]) for r in leader_first) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in leader_first]  # fmt: skip


def _cmd_metadata_quorum(args: argparse.Namespace, argv: list[str]) -> int:
    """Kafka's ``kafka-metadata-quorum.sh describe --status | --replication``: one
    DescribeQuorum for ``__cluster_metadata-0``. The cluster id comes from DescribeCluster, as
    Kafka's tool gets it from ``Admin.describeCluster`` (EndpointType 2 on a controller listener,
    1 on a broker listener); ``unknown`` when the endpoint answers neither it nor Metadata."""
    from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
    from kafka_rpc.protocol import codec
    from kafka_rpc.protocol.errors import ErrorCode, KafkaError
    from kafka_rpc.raft.api import METADATA_TOPIC_NAME

    mod = codec.module("DescribeQuorumRequest")
    topic = mod.TopicData(topic_name=METADATA_TOPIC_NAME,
                          partitions=(mod.PartitionData(partition_index=0),))  # fmt: skip
    req = mod.DescribeQuorumRequest(topics=(topic,))

    async def ask(address: str) -> tuple[Any, str]:
        client = await secured(KafkaRpcClient.connect, args)(
            address, client_id="kafka-rpc-metadata-quorum",
            connect_timeout=args.timeout, request_timeout=args.timeout,
        )  # fmt: skip
        try:
            resp = await client.request(req)
            cluster_id = None
            if 60 in client.versions:  # DescribeCluster
                dc = await client.request(codec.message_class("DescribeClusterRequest")(
                    endpoint_type=2 if args.bootstrap_controller else 1))  # fmt: skip
                cluster_id = dc.cluster_id if not dc.error_code else None
            if cluster_id is None and 3 in client.versions:
                md = await client.request(codec.message_class("MetadataRequest")(topics=()))
                cluster_id = md.cluster_id
            return resp, cluster_id or "unknown"
        finally:
            await client.close()

    async def run() -> int:
        # Kafka's admin client sends DescribeQuorum to the active controller: a controller
        # that is not the leader names it (and, from v2, every voter's endpoints), so follow.
        address = args.bootstrap_controller or args.bootstrap_server
        for _hop in range(3):
            try:
                resp, cluster_id = await ask(address)
            except (KafkaError, KafkaConnectionError, TimeoutError, OSError, ValueError) as e:
                print(f"kafka-rpc: DescribeQuorum failed: {e}", file=sys.stderr)
                return 1
            code = resp.error_code
            p = resp.topics[0].partitions[0] if resp.topics and resp.topics[0].partitions else None
            if not code and p is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if not code:
                code = p.error_code
            leader = next((n for n in resp.nodes if p is not None and n.node_id == p.leader_id
                           and n.listeners), None)  # fmt: skip
            if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and leader is not None:
                address = f"{leader.listeners[0].host}:{leader.listeners[0].port}"
                continue
            break
        if code:
            name = ErrorCode.for_code(code).name
            hint = f" (leader: {p.leader_id}, epoch {p.leader_epoch})" if p is not None else ""
            print(f"kafka-rpc: DescribeQuorum failed: {name}{hint}", file=sys.stderr)
            return 1
        if args.status:
            lines = _quorum_status_lines(cluster_id, p, resp.nodes)
        else:
            lines = _quorum_replication_lines(p)
        print("\n".join(lines))
        return 0

    return asyncio.run(run())


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

    repo = Path(__file__).resolve().parents[1]
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
    if args.cluster:  # kafka_rpc/tools/bench_cluster.py: nodes, kill and restart, cleanup
        from kafka_rpc.tools.bench_cluster import run_load

        kill_at = (
            None if args.no_kill else args.duration / 2 if args.kill_at is None else args.kill_at
        )
        props = dict(o.split("=", 1) for o in args.server_override or () if "=" in o)
        return run_load(spark_cmd, env, out, n=args.cluster, kill_at=kill_at,
                        restart_after=args.restart_after, props=props)  # fmt: skip
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


def _cmd_dump_log(args: argparse.Namespace, argv: list[str]) -> int:
    from kafka_rpc.tools.dump_log import dump_files

    return dump_files(args.files.split(","), print_data_log=args.print_data_log,
                      metadata_decoder=args.cluster_metadata_decoder)  # fmt: skip


def _cmd_acls(args: argparse.Namespace, argv: list[str]) -> int:
    from kafka_rpc.tools.acls import run_sync

    return run_sync(args)


def _cmd_topics(args: argparse.Namespace, argv: list[str]) -> int:
    from kafka_rpc.tools.topics import run_sync

    return run_sync(args)


def _cmd_cluster(args: argparse.Namespace, argv: list[str]) -> int:
    from kafka_rpc.tools.cluster import run_sync

    return run_sync(args)


def _cmd_chunks(args: argparse.Namespace, argv: list[str]) -> int:
    from kafka_rpc.tools.chunks import run_sync

    return run_sync(args)


def _cmd_diskless(args: argparse.Namespace, argv: list[str]) -> int:
    from kafka_rpc.tools.diskless import run_sync

    return run_sync(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kafka-rpc", description=__doc__.splitlines()[0])
    p.add_argument("--log-level", default=os.environ.get("KAFKA_RPC_LOG_LEVEL", "INFO"))
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the server")
    s.add_argument("--config", help="server.properties file")
    s.add_argument("--override", action="append", metavar="KEY=VALUE",
                   help="override a setting (repeatable)")  # fmt: skip
    s.set_defaults(func=_cmd_serve)

    a = sub.add_parser("api-versions", help="list the APIs a server supports")
    a.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    a.add_argument("--timeout", type=float, default=10.0)
    add_command_config(a)
    a.set_defaults(func=_cmd_api_versions)

    st = sub.add_parser("storage", help="format storage directories (kafka-storage.sh)")
    st_sub = st.add_subparsers(dest="storage_command", required=True)
    st_sub.add_parser("random-uuid", help="print a new cluster id").set_defaults(func=_cmd_storage)
    f = st_sub.add_parser("format", help="write meta.properties into the log directories")
    f.add_argument("--cluster-id", "-t", required=True, help="the cluster id (22-char base64)")
    f.add_argument("--config", "-c", required=True, help="server.properties file")
    f.add_argument("--override", action="append", metavar="KEY=VALUE",
                   help="override a setting (repeatable)")  # fmt: skip
    f.add_argument("--ignore-formatted", "-g", action="store_true",
                   help="skip directories already formatted instead of failing")  # fmt: skip
    f.add_argument("--add-scram", "-S", action="append", metavar="SCRAM",
                   help="a SCRAM credential, e.g. 'SCRAM-SHA-256=[name=alice,password=pw]' "
                   "(repeatable; salted into bootstrap.checkpoint)")  # fmt: skip
    f.add_argument("--release-version", "-r", metavar="VERSION",
                   help="the metadata.version to start with, as Kafka's (4.2-IV1, 3.9 ...); "
                   "default: the newest kafka-rpc supports")  # fmt: skip
    f.add_argument("--feature", "-f", action="append", metavar="NAME=LEVEL",
                   help="the level of one feature (repeatable), e.g. group.version=0")  # fmt: skip
    f.add_argument("--kafka-compatible", action="store_true",
                   help="leave kafka-rpc's own features (kafka_rpc.*) at 0 so that Apache "
                   "Kafka brokers and controllers can join (docs/features.md)")  # fmt: skip
    f.set_defaults(func=_cmd_storage)

    mq = sub.add_parser("metadata-quorum", help="describe the metadata quorum "
                        "(kafka-metadata-quorum.sh)")  # fmt: skip
    where = mq.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-controller", metavar="HOST:PORT")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT")
    mq.add_argument("--timeout", type=float, default=10.0)
    add_command_config(mq)
    mq_sub = mq.add_subparsers(dest="quorum_command", required=True)
    desc = mq_sub.add_parser("describe", help="print the quorum's status or replication")
    what = desc.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true")
    what.add_argument("--replication", action="store_true")
    desc.set_defaults(func=_cmd_metadata_quorum)

    b = sub.add_parser("bench", help="run the Spark diskless load + verification pipeline",
                       description="Runs bench/diskless_load.py through spark-submit with the "
                       "loopback settings; extra options after -- go to diskless_load.py "
                       "(see its --help).")  # fmt: skip
    b.add_argument("--master", default="local[2]")
    b.add_argument("--duration", type=float, default=60.0)
    g = b.add_mutually_exclusive_group()
    g.add_argument("--server", metavar="HOST:PORT")
    g.add_argument(
        "--start-server",
        action="store_true",
        help="start `kafka-rpc serve` on ephemeral ports for the run",
    )
    g.add_argument(
        "--cluster",
        type=int,
        metavar="N",
        help="start N broker+controller nodes on loopback (the default, topic-based Batch "
        "Coordinator), SIGKILL the coordinator leader during the load and restart it",
    )
    g.add_argument(
        "--kafka-brokers",
        type=int,
        metavar="N",
        help="start three kafka-rpc controllers and N Apache Kafka brokers, write keyed acks=all "
        "records with Spark's Kafka connector (bench/spark_kafka_load.py), SIGKILL the active "
        "controller and a broker during the write, then check with a Spark read",
    )
    b.add_argument(
        "--kill-at",
        type=float,
        metavar="SECONDS",
        help="with --cluster: the coordinator leader's SIGKILL, in seconds after the load's "
        "first acknowledged commit (default: --duration / 2); with --kafka-brokers: the active "
        "controller's (default: --duration / 3; the broker's is at 2/3)",
    )
    b.add_argument(
        "--no-kill", action="store_true", help="with --cluster or --kafka-brokers: kill no node"
    )
    b.add_argument(
        "--restart-after",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="with --cluster or --kafka-brokers: restart a killed node this long after its kill",
    )
    b.add_argument(
        "--controller",
        metavar="HOST:PORT",
        help="controller listener for the broker roles' BrokerRegistration, BrokerHeartbeat "
        "and AllocateProducerIds (default with --start-server: its controller listener; "
        "else diskless_load.py's default)",
    )
    b.add_argument(
        "--server-cpus",
        default="1",
        help="taskset CPU list for the started server ('none': no pinning)",
    )
    b.add_argument(
        "--spark-cpus",
        default="rest",
        help="taskset CPU list for Spark ('rest': the CPUs the server does not get "
        "when it was started pinned; 'none')",
    )
    b.add_argument(
        "--server-override",
        action="append",
        metavar="KEY=VALUE",
        help="--override for the started server or every --cluster node (repeatable)",
    )
    b.add_argument("--out", help="output dir (default bench/results/<timestamp>)")
    b.add_argument("--driver-memory", default="1g")
    b.add_argument("load_args", nargs=argparse.REMAINDER, help="-- options for diskless_load.py")
    b.set_defaults(func=_cmd_bench)

    dl = sub.add_parser("dump-log", help="print metadata log segments and snapshots "
                        "(kafka-dump-log.sh)")  # fmt: skip
    dl.add_argument("--files", required=True, metavar="FILE[,FILE...]",
                    help="comma-separated .log segments and .checkpoint snapshots")  # fmt: skip
    dl.add_argument("--cluster-metadata-decoder", action="store_true",
                    help="decode metadata records (implies --print-data-log)")  # fmt: skip
    dl.add_argument("--print-data-log", action="store_true", help="print each record")
    dl.set_defaults(func=_cmd_dump_log)

    from kafka_rpc.tools.acls import add_arguments as _acls_arguments
    from kafka_rpc.tools.topics import add_arguments as _topics_arguments

    ac = sub.add_parser("acls", help="add, remove and list ACLs (kafka-acls.sh)")
    _acls_arguments(ac)
    ac.set_defaults(func=_cmd_acls)
    tp = sub.add_parser("topics", help="create, alter (add partitions), delete, list and "
                        "describe topics (kafka-topics.sh)")  # fmt: skip
    _topics_arguments(tp)
    tp.set_defaults(func=_cmd_topics)

    from kafka_rpc.tools.cluster import add_arguments as _cluster_arguments

    cl = sub.add_parser("cluster", help="print the cluster id, unregister a broker "
                        "(kafka-cluster.sh)")  # fmt: skip
    _cluster_arguments(cl)
    cl.set_defaults(func=_cmd_cluster)

    from kafka_rpc.tools.chunks import add_arguments as _chunks_arguments

    ch = sub.add_parser("chunks", help="create chunks or move inactive ones (KIP-1114's "
                        "kafka-chunks.sh)")  # fmt: skip
    _chunks_arguments(ch)
    ch.set_defaults(func=_cmd_chunks)

    from kafka_rpc.tools.diskless import add_arguments as _diskless_arguments

    dk = sub.add_parser("diskless", help="assign diskless partitions to Batch Coordinators "
                        "(KIP-1164 AssignPartitionToBatchCoordinator)")  # fmt: skip
    _diskless_arguments(dk)
    dk.set_defaults(func=_cmd_diskless)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return args.func(args, argv)


if __name__ == "__main__":
    sys.exit(main())
