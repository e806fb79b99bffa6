"""Framing and request/response headers (sans-io, hand-written hot path).

A frame is an int32 big-endian size (excluding itself) followed by the payload. The request
header is v1 (api key, api version, correlation id, nullable int16-length client id) or v2 (v1 plus
a tagged section) when the api version is in the request spec's flexible versions. The response
header is v0 (correlation id) or v1 (plus an empty tagged section) when the response is flexible,
except ApiVersions (18), whose responses always use header v0 (KIP-511).
"""

from __future__ import annotations

import struct
import time
from typing import Protocol

from kafka_rpc.protocol.errors import DecodeError
from kafka_rpc.protocol.messages import SPECS
from kafka_rpc.protocol.primitives import load_native, read_tag_header, read_uvarint

__all__ = [
    "API_VERSIONS_KEY",
    "HeaderError",
    "UnknownApiKeyError",
    "dispatch",
    "dispatch_py",
    "encode_response",
    "frame",
    "parse_request_header",
    "request_header_bytes",
    "request_header_version",
    "response_frame",
    "response_frame_py",
    "response_header_bytes",
    "response_header_version",
    "scan_frames",
    "scan_frames_py",
]

API_VERSIONS_KEY = 18

_HDR = struct.Struct(">hhih")
_hdr_unpack = _HDR.unpack_from
_SIZE = struct.Struct(">i")
_size_pack = _SIZE.pack
_CORR = struct.Struct(">i")
_corr_pack = _CORR.pack


class HeaderError(DecodeError):
    """The request header cannot be parsed."""


class UnknownApiKeyError(HeaderError):
    """The api key names no API with valid versions (Kafka closes the connection)."""


# api_key -> flexible-from version (or a huge number when never flexible)
_NEVER = 1 << 30
_REQ_FLEX: dict[int, int] = {}
_RESP_FLEX: dict[int, int] = {}
for _name, _s in SPECS.items():
    if _s[3] is None or _s[2] is None:  # a removed API; a header or data spec (no api key)
        continue
    if _s[1] == "request":
        _REQ_FLEX[_s[2]] = _NEVER if _s[4] is None else _s[4]
    elif _s[1] == "response":
        _RESP_FLEX[_s[2]] = _NEVER if _s[4] is None else _s[4]


def request_header_version(api_key: int, version: int) -> int:
    """2 if ``version`` is a flexible version of the request, else 1 (threshold rule, so it also
    answers above the highest valid version). Raises UnknownApiKeyError for an unknown key."""
    flex = _REQ_FLEX.get(api_key)
    if flex is None:
        raise UnknownApiKeyError(f"unknown api key {api_key}")
    return 2 if version >= flex else 1


def response_header_version(api_key: int, version: int) -> int:
    """1 if the response is flexible at ``version``, else 0; always 0 for ApiVersions."""
    if api_key == API_VERSIONS_KEY:
        return 0
    flex = _RESP_FLEX.get(api_key)
    if flex is None:
        raise UnknownApiKeyError(f"unknown api key {api_key}")
    return 1 if version >= flex else 0


def parse_request_header(buf: bytes, pos: int = 0) -> tuple[int, int, int, str, int]:
    """Parse a request header at ``buf[pos:]``.

    Returns ``(api_key, api_version, correlation_id, client_id, body_pos)``; a null client id
    becomes ``""``. Raises UnknownApiKeyError for an unknown api key and HeaderError for a
    truncated or malformed header. The version is *not* checked against the valid range here.
    """
    try:
        api_key, version, corr, n = _hdr_unpack(buf, pos)
    except struct.error:
        raise HeaderError("truncated request header") from None
    flex = _REQ_FLEX.get(api_key)
    if flex is None:
        raise UnknownApiKeyError(f"unknown api key {api_key}")
    p = pos + 10
    if n < 0:
        if n != -1:
            raise HeaderError("negative client id length")
        client_id = ""
    else:
        end = p + n
        if end > len(buf):
            raise HeaderError("client id runs past the end of the frame")
        try:
            client_id = buf[p:end].decode()
        except UnicodeDecodeError:
            raise HeaderError("client id is not valid UTF-8") from None
        p = end
    if version >= flex:
        if p < len(buf) and buf[p] == 0:  # no tagged fields: the common case
            return api_key, version, corr, client_id, p + 1
        try:
            count, p = read_uvarint(buf, p)
            if count < 0:
                raise HeaderError("negative tagged field count")
            for _ in range(count):
                _tag, size, p = read_tag_header(buf, p)
                p += size
        except IndexError:
            raise HeaderError("truncated header tagged fields") from None
    return api_key, version, corr, client_id, p


