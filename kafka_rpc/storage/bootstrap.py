"""``bootstrap.checkpoint``: the bootstrap metadata a formatted directory holds (Kafka's
``BootstrapDirectory`` with ``BatchFileWriter`` / ``BatchFileReader``).

``kafka-storage format`` (and ``kafka-rpc storage format``) writes ``<dir>/bootstrap.checkpoint``
into the root of every directory it formats; the copy in ``metadata.log.dir`` is what the first
active controller of an empty log writes into the metadata log
(:func:`~kafka_rpc.controller.features.activation_records`). The file is in the KRaft snapshot
format (docs/features.md, "Formatting a cluster"): RecordBatch v2 batches with leader epoch 0
and offsets from 0, uncompressed; a control batch with ``SnapshotHeaderRecord{Version=0,
LastContainedLogTimestamp=0}``, the records in data batches of at most 8 MiB (Kafka's
``MAX_BATCH_SIZE_BYTES``; one batch in practice), then a control batch with
``SnapshotFooterRecord{Version=0}``. It is written as ``bootstrap.checkpoint.tmp``, fsynced and
renamed over the file, so a reader never sees half of one.

Reading (:func:`read_bootstrap`) skips control batches and needs a ``metadata.version``
FeatureLevelRecord (``BootstrapMetadata.fromRecords``). Kafka 4.4's ``kafka-storage format`` no
longer writes ``bootstrap.checkpoint``: it puts the same records into the metadata log's
bootstrap snapshot ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint``
(``Formatter.writeBoostrapSnapshot``, id (0, 0)), which its controller prefers
(``QuorumController.handleLoadBootstrap`` replaces the ``bootstrap.checkpoint`` metadata when the
snapshot holds records). We read them in that order; with neither, the default
:meth:`~kafka_rpc.controller.features.BootstrapMetadata.default` (Kafka's
``readFromConfiguration``; ours finalizes every proposal unless ``kafka_compatible``). We write
``bootstrap.checkpoint``, which Kafka 4.0 to 4.4 all read, and for a dynamic quorum (KIP-853)
also the bootstrap snapshot as Kafka 4.4 writes it, with the initial voters
(:func:`encode_bootstrap_snapshot`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kafka_rpc.controller.features import BootstrapMetadata, FeatureError, record_version
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import DecodeError
from kafka_rpc.protocol.record_batch import (
    CONTROL_SNAPSHOT_FOOTER,
    CONTROL_SNAPSHOT_HEADER,
    decode_batches,
    encode_batch,
    encode_control_batch,
)
from kafka_rpc.storage.durable import atomic_write

__all__ = [
    "BOOTSTRAP_FILE",
    "BOOTSTRAP_SNAPSHOT",
    "BootstrapFileError",
    "encode_bootstrap_snapshot",
    "read_bootstrap",
    "write_bootstrap",
    "write_bootstrap_snapshot",
]

BOOTSTRAP_FILE = "bootstrap.checkpoint"
"""``BootstrapDirectory.BINARY_BOOTSTRAP_FILENAME``."""
BOOTSTRAP_SNAPSHOT = "__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"
"""Kafka 4.4's bootstrap snapshot (``Snapshots.BOOTSTRAP_SNAPSHOT_ID`` = (0, 0)), relative to
``metadata.log.dir``."""
MAX_BATCH_BYTES = 8 * 1024 * 1024
"""Kafka's ``KafkaRaftClient.MAX_BATCH_SIZE_BYTES``: a data batch holds at most this much."""

_Header = codec.message_class("SnapshotHeaderRecord")
_Footer = codec.message_class("SnapshotFooterRecord")


class BootstrapFileError(Exception):
    """A ``bootstrap.checkpoint`` that cannot be read or used (corrupt batches, an unknown
    record, no ``metadata.version``, a level this code does not support)."""


class _Levels:
    __slots__ = ("features",)

    def __init__(self, levels: Any) -> None:
        self.features = levels


