"""``kafka-rpc dump-log``: Kafka's ``kafka-dump-log.sh`` (``kafka.tools.DumpLogSegments``) for the
files of our metadata log, segments ``%020d.log`` and snapshots ``%020d-%010d.checkpoint``.

For each file it prints ``Dumping <file>``, ``Log starting offset: N`` (or ``Snapshot end offset:
N, epoch: E``), then one line per batch as Kafka's ``printBatchLevel``::

    baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1
    producerEpoch: -1 partitionLeaderEpoch: 1 isTransactional: false isControl: true
    deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 80 magic: 2
    compresscodec: none crc: 123 isvalid: true

(on one line). With ``--print-data-log`` or ``--cluster-metadata-decoder`` (Kafka's deep
iteration) every record follows as ``| offset: N CreateTime: T keySize: K valueSize: V sequence:
-1 headerKeys: []`` and then:

- a control record: its type and body as JSON (``LeaderChange: {...}``, ``SnapshotHeader {...}``,
  ``SnapshotFooter {...}``: Kafka's ``ControlRecordType`` names, with its colons);
- with ``--cluster-metadata-decoder``: ``payload: {"type":"FEATURE_LEVEL_RECORD","version":0,
  "data":{...}}`` (Kafka's ``ClusterMetadataLogMessageParser``: ``MetadataRecordType`` name,
  record version, the fields of that version in Kafka's JSON: camelCase names, uuids in base64,
  bytes in base64, a tagged field only when it is not at its default); a record that does
  not decode prints ``payload: Error at N, skipping. ...``;
- with ``--print-data-log`` only: ``key: ...`` and ``payload: ...`` as UTF-8 text (Kafka's
  StringDecoder).

Every batch is checked (frame, magic, CRC32C, records) before it is printed. A corrupt batch
prints ``Error: corrupt batch at position P in <file>: <reason>`` and ends that file; the command
then exits 1. A torn tail (an incomplete last batch) prints Kafka's ``Found N invalid bytes at the
end of <name>`` and is not an error, as in Kafka (our log truncates it when it is opened).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import mmap
import os
import re
import struct
import sys
from pathlib import Path
from typing import IO, Any
from uuid import UUID

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import DecodeError
from kafka_rpc.protocol.record_batch import BATCH_OVERHEAD, CorruptRecordError, decode_batches
from kafka_rpc.protocol.uuids import uuid_text

__all__ = ["dump_file", "dump_files", "message_json", "record_type_name"]

_HEADER = struct.Struct(">qiibIhiqqqhii")  # baseOffset .. recordCount (RecordBatch v2)
_LOG_OVERHEAD = 12
_CONTROL_KEY = struct.Struct(">hh")
_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
#: Kafka ``ControlRecordType``: id -> (enum name, our message spec, label printed before the JSON)
_CONTROL_TYPES: dict[int, tuple[str, str | None, str | None]] = {
    0: ("ABORT", None, None),
    1: ("COMMIT", None, None),
    2: ("LEADER_CHANGE", "LeaderChangeMessage", "LeaderChange"),
    3: ("SNAPSHOT_HEADER", "SnapshotHeaderRecord", "SnapshotHeader"),
    4: ("SNAPSHOT_FOOTER", "SnapshotFooterRecord", "SnapshotFooter"),
    # (Kafka prints "LeaderChange: {...}" but "SnapshotHeader {...}" / "SnapshotFooter {...}")
    5: ("KRAFT_VERSION", None, None),
    6: ("KRAFT_VOTERS", None, None),
}


# ------------------------------------------------------------------ JSON (Kafka's converters)
def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(p[:1].upper() + p[1:] for p in rest)


def record_type_name(spec_name: str) -> str:
    """Kafka's ``MetadataRecordType`` name: ``FeatureLevelRecord`` -> ``FEATURE_LEVEL_RECORD``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", spec_name).upper()


