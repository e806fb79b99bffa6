"""TCP server benchmark: kafka-rpc (ApiVersions v3) vs a bare uvloop echo floor, side by side.

Both servers run pinned to CPU 1 (``taskset -c 1``); the load generator runs on CPU 0 and keeps
C connections x W requests in flight, measuring every request's latency. Cells: C in (1, 16, 64)
x W in (1, 16). Each cell runs ``--rounds`` alternated pairs (ours, then the echo), each for
``--duration`` seconds after a short warm-up (``--quick``: 1 s); the table gives the medians over
the rounds and the range of the per-round ratios. The machine is shared and noisy: alternating
keeps a burst of outside load from landing on one server's whole measurement.

Load generator (``--loadgen``): ``c`` (default when a C compiler is found) is bench/loadgen.c,
compiled at start: epoll, one thread, about 1M responses/s on one core, so it is not the limit in
any cell. ``python`` is the uvloop client below (``LoadConn``); it saturates near 0.7-0.8M
responses/s, which capped the echo floor in the pipelined cells and so flattered the ratio there
(measured side by side in one session: echo 16x16 766k/s under it vs 1.04M/s under the C one).

``--tls``: the same cells over TLS: ours on an SSL listener (PEM keystore, TLS 1.3,
no client certificate; uvloop's own TLS protocol, built by
kafka_rpc.server.secure_connection ``tls_protocol_factory`` so a failed handshake is logged) vs
the echo floor on uvloop's TLS transport (``create_server(ssl=...)``, the same protocol class)
with the same certificate. The key and a self-signed certificate are made at
start in the temporary data directory; the load generator is the Python uvloop client with TLS
(loadgen.c has no TLS).

Each cell also reports the server's CPU per request (µs of user + system CPU time of the server
process, from /proc, over the measured seconds, divided by the requests answered then): less
sensitive to outside load than req/s, it shows where the cost per request differs. The CPU ratio
(the echo's CPU per request over ours, median over the rounds) is the req/s ratio the two would
have with CPU 1 to themselves, both CPU-bound: on a loaded machine it varies far less than the
req/s ratio.

Prints a table and writes JSON to bench/results/server-<timestamp>.json (server-tls-... with
``--tls``).

    python bench/server.py [--quick] [--loadgen c|python] [--tls]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_size = struct.Struct(">i")

# ApiVersions v3 request (header v2, client id "bench", software "bench"/"1"), corr patched in
_BODY = bytes.fromhex("0012000300000000") + b"\x00\x05bench\x00" + b"\x06bench\x021\x00"


def request(corr: int) -> bytes:
    payload = bytearray(_BODY)
    struct.pack_into(">i", payload, 4, corr)
    return _size.pack(len(payload)) + bytes(payload)


class LoadConn(asyncio.Protocol):
    def __init__(self, window: int, stats: dict) -> None:
        self.window = window
        self.stats = stats
        self.sent: list[int] = []  # send times, FIFO (responses are in order)
        self.head = 0
        self.rest = b""
        self.corr = 0
        self.ready = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.ready.set_result(None)

    def start(self) -> None:
        now = time.perf_counter_ns()
        out = []
        for _ in range(self.window):
            self.corr += 1
            out.append(request(self.corr))
            self.sent.append(now)
        self.transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        if self.rest:
            data = self.rest + data
        pos, n = 0, len(data)
        now = time.perf_counter_ns()
        stats = self.stats
        lat = stats["lat"]
        done = 0
        while n - pos >= 4:
            end = pos + 4 + _size.unpack_from(data, pos)[0]
            if end > n:
                break
            pos = end
            if stats["recording"]:
                lat.append(now - self.sent[self.head])
            self.head += 1
            done += 1
        self.rest = data[pos:]
        if self.head > 4096:
            del self.sent[: self.head]
            self.head = 0
        if done and not stats["stop"]:
            out = []
            for _ in range(done):
                self.corr += 1
                out.append(request(self.corr))
                self.sent.append(now)
            self.transport.write(b"".join(out))


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc; 0.0 where unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_cell(port: int, conns: int, window: int, duration: float, warmup: float,
                   ssl_ctx=None, pid: int | None = None) -> dict:  # fmt: skip
    loop = asyncio.get_running_loop()
    stats = {"lat": [], "recording": False, "stop": False}
    protos = []
    tls = {"ssl": ssl_ctx, "server_hostname": "localhost"} if ssl_ctx is not None else {}
    for _ in range(conns):
        _, p = await loop.create_connection(
            lambda: LoadConn(window, stats), "127.0.0.1", port, **tls
        )
        protos.append(p)
    for p in protos:
        p.start()
    await asyncio.sleep(warmup)
    stats["recording"] = True
    cpu0 = _cpu_s(pid)
    t0 = time.perf_counter()
    await asyncio.sleep(duration)
    stats["recording"] = False
    elapsed = time.perf_counter() - t0
    cpu = _cpu_s(pid) - cpu0
    stats["stop"] = True
    for p in protos:
        p.transport.close()
    lat = sorted(stats["lat"])
    n = len(lat)
    return {
        "conns": conns,
        "inflight": window,
        "requests": n,
        "rps": n / elapsed,
        "p50_us": lat[n // 2] / 1000 if n else None,
        "p99_us": lat[min(n - 1, int(n * 0.99))] / 1000 if n else None,
        "cpu_us_per_req": cpu * 1e6 / n if n and pid else None,
    }


def build_loadgen(out_dir: str) -> str | None:
    """Compile bench/loadgen.c into ``out_dir``; None when no C compiler is available."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    exe = os.path.join(out_dir, "loadgen")
    subprocess.run([cc, "-O2", "-o", exe, str(HERE / "loadgen.c")], check=True)
    return exe