def _data_batches(values: Sequence[bytes], pos: int, ts: int) -> tuple[bytes, int]:
    """The records' data batches from offset ``pos`` (each at most :data:`MAX_BATCH_BYTES`),
    and the offset after them."""
    out = bytearray()
    chunk: list[bytes] = []
    size = 0
    for v in values:
        if chunk and size + len(v) + 32 > MAX_BATCH_BYTES:
            out += encode_batch(pos, 0, chunk, ts).data
            pos += len(chunk)
            chunk, size = [], 0
        chunk.append(v)
        size += len(v) + 32
    if chunk:
        out += encode_batch(pos, 0, chunk, ts).data
        pos += len(chunk)
    return bytes(out), pos


def _record_values(bootstrap: BootstrapMetadata) -> list[bytes]:
    levels = _Levels(bootstrap.levels)
    return [codec.encode_record(r, record_version(r, levels)) for r in bootstrap.records]


def encode_bootstrap(bootstrap: BootstrapMetadata, now_ms: int | None = None) -> bytes:
    """The file's bytes (see the module docstring); every record at the version the bootstrap's
    levels dictate (all of them 0)."""
    ts = int(time.time() * 1000) if now_ms is None else now_ms
    out = bytearray()
    head = codec.encode(_Header(version=0, last_contained_log_timestamp=0), 0)
    out += encode_control_batch(0, 0, [(CONTROL_SNAPSHOT_HEADER, head)], ts).data
    data, pos = _data_batches(_record_values(bootstrap), 1, ts)
    out += data
    foot = codec.encode(_Footer(version=0), 0)
    out += encode_control_batch(pos, 0, [(CONTROL_SNAPSHOT_FOOTER, foot)], ts).data
    return bytes(out)


def encode_bootstrap_snapshot(
    bootstrap: BootstrapMetadata,
    kraft_version: int,
    voters: Any = None,
    now_ms: int | None = None,
) -> bytes:
    """The bytes of the bootstrap snapshot :data:`BOOTSTRAP_SNAPSHOT` (id (0, 0)) as Kafka 4.4's
    ``Formatter.writeBoostrapSnapshot`` writes it through ``RecordsSnapshotWriter``: epoch 0,
    offsets from 0, uncompressed; a control batch with ``SnapshotHeaderRecord{Version 0,
    LastContainedLogTimestamp = now}`` and, at kraft.version 1, ``KRaftVersionRecord{Version 0,
    KRaftVersion 1}`` plus ``VotersRecord{Version 0}`` of ``voters`` (a
    :class:`~kafka_rpc.raft.voters.VoterSet`, the ``--initial-controllers`` / ``--standalone``
    ones; None with ``--no-initial-controllers``: no VotersRecord); then the bootstrap records
    (``bootstrap.checkpoint``'s: the FeatureLevelRecords, the SCRAM credentials) in data
    batches; then the ``SnapshotFooterRecord{Version 0}`` batch. ``now_ms``: the wall clock
    (ms) of every timestamp. ValueError for a voter set at kraft.version 0 (Kafka's builder
    refuses it)."""
    from kafka_rpc.raft.voters import snapshot_footer_batch, snapshot_header_batch

    ts = int(time.time() * 1000) if now_ms is None else now_ms
    head = snapshot_header_batch(0, ts, ts, kraft_version, voters)
    data, pos = _data_batches(_record_values(bootstrap), head.last_offset + 1, ts)
    return head.data + data + snapshot_footer_batch(pos, 0, ts).data


def write_bootstrap_snapshot(
    metadata_dir: Path | str, bootstrap: BootstrapMetadata, kraft_version: int, voters: Any = None
) -> Path:
    """Write ``<metadata_dir>/``:data:`BOOTSTRAP_SNAPSHOT` (:func:`encode_bootstrap_snapshot`),
    creating ``__cluster_metadata-0``: temp file, fsync, rename, then read-only as every frozen
    snapshot (Kafka ``FileRawSnapshotWriter.freeze``). Returns its path; OSError propagates."""
    path = Path(metadata_dir) / BOOTSTRAP_SNAPSHOT
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, encode_bootstrap_snapshot(bootstrap, kraft_version, voters), ".part")
    os.chmod(path, 0o444)
    return path