def _json_value(v: Any, version: int) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, UUID):
        return uuid_text(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, tuple | list):
        return [_json_value(x, version) for x in v]
    if dataclasses.is_dataclass(v):
        return message_json(v, version)
    return str(v)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def message_json(msg: Any, version: int) -> dict[str, Any]:
    """The fields of ``msg`` that exist at ``version``, as Kafka's generated ``*JsonConverter``
    writes them (camelCase names, in spec order; a tagged field only when it differs from its
    default). Nested structs follow the same version."""
    cls_name = type(msg).__name__.removeprefix("_M_")
    mod = sys.modules[type(msg).__module__]
    versioned = getattr(mod, f"{cls_name}V{version}", None)
    out = {}
    for f in dataclasses.fields(versioned if versioned is not None else msg):
        value = getattr(msg, f.name)
        if "tag" in f.metadata and value == _default(f):
            continue
        out[_camel(f.name)] = _json_value(value, version)
    return out


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def metadata_payload(value: bytes | None, offset: int) -> str:
    """Kafka ``ClusterMetadataLogMessageParser.parse`` for one record value."""
    if value is None:
        return f"Error at {offset}, skipping. the record has no value"
    try:
        msg, version = codec.decode_record(value)
    except DecodeError as e:
        return f"Error at {offset}, skipping. {e}"
    return _compact(
        {
            "type": record_type_name(type(msg).__spec_name__),
            "version": version,
            "data": message_json(msg, version),
        }
    )


def control_text(key: bytes | None, value: bytes | None) -> str:
    """What Kafka prints after a control record's metadata (``LeaderChange: {...}`` ...)."""
    if key is None or len(key) < 4:
        return "controlType: UNKNOWN(-1)"
    _, type_id = _CONTROL_KEY.unpack_from(key)
    name, spec, label = _CONTROL_TYPES.get(type_id, ("UNKNOWN", None, None))
    if type_id in (0, 1) and value is not None and len(value) >= 6:
        (epoch,) = struct.unpack_from(">i", value, 2)
        return f"endTxnMarker: {name} coordinatorEpoch: {epoch}"
    if spec is None or value is None:
        return f"controlType: {name}({type_id})"
    try:
        msg = codec.decode(spec, 0, value)
    except DecodeError as e:
        return f"{label}: Error, skipping. {e}"
    sep = ":" if type_id == 2 else ""
    return f"{label}{sep} {_compact(message_json(msg, 0))}"


# ----------------------------------------------------------------------------- records
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    v = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return (v >> 1) ^ -(v & 1), pos
        shift += 7


def _records(data: bytes, count: int):
    """``(offset_delta, timestamp_delta, key, value, header_keys)`` of each record of a batch
    whose bytes ``decode_batches`` has already validated."""
    p = BATCH_OVERHEAD
    for _ in range(count):
        length, p = _varint(data, p)
        end = p + length
        p += 1  # attributes
        ts_delta, p = _varint(data, p)
        off_delta, p = _varint(data, p)
        klen, p = _varint(data, p)
        key = None
        if klen >= 0:
            key, p = data[p : p + klen], p + klen
        vlen, p = _varint(data, p)
        value = None
        if vlen >= 0:
            value, p = data[p : p + vlen], p + vlen
        nh, p = _varint(data, p)
        hkeys = []
        for _ in range(nh):
            hk, p = _varint(data, p)
            hkeys.append(data[p : p + max(hk, 0)].decode("utf-8", "replace"))
            p += max(hk, 0)
            hv, p = _varint(data, p)
            p += max(hv, 0)
        yield off_delta, ts_delta, key, value, hkeys
        p = end


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


# ----------------------------------------------------------------------------- files
def dump_file(
    path: str | Path,
    *,
    deep: bool = False,
    metadata_decoder: bool = False,
    out: IO[str] | None = None,
) -> bool:
    """Dump one segment or snapshot file; returns False if a batch was corrupt or the file could
    not be read (its error line has been printed), True otherwise."""
    out = sys.stdout if out is None else out
    p = Path(path)
    print(f"Dumping {path}", file=out)
    seg = _SEGMENT_RE.match(p.name)
    snap = _SNAPSHOT_RE.match(p.name)
    if seg:
        print(f"Log starting offset: {int(seg.group(1))}", file=out)
    elif snap:
        print(f"Snapshot end offset: {int(snap.group(1))}, epoch: {int(snap.group(2))}", file=out)
    elif p.suffix in (".log", ".checkpoint"):
        pass  # a log or snapshot under another name (a copy): dump it all the same
    else:
        print(f"Ignoring unknown file {path}", file=out)
        return True
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return True
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _dump_batches(data, size, p.name, deep, metadata_decoder, out)
    except OSError as e:
        print(f"Error: cannot read {path}: {e}", file=out)
        return False


