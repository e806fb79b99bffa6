"""Kafka's RecordBatch v2 (magic 2) format: encode and decode whole batches (sans-io).

Layout (Kafka ``DefaultRecordBatch``), big-endian::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (=2)
    | crc uint32 (CRC32C of everything after this field) | attributes int16
    | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 | producerId int64
    | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...

and each record::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value
    | headerCount varint | headers...

Varints are zig-zag encoded. Attributes: bits 0-2 compression (only 0, none, is written or
read here), bit 3 timestamp type, bit 4 transactional, bit 5 control. A control record's key is
``int16 version (0) | int16 type`` (ControlRecordType: LEADER_CHANGE 2, SNAPSHOT_HEADER 3,
SNAPSHOT_FOOTER 4) and its value the control message's body at version 0, with no frame
(Kafka ``ControlRecordUtils``). CRC32C comes from the ``crc32c`` package.

Decoding untrusted bytes raises only :class:`CorruptRecordError` (a DecodeError): bad magic, a
CRC mismatch, a length that does not fit, compression we do not read, or malformed records.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from crc32c import crc32c

from kafka_rpc.protocol.errors import DecodeError
from kafka_rpc.protocol.primitives import load_native

__all__ = [
    "BATCH_OVERHEAD",
    "CONTROL_LEADER_CHANGE",
    "CONTROL_SNAPSHOT_FOOTER",
    "CONTROL_SNAPSHOT_HEADER",
    "Batch",
    "CorruptRecordError",
    "batch_headers",
    "control_type",
    "decode_batches",
    "encode_batch",
    "encode_control_batch",
]

CONTROL_LEADER_CHANGE = 2
CONTROL_SNAPSHOT_HEADER = 3
CONTROL_SNAPSHOT_FOOTER = 4

_HEADER = struct.Struct(">qiibIhiqqqhii")  # baseOffset .. recordCount: 61 bytes
BATCH_OVERHEAD = _HEADER.size
_LOG_OVERHEAD = 12  # baseOffset + batchLength
_CRC_START = 21  # first byte covered by the CRC (attributes)
_CONTROL_KEY = struct.Struct(">hh")
_ATTR_CONTROL = 0x20
_ATTR_TRANSACTIONAL = 0x10
_ATTR_COMPRESSION = 0x07


class CorruptRecordError(DecodeError):
    """Bytes that are not a valid RecordBatch v2 (Kafka's CorruptRecordException)."""


@dataclass(frozen=True, slots=True)
class Batch:
    """One RecordBatch v2: the encoded bytes and the header fields a log needs. ``records`` are
    the record values (None for a null value); ``keys`` the record keys (control batches: the
    4-byte control key)."""

    base_offset: int
    last_offset: int  # inclusive
    epoch: int  # PartitionLeaderEpoch
    data: bytes  # the whole encoded batch
    is_control: bool = False
    records: tuple[bytes | None, ...] = ()
    max_timestamp: int = -1  # ms
    keys: tuple[bytes | None, ...] = ()

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def record_count(self) -> int:
        return self.last_offset - self.base_offset + 1


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _varint(n: int, out: bytearray) -> None:
    v = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    shift = 0
    v = 0
    while True:
        if pos >= end:
            raise CorruptRecordError("record ends inside a varint")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    return (v >> 1) ^ -(v & 1), pos


def _record(
    out: bytearray, offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None
) -> None:
    body = bytearray(b"\x00")  # attributes
    _varint(ts_delta, body)
    _varint(offset_delta, body)
    if key is None:
        _varint(-1, body)
    else:
        _varint(len(key), body)
        body += key
    if value is None:
        _varint(-1, body)
    else:
        _varint(len(value), body)
        body += value
    body.append(0)  # no headers
    _varint(len(body), out)
    out += body


def _records_py(keys: Sequence[bytes | None] | None, values: Sequence[bytes | None]) -> bytearray:
    """The records section of a batch: record i at offset delta i and timestamp delta 0, with
    no headers (the reference of ``_crecords.encode_records``). ValueError when ``keys`` and
    ``values`` differ in length."""
    recs = bytearray()
    if keys is None:
        keys = (None,) * len(values)
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        _record(recs, i, 0, k, v)
    return recs


def encode_batch(
    base_offset: int,
    epoch: int,
    values: Sequence[bytes | None],
    timestamp_ms: int,
    *,
    keys: Sequence[bytes | None] | None = None,
    control: bool = False,
) -> Batch:
    """Encode records (null keys unless ``keys``) at ``base_offset`` with leader ``epoch``, all
    with ``timestamp_ms`` (CreateTime), no producer (id -1), uncompressed. Raises ValueError for
    an empty batch."""
    n = len(values)
    if n == 0:
        raise ValueError("a record batch needs at least one record")
    if _native is not None:
        recs = _native.encode_records(keys, values)
    else:
        recs = _records_py(keys, values)
    if keys is None:
        keys = (None,) * n
    attrs = _ATTR_CONTROL if control else 0
    buf = bytearray(_HEADER.size)
    buf += recs
    _HEADER.pack_into(
        buf, 0, base_offset, len(buf) - _LOG_OVERHEAD, epoch, 2, 0, attrs, n - 1,
        timestamp_ms, timestamp_ms, -1, -1, -1, n,
    )  # fmt: skip
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[_CRC_START:]))
    return Batch(
        base_offset=base_offset,
        last_offset=base_offset + n - 1,
        epoch=epoch,
        data=bytes(buf),
        is_control=control,
        records=tuple(values),
        max_timestamp=timestamp_ms,
        keys=tuple(keys),
    )


