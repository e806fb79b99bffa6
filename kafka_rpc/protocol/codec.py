"""Encode and decode generated messages by name, api key and version (sans-io).

Typical use::

    from kafka_rpc.protocol import codec
    FindCoordinatorResponse = codec.message_class("FindCoordinatorResponse")
    data = codec.encode(FindCoordinatorResponse(...), version=7)      # -> bytes
    msg = codec.decode("FindCoordinatorRequest", 7, frame_body)       # -> full message object

Messages are the generated *full* classes (every field of every version, Kafka's defaults);
``encode`` writes them at any valid version, raising
:class:`~kafka_rpc.protocol.errors.UnsupportedVersionError` for a non-default, non-ignorable field
that the version lacks (Kafka's "Attempted to write a non-default X at version V") and dropping
ignorable ones. ``decode`` reads untrusted bytes and raises only
:class:`~kafka_rpc.protocol.errors.DecodeError` subclasses; it never allocates more than the input
holds (array counts are checked against the bytes remaining first) and skips unknown tagged
fields. Modules are imported lazily, on first use.
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType
from typing import Any

from kafka_rpc.protocol.errors import (
    DecodeError,
    UnknownApiError,
    UnsupportedVersionError,
)
from kafka_rpc.protocol.messages import SPECS
from kafka_rpc.protocol.primitives import read_uvarint, uvarint_bytes

_PKG = "kafka_rpc.protocol.messages"

REQUESTS_BY_KEY: dict[int, str] = {
    v[2]: k for k, v in SPECS.items() if v[1] == "request" and v[3] is not None and v[2] is not None
}
RESPONSES_BY_KEY: dict[int, str] = {
    v[2]: k
    for k, v in SPECS.items()
    if v[1] == "response" and v[3] is not None and v[2] is not None
}
RECORDS_BY_KEY: dict[int, str] = {
    v[2]: k
    for k, v in SPECS.items()
    if v[1] == "metadata" and v[3] is not None and v[2] is not None
}


@cache
def module(name: str) -> ModuleType:
    """The generated module of spec ``name`` (e.g. ``"FindCoordinatorRequest"``)."""
    try:
        entry = SPECS[name]
    except KeyError:
        raise UnknownApiError(f"unknown message {name!r}") from None
    return importlib.import_module(f"{_PKG}.{entry[0]}")


def message_class(name: str) -> type:
    """The full (all-versions) class of spec ``name``."""
    return module(name).MESSAGE


def valid_versions(name: str) -> tuple[int, int] | None:
    """``(lowest, highest)`` valid version of a spec, or None for a removed API."""
    return SPECS[name][3]


def is_flexible(name: str, version: int) -> bool:
    flex = SPECS[name][4]
    return flex is not None and version >= flex


def _check_version(name: str, version: int) -> None:
    vv = SPECS[name][3]
    if vv is None or not vv[0] <= version <= vv[1]:
        raise UnsupportedVersionError(f"{name} has no version {version} (valid: {vv})")


def encode(msg: Any, version: int, name: str | None = None) -> bytes:
    """Encode ``msg`` (a full message object) at ``version``; returns the body bytes.

    Raises UnsupportedVersionError for an undefined version or a non-default field the version
    lacks, EncodeError for values that cannot be written.
    """
    name = name or type(msg).__spec_name__
    _check_version(name, version)
    w = bytearray()
    module(name).WRITERS[version](msg, w)
    return bytes(w)


def encode_into(msg: Any, version: int, w: bytearray, name: str | None = None) -> None:
    """Like :func:`encode` but appends to ``w`` (no version check: callers pass known versions)."""
    module(name or type(msg).__spec_name__).WRITERS[version](msg, w)


def decode_from(name: str, version: int, data: bytes, pos: int = 0) -> tuple[Any, int]:
    """Decode spec ``name`` at ``version`` from ``data[pos:]``; returns ``(message, end)``.

    ``data`` should be ``bytes``; other buffers are copied once. Raises DecodeError subclasses
    only (UnknownApiError-free: an unknown name or version is a DecodeError here too).
    """
    vv = SPECS.get(name)
    if vv is None or vv[3] is None or not vv[3][0] <= version <= vv[3][1]:
        raise DecodeError(f"cannot decode {name} version {version}")
    if type(data) is not bytes:
        data = bytes(data)
    return module(name).READERS[version](data, pos)


def decode(name: str, version: int, data: bytes) -> Any:
    """Decode a whole message; trailing bytes are ignored, as Kafka's broker does for requests
    (``AbstractRequest.parseRequest``)."""
    return decode_from(name, version, data, 0)[0]


def reader(name: str, version: int):
    """The raw generated reader ``(bytes, pos) -> (message, end)`` (hot paths)."""
    return module(name).READERS[version]


def writer(name: str, version: int):
    """The raw generated writer ``(message, bytearray) -> None`` (hot paths)."""
    return module(name).WRITERS[version]


# ----------------------------------------------------------------------------- metadata records
FRAME_VERSION = 1


def encode_record(msg: Any, version: int | None = None) -> bytes:
    """Frame a metadata-log record as Kafka's ``AbstractApiMessageSerde`` does: uvarint frame
    version (1), uvarint record type (apiKey), uvarint record version, then the body."""
    name = type(msg).__spec_name__
    spec = SPECS[name]
    if spec[1] != "metadata":
        raise UnknownApiError(f"{name} is not a metadata record")
    key = spec[2]
    assert key is not None  # every metadata record has one
    if version is None:
        version = spec[3][1]
    body = encode(msg, version, name)
    return uvarint_bytes(FRAME_VERSION) + uvarint_bytes(key) + uvarint_bytes(version) + body


#: (record type, version) -> the generated reader, filled by decode_record as types are met
_RECORD_READERS: dict[tuple[int, int], Any] = {}


def decode_record(data: bytes) -> tuple[Any, int]:
    """Decode a framed metadata record; returns ``(record, version)``. Raises DecodeError for an
    unknown frame version or record type, or trailing garbage ("Found N byte(s) of garbage")."""
    if type(data) is not bytes:
        data = bytes(data)
    # the common frame: three one-byte uvarints (frame 1, type < 128, version < 128)
    if len(data) >= 3 and data[0] == FRAME_VERSION and data[1] < 0x80 and data[2] < 0x80:
        rd = _RECORD_READERS.get((data[1], data[2]))
        if rd is not None:
            msg, end = rd(data, 3)
            if end != len(data):
                raise DecodeError(f"Found {len(data) - end} byte(s) of garbage after "
                                  f"{type(msg).__spec_name__}")  # fmt: skip
            return msg, data[2]
    try:
        frame, p = read_uvarint(data, 0)
        api_key, p = read_uvarint(data, p)
        version, p = read_uvarint(data, p)
    except IndexError:
        raise DecodeError("truncated metadata record header") from None
    if frame != FRAME_VERSION:
        raise DecodeError(f"Could not deserialize metadata record due to unknown frame version "
                          f"{frame} (expected {FRAME_VERSION})")  # fmt: skip
    name = RECORDS_BY_KEY.get(api_key)
    if name is None:
        raise DecodeError(f"unknown metadata record type {api_key}")
    msg, end = decode_from(name, version, data, p)
    if end != len(data):
        raise DecodeError(f"Found {len(data) - end} byte(s) of garbage after {name}")
    if p == 3:  # decodable at this version: the fast path takes the next one
        _RECORD_READERS[(api_key, version)] = module(name).READERS[version]
    return msg, version
