"""``kafka-rpc topics``: Kafka's ``kafka-topics.sh`` (``org.apache.kafka.tools.TopicCommand``)
over :class:`~kafka_rpc.client.KafkaRpcClient` on a broker listener.

    kafka-rpc topics --bootstrap-server H:P --create --topic T [--partitions N]
                     [--replication-factor R] [--config k=v ...] [--if-not-exists]
    kafka-rpc topics --bootstrap-server H:P --alter --topic T --partitions N
                     [--replica-assignment B:B,B:B] [--if-exists]
    kafka-rpc topics --bootstrap-server H:P --delete --topic T [--if-exists]
    kafka-rpc topics --bootstrap-server H:P --list
    kafka-rpc topics --bootstrap-server H:P --describe [--topic T]

CreateTopics, CreatePartitions (``--alter``: more partitions; on ``__diskless-metadata`` more
Batch Coordinators, KIP-1164), DeleteTopics, Metadata and DescribeConfigs requests; the output
is Kafka's: ``Created topic T.``, one name per line (sorted) for ``--list``, and for
``--describe``::

    Topic: T<TAB>TopicId: <id><TAB>PartitionCount: N<TAB>ReplicationFactor: R<TAB>Configs: a=1,b=2
    <TAB>Topic: T<TAB>Partition: 0<TAB>Leader: 1<TAB>Replicas: 1,2<TAB>Isr: 1,2

(``Configs:`` lists the configs that are not at their default, ``name=value`` joined by ``,``
in name order, from DescribeConfigs; nothing when the server does not serve DescribeConfigs;
``Leader: none`` without a leader). Partitions with chunks (KIP-1114, Metadata v14) add
``<TAB>StartOffset: N`` (the active chunk's start) and one line per inactive chunk with its
start, stop and end offsets, replicas and ISR, as the KIP asks::

    <TAB><TAB>Chunk: StartOffset: 0<TAB>StopOffset: 9<TAB>EndOffset: 9<TAB>Replicas: 2<TAB>Isr: 2

Any failure prints ``Error while executing topic command : <message>`` on stdout and exits 1, as
Kafka does; a command line without exactly one action prints Kafka's usage message on stderr
and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import IO, Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode, KafkaError
from kafka_rpc.protocol.uuids import uuid_text
from kafka_rpc.tools import add_command_config, secured

__all__ = ["TopicCommandError", "add_arguments", "run", "run_sync"]

_CREATE_TOPICS, _DELETE_TOPICS = 19, 20
_DESCRIBE_CONFIGS = 32
_TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
_DEFAULT_CONFIG = 5  # ConfigSource.DEFAULT_CONFIG: not shown by --describe
_ACTIONS = ("list", "describe", "create", "alter", "delete")
_ACTION_MESSAGE = (
    "Command must include exactly one action: --list, --describe, --create, --alter or --delete"
)
_COLLISION_WARNING = (
    "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore "
    "('_') could collide. To avoid issues it is best to use either, but not both."
)
#: Kafka's ``Errors`` default messages, used when a response carries no ErrorMessage.
_DEFAULT_MESSAGES = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.REQUEST_TIMED_OUT: "The request timed out.",
    ErrorCode.INVALID_TOPIC_EXCEPTION: (
        "The request attempted to perform an operation on an invalid topic."
    ),
    ErrorCode.TOPIC_ALREADY_EXISTS: "Topic with this name already exists.",
    ErrorCode.INVALID_PARTITIONS: "Number of partitions is below 1.",
    ErrorCode.INVALID_REPLICATION_FACTOR: (
        "Replication factor is below 1 or larger than the number of available brokers."
    ),
    ErrorCode.INVALID_CONFIG: "Configuration is invalid.",
    ErrorCode.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    ErrorCode.UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: "Replica assignment is invalid.",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
}


class TopicCommandError(Exception):
    """A failure reported as ``Error while executing topic command : <message>``."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``kafka-topics.sh`` this tool supports."""
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                   help="a broker listener to connect to")  # fmt: skip
    p.add_argument("--create", action="store_true", help="create a new topic")
    p.add_argument("--delete", action="store_true", help="delete a topic")
    p.add_argument("--list", action="store_true", help="list all topics")
    p.add_argument("--describe", action="store_true", help="describe topics")
    p.add_argument("--alter", action="store_true",
                   help="add partitions to a topic (on __diskless-metadata: Batch Coordinators)")
    p.add_argument("--topic", help="the topic to create, alter, delete or describe")
    p.add_argument("--partitions", type=int,
                   help="partitions of the topic (--create), its new count (--alter)")
    p.add_argument("--replica-assignment", metavar="B:B,B:B",
                   help="replicas per partition, partitions separated by ',' (--alter: the "
                   "existing partitions' entries are skipped)")  # fmt: skip
    p.add_argument("--replication-factor", type=int,
                   help="replicas of each partition (--create)")  # fmt: skip
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config override (--create, repeatable)")  # fmt: skip
    p.add_argument("--if-not-exists", action="store_true",
                   help="with --create: do nothing if the topic exists")  # fmt: skip
    p.add_argument("--if-exists", action="store_true",
                   help="--alter/--delete/--describe: no error if there is no such topic")
    p.add_argument("--exclude-internal", action="store_true",
                   help="--list/--describe: leave out internal topics")  # fmt: skip
    p.add_argument("--timeout", type=float, default=30.0, help="request timeout, seconds")
    add_command_config(p)


