"""The client subcommands: ``api-versions``, and the operator tools of ``kafka_rpc.tools``
(``dump-log``, ``acls``, ``topics``, ``cluster``, ``chunks``, ``diskless``)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from kafka_rpc.tools import secured


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
