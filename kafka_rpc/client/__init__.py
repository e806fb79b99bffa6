"""asyncio Kafka protocol client: bootstrap, ApiVersions negotiation, pipelined requests.

    client = await KafkaRpcClient.connect("127.0.0.1:9092", client_id="me")
    resp = await client.request(FindCoordinatorRequest(key_type=3, coordinator_keys=(...)))
    await client.close()

Requests are pipelined on one connection and matched by correlation id. ``request`` picks the
highest version both sides support (or ``version=``), enforces a per-request timeout, and raises
:class:`~kafka_rpc.protocol.errors.KafkaError` for a non-zero top-level ErrorCode only with
``raise_on_error=True``. A lost connection fails the requests in flight with
:class:`KafkaConnectionError`; the next request reconnects (bootstrap list, exponential backoff)
and negotiates again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
from typing import Any, TypeGuard

from kafka_rpc.protocol import codec, frames
from kafka_rpc.protocol.errors import ErrorCode, KafkaError
from kafka_rpc.protocol.primitives import read_tag_header, read_uvarint

__all__ = ["KafkaConnectionError", "KafkaRpcClient", "parse_bootstrap"]

_size = struct.Struct(">i")
_API_VERSIONS = 18
CLIENT_SOFTWARE_NAME = "kafka-rpc"
CLIENT_SOFTWARE_VERSION = "0.1.0"


class KafkaConnectionError(ConnectionError):
    """The connection to the server failed or was lost."""


def parse_bootstrap(bootstrap: str | list[str]) -> list[tuple[str, int]]:
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = []
    for item in items:
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad bootstrap address {item!r} (expected host:port)")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("empty bootstrap list")
    return out


class _Protocol(asyncio.Protocol):
    def __init__(self, client: KafkaRpcClient) -> None:
        self.client = client
        # the asyncio transport: set by connection_made, before create_connection returns
        self.transport: Any = None
        self.buf = bytearray()
        self.pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        err = KafkaConnectionError(f"connection lost: {exc}" if exc else "connection closed")
        for fut, _, _ in self.pending.values():
            if not fut.done():
                fut.set_exception(err)
        self.pending.clear()
        if not self.lost.done():
            self.lost.set_result(None)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        n = len(buf)
        with memoryview(buf) as view:  # one copy per frame (a bytearray slice is a second)
            while n - pos >= 4:
                size = _size.unpack_from(buf, pos)[0]
                end = pos + 4 + size
                if size < 0 or end > n:
                    break
                self._response(bytes(view[pos + 4 : end]))
                pos = end
        if pos:
            del buf[:pos]

    def _response(self, payload: bytes) -> None:
        corr = _size.unpack_from(payload, 0)[0]
        entry = self.pending.pop(corr, None)
        if entry is None:
            return
        fut, api_key, version = entry
        if fut.done():
            return
        try:
            fut.set_result(decode_response(api_key, version, payload))
        except Exception as e:  # noqa: BLE001 - delivered to the caller
            fut.set_exception(e)


def decode_response(api_key: int, version: int, payload: bytes) -> Any:
    """Decode a response payload (header + body) of ``api_key`` at ``version``."""
    pos = 4
    if frames.response_header_version(api_key, version) == 1:
        count, pos = read_uvarint(payload, pos)
        for _ in range(count):
            _tag, size, pos = read_tag_header(payload, pos)
            pos += size
    name = codec.RESPONSES_BY_KEY[api_key]
    if api_key == _API_VERSIONS and version > 0 and len(payload) >= pos + 2:
        # an unsupported-version answer is always in the v0 format (KIP-511)
        if _size.unpack_from(b"\0\0" + payload[pos : pos + 2])[0] == ErrorCode.UNSUPPORTED_VERSION:
            version = 0
    return codec.decode_from(name, version, payload, pos)[0]


class KafkaRpcClient:
    def __init__(
        self,
        bootstrap: str | list[str],
        client_id: str | None = "kafka-rpc",
        request_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        backoff: float = 0.05,
        max_backoff: float = 1.0,
        security: Any = None,
    ) -> None:
        self.addresses = parse_bootstrap(bootstrap)
        #: ``kafka_rpc.security.client.ClientSecurity`` (TLS context, SASL mechanism and
        #: credentials) or None for PLAINTEXT
        self.security = security
        # loop times: re-authenticate from _session_end (90% of the SASL session lifetime) until
        # _session_deadline (its end; after it, reconnect) (KIP-368)
        self._session_end: float | None = None
        self._session_deadline = 0.0
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.server_versions: dict[int, tuple[int, int]] = {}
        self.versions: dict[int, int] = {}  # negotiated: api key -> highest common version
        self._proto: _Protocol | None = None
        self._corr = itertools.count(1)
        self._lock = asyncio.Lock()
        self._closed = False
        self.connected_to: tuple[str, int] | None = None

    @classmethod
    async def connect(cls, bootstrap: str | list[str], **kwargs: Any) -> KafkaRpcClient:
        client = cls(bootstrap, **kwargs)
        await client._ensure_connected()
        return client

    async def __aenter__(self) -> KafkaRpcClient:
        await self._ensure_connected()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ connection
    @staticmethod
    def _open(proto: _Protocol | None) -> TypeGuard[_Protocol]:
        """Whether ``proto`` is a connection still open at both ends."""
        return proto is not None and not proto.lost.done() and not proto.transport.is_closing()

    def _ready(self, proto: _Protocol | None) -> TypeGuard[_Protocol]:
        """Whether a request can go on ``proto`` now: open, and no SASL session to renew."""
        return self._open(proto) and (self._session_end is None or self._session_alive())

    async def _ensure_connected(self) -> _Protocol:
        proto = self._proto
        if self._ready(proto):
            return proto
        async with self._lock:
            proto = self._proto
            if self._session_end is not None and not self._session_alive() and self._open(proto):
                if asyncio.get_running_loop().time() >= self._session_deadline:
                    self._drop()  # the server closes it at the next request: reconnect
                else:
                    # re-authenticate on the live connection (KIP-368); requests in flight go on
                    try:
                        await self._authenticate(proto)
                        return proto
                    except (TimeoutError, OSError, KafkaConnectionError):
                        self._drop()
            if self._open(proto):
                return proto
            self._drop()
            if self._closed:
                raise KafkaConnectionError("client is closed")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.connect_timeout
            delay = self.backoff
            last: Exception | None = None
            for host, port in itertools.cycle(self.addresses):
                try:
                    ctx = self.security.ssl_context if self.security is not None else None
                    _, opened = await asyncio.wait_for(
                        loop.create_connection(lambda: _Protocol(self), host, port, ssl=ctx),
                        max(0.01, deadline - loop.time()),
                    )
                    self._proto = opened
                    self.connected_to = (host, port)
                    await self._negotiate(opened)
                    if self.security is not None and self.security.sasl_mechanism:
                        await self._authenticate(opened)
                    return opened
                except (TimeoutError, OSError, KafkaConnectionError) as e:
                    last = e
                    self._drop()
                if loop.time() + delay > deadline:
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
            raise KafkaConnectionError(f"cannot connect to {self.addresses}: {last}")

    def _session_alive(self) -> bool:
        """False once 90% of the SASL session lifetime has passed: the next request first
        re-authenticates on the same connection (SaslHandshake v1 + SaslAuthenticate, KIP-368)
        or, when the whole lifetime has passed (the server closes such a connection at its next
        request, as Kafka's), reconnects."""
        assert self._session_end is not None  # called only within a SASL session
        return asyncio.get_running_loop().time() < self._session_end

    async def _authenticate(self, proto: _Protocol) -> None:
        """SASL over SaslHandshake v1 and SaslAuthenticate (Kafka's ``SaslClientAuthenticator``):
        any failure raises KafkaConnectionError (the server closes the connection after it)."""
        from kafka_rpc.security.sasl import SaslAuthenticationError

        sec = self.security
        client = sec.sasl_client()
        hs = codec.message_class("SaslHandshakeRequest")(mechanism=sec.sasl_mechanism)
        resp = await self._send(proto, hs, 17, 1, self.connect_timeout)
        if resp.error_code:
            raise KafkaConnectionError(
                f"SASL handshake failed: {ErrorCode.for_code(resp.error_code).name}, server "
                f"mechanisms {list(resp.mechanisms)}"
            )
        version = min(self.server_versions.get(36, (0, 0))[1], 2)
        auth_cls = codec.message_class("SaslAuthenticateRequest")
        token: bytes | None = client.first()
        lifetime_ms = 0
        for _ in range(4):  # PLAIN: 1 round, SCRAM: 2
            if token is None:
                break
            resp = await self._send(proto, auth_cls(auth_bytes=token), 36, version,
                                    self.connect_timeout)  # fmt: skip
            if resp.error_code:
                raise KafkaConnectionError(
                    f"SASL authentication failed: {ErrorCode.for_code(resp.error_code).name}: "
                    f"{resp.error_message}"
                )
            lifetime_ms = getattr(resp, "session_lifetime_ms", 0)
            try:
                token = client.step(resp.auth_bytes)
            except SaslAuthenticationError as e:
                raise KafkaConnectionError(f"SASL authentication failed: {e}") from None
        now = asyncio.get_running_loop().time()
        self._session_end = now + 0.9 * lifetime_ms / 1000 if lifetime_ms else None
        self._session_deadline = now + lifetime_ms / 1000

    def _drop(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.abort()
        self._proto = None

    async def _negotiate(self, proto: _Protocol) -> None:
        req_cls = codec.message_class("ApiVersionsRequest")
        req = req_cls(
            client_software_name=CLIENT_SOFTWARE_NAME,
            client_software_version=CLIENT_SOFTWARE_VERSION,
        )
        resp = await self._send(proto, req, _API_VERSIONS, 3, self.connect_timeout)
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            mine = codec.valid_versions("ApiVersionsRequest")
            assert mine is not None  # ApiVersions is never removed
            theirs = {k.api_key: k.max_version for k in resp.api_keys}.get(_API_VERSIONS, 0)
            v = min(mine[1], theirs) if theirs else 0
            resp = await self._send(proto, req, _API_VERSIONS, v, self.connect_timeout)
        if resp.error_code != 0:
            raise KafkaError(resp.error_code, "ApiVersions failed")
        self.server_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        self.versions = {}
        for key, (lo, hi) in self.server_versions.items():
            name = codec.REQUESTS_BY_KEY.get(key)
            if name is None:
                continue
            mine = codec.valid_versions(name)
            if mine is None:
                continue
            top = min(hi, mine[1])
            if top >= max(lo, mine[0]):
                self.versions[key] = top

    def _start(self, proto: _Protocol, msg: Any, api_key: int, version: int) -> tuple:
        """Write one request; returns ``(correlation id, future of the decoded response)``."""
        if proto.lost.done() or proto.transport.is_closing():
            # the peer went away after the connect (uvloop raises RuntimeError on a closed
            # transport; asyncio drops the bytes and the answer never comes)
            raise KafkaConnectionError("connection lost before the request was sent")
        corr = next(self._corr) & 0x7FFFFFFF
        name = codec.REQUESTS_BY_KEY[api_key]
        w = bytearray(4)
        w += frames.request_header_bytes(api_key, version, corr, self.client_id)
        codec.writer(name, version)(msg, w)
        _size.pack_into(w, 0, len(w) - 4)
        fut = asyncio.get_running_loop().create_future()
        proto.pending[corr] = (fut, api_key, version)
        proto.transport.write(w)
        return corr, fut

    def _send(self, proto: _Protocol, msg: Any, api_key: int, version: int, timeout: float):
        corr, fut = self._start(proto, msg, api_key, version)
        return self._wait(proto, corr, fut, timeout)

    async def _wait(self, proto, corr, fut, timeout):
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            proto.pending.pop(corr, None)
            raise

    # ------------------------------------------------------------------ API
    def version_for(self, api_key: int) -> int:
        try:
            return self.versions[api_key]
        except KeyError:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION, f"the server does not serve api key {api_key}"
            ) from None

    def request_nowait(self, msg: Any, version: int) -> tuple[int, asyncio.Future] | None:
        """Write ``msg`` at ``version`` now, without a coroutine, when the connection is open
        and needs no (re-)authentication; returns ``(correlation id, future)``: the future gets
        the decoded response, or :class:`KafkaConnectionError` when the connection is lost. No
        timeout: the caller bounds the wait and calls :meth:`abandon` with the correlation id
        when it gives up. Returns None when the connection is not ready (use :meth:`request`,
        which connects); raises :class:`KafkaConnectionError` when it was just lost."""
        proto = self._proto
        if not self._ready(proto):
            return None
        return self._start(proto, msg, type(msg).__api_key__, version)

    def disconnect(self) -> None:
        """Abort the connection now: the requests in flight on it fail with
        :class:`KafkaConnectionError` and the next request connects again. What Kafka's
        ``NetworkClient`` does after a request timeout (``handleTimedOutRequests``), so that no
        later request queues behind bytes a stalled TCP connection may still be retransmitting."""
        self._drop()

    def abandon(self, corr: int) -> None:
        """Forget the request ``corr`` of :meth:`request_nowait` (a late answer is dropped)."""
        if self._proto is not None:
            self._proto.pending.pop(corr, None)

    async def request(
        self,
        msg: Any,
        version: int | None = None,
        timeout: float | None = None,
        raise_on_error: bool = False,
    ) -> Any:
        """Send a request message and return the decoded response."""
        api_key = type(msg).__api_key__
        proto = await self._ensure_connected()
        if version is None:
            version = self.version_for(api_key)
        resp = await self._send(
            proto, msg, api_key, version, self.request_timeout if timeout is None else timeout
        )
        if raise_on_error:
            code = getattr(resp, "error_code", 0)
            if code:
                raise KafkaError(code, getattr(resp, "error_message", None) or None)
        return resp

    async def close(self) -> None:
        self._closed = True
        proto = self._proto
        self._proto = None
        if proto is not None and proto.transport is not None:
            proto.transport.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(proto.lost), 1.0)
