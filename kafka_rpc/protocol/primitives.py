"""Wire primitives shared by the generated codecs (sans-io; imports nothing of ours but errors).

Encodings follow Apache Kafka (``ByteUtils``, ``Readable``/``Writable``; tagged
fields KIP-482): big-endian fixed-width integers, unsigned varints of at most 5
bytes, classic (int16/int32 length, -1 = null) and compact (uvarint length + 1, 0 = null) strings,
bytes and arrays, UUIDs as 16 bytes, tagged-field sections.

Readers take ``(buf: bytes, pos: int)`` and return ``(value, new_pos)``. Running past the end of
``buf`` raises :class:`~kafka_rpc.protocol.errors.BufferUnderflow`; malformed values raise another
:class:`~kafka_rpc.protocol.errors.DecodeError`. Writers append to a ``bytearray``.
"""

from __future__ import annotations

import importlib
import os
import struct
import uuid as _uuid_mod

from kafka_rpc.protocol.errors import (
    BufferUnderflow,
    DecodeError,
    EncodeError,
    InvalidLength,
)

UUID = _uuid_mod.UUID
ZERO_UUID = UUID(int=0)
#: The metadata topic's id (Kafka ``Uuid.METADATA_TOPIC_ID``), KIP-516.
METADATA_TOPIC_ID = UUID(int=1)

_uuid_new = object.__new__
_uuid_set_int = UUID.__dict__["int"].__set__
_uuid_set_safe = UUID.__dict__["is_safe"].__set__
_SAFE_UNKNOWN = _uuid_mod.SafeUUID.unknown
_from_bytes = int.from_bytes

MAX_STRING_BYTES = 0x7FFF


def uuid_from_bytes(b: bytes) -> UUID:
    """Build a :class:`uuid.UUID` from 16 big-endian bytes without ``UUID.__init__``'s checks."""
    u = _uuid_new(UUID)
    _uuid_set_int(u, _from_bytes(b, "big"))
    _uuid_set_safe(u, _SAFE_UNKNOWN)
    return u


def uuid_to_bytes(u: UUID | None) -> bytes:
    """16 bytes of a UUID; ``None`` (kio's spelling of the zero UUID) gives 16 zero bytes."""
    if u is None:
        return bytes(16)
    return u.int.to_bytes(16, "big")