def _dump_batches(data, n: int, name: str, deep: bool, decoder: bool, out: IO[str]) -> bool:
    pos = 0
    w = out.write
    while pos < n:
        if n - pos < BATCH_OVERHEAD:
            break
        (base, length, epoch, magic, crc, attrs, last_delta, base_ts, max_ts, pid, pepoch,
         base_seq, count) = _HEADER.unpack_from(data, pos)  # fmt: skip
        end = pos + _LOG_OVERHEAD + length
        if length < BATCH_OVERHEAD - _LOG_OVERHEAD:
            w(f"Error: corrupt batch at position {pos} in {name}: batch length {length} "
              f"below the minimum\n")  # fmt: skip
            return False
        if end > n:
            break
        batch = data[pos:end]
        try:
            decode_batches(batch)
        except CorruptRecordError as e:
            w(f"Error: corrupt batch at position {pos} in {name}: {e}\n")
            return False
        last_seq = -1 if base_seq == -1 else (base_seq + last_delta) & 0x7FFFFFFF
        ts_type = "LogAppendTime" if attrs & 0x08 else "CreateTime"
        is_control = bool(attrs & 0x20)
        horizon = f"OptionalLong[{base_ts}]" if attrs & 0x40 else "OptionalLong.empty"
        w(f"baseOffset: {base} lastOffset: {base + last_delta} count: {count} "
          f"baseSequence: {base_seq} lastSequence: {last_seq} producerId: {pid} "
          f"producerEpoch: {pepoch} partitionLeaderEpoch: {epoch} "
          f"isTransactional: {'true' if attrs & 0x10 else 'false'} "
          f"isControl: {'true' if is_control else 'false'} deleteHorizonMs: {horizon} "
          f"position: {pos} {ts_type}: {max_ts} size: {end - pos} magic: {magic} "
          f"compresscodec: {_CODECS.get(attrs & 0x07, 'unknown')} crc: {crc} "
          f"isvalid: true\n")  # fmt: skip
        if deep:
            for off_delta, ts_delta, key, value, hkeys in _records(batch, count):
                offset = base + off_delta
                ts = max_ts if attrs & 0x08 else base_ts + ts_delta
                seq = -1 if base_seq == -1 else (base_seq + off_delta) & 0x7FFFFFFF
                line = (f"| offset: {offset} {ts_type}: {ts} "
                        f"keySize: {-1 if key is None else len(key)} "
                        f"valueSize: {-1 if value is None else len(value)} "
                        f"sequence: {seq} headerKeys: [{','.join(hkeys)}]")  # fmt: skip
                if is_control:
                    line += " " + control_text(key, value)
                elif decoder:
                    line += " payload: " + metadata_payload(value, offset)
                else:
                    if key is not None:
                        line += " key: " + _text(key)
                    if value is not None:
                        line += " payload: " + _text(value)
                w(line + "\n")
        pos = end
    if pos < n:
        w(f"Found {n - pos} invalid bytes at the end of {name}\n")
    return True


def dump_files(
    files: list[str],
    *,
    print_data_log: bool = False,
    metadata_decoder: bool = False,
    out: IO[str] | None = None,
) -> int:
    """The whole command: exit status 0, or 1 if any file was corrupt or unreadable."""
    ok = True
    deep = print_data_log or metadata_decoder
    for f in files:
        if not f:
            continue
        ok &= dump_file(f, deep=deep, metadata_decoder=metadata_decoder, out=out)
    return 0 if ok else 1