def request_header_bytes(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Encode a request header at the version the api/version pair calls for (clients)."""
    if client_id is None:
        cid = b"\xff\xff"
    else:
        raw = client_id.encode()
        cid = len(raw).to_bytes(2, "big") + raw
    out = struct.pack(">hhi", api_key, api_version, correlation_id) + cid
    if request_header_version(api_key, api_version) == 2:
        out += b"\x00"
    return out


def response_header_bytes(api_key: int, api_version: int, correlation_id: int) -> bytes:
    """The response header for ``correlation_id`` at the version the api/version calls for."""
    if response_header_version(api_key, api_version) == 1:
        return _corr_pack(correlation_id) + b"\x00"
    return _corr_pack(correlation_id)


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its int32 big-endian size."""
    return _size_pack(len(payload)) + payload


# ------------------------------------------------------------------ the server's per-frame path

#: ``REQUEST_FLEX[api_key]``: first flexible request version of the API (request header v2 from
#: there on), ``1 << 30`` when never flexible, None for an api key no spec defines.
REQUEST_FLEX: tuple[int | None, ...] = tuple(
    _REQ_FLEX.get(k) for k in range(max(_REQ_FLEX, default=-1) + 1)
)


def scan_frames_py(
    buf: bytes,
    pos: int,
    max_bytes: int,
    max_frames: int,
    flex: tuple = REQUEST_FLEX,
    ctx_type: type = tuple,
    listener: object = None,
) -> tuple[list[tuple], int, str | None]:
    """Split the complete frames of ``buf[pos:]`` and parse their request headers.

    Returns ``(frames, new_pos, error)``. Each frame is a ``ctx_type`` (tuple or a tuple
    subclass, e.g. the server's RequestContext) of ``(api_key, api_version, correlation_id,
    client_id, listener, frame, body_pos)`` where ``frame`` holds the 4-byte size and the
    payload (``buf``
    itself when the frame is all of it, else a copy, so a body reader cannot run into the next
    frame) and ``body_pos`` indexes it. At most ``max_frames`` frames are taken; ``new_pos`` is
    the start of the first frame not taken (incomplete, over the limit, or bad). ``error`` is
    None, or why the connection must close at ``new_pos``: a size that is negative or above
    ``max_bytes`` (Kafka's ``socket.request.max.bytes``), an api key no spec defines, or a
    malformed header (HeaderError cases of :func:`parse_request_header`). The frames before a
    bad one are returned: Kafka answers them before closing.

    ``flex`` is :data:`REQUEST_FLEX` (the native twin takes it as an argument; this reference
    reads the same table through :func:`parse_request_header`). The reference implementation;
    the server uses :data:`scan_frames`, the native twin in
    ``_cframes.c`` when it is built (same results, checked by tests/protocol/test_frames.py).
    """
    out: list[tuple] = []
    n = len(buf)
    while n - pos >= 4 and len(out) < max_frames:
        size = _SIZE.unpack_from(buf, pos)[0]
        if size < 0 or size > max_bytes:
            return out, pos, f"frame size {size} outside [0, {max_bytes}]"
        end = pos + 4 + size
        if end > n:
            break
        frame = buf if pos == 0 and end == n else buf[pos:end]
        try:
            api_key, version, corr, client_id, body_pos = parse_request_header(frame, 4)
        except DecodeError as e:
            return out, pos, f"bad request header: {e}"
        ctx = (api_key, version, corr, client_id, listener, frame, body_pos)
        out.append(ctx if ctx_type is tuple else tuple.__new__(ctx_type, ctx))
        pos = end
    return out, pos, None


def response_frame_py(correlation_id: int, header_v1: bool, body: bytes) -> bytes:
    """A response frame: int32 size, int32 correlation id, an empty tagged section when the
    response header is v1, then ``body`` (already encoded at the request's version)."""
    head = _corr_pack(correlation_id) + b"\x00" if header_v1 else _corr_pack(correlation_id)
    return _size_pack(len(head) + len(body)) + head + body


def encode_response(
    correlation_id: int, header_v1: bool, result: object, writer
) -> bytes | bytearray:
    """The response frame of a handler's ``result``: framed by :func:`response_frame` when it is
    bytes (a body the handler already encoded at the request's version), else written by
    ``writer(result, w)`` into a bytearray ``w`` that holds the size placeholder and the
    response header (v1: an empty tagged section after the correlation id). Raises what the
    writer raises, or OverflowError when the frame would exceed an int32 size."""
    if type(result) is bytes:
        return response_frame(correlation_id, header_v1, result)
    w = bytearray(4) + _corr_pack(correlation_id)
    if header_v1:
        w.append(0)
    writer(result, w)
    if len(w) - 4 > 0x7FFFFFFF:
        raise OverflowError("response larger than a frame can say")
    _SIZE.pack_into(w, 0, len(w) - 4)
    return w


class _ApiObserver(Protocol):
    """What ``dispatch`` reports each served request to (``ApiMetrics``)."""

    def observe(self, api_key: int, version: int, seconds: float, error: bool) -> None: ...


def dispatch_py(
    buf: bytes,
    pos: int,
    max_bytes: int,
    max_frames: int,
    flex: tuple,
    ctx_type: type,
    listener: object,
    table: tuple,
    out: list,
    metrics: _ApiObserver | None,
) -> tuple[int, tuple | None, str | None]:
    """:func:`scan_frames_py` that also serves, in order, each frame whose API has a
    synchronous handler; the reference of the native ``dispatch`` (``_cframes.c``).

    ``table`` is a tuple indexed by api key of None or ``(min_version, max_version, readers,
    handler, resp_header_flex, writers)``, readers and writers being tuples indexed by
    ``version - min_version`` (built by ``registry.dispatch_table``). For each frame:
    ``request = reader(frame, body_pos)[0]``, ``result = handler(ctx, request)``, and
    :func:`encode_response` of it (header v1 from ``resp_header_flex`` on) goes to ``out``.
    With ``metrics`` not None, ``metrics.observe(api_key, version, seconds, False)`` follows each
    response.

    Returns ``(new_pos, stop, error)``. ``stop`` is None, or the first frame the walk could not
    finish (it is consumed: ``new_pos`` is past it) as ``(kind, ctx, request, exc)``: kind 0, no
    table entry or a version out of range (nothing was run: the caller serves it); kind 1, the
    reader raised ``exc``; kind 2, the handler or the writer raised ``exc``. ``new_pos`` and
    ``error`` are otherwise those of :func:`scan_frames_py`; ``max_frames`` counts the stop frame.
    Exceptions that are not ``Exception`` subclasses propagate.
    """
    for _ in range(max_frames):
        frames, pos, error = scan_frames_py(buf, pos, max_bytes, 1, flex, ctx_type, listener)
        if not frames:
            return pos, None, error
        ctx = frames[0]
        api_key, version, corr, _client_id, _listener, frame, body_pos = ctx
        entry = table[api_key] if api_key < len(table) else None
        if entry is None or not entry[0] <= version <= entry[1]:
            return pos, (0, ctx, None, None), None
        lo, _hi, readers, handler, resp_flex, writers = entry
        try:
            request = readers[version - lo](frame, body_pos)[0]
        except Exception as exc:  # noqa: BLE001 - the caller closes the connection
            return pos, (1, ctx, None, exc), None
        t0 = time.perf_counter() if metrics is not None else 0.0
        try:
            result = handler(ctx, request)
            data = encode_response(corr, version >= resp_flex, result, writers[version - lo])
        except Exception as exc:  # noqa: BLE001 - becomes the request's error response
            return pos, (2, ctx, request, exc), None
        out.append(data)
        if metrics is not None:
            metrics.observe(api_key, version, time.perf_counter() - t0, False)
    return pos, None, None


_native = load_native("_cframes")
#: True when the server's per-frame path runs in ``_cframes.c``.
NATIVE_FRAMES = _native is not None
#: ``scan_frames(buf, pos, max_bytes, max_frames, flex, ctx_type, listener)``: native when
#: built, else the reference.
scan_frames = _native.scan_frames if _native is not None else scan_frames_py
#: ``dispatch(buf, pos, max_bytes, max_frames, flex, ctx_type, listener, table, out, metrics)``:
#: native when built, else the reference.
dispatch = _native.dispatch if _native is not None else dispatch_py
#: ``response_frame(correlation_id, header_v1, body)``: native when built, else the reference.
response_frame = _native.response_frame if _native is not None else response_frame_py