def read_uvarint_slow(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes, returned as Kafka's Java ``int`` (so values with bit
    31 set come back negative, as ``ByteUtils.readUnsignedVarint`` does).

    Raises BufferUnderflow when the input ends, InvalidLength when a 5th byte has its
    continuation bit set.
    """
    value = 0
    shift = 0
    n = len(buf)
    for i in range(5):
        if pos >= n:
            raise BufferUnderflow("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            value &= 0xFFFFFFFF
            if value >= 0x80000000:
                value -= 0x100000000
            return value, pos
        shift += 7
        if i == 4:
            break
    raise InvalidLength("varint is longer than 5 bytes")


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return read_uvarint_slow(buf, pos)


def uvarint_bytes(value: int) -> bytes:
    """Encode an unsigned varint (Java int semantics: negative values take 5 bytes)."""
    if 0 <= value < 0x80:
        return _SMALL_VARINTS[value]
    value &= 0xFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [bytes((i,)) for i in range(0x80)]


def underflow(what: str) -> BufferUnderflow:
    return BufferUnderflow(f"not enough bytes for {what}")


def null_error(what: str) -> DecodeError:
    return DecodeError(f"non-nullable field {what} was serialized as null")


def collection_too_large(what: str, count: int, remaining: int) -> DecodeError:
    return InvalidLength(
        f"Tried to allocate a collection of size {count} for {what}, but there are only "
        f"{remaining} bytes remaining"
    )


def string_too_long(what: str, n: int) -> EncodeError:
    return EncodeError(f"'{what}' field is too long to be serialized: {n} bytes")


def tag_not_valid(tag: int, version: int) -> DecodeError:
    return DecodeError(f"Tag {tag} is not valid for version {version}")


def cannot_write(what: str, version: int) -> EncodeError:
    from kafka_rpc.protocol.errors import UnsupportedVersionError

    return UnsupportedVersionError(f"Attempted to write a non-default {what} at version {version}")


def null_not_allowed(what: str, version: int) -> EncodeError:
    return EncodeError(f"null is not allowed for {what} at version {version}")


def read_tag_header(buf: bytes, pos: int) -> tuple[int, int, int]:
    """Read ``(tag, size, new_pos)`` of one tagged field to be skipped, checking the payload
    fits (Kafka's ``readUnknownTaggedField`` reads ``size`` bytes)."""
    tag, size, pos = read_tag_prefix(buf, pos)
    if pos + size > len(buf):
        raise BufferUnderflow("tagged field runs past the end of the buffer")
    return tag, size, pos


def read_tag_prefix(buf: bytes, pos: int) -> tuple[int, int, int]:
    """Read ``(tag, size, new_pos)`` of one tagged field, nothing more: a generated reader reads
    a *known* tag's field by its type and ignores ``size``, as Kafka's generated readers do (a
    size that disagrees with the field, even one past the end of the buffer, is not an error
    there), and checks ``size`` only when it skips an unknown tag (:func:`skip_tagged`)."""
    tag, pos = read_uvarint(buf, pos)
    size, pos = read_uvarint(buf, pos)
    if tag < 0 or size < 0:
        raise InvalidLength("negative tag or tagged-field size")
    return tag, size, pos


def skip_tagged(buf: bytes, pos: int, size: int) -> int:
    """The position after an unknown tagged field of ``size`` bytes at ``pos``; raises
    BufferUnderflow when it runs past the end of ``buf``."""
    end = pos + size
    if end > len(buf):
        raise BufferUnderflow("tagged field runs past the end of the buffer")
    return end


def is_default_struct(value: object, defaults: dict[str, object]) -> bool:
    """True when every field of ``value`` named in ``defaults`` equals its default (recursively for
    nested defaults given as dicts); used for the "non-default field at this version" rule."""
    if value is None:
        return False
    for name, d in defaults.items():
        v = getattr(value, name, d)
        if isinstance(d, dict):
            if not is_default_struct(v, d):
                return False
        elif d == ():
            if v:
                return False
        elif v != d:
            return False
    return True


_ARRAY_STRUCTS: dict[tuple[str, int], struct.Struct] = {}


def array_struct(code: str, count: int) -> struct.Struct:
    """A cached ``struct.Struct`` for ``count`` big-endian values of ``code`` (int arrays).
    Counts are bounded by the caller (checked against the bytes remaining before decoding)."""
    key = (code, count)
    s = _ARRAY_STRUCTS.get(key)
    if s is None:
        s = struct.Struct(f">{count}{code}")
        if count <= 256:
            _ARRAY_STRUCTS[key] = s
    return s


def load_native(name: str):
    """The optional extension module ``kafka_rpc.protocol.<name>`` (``_cdecode``, ``_cframes``),
    or None when it was not built (``pip install`` without a C compiler: the extensions are
    optional) or ``KAFKA_RPC_PURE_PYTHON=1`` is set."""
    if os.environ.get("KAFKA_RPC_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(f"kafka_rpc.protocol.{name}")
    except ImportError:
        return None


_native = load_native("_cdecode")
#: True when generated modules decode with the native decoder (``_cdecode.c``).
NATIVE_DECODER = _native is not None
#: ``Constructor(cls, names)`` of ``_cdecode.c`` (used by ``kafka_rpc._frozen``), or None.
NATIVE_CONSTRUCTOR = _native.Constructor if _native is not None else None


def native_readers(py_readers: dict, programs: dict) -> dict:
    """The ``READERS`` table of a generated module: native readers compiled from ``programs``
    (``{version: program}``, emitted by codegen) when the extension is available, else the
    generated Python ``read_vN`` functions. Both have the same signature ``(buf, pos=0) ->
    (message, end)`` and the same results and exceptions (``tests/protocol/test_native.py``)."""
    if _native is None:
        return py_readers
    return {v: _native.Reader(prog) for v, prog in programs.items()}


s_h = struct.Struct(">h")
s_i = struct.Struct(">i")

__all__ = [
    "METADATA_TOPIC_ID",
    "UUID",
    "ZERO_UUID",
    "read_uvarint",
    "read_uvarint_slow",
    "uuid_from_bytes",
    "uuid_to_bytes",
    "uvarint_bytes",
]
