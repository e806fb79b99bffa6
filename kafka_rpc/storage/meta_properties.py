"""Data directories as Apache Kafka keeps them: ``meta.properties``, directory ids, the ``.lock``.

* ``meta.properties`` (Kafka's ``MetaProperties``, v1): ``version=1``, ``cluster.id``, ``node.id``
  and ``directory.id`` (a Kafka ``Uuid`` in its 22-character text form), as Java's
  ``Properties.store`` writes them (a ``#`` comment line first, then ``key=value`` lines), written
  to a temp file, fsynced and renamed (``PropertiesUtils.writePropertiesFile``).
* Directory ids (``DirectoryId``): random, never one of the 100 reserved ids (most significant
  64 bits 0 and least significant bits below 100: UNASSIGNED, LOST, MIGRATING and the ones kept
  for later), never starting with ``-``, unique among the node's directories
  (``MetaPropertiesEnsemble.Copier.generateValidDirectoryId``). The metadata log directory's id
  is the Raft replica's directory id (Kafka ``SharedServer`` -> ``KafkaRaftManager``).
* Start-up checks (:func:`verify`; Kafka ``KafkaRaftServer.initializeLogDirs`` with
  ``MetaPropertiesEnsemble.verify(REQUIRE_AT_LEAST_ONE_VALID, REQUIRE_METADATA_LOG_DIR)``): one
  cluster id in every directory (and the configured ``cluster.id`` when set), ``node.id`` equal
  to the configured one, directory ids not reserved and not shared by two directories, no
  ``__cluster_metadata-0`` in a data directory other than ``metadata.log.dir``; a directory whose
  ``meta.properties`` has no ``directory.id`` gets a new one written back. Each failure raises
  :class:`~kafka_rpc.storage.errors.StorageError` with Kafka's message (``kafka-rpc serve`` exits
  2).
* The directory lock (:class:`DirectoryLock`): ``<dir>/.lock`` held with a POSIX record lock
  (``fcntl.lockf``, what Java's ``FileChannel.tryLock`` takes on Linux, so a Kafka process and
  ours exclude each other on one directory); Kafka's ``KafkaRaftManager.lockDataDir`` message
  when another process holds it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import uuid
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from jproperties import Properties

from kafka_rpc.protocol.uuids import parse_uuid_text, uuid_text
from kafka_rpc.storage.durable import atomic_write
from kafka_rpc.storage.errors import StorageError

__all__ = [
    "LOCK_FILE_NAME",
    "METADATA_PARTITION_DIR",
    "META_PROPERTIES_NAME",
    "DirectoryLock",
    "MetaProperties",
    "directory_ids",
    "is_reserved",
    "metadata_directory_id",
    "random_directory_id",
    "read",
    "verify",
    "write",
]

META_PROPERTIES_NAME = "meta.properties"
LOCK_FILE_NAME = ".lock"  # Kafka ``LogManager.LOCK_FILE_NAME``
METADATA_PARTITION_DIR = "__cluster_metadata-0"
_RESERVED_BELOW = 100  # DirectoryId.reserved: msb 0 and lsb < 100


def is_reserved(u: uuid.UUID) -> bool:
    """Kafka ``DirectoryId.reserved``: the first 100 ids (most significant 64 bits zero)."""
    return u.int >> 64 == 0 and (u.int & ((1 << 64) - 1)) < _RESERVED_BELOW


def random_directory_id(taken: AbstractSet[str] = frozenset()) -> str:
    """A new directory id as text: random, not reserved, not starting with ``-``, not in
    ``taken`` (Kafka ``Copier.generateValidDirectoryId``)."""
    while True:
        u = uuid.uuid4()
        text = uuid_text(u)
        if not is_reserved(u) and not text.startswith("-") and text not in taken:
            return text


@dataclass(frozen=True)
class MetaProperties:
    """One directory's ``meta.properties`` (Kafka ``MetaProperties``); ids as text, None when
    the file lacks them."""

    version: int
    cluster_id: str | None
    node_id: int | None
    directory_id: str | None

    def text(self) -> str:
        """The file's content as Kafka writes it (a comment line, then the keys)."""
        lines = ["#", f"node.id={self.node_id}"]
        if self.directory_id is not None:
            lines.append(f"directory.id={self.directory_id}")
        lines += [f"version={self.version}", f"cluster.id={self.cluster_id}"]
        return "\n".join(lines) + "\n"


def read(directory: Path) -> MetaProperties | None:
    """``<directory>/meta.properties``, None when the file does not exist. A file that cannot be
    parsed, or a version other than 0/1, raises StorageError naming it."""
    path = Path(directory) / META_PROPERTIES_NAME
    if not path.exists():
        return None
    p = Properties()
    try:
        with path.open("rb") as f:
            p.load(f, "utf-8")
    except Exception as e:  # noqa: BLE001 - jproperties raises its own parse errors
        raise StorageError(f"cannot read {path}: {e}") from None
    props = {k.strip(): v.strip() for k, v in p.properties.items()}
    try:
        version = int(props.get("version", "0"))
        node = props.get("node.id", props.get("broker.id"))
        node_id = int(node) if node is not None else None
    except ValueError as e:
        raise StorageError(f"{path}: {e}") from None
    if version not in (0, 1):
        raise StorageError(f"{path}: unknown meta.properties version {version}")
    return MetaProperties(version, props.get("cluster.id") or None, node_id,
                          props.get("directory.id") or None)  # fmt: skip