def check_args(args: argparse.Namespace) -> str | None:
    """Kafka ``TopicCommandOptions.checkArgs``: the usage error, or None."""
    if sum(bool(getattr(args, a)) for a in _ACTIONS) != 1:
        return _ACTION_MESSAGE
    if (args.create or args.delete or args.alter) and not args.topic:
        return 'Missing required argument "[topic]"'
    if args.alter and args.partitions is None:
        return 'Missing required argument "[partitions]"'
    if args.alter and args.config:
        return ('Option "[config]" can\'t be used with option "[alter]": use kafka-configs to '
                "alter a topic's configs")
    if not args.create:
        create_only: tuple[tuple[str, Any], ...]
        create_only = (("--replication-factor", args.replication_factor),
                       ("--config", args.config),
                       ("--if-not-exists", args.if_not_exists))  # fmt: skip
        if not args.alter:
            create_only = (("--partitions", args.partitions),
                           ("--replica-assignment", args.replica_assignment), *create_only)
        for opt, val in create_only:
            if val:
                return f'Option "{opt}" can only be used with "--create"'
    elif args.replica_assignment:
        return 'Option "--replica-assignment" can only be used with "--alter" here'
    return None


def parse_replica_assignment(text: str) -> list[tuple[int, ...]]:
    """Kafka ``TopicCommand.parseReplicaAssignment``: ``"1:2,3:4"`` -> ``[(1, 2), (3, 4)]``
    (partition 0, 1, ...); a partition naming a broker twice is an error."""
    out = []
    for part in text.split(","):
        try:
            ids = tuple(int(b.strip()) for b in part.split(":") if b.strip())
        except ValueError:
            raise TopicCommandError(f"Invalid replica assignment {text!r}") from None
        if len(set(ids)) != len(ids):
            dupes = ", ".join(str(b) for b in ids)
            raise TopicCommandError(
                f"Partition replica lists may not contain duplicate entries: {dupes}"
            )
        out.append(ids)
    return out


