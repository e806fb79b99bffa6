"""The choice of a KIP-1164 Batch Coordinator by URL (``diskless.coordinator.url``,
docs/batch-coordinator.md).

``create_coordinator(url, **options)`` returns an unstarted coordinator (``await c.start()``, or
``async with``):

* ``memory://`` -> ``InMemoryBatchCoordinator`` (reference implementation, nothing persisted);
* ``sqlite:///abs/path.db`` or ``sqlite://relative/path.db`` -> ``SqliteBatchCoordinator`` (the
  path is everything after ``sqlite://``); query parameters (``?synchronous=NORMAL&
  max_group_size=32&inline_read_max_partitions=0``) become options, explicit ``options`` win;
* ``postgresql://user[:password]@host[:port]/dbname`` (or ``postgres://``) ->
  ``PostgresBatchCoordinator`` on a database any number of servers may share; the query
  parameters ``pool_min_size``, ``pool_max_size``, ``read_pool_size``,
  ``producer_id_expiration_ms`` and ``connect_timeout_s`` become options (explicit ``options``
  win), every other one (``sslmode``, ``application_name``...) stays in the URL given to the
  driver (asyncpg, libpq syntax);
* ``raft:///abs/log/dir`` or ``raft://relative/log/dir`` (percent-encoding allowed) -> the
  topic-based Batch Coordinator (KIP-1164's reference implementation, "Batch Coordinator
  implemented with an internal topic"):
  ``__diskless-metadata`` partitions on Raft in ``<dir>/__diskless-metadata-<partition>/``. The
  query parameters ``synchronous`` (OFF/NORMAL/FULL), ``producer_id_expiration_ms``,
  ``write_timeout_ms``, ``inline_read_max_partitions``, ``apply_commit_records``,
  ``apply_commit_ms``, ``cluster_id`` and ``import_path`` (a standalone SQLite coordinator's
  database, imported once through the log and then renamed ``<name>.imported``) become options;
  ``raft.<field>=N`` sets an integer ``RaftConfig`` field (``raft.election_timeout_ms=300``);
  explicit ``options`` win.

  - With none of ``node_id``, ``voters`` and ``topic_id``: "from the metadata log", an
    ``AssignedBatchCoordinator`` (``kafka_rpc.coordinator.assigned``) that the server attaches to
    its committed metadata image; it runs a replica of every ``__diskless-metadata`` partition
    the controller placed on this node (voters: the partition's replicas at their
    ``controller.quorum.voters`` addresses; topic id: the image's). This is the server's
    default (``kafka_rpc.config.default_coordinator_url``: ``raft://<log.dirs[0]>`` importing
    ``<log.dirs[0]>/coordinator.db``).
  - Static, one partition (``ReplicatedBatchCoordinator``): ``node_id``, ``partition``,
    ``voters=1@host:port,2@host:port`` (the replicas' controller listeners; default: this node
    alone) and ``topic_id`` (Kafka's base64 or the 36-character form);
* ``package.module:ClassName`` -> a third-party ``BatchCoordinator`` subclass, called with
  ``**options``.
"""

from __future__ import annotations

import importlib
import re
import uuid
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

from .api import BatchCoordinator

__all__ = ["create_coordinator"]

_DOTTED = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_INT_OPTIONS = {"max_group_size", "producer_id_expiration_ms", "inline_read_max_partitions"}
_PG_OPTIONS = {
    "pool_min_size": int,
    "pool_max_size": int,
    "producer_id_expiration_ms": int,
    "connect_timeout_s": float,
    "read_pool_size": int,
}

_RAFT_OPTIONS = {
    "node_id": int,
    "partition": int,
    "synchronous": str,
    "producer_id_expiration_ms": int,
    "write_timeout_ms": int,
    "inline_read_max_partitions": int,
    "cluster_id": str,
    "import_path": str,
    "apply_commit_records": int,
    "apply_commit_ms": int,
}


def _parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``1@host:port,2@host:port`` (``controller.quorum.voters`` syntax) -> {id: (host, port)}."""
    out: dict[int, tuple[str, int]] = {}
    for item in text.split(","):
        node, _, address = item.strip().partition("@")
        host, _, port = address.rpartition(":")
        if not node or not host or not port:
            raise ValueError(f"bad voter {item!r} (id@host:port)")
        out[int(node)] = (host.strip("[]"), int(port))
    return out


def create_coordinator(url: str, **options: Any) -> BatchCoordinator:
    """Build the coordinator named by ``url`` (see the module docstring). Raises ``ValueError``
    for an unknown scheme and ``TypeError`` if a dotted class is not a ``BatchCoordinator``."""
    if url.startswith("memory://"):
        from .memory import InMemoryBatchCoordinator

        return InMemoryBatchCoordinator(**options)
    if url.startswith("sqlite://"):
        from .sqlite import SqliteBatchCoordinator

        path, _, query = url[len("sqlite://") :].partition("?")
        if not path:
            raise ValueError(f"no database path in {url!r}")
        params: dict[str, Any] = {}
        for k, v in parse_qsl(query, strict_parsing=bool(query)):
            params[k] = int(v) if k in _INT_OPTIONS else v
        params.update(options)
        return SqliteBatchCoordinator(path, **params)
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresBatchCoordinator

        base, _, query = url.partition("?")
        pg_params: dict[str, Any] = {}
        kept: list[tuple[str, str]] = []
        for k, v in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
            if k in _PG_OPTIONS:
                pg_params[k] = _PG_OPTIONS[k](v)
            else:
                kept.append((k, v))
        pg_params.update(options)
        dsn = f"{base}?{urlencode(kept)}" if kept else base
        return PostgresBatchCoordinator(dsn, **pg_params)
    if url.startswith("raft://"):
        from .replicated import ReplicatedBatchCoordinator

        path, _, query = url[len("raft://") :].partition("?")
        path = unquote(path)  # percent-encoded as config.default_coordinator_url writes it
        if not path:
            raise ValueError(f"no log directory in {url!r}")
        raft_params: dict[str, Any] = {}
        raft_fields: dict[str, int] = {}
        for k, v in parse_qsl(query, strict_parsing=bool(query)):
            if k.startswith("raft."):
                raft_fields[k[len("raft.") :]] = int(v)
            elif k == "voters":
                raft_params["voters"] = _parse_voters(v)
            elif k == "topic_id":
                from kafka_rpc.protocol.uuids import parse_uuid_text

                raft_params["topic_id"] = uuid.UUID(v) if len(v) == 36 else parse_uuid_text(v)
            elif k in _RAFT_OPTIONS:
                raft_params[k] = _RAFT_OPTIONS[k](v)
            else:
                raise ValueError(f"unknown option {k!r} in {url!r}")
        if raft_fields:
            raft_params["raft_options"] = raft_fields
        raft_params.update(options)
        if not any(k in raft_params for k in ("node_id", "voters", "topic_id")):
            from .assigned import AssignedBatchCoordinator

            return AssignedBatchCoordinator(path, **raft_params)
        return ReplicatedBatchCoordinator(path, **raft_params)
    if _DOTTED.match(url):
        module_name, _, class_name = url.partition(":")
        cls = getattr(importlib.import_module(module_name), class_name)
        if not (isinstance(cls, type) and issubclass(cls, BatchCoordinator)):
            raise TypeError(f"{url} is not a BatchCoordinator subclass")
        return cls(**options)
    raise ValueError(
        f"unknown coordinator URL {url!r}"
        " (memory://, sqlite:///path, raft:///log/dir, postgresql://user@host:port/db,"
        " module:Class)"
    )
