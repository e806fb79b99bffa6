"""``kafka-rpc`` command line.

    kafka-rpc serve [--config server.properties] [--override key=value ...]
    kafka-rpc api-versions --bootstrap-server HOST:PORT
    kafka-rpc storage random-uuid
    kafka-rpc storage format --cluster-id ID --config server.properties [--override k=v]
                             [--ignore-formatted] [--release-version V] [--feature F=L ...]
                             [--kafka-compatible] [--add-scram SCRAM ...]
                             [--standalone | --initial-controllers ID@H:P:DIR,... |
                              --no-initial-controllers]
    kafka-rpc metadata-quorum (--bootstrap-controller|--bootstrap-server) HOST:PORT
                              [--command-config FILE] describe (--status|--replication)
    kafka-rpc metadata-quorum ... --command-config CONTROLLER.properties add-controller [--dry-run]
    kafka-rpc metadata-quorum ... remove-controller --controller-id N --controller-directory-id U
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
The subcommands are in ``serve``, ``storage``, ``metadata_quorum``, ``bench`` and ``tools``; this
module builds the parser and runs the subcommand asked for.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from kafka_rpc.cli.bench import _cmd_bench
from kafka_rpc.cli.metadata_quorum import _cmd_metadata_quorum
from kafka_rpc.cli.serve import _cmd_serve
from kafka_rpc.cli.storage import KafkaExitParser, _cmd_storage, add_format_quorum_arguments
from kafka_rpc.cli.tools import (
    _cmd_acls,
    _cmd_api_versions,
    _cmd_chunks,
    _cmd_cluster,
    _cmd_diskless,
    _cmd_dump_log,
    _cmd_topics,
)
from kafka_rpc.tools import add_command_config


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
    # usage errors exit 1 there, as Kafka's kafka-storage.sh
    st_sub = st.add_subparsers(dest="storage_command", required=True, parser_class=KafkaExitParser)
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
    add_format_quorum_arguments(f)
    f.set_defaults(func=_cmd_storage)

    mq = sub.add_parser("metadata-quorum", help="describe the metadata quorum "
                        "(kafka-metadata-quorum.sh)")  # fmt: skip
    where = mq.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-controller", metavar="HOST:PORT")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT")
    mq.add_argument("--timeout", type=float, default=10.0)
    add_command_config(mq)
    # usage errors of the subcommands exit 1, as Kafka's kafka-metadata-quorum.sh
    mq_sub = mq.add_subparsers(dest="quorum_command", required=True,
                               parser_class=KafkaExitParser)  # fmt: skip
    desc = mq_sub.add_parser("describe", help="print the quorum's status or replication")
    desc.add_argument("--status", action="store_true",
                      help="a short summary of the quorum status")  # fmt: skip
    desc.add_argument("--replication", action="store_true",
                      help="detailed information about the status of replication")  # fmt: skip
    desc.add_argument("--human-readable", action="store_true",
                      help="with --replication: timestamps as 'N ms ago'")  # fmt: skip
    add = mq_sub.add_parser("add-controller", help="add a controller to the KRaft controller "
                            "cluster (its properties file: --command-config)")  # fmt: skip
    add.add_argument("--dry-run", action="store_true",
                     help="print what would be done, but do not do it")  # fmt: skip
    add.set_defaults(func=_cmd_metadata_quorum)
    rm = mq_sub.add_parser("remove-controller",
                           help="remove a controller from the KRaft controller quorum")  # fmt: skip
    rm.add_argument("--controller-id", "-i", type=int, required=True,
                    help="the id of the controller to remove")  # fmt: skip
    rm.add_argument("--controller-directory-id", "-d", required=True,
                    help="the directory id of the controller to remove")  # fmt: skip
    rm.add_argument("--dry-run", action="store_true",
                    help="print what would be done, but do not do it")  # fmt: skip
    rm.set_defaults(func=_cmd_metadata_quorum)
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
        "--layout",
        choices=("combined", "dedicated"),
        default="combined",
        help="with --cluster: N broker+controller nodes (combined), or three controller-only "
        "nodes and N broker-only nodes holding the coordinator replicas (dedicated)",
    )
    b.add_argument(
        "--replace-node",
        action="store_true",
        help="with --cluster: instead of restarting the killed coordinator leader, start a new "
        "broker and move the dead node's __diskless-metadata replicas to it with a "
        "reassignment (AlterPartitionReassignments), waiting until the ISR is whole",
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