def parse_configs(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TopicCommandError(
                'Invalid topic config: all configs to be added must be in the format "key=val".'
            )
        out.append((key.strip(), value.strip()))
    return out


def _error(code: int, message: str | None) -> TopicCommandError:
    ec = ErrorCode.for_code(code)
    return TopicCommandError(message or _DEFAULT_MESSAGES.get(ec, ec.name))


def _nodes(ids: Any) -> str:
    return ",".join(str(i) for i in ids)


def describe_lines(topic: Any, configs: str = "") -> list[str]:
    """``--describe`` lines of one MetadataResponseTopic (Kafka ``TopicDescription``);
    ``configs`` the ``name=value,...`` text of its non-default configs."""
    parts = sorted(topic.partitions, key=lambda p: p.partition_index)
    rf = len(parts[0].replica_nodes) if parts else 0
    lines = [
        f"Topic: {topic.name}\tTopicId: {uuid_text(topic.topic_id)}\t"
        f"PartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: {configs}"
    ]
    for p in parts:
        leader = p.leader_id if p.leader_id >= 0 else "none"
        line = (f"\tTopic: {topic.name}\tPartition: {p.partition_index}\tLeader: {leader}\t"
                f"Replicas: {_nodes(p.replica_nodes)}\tIsr: {_nodes(p.isr_nodes)}")  # fmt: skip
        if p.offline_replicas:
            line += f"\tOffline: {_nodes(p.offline_replicas)}"
        if getattr(p, "start_offset", -1) >= 0:  # the active chunk's start (KIP-1114, v14)
            line += f"\tStartOffset: {p.start_offset}"
        lines.append(line)
        for c in sorted(getattr(p, "chunks", ()) or (), key=lambda c: c.start_offset):
            lines.append(f"\t\tChunk: StartOffset: {c.start_offset}\tStopOffset: "
                         f"{c.stop_offset}\tEndOffset: {c.end_offset}\tReplicas: "
                         f"{_nodes(c.replica_nodes)}\tIsr: {_nodes(c.isr_nodes)}")  # fmt: skip
    return lines


class TopicCommand:
    """The five actions over a connected client (anything with ``request(msg, timeout=)`` and
    ``version_for(api_key)``)."""

    def __init__(self, client: Any, out: IO[str], timeout: float = 30.0) -> None:
        self.client = client
        self.out = out
        self.timeout = timeout

    def _print(self, line: str) -> None:
        print(line, file=self.out)

    async def create(self, args: argparse.Namespace) -> None:
        if args.partitions is not None and args.partitions < 1:
            raise TopicCommandError("The partitions must be greater than 0")
        rf = args.replication_factor
        if rf is not None and not 1 <= rf <= 32767:
            raise TopicCommandError("The replication factor must be between 1 and 32767 inclusive")
        configs = parse_configs(args.config)
        mod = codec.module("CreateTopicsRequest")
        topic = mod.CreatableTopic(
            name=args.topic,
            num_partitions=-1 if args.partitions is None else args.partitions,
            replication_factor=-1 if rf is None else rf,
            configs=tuple(mod.CreatableTopicConfig(name=k, value=v) for k, v in configs),
        )
        if "." in args.topic or "_" in args.topic:
            self._print(_COLLISION_WARNING)
        req = mod.MESSAGE(topics=(topic,), timeout_ms=int(self.timeout * 1000))
        resp = await self.client.request(req, timeout=self.timeout)
        for r in resp.topics:
            if r.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
                return
            if r.error_code:
                raise _error(r.error_code, r.error_message)
        self._print(f"Created topic {args.topic}.")

    async def alter(self, args: argparse.Namespace) -> None:
        """Kafka ``TopicService.alterTopic``: the topic must exist (unless ``--if-exists``), then
        CreatePartitions to ``--partitions``, with the ``--replica-assignment`` entries of the
        new partitions (those of the existing ones skipped)."""
        topics = await self._metadata(args.topic)
        if not topics:
            if args.if_exists:
                return
            raise TopicCommandError(f"Topic '{args.topic}' does not exist as expected")
        mod = codec.module("CreatePartitionsRequest")
        assignments = None
        if args.replica_assignment:
            current = len(topics[0].partitions)
            assignments = tuple(
                mod.CreatePartitionsAssignment(broker_ids=ids)
                for ids in parse_replica_assignment(args.replica_assignment)[current:]
            )
        req = mod.MESSAGE(
            topics=(mod.CreatePartitionsTopic(name=args.topic, count=args.partitions,
                                              assignments=assignments),),
            timeout_ms=int(self.timeout * 1000), validate_only=False,
        )  # fmt: skip
        resp = await self.client.request(req, timeout=self.timeout)
        for r in resp.results:
            if r.error_code:
                raise _error(r.error_code, r.error_message)

    async def delete(self, args: argparse.Namespace) -> None:
        mod = codec.module("DeleteTopicsRequest")
        timeout_ms = int(self.timeout * 1000)
        if self.client.version_for(_DELETE_TOPICS) >= 6:
            req = mod.MESSAGE(topics=(mod.DeleteTopicState(name=args.topic),),
                              timeout_ms=timeout_ms)  # fmt: skip
        else:
            req = mod.MESSAGE(topic_names=(args.topic,), timeout_ms=timeout_ms)
        resp = await self.client.request(req, timeout=self.timeout)
        for r in resp.responses:
            if r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                if args.if_exists:
                    return
                raise TopicCommandError(f"Topic '{args.topic}' does not exist as expected")
            if r.error_code:
                raise _error(r.error_code, r.error_message)

    async def _metadata(self, name: str | None) -> list[Any]:
        mod = codec.module("MetadataRequest")
        topics = None if name is None else (mod.MetadataRequestTopic(name=name),)
        req = mod.MESSAGE(topics=topics, allow_auto_topic_creation=False)
        resp = await self.client.request(req, timeout=self.timeout)
        out = []
        for t in resp.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if t.error_code:
                raise _error(t.error_code, None)
            out.append(t)
        return sorted(out, key=lambda t: t.name or "")

    async def list_topics(self, args: argparse.Namespace) -> None:
        """Every topic name, internal ones (``__diskless-metadata``) included unless
        ``--exclude-internal`` (Kafka's ``TopicCommand``: Metadata's IsInternal)."""
        for t in await self._metadata(None):
            if getattr(args, "exclude_internal", False) and t.is_internal:
                continue
            self._print(t.name)

    async def describe(self, args: argparse.Namespace) -> None:
        topics = await self._metadata(args.topic)
        if args.topic and not topics:
            if args.if_exists:
                return
            raise TopicCommandError(f"Topic '{args.topic}' does not exist as expected")
        topics = [t for t in topics
                  if not (getattr(args, "exclude_internal", False) and t.is_internal)]  # fmt: skip
        configs = await self._configs([t.name for t in topics])
        for t in topics:
            for line in describe_lines(t, configs.get(t.name, "")):
                self._print(line)

    async def _configs(self, names: list[str]) -> dict[str, str]:
        """Each topic's non-default configs as Kafka's ``TopicCommand`` prints them
        (``name=value`` of the entries whose source is not DEFAULT_CONFIG, joined by ``,``, in
        name order), from one DescribeConfigs; {} when the server does not serve it."""
        try:
            self.client.version_for(_DESCRIBE_CONFIGS)
        except KafkaError:
            return {}
        if not names:
            return {}
        mod = codec.module("DescribeConfigsRequest")
        req = mod.MESSAGE(resources=tuple(
            mod.DescribeConfigsResource(resource_type=_TOPIC_RESOURCE, resource_name=n,
                                        configuration_keys=None) for n in names))  # fmt: skip
        resp = await self.client.request(req, timeout=self.timeout)
        out = {}
        for r in resp.results:
            if r.error_code:
                raise _error(r.error_code, r.error_message or None)
            shown = sorted((c for c in r.configs if c.config_source != _DEFAULT_CONFIG),
                           key=lambda c: c.name)  # fmt: skip
            out[r.resource_name] = ",".join(f"{c.name}={c.value}" for c in shown)
        return out


Connect = Callable[..., Awaitable[Any]]


async def run(
    args: argparse.Namespace,
    *,
    connect: Connect | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> int:
    """Run the command; returns the exit status. ``connect(bootstrap, **kw)`` defaults to
    :meth:`KafkaRpcClient.connect`."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    usage = check_args(args)
    if usage is not None:
        print(usage, file=err)
        return 1
    if connect is None:
        from kafka_rpc.client import KafkaRpcClient

        connect = KafkaRpcClient.connect
    connect = secured(connect, args)
    action = next(a for a in _ACTIONS if getattr(args, a))
    client = None
    try:
        client = await connect(
            args.bootstrap_server, client_id="kafka-rpc-topics",
            connect_timeout=args.timeout, request_timeout=args.timeout,
        )  # fmt: skip
        cmd = TopicCommand(client, out, args.timeout)
        actions = {"list": cmd.list_topics, "describe": cmd.describe, "create": cmd.create,
                   "alter": cmd.alter, "delete": cmd.delete}  # fmt: skip
        await actions[action](args)
        return 0
    except Exception as e:  # noqa: BLE001 - Kafka prints any failure this way (TopicCommand.main)
        print(f"Error while executing topic command : {str(e) or type(e).__name__}", file=out)
        return 1
    finally:
        if client is not None:
            await client.close()


def run_sync(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))
