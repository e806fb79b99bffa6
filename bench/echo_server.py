"""The floor: a bare uvloop length-prefixed server with the same framing as Kafka.

Each complete frame is answered with a fixed small response (the request's correlation id and a
fixed body as long as our ApiVersions v3 answer), all frames of a read with one write. Prints
``listening on HOST:PORT`` once bound.

    taskset -c 1 python bench/echo_server.py --port 0 [--keystore server.pem]

With ``--keystore`` it serves over TLS (uvloop's TLS transport), the floor of the TLS cells.
"""

from __future__ import annotations

import argparse
import asyncio
import struct

_size = struct.Struct(">i")


def make_response(body_len: int) -> bytes:
    return b"\x00" * body_len


class Echo(asyncio.Protocol):
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.rest = b""

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.rest:
            data = self.rest + data
        pos, n, out = 0, len(data), []
        body = self.body
        while n - pos >= 4:
            size = _size.unpack_from(data, pos)[0]
            end = pos + 4 + size
            if end > n:
                break
            out.append(_size.pack(4 + len(body)) + data[pos + 8 : pos + 12] + body)
            pos = end
        self.rest = data[pos:]
        if out:
            self.transport.write(b"".join(out))


async def main(host: str, port: int, body_len: int, keystore: str | None = None) -> None:
    loop = asyncio.get_running_loop()
    body = make_response(body_len)
    ctx = None
    if keystore:  # the TLS floor: uvloop's own TLS transport with a PEM keystore
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(keystore)
    srv = await loop.create_server(lambda: Echo(body), host, port, backlog=1024, ssl=ctx)
    print(f"listening on {host}:{srv.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--body-len", type=int, default=29)
    ap.add_argument("--keystore", help="PEM key + certificate: serve over TLS")
    a = ap.parse_args()
    import uvloop

    uvloop.run(main(a.host, a.port, a.body_len, a.keystore))
