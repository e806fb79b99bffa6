"""The storage formatter: Kafka's ``StorageTool`` / ``Formatter`` (``kafka-storage format``).

:func:`format_storage` is ``kafka-rpc storage format``: into every directory of
:meth:`Config.storage_dirs <kafka_rpc.config.Config.storage_dirs>` without ``meta.properties`` it
writes ``bootstrap.checkpoint`` (:mod:`kafka_rpc.storage.bootstrap`) and ``meta.properties``
(``version=1``, ``cluster.id``, ``node.id``, a fresh ``directory.id`` per directory, as Kafka
3.7+; :mod:`kafka_rpc.storage.meta_properties`), and creates the metadata partition directory
with its ``partition.metadata`` (the metadata topic id, KIP-516). :func:`ensure_cluster_id` is
what ``kafka-rpc serve`` does first: format an empty node by itself (the embedded default), then
check every directory as Kafka's ``KafkaRaftServer.initializeLogDirs`` does, and return the
cluster id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafka_rpc.config import Config, ConfigError
from kafka_rpc.protocol.uuids import parse_uuid_text, random_uuid_text
from kafka_rpc.storage import meta_properties, partition_metadata
from kafka_rpc.storage.errors import StorageError, StorageFormattedError

__all__ = ["ensure_cluster_id", "format_storage"]


def format_storage(
    config: Config, cluster_id: str, ignore_formatted: bool = False, bootstrap: Any = None
) -> list[Path]:
    """Kafka's ``kafka-storage format`` (``Formatter.doFormat``): into every directory of
    ``config.storage_dirs()`` that has no ``meta.properties``, write ``bootstrap.checkpoint``
    (``bootstrap``, a :class:`~kafka_rpc.controller.features.BootstrapMetadata`; the default
    one of ``config.kafka_compatible`` when None; :mod:`kafka_rpc.storage.bootstrap`), then
    ``meta.properties`` (``version=1``, ``cluster.id``, ``node.id``, a fresh ``directory.id``
    per directory, as Kafka 3.7+); and create ``config.metadata_partition_dir`` with its
    ``partition.metadata`` (the metadata topic id, KIP-516). Returns the directories formatted
    now. A ``cluster_id`` that is not a Kafka Uuid raises ConfigError; a directory that already
    has ``meta.properties`` raises :class:`StorageFormattedError` (Kafka's message), or is
    skipped with ``ignore_formatted``. OSError when a file cannot be written."""
    from kafka_rpc.controller.features import BootstrapMetadata
    from kafka_rpc.storage.bootstrap import write_bootstrap

    if bootstrap is None:
        bootstrap = BootstrapMetadata.default(config.kafka_compatible)
    _check_uuid_text("--cluster-id", cluster_id)
    dirs = config.storage_dirs()
    todo = []
    for d in dirs:
        if (d / "meta.properties").exists():
            if not ignore_formatted:
                raise StorageFormattedError(
                    f"Log directory {d} is already formatted. Use --ignore-formatted to "
                    "ignore this directory and format the others."
                )
        else:
            todo.append(d)
    for d in todo:
        d.mkdir(parents=True, exist_ok=True)
        write_bootstrap(d, bootstrap)
        _write_meta(d, cluster_id, config.node_id)
    config.metadata_partition_dir.mkdir(parents=True, exist_ok=True)
    from kafka_rpc.raft.api import METADATA_TOPIC_ID

    partition_metadata.ensure(config.metadata_partition_dir, METADATA_TOPIC_ID)
    return todo


def ensure_cluster_id(config: Config) -> str:
    """Format the storage on first start (the embedded default: :func:`format_storage` with
    ``cluster.id`` or a new id when no directory holds ``meta.properties``; a formatted node's
    other, empty directories get its ``meta.properties``), check every directory as Kafka does
    at start-up (:func:`kafka_rpc.storage.meta_properties.verify`: one cluster id, equal to
    ``cluster.id`` when configured, ``node.id``, directory ids, a ``directory.id`` written back
    where missing) and return the cluster id (22-character Kafka Uuid text). Raises
    StorageError (a ConfigError)."""
    dirs = config.storage_dirs()
    stored = {d: meta_properties.read(d) for d in dirs}
    present = [(d, m) for d, m in stored.items() if m is not None]
    if not present:
        cid = config.cluster_id or random_uuid_text()
        format_storage(config, cid, ignore_formatted=True)
    else:
        d0, m0 = present[0]
        meta = d0 / "meta.properties"
        if config.cluster_id and m0.cluster_id and config.cluster_id != m0.cluster_id:
            raise StorageError(
                f"cluster.id: configured {config.cluster_id!r} but {meta} holds {m0.cluster_id!r}"
            )
        if m0.node_id is not None and m0.node_id != config.node_id:
            raise StorageError(f"node.id: configured {config.node_id} but {meta} holds "
                               f"{m0.node_id}")  # fmt: skip
        cid = m0.cluster_id or config.cluster_id or random_uuid_text()
        for d, m in stored.items():
            if m is None:
                _write_meta(d, cid, config.node_id)
    metas = meta_properties.verify(dirs, Path(config.metadata_log_dir), config.node_id,
                                   config.cluster_id)  # fmt: skip
    config.metadata_partition_dir.mkdir(parents=True, exist_ok=True)
    return metas[Path(config.metadata_log_dir)].cluster_id or cid


def _write_meta(d: Path, cluster_id: str, node_id: int) -> None:
    """``<d>/meta.properties`` as Kafka 3.7+ writes it, with a new non-reserved ``directory.id``
    (:mod:`kafka_rpc.storage.meta_properties`), atomically (temp file, fsync, rename, fsync of
    the directory, as Kafka's ``PropertiesUtils.writePropertiesFile``)."""
    mp = meta_properties
    mp.write(d, mp.MetaProperties(1, cluster_id, node_id, mp.random_directory_id()))


def _check_uuid_text(what: str, text: str) -> None:
    """Kafka's ``Uuid.fromString`` for an id given on the command line (``what`` names it):
    exactly 22 chars of URL-safe base64 for 16 bytes, else ConfigError naming ``what``."""
    try:
        ok = len(text) == 22 and parse_uuid_text(text) is not None
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"{what}: {text!r} is not a valid UUID (22 chars of URL-safe base64)")
