"""``kafka-rpc chunks``: KIP-1114's ``kafka-chunks.sh`` (the KIP's ``ChunkCommand``) over
:class:`~kafka_rpc.client.KafkaRpcClient` on a broker listener.

    kafka-rpc chunks create --bootstrap-server H:P --create-chunk-json-file F
    kafka-rpc chunks alter  --bootstrap-server H:P --alter-chunk-json-file F

The files are the KIP's formats exactly::

    {"partitions": [{"topic": "topic1", "partition": 0, "replicas": [1, 2, 3]}, ...]}
    {"chunks": [{"topic": "topic1", "partition": 0, "startOffset": 289818,
                 "replicas": [4, 5, 6]}, ...]}

(an alter entry may also carry ``"chunkEpoch"``, the AlterChunkAssignments ChunkEpoch; without
it -1, no check). An empty ``replicas`` list in an alter entry removes the chunk.

``create`` asks Metadata for the partitions' leaders and sends each leader one CreateChunks
request with its entries, offsets and timestamp left at -1 for the leader to fill in (KIP-1114
"Only the leader broker of given active chunk should process this request"); ``alter`` sends one
AlterChunkAssignments request to the bootstrap broker, which forwards it to the active controller.

Output, one line per JSON entry in file order::

    Created a chunk of topic1-0 on replicas 1,2,3.
    Altered the chunk of topic1-0 at offset 289818 to replicas 4,5,6.
    Error for topic1-0: NOT_LEADER_OR_FOLLOWER: <message>
    Error for topic1-0 at offset 289818: INVALID_UPDATE_VERSION: <message>

Exit status 0 when every entry succeeded, 1 otherwise. A file that cannot be read or does not
have the format, or a failure to reach the bootstrap broker, prints
``Error while executing chunk command : <message>`` and exits 1; a partition whose leader is
unknown or unreachable is an error line for its entries (UNKNOWN_TOPIC_OR_PARTITION,
LEADER_NOT_AVAILABLE, NETWORK_EXCEPTION).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import IO, Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.tools import add_command_config, secured

__all__ = [
    "ChunkCommandError",
    "add_arguments",
    "parse_alter_file",
    "parse_create_file",
    "run",
    "run_sync",
]

Connect = Callable[..., Awaitable[Any]]


class ChunkCommandError(Exception):
    """A failure reported as ``Error while executing chunk command : <message>``."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("create", "alter"), help="create or alter chunks")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                   help="a broker listener to connect to")  # fmt: skip
    p.add_argument("--create-chunk-json-file", metavar="FILE",
                   help="create: the partitions and the replicas of their new chunks")  # fmt: skip
    p.add_argument("--alter-chunk-json-file", metavar="FILE",
                   help="alter: the chunks and their new replicas")  # fmt: skip
    p.add_argument("--timeout", type=float, default=30.0, help="request timeout, seconds")
    add_command_config(p)