def run_cell_c(exe: str, port: int, conns: int, window: int, duration: float, warmup: float,
               pid: int | None = None):  # fmt: skip
    """One cell with the C load generator (inherits this process's CPU 0 affinity); the server's
    CPU per request is taken over the whole run (warm-up included) for lack of a signal."""
    cpu0 = _cpu_s(pid)
    out = subprocess.run(
        [exe, "127.0.0.1", str(port), str(conns), str(window), str(warmup), str(duration),
         request(0).hex()],
        capture_output=True, text=True, timeout=warmup + duration + 30, check=True,
    )  # fmt: skip
    cpu = _cpu_s(pid) - cpu0
    r = json.loads(out.stdout)
    total = r["rps"] * (duration + warmup)  # about the requests of the whole run
    return {"conns": conns, "inflight": window, "requests": r["requests"], "rps": r["rps"],
            "p50_us": r["p50_us"], "p99_us": r["p99_us"],
            "cpu_us_per_req": cpu * 1e6 / total if total and pid else None}  # fmt: skip


def _start(cmd: list[str], pattern: str, env: dict | None = None) -> tuple[subprocess.Popen, int]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        cmd = ["taskset", "-c", "1", *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)  # fmt: skip
    deadline = time.monotonic() + 20
    for line in proc.stdout:
        m = re.search(pattern, line)
        if m:
            return proc, int(m.group(1))
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"{cmd} did not start")


def make_tls(directory: str):
    """A key and self-signed certificate for localhost / 127.0.0.1 in ``directory`` (the PEM
    keystore of both servers) and the client context that trusts it."""
    import datetime
    import ipaddress
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    keystore = os.path.join(directory, "bench.keystore.pem")
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    with open(keystore, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()) + cert_pem)  # fmt: skip
    ctx = ssl.create_default_context(cadata=cert_pem.decode())
    return keystore, ctx