def encode_control_batch(
    base_offset: int, epoch: int, controls: Sequence[tuple[int, bytes]], timestamp_ms: int
) -> Batch:
    """A control batch of ``(control_type, message_body)`` records (body at version 0)."""
    return encode_batch(
        base_offset,
        epoch,
        [body for _, body in controls],
        timestamp_ms,
        keys=[_CONTROL_KEY.pack(0, t) for t, _ in controls],
        control=True,
    )


def control_type(key: bytes | None) -> int:
    """The ControlRecordType of a control record key; raises CorruptRecordError."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key shorter than 4 bytes")
    version, t = _CONTROL_KEY.unpack_from(key)
    if version != 0:
        raise CorruptRecordError(f"unknown control record key version {version}")
    return t


def batch_headers(data: bytes, pos: int = 0) -> Iterator[tuple[int, int, int, int]]:
    """Walk batch frames without checking CRCs: ``(position, size, base_offset, epoch)`` of each
    complete batch from ``pos``; stops at the first incomplete frame (a torn tail)."""
    n = len(data)
    while n - pos >= _LOG_OVERHEAD + 5:
        base, length, epoch = struct.unpack_from(">qii", data, pos)
        size = length + _LOG_OVERHEAD
        if length < BATCH_OVERHEAD - _LOG_OVERHEAD or pos + size > n:
            return
        yield pos, size, base, epoch
        pos += size


def _read_nullable_bytes(data: bytes, p: int, end: int, what: str) -> tuple[bytes | None, int]:
    """A record's varint-length-prefixed key or value at ``p`` (length -1: None), which must end
    by ``end``; returns it and the position after it. Raises CorruptRecordError."""
    n, p = _read_varint(data, p, end)
    if n < 0:
        return None, p
    if p + n > end:
        raise CorruptRecordError(f"record {what} does not fit")
    return data[p : p + n], p + n


def _decode_records_py(
    data: bytes, p: int, end: int, count: int
) -> tuple[list[bytes | None], list[bytes | None]]:
    """``count`` records from ``data[p:end]``, which they must fill exactly: their keys and
    values (bytes or None; headers are skipped). Raises CorruptRecordError (the reference of
    ``_crecords.decode_records``)."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    # A one-byte varint (below 0x80) is read in line; anything else, and every bound
    # check, goes through _read_varint.
    for _ in range(count):
        rlen, p = _read_varint(data, p, end)
        rend = p + rlen
        if rlen < 1 or rend > end:
            raise CorruptRecordError("record length does not fit in its batch")
        p += 1  # attributes
        if p + 2 < rend and data[p] < 0x80 and data[p + 1] < 0x80:
            p += 2  # timestamp delta and offset delta, one byte each
        else:
            _, p = _read_varint(data, p, rend)  # timestamp delta
            _, p = _read_varint(data, p, rend)  # offset delta
        if p < rend and data[p] == 1:  # key length -1 (zigzag 1): a null key
            p += 1
            keys.append(None)
        else:
            key, p = _read_nullable_bytes(data, p, rend, "key")
            keys.append(key)
        value, p = _read_nullable_bytes(data, p, rend, "value")
        values.append(value)
        if p < rend and data[p] == 0:  # no headers
            p += 1
        else:
            nh, p = _read_varint(data, p, rend)
            for _ in range(nh):
                hk, p = _read_varint(data, p, rend)
                p += max(hk, 0)
                hv, p = _read_varint(data, p, rend)
                p += max(hv, 0)
        if p != rend:
            raise CorruptRecordError("record length does not match its fields")
    if p != end:
        raise CorruptRecordError("batch length does not match its records")
    return keys, values