def write(directory: Path, meta: MetaProperties) -> None:
    """Write ``<directory>/meta.properties`` atomically (temp file, fsync, rename, fsync of the
    directory), creating the directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / META_PROPERTIES_NAME, meta.text())


def verify(
    dirs: list[Path], metadata_dir: Path, node_id: int, cluster_id: str | None = None
) -> dict[Path, MetaProperties]:
    """Kafka's start-up checks of the node's directories (see the module docstring); every one
    of ``dirs`` (``log.dirs`` and ``metadata.log.dir``) must hold a ``meta.properties``.
    ``cluster_id``: the configured ``cluster.id`` when set. Writes back a ``directory.id`` where
    one is missing; returns each directory's properties. Raises StorageError."""
    metas: dict[Path, MetaProperties] = {}
    for d in dirs:
        m = read(d)
        if m is None:
            raise StorageError(f"No `meta.properties` found in {d} (have you run `kafka-rpc "
                              "storage format` to format the directory?)")  # fmt: skip
        metas[Path(d)] = m
    if Path(metadata_dir) not in metas:
        raise StorageError(f"no meta.properties in the metadata log directory {metadata_dir}")
    expected_cluster = cluster_id
    seen: dict[str, Path] = {}  # directory.id -> the directory holding it
    for d, m in metas.items():
        path = d / META_PROPERTIES_NAME
        if m.cluster_id is None:
            raise StorageError(f"cluster.id was not specified in the v1 file: {path}")
        if expected_cluster is None:
            expected_cluster = m.cluster_id
        elif m.cluster_id != expected_cluster:
            raise StorageError(f"Invalid cluster.id in: {path}. Expected {expected_cluster}, but "
                              f"read {m.cluster_id}")  # fmt: skip
        if m.node_id is None:
            raise StorageError(f"node.id was not specified in {path}")
        if m.node_id != node_id:
            raise StorageError(
                f"Stored node id {m.node_id} doesn't match previous node id {node_id} in {path}. "
                "If you moved your data, make sure your configured node id matches. If you "
                "intend to create a new node, you should remove all data in your data directories."
            )
        if m.directory_id is not None:
            try:
                u = parse_uuid_text(m.directory_id)
            except ValueError as e:
                raise StorageError(f"{path}: directory.id {e}") from None
            if is_reserved(u):
                raise StorageError(f"Invalid reserved directory ID {m.directory_id} found in {d}")
            if m.directory_id in seen:
                raise StorageError(f"Duplicate directory ID {m.directory_id} found. It was the ID "
                                  f"of {seen[m.directory_id]}, but also of {d}")  # fmt: skip
            seen[m.directory_id] = d
    meta_resolved = Path(metadata_dir).resolve()
    for d in metas:
        if d.resolve() != meta_resolved and (d / METADATA_PARTITION_DIR).exists():
            where = d / METADATA_PARTITION_DIR
            raise StorageError(
                f"Found unexpected metadata location in data directory `{where}` (the "
                f"configured metadata directory is {metadata_dir})."
            )
    for d, m in list(metas.items()):
        if m.directory_id is None:
            directory_id = random_directory_id(set(seen))
            new = MetaProperties(m.version, m.cluster_id, m.node_id, directory_id)
            seen[directory_id] = d
            write(d, new)
            metas[d] = new
    return metas


def directory_ids(log_dirs: Iterable[Path | str]) -> tuple[uuid.UUID, ...]:
    """The ``directory.id`` of each of ``log_dirs`` (``log.dirs``) that has one in its
    ``meta.properties`` (Kafka's ``LogManager.directoryIdsSet``), sorted: what a broker registers
    as LogDirs. StorageError for a ``meta.properties`` that cannot be read (see :func:`read`),
    ValueError for a ``directory.id`` that is not a Kafka Uuid."""
    out = []
    for d in log_dirs:
        m = read(Path(d))
        if m is not None and m.directory_id is not None:
            out.append(parse_uuid_text(m.directory_id))
    return tuple(sorted(out))


def metadata_directory_id(metadata_log_dir: Path | str) -> uuid.UUID:
    """The ``directory.id`` of ``metadata_log_dir``'s ``meta.properties`` (``metadata.log.dir``;
    the Raft replica's directory id, Kafka ``SharedServer``); the zero UUID when it has none."""
    m = read(Path(metadata_log_dir))
    if m is None or m.directory_id is None:
        return uuid.UUID(int=0)
    return parse_uuid_text(m.directory_id)


class DirectoryLock:
    """``<directory>/.lock`` held with an exclusive POSIX record lock (``fcntl.lockf``, as Java's
    ``FileChannel.tryLock`` on Linux) for as long as this object is open. :meth:`acquire` raises
    StorageError with Kafka's message when another process holds it."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> DirectoryLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EACCES, errno.EAGAIN):
                raise StorageError(
                    f"Failed to acquire lock on file .lock in {self.path.parent}. A Kafka "
                    "instance in another process or thread is using this directory."
                ) from None
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.lockf(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None
