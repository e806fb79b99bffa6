"""In-process cost of the server's per-read path: ``KafkaConnection.data_received`` vs the echo
floor's (bench/echo_server.py), side by side, no sockets.

Both get the same bytes: ``--frames`` ApiVersions v3 requests per read (as bench/server.py
sends), through a transport that only counts writes. ``--repeat`` alternated rounds of
``--reads`` calls each; the figure is the best round's µs per request, and the ratio is
echo / ours (1.0 = as cheap as the echo's Python). This isolates the Python and C work per
request from the system calls that dominate bench/server.py.

    python bench/dispatch.py [--frames 1,16] [--reads 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from echo_server import Echo  # noqa: E402
from server import request  # noqa: E402

import kafka_rpc.handlers  # noqa: E402,F401 - registers the handlers
from kafka_rpc.api.registry import default_registry  # noqa: E402
from kafka_rpc.config import load_config  # noqa: E402
from kafka_rpc.node import Node  # noqa: E402
from kafka_rpc.server.connection import KafkaConnection  # noqa: E402
from kafka_rpc.server.listeners import ListenerState  # noqa: E402


class CountingTransport:
    def __init__(self) -> None:
        self.writes = 0
        self.bytes = 0

    def write(self, data) -> None:
        self.writes += 1
        self.bytes += len(data)

    def get_extra_info(self, name):
        return None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def us_per_request(fn, buf: bytes, frames: int, reads: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reads):
        fn(buf)
    return (time.perf_counter() - t0) / reads / frames * 1e6


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", default="1,16", help="requests per read, comma-separated")
    ap.add_argument("--reads", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    listener = ListenerState(
        name="PLAINTEXT", role="broker", host="127.0.0.1", port=0,
        services=Node(load_config(None, [])), table=default_registry.table("broker"),
        max_request_bytes=100 << 20, max_inflight=1000,
    )  # fmt: skip
    ours = KafkaConnection(listener)
    ours_t = CountingTransport()
    ours.connection_made(ours_t)
    ours.data_received(request(0))
    body_len = ours_t.bytes - 8  # size + correlation id
    ours_t.writes = 0
    echo = Echo(b"\x00" * body_len)
    echo_t = CountingTransport()
    echo.connection_made(echo_t)
    print(f"ApiVersions v3, response body {body_len} B; best of {a.repeat} x {a.reads:,} reads\n")
    print("| requests per read | ours µs/request | echo µs/request | ratio echo/ours |")
    print("|---|---|---|---|")
    for frames in [int(x) for x in a.frames.split(",")]:
        buf = b"".join(request(i) for i in range(frames))
        o = e = float("inf")
        for _ in range(a.repeat):  # alternated, so a noisy moment does not hit one side only
            o = min(o, us_per_request(ours.data_received, buf, frames, a.reads))
            e = min(e, us_per_request(echo.data_received, buf, frames, a.reads))
        print(f"| {frames} | {o:.3f} | {e:.3f} | {e / o:.2f} |")
    if ours_t.writes != echo_t.writes:
        raise SystemExit(f"write counts differ: ours {ours_t.writes}, echo {echo_t.writes}")


if __name__ == "__main__":
    asyncio.run(main())
