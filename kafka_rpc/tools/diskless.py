"""``kafka-rpc diskless assign``: AssignPartitionToBatchCoordinator (10099, KIP-1164 "Scaling the
number of Batch Coordinators") from the command line, over
:class:`~kafka_rpc.client.KafkaRpcClient`.

    kafka-rpc diskless assign --bootstrap-controller H:P --topic T --partition P [--partition P2]
                              --coordinator-partition N [--bootstrap-server H:P] [--timeout S]

``--topic`` is a topic id (Kafka's 22-character URL-safe base64 ``Uuid.toString()`` or the
36-character form) or a topic name; a name is looked up with Metadata on ``--bootstrap-server``
(the controller listener serves no Metadata), and an unknown name is an error. The request goes
to the active controller: the tool asks the bootstrap controller for the controller id and
endpoints (DescribeCluster, EndpointType 2, KIP-919) and sends it there, asking again after
NOT_CONTROLLER (at most ``_ATTEMPTS`` times, 100 ms apart, within ``--timeout``).

Output, one line per partition in argument order::

    Assigned orders-0 to Batch Coordinator partition 1.
    Error for orders-7: UNKNOWN_TOPIC_OR_PARTITION

Exit status 0 when every entry succeeded, 1 otherwise (also for a connection failure or an
unknown topic name: ``Error: <message>`` on stderr); argument errors exit 2 (argparse).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import IO, Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.protocol.uuids import parse_uuid_text, uuid_text
from kafka_rpc.tools import add_command_config, secured

__all__ = ["add_arguments", "parse_topic_id", "run", "run_sync"]

Connect = Callable[..., Awaitable[Any]]
_ATTEMPTS = 5
_RETRY_BACKOFF_S = 0.1
_ENDPOINT_CONTROLLER = 2


class DisklessCommandError(Exception):
    """A failure reported as ``Error: <message>`` with exit status 1."""


def parse_topic_id(text: str) -> uuid.UUID | None:
    """The topic id ``text`` spells (22-character URL-safe base64 or 36-character form), or
    None when it is not one (then it is a topic name)."""
    if len(text) == 36:
        try:
            return uuid.UUID(text)
        except ValueError:
            return None
    if len(text) == 22:
        try:
            u = parse_uuid_text(text)
        except ValueError:
            return None
        if uuid_text(u) == text:  # canonical only: "a" * 22 is a name, not an id
            return u
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``assign`` subcommand."""
    sub = p.add_subparsers(dest="diskless_command", required=True)
    a = sub.add_parser("assign", help="assign diskless partitions to a Batch Coordinator "
                       "(a __diskless-metadata partition)")  # fmt: skip
    a.add_argument("--bootstrap-controller", metavar="HOST:PORT", required=True,
                   help="a controller listener to connect to")  # fmt: skip
    a.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="a broker listener, to look a topic name up")  # fmt: skip
    a.add_argument("--topic", required=True, help="topic name or topic id")
    a.add_argument("--partition", type=int, action="append", required=True,
                   help="partition of the topic (repeatable)")  # fmt: skip
    a.add_argument("--coordinator-partition", type=int, required=True,
                   help="the __diskless-metadata partition to own them")  # fmt: skip
    a.add_argument("--timeout", type=float, default=30.0, help="request timeout, seconds")
    add_command_config(a)


class _Tool:
    def __init__(self, args: argparse.Namespace, connect: Connect) -> None:
        self.args = args
        self.connect = connect
        self.timeout = args.timeout
        self._clients: list[Any] = []

    async def _open(self, address: str) -> Any:
        client = await self.connect(
            address, client_id="kafka-rpc-diskless",
            connect_timeout=self.timeout, request_timeout=self.timeout,
        )  # fmt: skip
        self._clients.append(client)
        return client

    async def close(self) -> None:
        while self._clients:
            await self._clients.pop().close()

    async def topic_id(self) -> uuid.UUID:
        tid = parse_topic_id(self.args.topic)
        if tid is not None:
            return tid
        if not self.args.bootstrap_server:
            raise DisklessCommandError(
                f"--topic {self.args.topic!r} is a name: give its id, or --bootstrap-server to "
                "look it up"
            )
        mod = codec.module("MetadataRequest")
        client = await self._open(self.args.bootstrap_server)
        md = await client.request(
            mod.MetadataRequest(topics=(mod.MetadataRequestTopic(name=self.args.topic),),
                                allow_auto_topic_creation=False),
            timeout=self.timeout,
        )  # fmt: skip
        t = md.topics[0] if md.topics else None
        if t is None or t.error_code or t.topic_id == uuid.UUID(int=0):
            code = ErrorCode.for_code(t.error_code if t else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise DisklessCommandError(f"Topic '{self.args.topic}' not found ({code.name})")
        return t.topic_id

    async def _active_controller(self) -> Any:
        boot = await self._open(self.args.bootstrap_controller)
        mod = codec.module("DescribeClusterRequest")
        resp = await boot.request(
            mod.DescribeClusterRequest(endpoint_type=_ENDPOINT_CONTROLLER), timeout=self.timeout
        )
        if resp.error_code:
            return boot
        node = next((b for b in resp.brokers if b.broker_id == resp.controller_id), None)
        if node is None or (node.host, node.port) == getattr(boot, "connected_to", None):
            return boot
        return await self._open(f"{node.host}:{node.port}")

    async def assign(self, out: IO[str]) -> bool:
        tid = await self.topic_id()
        mod = codec.module("AssignPartitionToBatchCoordinatorRequest")
        req = mod.AssignPartitionToBatchCoordinatorRequest(
            topics=(
                mod.AssignTopicToBatchCoordinator(
                    topic_id=tid,
                    partitions=tuple(
                        mod.AssignTopicPartitionToBatchCoordinator(
                            partition_index=p,
                            batch_coordinator_partition_index=self.args.coordinator_partition,
                        )
                        for p in self.args.partition
                    ),
                ),
            )
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        for attempt in range(_ATTEMPTS):
            client = await self._active_controller()
            resp = await client.request(req, timeout=self.timeout)
            codes = [p.error_code for t in resp.responses for p in t.partitions]
            retry = (
                ErrorCode.NOT_CONTROLLER in codes
                and attempt + 1 < _ATTEMPTS
                and loop.time() + _RETRY_BACKOFF_S < deadline
            )
            if not retry:
                break
            await self.close()
            await asyncio.sleep(_RETRY_BACKOFF_S)
        if len(codes) != len(self.args.partition):
            raise DisklessCommandError(f"{len(codes)} answers for {len(self.args.partition)}")
        ok = True
        n = self.args.coordinator_partition
        for p, code in zip(self.args.partition, codes, strict=True):
            if code == 0:
                print(f"Assigned {self.args.topic}-{p} to Batch Coordinator partition {n}.",
                      file=out)  # fmt: skip
            else:
                ok = False
                print(f"Error for {self.args.topic}-{p}: {ErrorCode.for_code(code).name}",
                      file=out)  # fmt: skip
        return ok


async def run(
    args: argparse.Namespace,
    *,
    connect: Connect | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> int:
    """Run the command; returns the exit status (0: every entry succeeded)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    if connect is None:
        from kafka_rpc.client import KafkaRpcClient

        connect = KafkaRpcClient.connect
    tool = _Tool(args, secured(connect, args))
    try:
        return 0 if await tool.assign(out) else 1
    except Exception as e:  # noqa: BLE001 - reported as the other tools report failures
        print(f"Error: {str(e) or type(e).__name__}", file=err)
        return 1
    finally:
        await tool.close()


def run_sync(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))