def _load(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ChunkCommandError(f"cannot read {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise ChunkCommandError(f"{path} is not valid JSON: {e}") from e


def _int(entry: dict, key: str, where: str) -> int:
    v = entry.get(key)
    if type(v) is not int:
        raise ChunkCommandError(f'{where}: "{key}" must be an integer')
    return v


def _replicas(entry: dict, where: str) -> tuple[int, ...]:
    v = entry.get("replicas")
    if not isinstance(v, list) or any(type(b) is not int for b in v):
        raise ChunkCommandError(f'{where}: "replicas" must be a list of broker ids')
    return tuple(v)


def _entries(doc: Any, key: str, path: str) -> list[dict]:
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise ChunkCommandError(f'{path}: expected an object with a "{key}" list')
    out = doc[key]
    for i, e in enumerate(out):
        if not isinstance(e, dict):
            raise ChunkCommandError(f"{path}: {key}[{i}] is not an object")
        if not isinstance(e.get("topic"), str) or not e["topic"]:
            raise ChunkCommandError(f'{path}: {key}[{i}]: "topic" must be a non-empty string')
    return out


def parse_create_file(path: str) -> list[tuple[str, int, tuple[int, ...]]]:
    """``[(topic, partition, replicas)]`` from a create-chunk JSON file; raises
    ChunkCommandError."""
    out = []
    for i, e in enumerate(_entries(_load(path), "partitions", path)):
        where = f"{path}: partitions[{i}]"
        out.append((e["topic"], _int(e, "partition", where), _replicas(e, where)))
    return out


def parse_alter_file(path: str) -> list[tuple[str, int, int, int, tuple[int, ...]]]:
    """``[(topic, partition, startOffset, chunkEpoch or -1, replicas)]`` from an alter-chunk
    JSON file; raises ChunkCommandError."""
    out = []
    for i, e in enumerate(_entries(_load(path), "chunks", path)):
        where = f"{path}: chunks[{i}]"
        epoch = _int(e, "chunkEpoch", where) if "chunkEpoch" in e else -1
        out.append(
            (e["topic"], _int(e, "partition", where), _int(e, "startOffset", where), epoch,
             _replicas(e, where))
        )  # fmt: skip
    return out


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _nodes(ids: Any) -> str:
    return ",".join(str(i) for i in ids)


class ChunkCommand:
    def __init__(self, client: Any, connect: Connect, out: IO[str], timeout: float) -> None:
        self.client = client
        self.connect = connect
        self.out = out
        self.timeout = timeout

    def _print(self, line: str) -> None:
        print(line, file=self.out)

    async def _leaders(self, topics: list[str]) -> tuple[dict, dict]:
        """``({(topic, partition): leader id}, {node id: "host:port"})`` from Metadata."""
        mod = codec.module("MetadataRequest")
        req = mod.MESSAGE(
            topics=tuple(mod.MetadataRequestTopic(name=t) for t in dict.fromkeys(topics)),
            allow_auto_topic_creation=False,
        )
        resp = await self.client.request(req, timeout=self.timeout)
        endpoints = {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers}
        leaders = {
            (t.name, p.partition_index): p.leader_id
            for t in resp.topics
            if t.error_code == 0
            for p in t.partitions
        }
        return leaders, endpoints

    async def create(self, entries: list[tuple[str, int, tuple[int, ...]]]) -> bool:
        leaders, endpoints = await self._leaders([t for t, _, _ in entries])
        results: list[tuple[int, str | None] | None] = [None] * len(entries)
        by_leader: dict[int, list[int]] = {}
        for i, (t, p, _) in enumerate(entries):
            leader = leaders.get((t, p))
            if leader is None:
                results[i] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              f"Unable to find partition {t}:{p}.")  # fmt: skip
            elif leader < 0 or leader not in endpoints:
                results[i] = (ErrorCode.LEADER_NOT_AVAILABLE,
                              f"The leader of {t}-{p} is not available.")  # fmt: skip
            else:
                by_leader.setdefault(leader, []).append(i)
        mod = codec.module("CreateChunksRequest")
        for leader, idx in sorted(by_leader.items()):
            req = mod.MESSAGE(
                topic_partitions=tuple(
                    mod.CreateChunksTopicPartition(
                        topic_name=entries[i][0], partition_id=entries[i][1],
                        broker_ids=entries[i][2],
                    )
                    for i in idx
                )
            )  # fmt: skip
            try:
                client = await self.connect(
                    endpoints[leader], client_id="kafka-rpc-chunks",
                    connect_timeout=self.timeout, request_timeout=self.timeout,
                )  # fmt: skip
                try:
                    resp = await client.request(req, timeout=self.timeout)
                finally:
                    await client.close()
                answers = [(r.error_code, r.error_message) for r in resp.results]
                if len(answers) != len(idx):
                    raise ChunkCommandError(f"{len(answers)} answers for {len(idx)} entries")
            except Exception as e:  # noqa: BLE001 - this leader's entries fail, the rest go on
                answers = [(ErrorCode.NETWORK_EXCEPTION, f"broker {leader}: {e}")] * len(idx)
            for i, a in zip(idx, answers, strict=True):
                results[i] = a
        ok = True
        for (t, p, replicas), res in zip(entries, results, strict=True):
            assert res is not None
            code, msg = res
            if code == 0:
                self._print(f"Created a chunk of {t}-{p} on replicas {_nodes(replicas)}.")
            else:
                ok = False
                self._print(f"Error for {t}-{p}: {_code_name(code)}: {msg or ''}".rstrip())
        return ok

    async def alter(self, entries: list[tuple[str, int, int, int, tuple[int, ...]]]) -> bool:
        mod = codec.module("AlterChunkAssignmentsRequest")
        req = mod.MESSAGE(
            chunks=tuple(
                mod.AlterChunkAssignment(
                    topic_name=t, partition_id=p, start_offset=s, chunk_epoch=ep, broker_ids=b
                )
                for t, p, s, ep, b in entries
            )
        )
        resp = await self.client.request(req, timeout=self.timeout)
        if len(resp.results) != len(entries):
            raise ChunkCommandError(f"{len(resp.results)} answers for {len(entries)} entries")
        ok = True
        for (t, p, s, _, replicas), r in zip(entries, resp.results, strict=True):
            if r.error_code == 0:
                self._print(f"Altered the chunk of {t}-{p} at offset {s} to replicas "
                            f"{_nodes(replicas)}.")  # fmt: skip
            else:
                ok = False
                self._print(f"Error for {t}-{p} at offset {s}: {_code_name(r.error_code)}: "
                            f"{r.error_message or ''}".rstrip())  # fmt: skip
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
    if args.action == "create" and (not args.create_chunk_json_file or args.alter_chunk_json_file):
        print("create needs --create-chunk-json-file (and no --alter-chunk-json-file)", file=err)
        return 1
    if args.action == "alter" and (not args.alter_chunk_json_file or args.create_chunk_json_file):
        print("alter needs --alter-chunk-json-file (and no --create-chunk-json-file)", file=err)
        return 1
    if connect is None:
        from kafka_rpc.client import KafkaRpcClient

        connect = KafkaRpcClient.connect
    connect = secured(connect, args)
    client = None
    try:
        if args.action == "create":
            entries: list = parse_create_file(args.create_chunk_json_file)
        else:
            entries = parse_alter_file(args.alter_chunk_json_file)
        if not entries:
            return 0
        client = await connect(
            args.bootstrap_server, client_id="kafka-rpc-chunks",
            connect_timeout=args.timeout, request_timeout=args.timeout,
        )  # fmt: skip
        cmd = ChunkCommand(client, connect, out, args.timeout)
        ok = await (cmd.create(entries) if args.action == "create" else cmd.alter(entries))
        return 0 if ok else 1
    except Exception as e:  # noqa: BLE001 - reported the way the other tools report failures
        print(f"Error while executing chunk command : {str(e) or type(e).__name__}", file=out)
        return 1
    finally:
        if client is not None:
            await client.close()


def run_sync(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))