def write_bootstrap(directory: Path | str, bootstrap: BootstrapMetadata) -> Path:
    """Write ``<directory>/bootstrap.checkpoint`` (``BootstrapDirectory.writeBinaryFile``:
    ``.tmp``, fsync, rename). The directory must exist (FileNotFoundError otherwise, as Kafka's
    "No such directory"); other OSErrors propagate. Returns the file's path."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"No such directory as {d}")
    path = d / BOOTSTRAP_FILE
    atomic_write(path, encode_bootstrap(bootstrap))
    return path


def decode_bootstrap(data: bytes, source: str) -> BootstrapMetadata:
    """The bootstrap metadata in a file's bytes: every record of the data batches (control
    batches skipped, ``BootstrapDirectory.readFromBinaryFile``). BootstrapFileError for corrupt
    batches, an undecodable record, or levels :class:`BootstrapMetadata` refuses."""
    return _from_records(_decode_records(data, source), source)


def _decode_records(data: bytes, source: str) -> list[Any]:
    try:
        batches = decode_batches(data)
        records: list[Any] = []
        for b in batches:
            if b.is_control:
                continue
            for v in b.records:
                if v is None:
                    raise DecodeError("a record without a value")
                records.append(codec.decode_record(v)[0])
    except DecodeError as e:
        raise BootstrapFileError(f"{source}: {e}") from None
    return records


def _from_records(records: list[Any], source: str) -> BootstrapMetadata:
    try:
        return BootstrapMetadata.from_records(records, source)
    except FeatureError as e:
        raise BootstrapFileError(f"{source}: {e}") from None


def read_bootstrap(directory: Path | str, kafka_compatible: bool = False) -> BootstrapMetadata:
    """The bootstrap metadata of metadata log directory ``directory``: the records of Kafka 4.4's
    bootstrap snapshot (:data:`BOOTSTRAP_SNAPSHOT`) when it holds any, else those of
    ``bootstrap.checkpoint`` (``BootstrapDirectory.read``), else
    :meth:`BootstrapMetadata.default` (``kafka_compatible``: ours at 0); ``source`` names the
    file. BootstrapFileError when a file cannot be used (see :func:`decode_bootstrap`);
    FileNotFoundError when ``directory`` is missing."""
    d = Path(directory)
    if not d.is_dir():
        if d.exists():
            raise FileNotFoundError(f"Path {d} exists, but is not a directory.")
        raise FileNotFoundError(f"No such directory as {d}")
    snap = d / BOOTSTRAP_SNAPSHOT
    if snap.exists():
        source = f"the bootstrap snapshot: {snap}"
        records = _decode_records(snap.read_bytes(), source)
        if records:  # none (a dynamic quorum's voters only): Kafka keeps the other bootstrap
            return _from_records(records, source)
    path = d / BOOTSTRAP_FILE
    if not path.exists():
        return BootstrapMetadata.default(kafka_compatible)
    return decode_bootstrap(path.read_bytes(),
                            f"the binary bootstrap metadata file: {path}")  # fmt: skip


def bootstrap_from(
    levels: dict[str, int], scram: Sequence[Any] = (), source: str = "format command"
) -> BootstrapMetadata:
    """``Formatter.calculateBootstrapMetadata``: the FeatureLevelRecords of ``levels`` then the
    ``--add-scram`` UserScramCredentialRecords (which need ``metadata.version`` 3.5-IV2, 11, or
    later: FeatureError otherwise, with Kafka's message)."""
    if scram and levels["metadata.version"] < 11:
        raise FeatureError("SCRAM is only supported in metadata.version 3.5-IV2 or later.")
    return BootstrapMetadata.from_levels(levels, scram, source)
