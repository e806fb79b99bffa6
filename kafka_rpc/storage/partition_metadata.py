"""``partition.metadata``: the topic id a partition directory belongs to (KIP-516).

Kafka's ``PartitionMetadataFile`` / ``PartitionMetadataReadBuffer`` / ``PartitionMetadata``
(``storage/.../internals/checkpoint/``). The file holds exactly two lines, UTF-8, and no final
newline::

    version: 0
    topic_id: <Kafka Uuid.toString: the 16 bytes in URL-safe base64 without padding, 22 chars>

* **Write** (``PartitionMetadataFile.maybeFlush``): the text goes to ``partition.metadata.tmp``,
  which is fsynced and renamed over ``partition.metadata`` (``Utils.atomicMoveWithFallback``); the
  directory is fsynced too, so the rename survives a crash.
* **Read** (``PartitionMetadataReadBuffer.read``): line 1 must be ``version`` and line 2
  ``topic_id``, each key followed by ``:`` and at least one whitespace character; a missing line,
  another key, a version that is not a 32-bit integer or an id that is not a base64 UUID is
  "Malformed line in partition metadata file [path]: line"; a version below 0 is "Unrecognized
  version" (a higher one is accepted, as Kafka does for downgrades); the zero id is "Invalid topic
  ID". Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (Java's ``readLine``); anything after line 2 is
  ignored.
* **Open a log with an expected id** (``UnifiedLog.initializeTopicId``): an existing file must name
  that id (else :class:`InconsistentTopicIdError`, Kafka's ``InconsistentTopicIdException``); a
  missing one is written.

The errors derive from :class:`kafka_rpc.storage.errors.StorageError`, like a ``meta.properties``
that does not match the configuration: at start-up they stop the node with a clear message
(``kafka-rpc serve`` exits 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from kafka_rpc.protocol.uuids import parse_uuid_text, uuid_text
from kafka_rpc.storage import durable
from kafka_rpc.storage.errors import StorageError

__all__ = [
    "CURRENT_VERSION",
    "FILE_NAME",
    "InconsistentTopicIdError",
    "PartitionMetadata",
    "PartitionMetadataError",
    "atomic_write",
    "ensure",
    "read",
    "read_topic_id",
    "write",
]

FILE_NAME = "partition.metadata"
"""``PartitionMetadataFile.PARTITION_METADATA_FILE_NAME``."""
CURRENT_VERSION = 0
"""``PartitionMetadataFile.CURRENT_VERSION``."""

_TMP_SUFFIX = ".tmp"
_ZERO = UUID(int=0)
# Java's \s is [ \t\n\x0B\f\r]; Python's would also match Unicode spaces.
_KEY_SEP = re.compile(r":[ \t\n\x0b\f\r]+")
_LINE_END = re.compile(r"\r\n|\r|\n")
_INT = re.compile(r"[+-]?[0-9]+")


class PartitionMetadataError(StorageError):
    """A ``partition.metadata`` that cannot be used (Kafka: the ``IOException`` of
    ``PartitionMetadataReadBuffer``, raised as ``KafkaStorageException``)."""


class InconsistentTopicIdError(PartitionMetadataError):
    """The directory belongs to another topic id than the one the log is opened with (Kafka's
    ``InconsistentTopicIdException``)."""


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """The content of ``partition.metadata`` (Kafka's ``PartitionMetadata`` record)."""

    version: int
    topic_id: UUID

    def encode(self) -> str:
        """Kafka's ``PartitionMetadata.encode``: ``"version: V\\ntopic_id: ID"``, no final
        newline."""
        return f"version: {self.version}\ntopic_id: {uuid_text(self.topic_id)}"


def path_of(directory: Path | str) -> Path:
    """``<directory>/partition.metadata``."""
    return Path(directory) / FILE_NAME


def write(directory: Path | str, topic_id: UUID) -> None:
    """Write ``partition.metadata`` for ``topic_id`` (version 0) into ``directory`` atomically:
    temp file, fsync, rename, fsync of the directory. ``OSError`` on an I/O failure (Kafka:
    ``KafkaStorageException``); ``ValueError`` for the zero id, which no topic has."""
    if topic_id == _ZERO:
        raise ValueError("the zero UUID is not a topic id")
    atomic_write(path_of(directory), PartitionMetadata(CURRENT_VERSION, topic_id).encode())


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) so that a crash leaves the old or the new content
    (Kafka's ``PartitionMetadataFile.maybeFlush`` with ``Utils.atomicMoveWithFallback``):
    :func:`kafka_rpc.storage.durable.atomic_write` with ``<path>.tmp``. ``OSError`` on an I/O
    failure."""
    durable.atomic_write(path, text, _TMP_SUFFIX)


def _malformed(where: Path, line: str | None) -> PartitionMetadataError:
    shown = "null" if line is None else line  # as Java prints a missing line
    return PartitionMetadataError(f"Malformed line in partition metadata file [{where}]: {shown}")


def _value(where: Path, line: str | None, key: str) -> str:
    if line is None:
        raise _malformed(where, None)
    parts = _KEY_SEP.split(line, maxsplit=1)
    if len(parts) != 2 or parts[0] != key:
        raise _malformed(where, line)
    return parts[1]


def read(directory: Path | str) -> PartitionMetadata:
    """Read and validate ``<directory>/partition.metadata`` (Kafka's
    ``PartitionMetadataReadBuffer.read``; see the module docstring for the rules).
    ``FileNotFoundError`` when there is none, other ``OSError`` when it cannot be read,
    :class:`PartitionMetadataError` when it is malformed."""
    path = path_of(directory).absolute()
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PartitionMetadataError(
            f"Malformed partition metadata file [{path}]: not UTF-8 ({e})"
        ) from e
    lines: list[str | None] = list(_LINE_END.split(text))
    if lines and lines[-1] == "":  # a final line end does not start another line
        lines.pop()
    lines += [None, None]
    version_text = _value(path, lines[0], "version")
    if not _INT.fullmatch(version_text) or not -(2**31) <= int(version_text) < 2**31:
        raise _malformed(path, lines[0])
    version = int(version_text)
    if version < CURRENT_VERSION:
        raise PartitionMetadataError(
            f"Unrecognized version of partition metadata file ({path}): {version}"
        )
    try:
        topic_id = parse_uuid_text(_value(path, lines[1], "topic_id"))
    except ValueError as e:
        raise _malformed(path, lines[1]) from e
    if topic_id == _ZERO:
        raise PartitionMetadataError(f"Invalid topic ID in partition metadata file ({path})")
    return PartitionMetadata(version, topic_id)


def read_topic_id(directory: Path | str) -> UUID | None:
    """The topic id ``<directory>/partition.metadata`` names, or None when the file does not
    exist. Raises as :func:`read` otherwise."""
    try:
        return read(directory).topic_id
    except FileNotFoundError:
        return None


def ensure(directory: Path | str, topic_id: UUID) -> bool:
    """Kafka's ``UnifiedLog.initializeTopicId`` for a log opened with ``topic_id``: an existing
    ``partition.metadata`` must name it (:class:`InconsistentTopicIdError` otherwise, or the
    errors of :func:`read`); a missing one is written. Returns True when it wrote the file."""
    directory = Path(directory)
    found = read_topic_id(directory)
    if found is None:
        write(directory, topic_id)
        return True
    if found != topic_id:
        raise InconsistentTopicIdError(
            f"Tried to assign topic ID {uuid_text(topic_id)} to log for topic partition "
            f"{directory.name}, but log already contained topic ID {uuid_text(found)} "
            f"({path_of(directory)})"
        )
    return False