def decode_batches(data: bytes, *, allow_partial_tail: bool = False) -> list[Batch]:
    """Decode every batch in ``data`` (checking magic, CRC and each record). A trailing partial
    batch raises CorruptRecordError unless ``allow_partial_tail`` (then it is ignored)."""
    if type(data) is not bytes:
        data = bytes(data)
    out: list[Batch] = []
    pos = 0
    n = len(data)
    while pos < n:
        if n - pos < BATCH_OVERHEAD:
            if allow_partial_tail:
                break
            raise CorruptRecordError(f"{n - pos} trailing bytes are not a whole batch")
        (base, length, epoch, magic, crc, attrs, last_delta, _base_ts, max_ts, _pid, _pepoch,
         _seq, count) = _HEADER.unpack_from(data, pos)  # fmt: skip
        end = pos + _LOG_OVERHEAD + length
        if length < BATCH_OVERHEAD - _LOG_OVERHEAD:
            raise CorruptRecordError(f"batch length {length} below the minimum")
        if end > n:
            if allow_partial_tail:
                break
            raise CorruptRecordError("batch extends past the end of the data")
        if magic != 2:
            raise CorruptRecordError(f"unsupported magic {magic}")
        if crc32c(memoryview(data)[pos + _CRC_START : end]) != crc:
            raise CorruptRecordError(f"CRC mismatch in the batch at offset {base}")
        if attrs & _ATTR_COMPRESSION:
            raise CorruptRecordError("compressed batches are not supported here")
        if count < 0 or last_delta < 0 or count > length:
            raise CorruptRecordError(f"bad record count {count} / last offset delta {last_delta}")
        if _native is not None:
            keys, values = _native.decode_records(data, pos + BATCH_OVERHEAD, end, count)
        else:
            keys, values = _decode_records_py(data, pos + BATCH_OVERHEAD, end, count)
        out.append(
            Batch(
                base_offset=base,
                last_offset=base + last_delta,
                epoch=epoch,
                data=data[pos:end],
                is_control=bool(attrs & _ATTR_CONTROL),
                records=tuple(values),
                max_timestamp=max_ts,
                keys=tuple(keys),
            )
        )
        pos = end
    return out


_native = load_native("_crecords")
if _native is not None:
    _native.init(CorruptRecordError)
#: True when batches are encoded and decoded by ``_crecords.c`` (same results as the Python
#: reference, checked by tests/protocol/test_record_batch.py).
NATIVE_RECORDS = _native is not None
