"""The storage formatter: Kafka's ``StorageTool`` / ``Formatter`` (``kafka-storage format``).

:func:`format_storage` is ``kafka-rpc storage format``: into every directory of
:meth:`Config.storage_dirs <kafka_rpc.config.Config.storage_dirs>` without ``meta.properties`` it
writes ``bootstrap.checkpoint`` (:mod:`kafka_rpc.storage.bootstrap`) and ``meta.properties``
(``version=1``, ``cluster.id``, ``node.id``, a fresh ``directory.id`` per directory, as Kafka
3.7+; :mod:`kafka_rpc.storage.meta_properties`), and creates the metadata partition directory
with its ``partition.metadata`` (the metadata topic id, KIP-516); for a dynamic quorum
(KIP-853) the metadata log directory also gets the bootstrap snapshot with the initial voters
(``--standalone``, ``--initial-controllers``; none with ``--no-initial-controllers``).
:func:`ensure_cluster_id` is what ``kafka-rpc serve`` does first: format an empty node by itself
(the embedded default; a dynamic quorum's node as ``--no-initial-controllers`` would, so it
starts as an observer), then check every directory as Kafka's
``KafkaRaftServer.initializeLogDirs`` does, and return the cluster id.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafka_rpc.config import Config, ConfigError
from kafka_rpc.protocol.uuids import parse_uuid_text, random_uuid_text, uuid_text
from kafka_rpc.storage import meta_properties, partition_metadata
from kafka_rpc.storage.errors import StorageError, StorageFormattedError
from kafka_rpc.storage.initial_controllers import DynamicVoter, voter_set

__all__ = ["directory_description", "ensure_cluster_id", "format_storage"]


def format_storage(
    config: Config,
    cluster_id: str,
    ignore_formatted: bool = False,
    bootstrap: Any = None,
    initial_controllers: Mapping[int, DynamicVoter] | None = None,
    kraft_version: int | None = None,
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
    skipped with ``ignore_formatted``. OSError when a file cannot be written.

    A dynamic quorum (``config.dynamic_quorum``, KIP-853) also gets, in ``metadata.log.dir``
    when it is formatted now, the bootstrap snapshot
    ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`` as Kafka 4.4 writes it
    (:func:`~kafka_rpc.storage.bootstrap.encode_bootstrap_snapshot`): ``kraft_version`` (None:
    1), the ``initial_controllers`` (``--initial-controllers`` / ``--standalone``, node id ->
    :class:`~kafka_rpc.storage.initial_controllers.DynamicVoter`; None: no voters, as
    ``--no-initial-controllers``) and the bootstrap records. When this node is one of them its
    metadata directory's ``directory.id`` is the listed one (Kafka's
    ``DYNAMIC_METADATA_VOTER_DIRECTORY``). ValueError for initial controllers with static
    voters."""
    from kafka_rpc.controller.features import BootstrapMetadata
    from kafka_rpc.storage.bootstrap import write_bootstrap, write_bootstrap_snapshot

    if bootstrap is None:
        bootstrap = BootstrapMetadata.default(config.kafka_compatible)
    if initial_controllers is not None and not config.dynamic_quorum:
        raise ValueError("initial controllers need a dynamic quorum (no controller.quorum.voters)")
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
    meta_dir = Path(config.metadata_log_dir).resolve()
    listed = initial_controllers.get(config.node_id) if initial_controllers else None
    taken = {uuid_text(v.directory_id) for v in (initial_controllers or {}).values()}
    for d in todo:
        d.mkdir(parents=True, exist_ok=True)
        write_bootstrap(d, bootstrap)
        is_meta = d.resolve() == meta_dir
        if is_meta and config.dynamic_quorum:
            voters = None
            if initial_controllers:
                voters = voter_set(initial_controllers, config.controller_listener_names[0])
            level = 1 if kraft_version is None else kraft_version
            write_bootstrap_snapshot(d, bootstrap, level, voters)
        if is_meta and listed is not None:
            dir_id = uuid_text(listed.directory_id)
        else:
            dir_id = meta_properties.random_directory_id(taken)
        taken.add(dir_id)
        _write_meta(d, cluster_id, config.node_id, dir_id)
    config.metadata_partition_dir.mkdir(parents=True, exist_ok=True)
    from kafka_rpc.raft.api import METADATA_TOPIC_ID

    partition_metadata.ensure(config.metadata_partition_dir, METADATA_TOPIC_ID)
    return todo


def directory_description(
    config: Config, directory: Path, initial_controllers: Mapping[int, Any] | None
) -> str:
    """What Kafka's ``format`` calls a directory in its "Formatting <kind> <dir> with
    metadata.version <mv>." line (``Formatter.DirectoryType``): ``data directory`` (not
    ``metadata.log.dir``), ``metadata directory`` (no initial controllers), ``dynamic metadata
    voter directory`` (this node is one of them), else ``dynamic metadata directory``."""
    if Path(directory).resolve() != Path(config.metadata_log_dir).resolve():
        return "data directory"
    if initial_controllers is None:
        return "metadata directory"
    if config.node_id in initial_controllers:
        return "dynamic metadata voter directory"
    return "dynamic metadata directory"


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


def _write_meta(d: Path, cluster_id: str, node_id: int, directory_id: str | None = None) -> None:
    """``<d>/meta.properties`` as Kafka 3.7+ writes it, with ``directory_id`` (text) or a new
    non-reserved one (:mod:`kafka_rpc.storage.meta_properties`), atomically (temp file, fsync,
    rename, fsync of the directory, as Kafka's ``PropertiesUtils.writePropertiesFile``)."""
    mp = meta_properties
    dir_id = directory_id or mp.random_directory_id()
    mp.write(d, mp.MetaProperties(1, cluster_id, node_id, dir_id))


def _check_uuid_text(what: str, text: str) -> None:
    """Kafka's ``Uuid.fromString`` for an id given on the command line (``what`` names it):
    exactly 22 chars of URL-safe base64 for 16 bytes, else ConfigError naming ``what``."""
    try:
        ok = len(text) == 22 and parse_uuid_text(text) is not None
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"{what}: {text!r} is not a valid UUID (22 chars of URL-safe base64)")
