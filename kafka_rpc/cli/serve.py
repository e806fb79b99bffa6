"""``kafka-rpc serve``: the server from ``server.properties`` and ``--override`` settings, with
its startup lines on stdout.

``serve`` re-executes itself once with glibc's ``MALLOC_MMAP_THRESHOLD_=33554432`` and
``MALLOC_TRIM_THRESHOLD_=67108864`` when they are not set (they only take effect at process start;
see ``MALLOC_ENV``), unless ``KAFKA_RPC_NO_REEXEC=1``. Configuration errors exit with 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from kafka_rpc.config import ConfigError, load_config

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

    from kafka_rpc.node import Node, handlers_registry
    from kafka_rpc.server import install_uvloop

    uv = install_uvloop()

    async def run() -> None:
        server = Node(config, handlers_registry())
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