def _response_body_len(port: int, ssl_ctx=None) -> int:
    """Bytes after the correlation id in our answer to the benchmark's request, so the echo
    floor writes responses exactly as long as ours."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock = ssl_ctx.wrap_socket(raw, server_hostname="localhost") if ssl_ctx else raw
    with sock:
        sock.sendall(request(1))
        data = b""
        while len(data) < 4 or len(data) < 4 + _size.unpack_from(data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the server closed the connection")
            data += chunk
    return _size.unpack_from(data)[0] - 4


def _median_row(rounds: list[dict]) -> dict:
    """A cell's medians over its alternated rounds: each server's req/s, p50 and p99 (each the
    median of that figure), the median of the per-round ratios, and every round kept."""

    med = statistics.median
    row: dict = {"rounds": rounds, "ratios": [r["ratio"] for r in rounds]}
    for side in ("kafka_rpc", "echo"):
        runs = [r[side] for r in rounds]
        row[side] = {"conns": runs[0]["conns"], "inflight": runs[0]["inflight"]}
        for k in ("rps", "p50_us", "p99_us", "cpu_us_per_req"):
            vals = [x[k] for x in runs if x.get(k) is not None]
            row[side][k] = med(vals) if vals else None
    row["ratio"] = med(row["ratios"])
    cpu = [r["echo"]["cpu_us_per_req"] / r["kafka_rpc"]["cpu_us_per_req"] for r in rounds
           if r["echo"].get("cpu_us_per_req") and r["kafka_rpc"].get("cpu_us_per_req")]  # fmt: skip
    row["cpu_ratios"] = cpu
    row["cpu_ratio"] = med(cpu) if cpu else None
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 s per cell")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--conns", default="1,16,64")
    ap.add_argument("--inflight", default="1,16")
    ap.add_argument("--loadgen", choices=("c", "python"), default="c")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternated ours/echo pairs per cell; medians are reported")  # fmt: skip
    ap.add_argument("--tls", action="store_true", help="both servers over TLS (SSL listener)")
    a = ap.parse_args()
    duration = 1.0 if a.quick else a.duration
    warmup = 0.3 if a.quick else 0.5
    if (os.cpu_count() or 1) > 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    import uvloop

    data_dir = tempfile.mkdtemp(prefix="kafka-rpc-bench-")
    ssl_ctx = keystore = None
    listener = "PLAINTEXT"
    tls_args: list[str] = []
    echo_tls: list[str] = []
    if a.tls:
        keystore, ssl_ctx = make_tls(data_dir)
        listener = "SSL"
        tls_args = ["--override", f"ssl.keystore.location={keystore}"]
        echo_tls = ["--keystore", keystore]
    exe = build_loadgen(data_dir) if a.loadgen == "c" and not a.tls else None
    loadgen = "bench/loadgen.c (epoll)" if exe else "Python uvloop client"
    print(f"load generator: {loadgen}", file=sys.stderr, flush=True)

    def cell(port: int, pid: int, conns: int, window: int) -> dict:
        if exe:
            return run_cell_c(exe, port, conns, window, duration, warmup, pid)
        return uvloop.run(run_cell(port, conns, window, duration, warmup, ssl_ctx, pid))

    ours, our_port = _start(
        [sys.executable, "-m", "kafka_rpc.cli", "--log-level", "WARNING", "serve",
         "--override", f"listeners={listener}://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
         "--override", f"log.dirs={data_dir}", *tls_args],
        rf"listening {listener} \(broker\) on [\d.]+:(\d+)",
    )  # fmt: skip
    try:
        body_len = _response_body_len(our_port, ssl_ctx)
    except BaseException:
        ours.kill()
        raise
    print(f"ApiVersions v3 response body: {body_len} bytes (the echo answers as long)",
          file=sys.stderr, flush=True)  # fmt: skip
    echo, echo_port = _start(
        [sys.executable, str(HERE / "echo_server.py"), "--body-len", str(body_len), *echo_tls],
        r":(\d+)$",
    )
    rows = []
    try:
        for conns in [int(x) for x in a.conns.split(",")]:
            for window in [int(x) for x in a.inflight.split(",")]:
                rounds = []
                for _ in range(a.rounds):  # alternated, so a noisy moment hits one pair
                    r_ours = cell(our_port, ours.pid, conns, window)
                    r_echo = cell(echo_port, echo.pid, conns, window)
                    rounds.append({"kafka_rpc": r_ours, "echo": r_echo,
                                   "ratio": r_ours["rps"] / r_echo["rps"]})  # fmt: skip
                    print(f"  {conns}x{window}: ours {r_ours['rps']:,.0f}/s echo "
                          f"{r_echo['rps']:,.0f}/s", file=sys.stderr, flush=True)  # fmt: skip
                rows.append(_median_row(rounds))
    finally:
        for p in (ours, echo):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(data_dir, ignore_errors=True)

    over = " over TLS 1.3" if a.tls else ""
    print(f"\nkafka-rpc (ApiVersions v3) vs uvloop echo floor{over}; {a.rounds} alternated "
          f"rounds of {duration:g} s per cell, medians [ratio range]; servers on CPU 1, load "
          f"generator ({loadgen}) on CPU 0\n")  # fmt: skip
    print("| conns x in-flight | kafka-rpc req/s | p50 µs | p99 µs | CPU µs/req | echo req/s "
          "| p50 µs | p99 µs | CPU µs/req | ratio | CPU ratio |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")

    def cpu(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    def cpu_ratio(xs: list[float]) -> str:
        if not xs:
            return "-"
        return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"

    for row in rows:
        o, e = row["kafka_rpc"], row["echo"]
        lo, hi = min(row["ratios"]), max(row["ratios"])
        print(f"| {o['conns']} x {o['inflight']} | {o['rps']:,.0f} | {o['p50_us']:.0f} | "
              f"{o['p99_us']:.0f} | {cpu(o['cpu_us_per_req'])} | {e['rps']:,.0f} | "
              f"{e['p50_us']:.0f} | {e['p99_us']:.0f} | {cpu(e['cpu_us_per_req'])} | "
              f"{row['ratio']:.2f} [{lo:.2f}-{hi:.2f}] | {cpu_ratio(row['cpu_ratios'])} |"
              )  # fmt: skip
    kind = "server-tls" if a.tls else "server"
    out = HERE / "results" / f"{kind}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    doc = {"duration_s": duration, "rounds": a.rounds, "loadgen": loadgen, "tls": a.tls,
           "cells": rows}  # fmt: skip
    out.write_text(json.dumps(doc, indent=2))
    print(f"\nJSON: {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
