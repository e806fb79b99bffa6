"""``kafka-rpc`` command line.

    kafka-rpc serve [--config server.properties] [--override key=value ...]
    kafka-rpc api-versions --bootstrap-server HOST:PORT

``serve`` re-executes itself once with glibc's ``MALLOC_MMAP_THRESHOLD_=1048576`` and
``MALLOC_TRIM_THRESHOLD_=8388608`` when they are not set (they only take effect at process start;
see the performance notes), unless ``KAFKA_RPC_NO_REEXEC=1``. Configuration errors exit with 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from kafka_rpc.config import ConfigError, load_config

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "1048576", "MALLOC_TRIM_THRESHOLD_": "8388608"}


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
        await task

    try:
        asyncio.run(run())
    except ConfigError as e:
        print(f"kafka-rpc: configuration error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kafka-rpc: cannot listen: {e}", file=sys.stderr)
        return 1
    return 0


def _cmd_api_versions(args: argparse.Namespace, argv: list[str]) -> int:
    from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
    from kafka_rpc.protocol import codec

    async def run() -> int:
        try:
            client = await KafkaRpcClient.connect(
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
    a.set_defaults(func=_cmd_api_versions)
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
