"""Server configuration: Kafka's keys and ``server.properties`` syntax, plus ``--override k=v``.

The file is read with the ``jproperties`` package (Java properties syntax: ``key=value``,
``key: value``, ``#``/``!`` comments, ``\\`` line continuations). Every setting has a documented
default (``SETTINGS``), so no file and no overrides is a working single-node combined server.
An unknown key or a malformed value raises :class:`ConfigError` naming the key (the CLI exits 2).

The cluster id is generated once and persisted in ``<log.dirs>/meta.properties`` like Kafka's
``kafka-storage format`` (``version=1``, ``cluster.id``, ``node.id``).
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jproperties import Properties

__all__ = ["SETTINGS", "Config", "ConfigError", "Endpoint", "load_config"]


class ConfigError(ValueError):
    """A configuration problem; the message names the key."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # listener name, e.g. PLAINTEXT
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9a-fA-F:.]+\]|[^:/\s]*):(\d+)$")


def _int(key: str, v: str) -> int:
    try:
        return int(v.strip())
    except ValueError:
        raise ConfigError(f"{key}: expected an integer, got {v!r}") from None


def _str(key: str, v: str) -> str:
    return v.strip()


def _list(key: str, v: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in v.split(",") if x.strip())


def _roles(key: str, v: str) -> tuple[str, ...]:
    roles = _list(key, v)
    if not roles or any(r not in ("broker", "controller") for r in roles):
        raise ConfigError(f"{key}: expected a list of broker/controller, got {v!r}")
    if len(set(roles)) != len(roles):
        raise ConfigError(f"{key}: duplicate role in {v!r}")
    return roles


def _endpoints(key: str, v: str) -> tuple[Endpoint, ...]:
    out = []
    for item in _list(key, v):
        m = _LISTENER_RE.match(item)
        if not m:
            raise ConfigError(f"{key}: malformed listener {item!r} (expected NAME://host:port)")
        port = int(m.group(3))
        if port > 65535:
            raise ConfigError(f"{key}: port out of range in {item!r}")
        host = m.group(2)
        if host.startswith("["):
            host = host[1:-1]
        out.append(Endpoint(m.group(1).upper(), host, port))
    names = [e.name for e in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{key}: duplicate listener name in {v!r}")
    return tuple(out)


def _voters(key: str, v: str) -> tuple[tuple[int, str, int], ...]:
    out = []
    for item in _list(key, v):
        m = re.match(r"^(\d+)@(\[[0-9a-fA-F:.]+\]|[^:\s]+):(\d+)$", item)
        if not m:
            raise ConfigError(f"{key}: malformed voter {item!r} (expected id@host:port)")
        out.append((int(m.group(1)), m.group(2).strip("[]"), int(m.group(3))))
    return tuple(out)


# key -> (parser, default as text (None: derived), documentation)
SETTINGS: dict[str, tuple[Callable[[str, str], Any], str | None, str]] = {
    "node.id": (_int, "1", "This node's id (broker id and controller voter id)."),
    "process.roles": (_roles, "broker,controller", "Roles this process plays (KRaft)."),
    "listeners": (
        _endpoints,
        "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "Listeners NAME://host:port; port 0 picks a free port.",
    ),
    "advertised.listeners": (
        _endpoints,
        None,
        "What clients are told (Metadata, FindCoordinator). Default: the broker listeners.",
    ),
    "controller.listener.names": (_list, "CONTROLLER", "Listener names of the controller role."),
    "controller.quorum.voters": (_voters, "1@127.0.0.1:9093", "Controller quorum id@host:port."),
    "log.dirs": (_list, "./data", "Data directories (the first one holds meta.properties)."),
    "socket.request.max.bytes": (
        _int,
        "104857600",
        "Largest request frame accepted; bigger (or negative) sizes close the connection.",
    ),
    "cluster.id": (_str, None, "Cluster id; default: generated once, kept in meta.properties."),
    "metrics.port": (_int, "-1", "Prometheus HTTP port (-1: off, 0: any free port)."),
    "metrics.host": (_str, "127.0.0.1", "Prometheus HTTP bind address."),
    "diskless.coordinator.url": (
        _str,
        None,
        "Batch coordinator store. Default: sqlite:///<log.dirs>/coordinator.db.",
    ),
    "shutdown.timeout.ms": (_int, "5000", "Time to finish in-flight requests on shutdown."),
    "log.retention.ms": (
        _int,
        "604800000",
        "Diskless retention by time, ms (Kafka's default 7 days); -1 keeps batches forever.",
    ),
    "log.retention.bytes": (
        _int,
        "-1",
        "Diskless retention by size per partition, bytes; -1 (Kafka's default) disables it.",
    ),
    "log.retention.check.interval.ms": (
        _int,
        "300000",
        "How often the retention task runs, ms (Kafka's default 5 minutes); 0 disables it.",
    ),
    "max.inflight.requests.per.connection": (
        _int,
        "128",
        "Requests in flight on one connection before the server stops reading from it.",
    ),
}


@dataclass(frozen=True)
class Config:
    """Parsed, validated configuration (read the typed attributes, or ``raw``)."""

    raw: Mapping[str, str]
    node_id: int
    process_roles: tuple[str, ...]
    listeners: tuple[Endpoint, ...]
    advertised_listeners: tuple[Endpoint, ...]
    controller_listener_names: tuple[str, ...]
    controller_quorum_voters: tuple[tuple[int, str, int], ...]
    log_dirs: tuple[str, ...]
    socket_request_max_bytes: int
    cluster_id: str | None
    metrics_port: int
    metrics_host: str
    diskless_coordinator_url: str
    shutdown_timeout_ms: int
    max_inflight_requests_per_connection: int
    log_retention_ms: int = 604800000
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 300000

    @property
    def data_dir(self) -> Path:
        return Path(self.log_dirs[0])

    def role_of(self, listener_name: str) -> str:
        return "controller" if listener_name in self.controller_listener_names else "broker"

    def served_listeners(self) -> tuple[Endpoint, ...]:
        """Listeners whose role this process plays."""
        return tuple(e for e in self.listeners if self.role_of(e.name) in self.process_roles)

    def ensure_cluster_id(self) -> str:
        """Create the data directory and ``meta.properties`` if needed; return the cluster id."""
        d = self.data_dir
        d.mkdir(parents=True, exist_ok=True)
        meta = d / "meta.properties"
        if meta.exists():
            p = Properties()
            with meta.open("rb") as f:
                p.load(f, "utf-8")
            stored = p.properties.get("cluster.id")
            if not stored:
                raise ConfigError(f"{meta}: no cluster.id")
            if self.cluster_id and self.cluster_id != stored:
                raise ConfigError(
                    f"cluster.id: configured {self.cluster_id!r} but {meta} holds {stored!r}"
                )
            stored_node = p.properties.get("node.id")
            if stored_node is not None and stored_node.strip() != str(self.node_id):
                raise ConfigError(
                    f"node.id: configured {self.node_id} but {meta} holds {stored_node}"
                )
            return stored
        cid = self.cluster_id or random_uuid_text()
        tmp = meta.with_suffix(".tmp")
        tmp.write_text(f"#\nversion=1\ncluster.id={cid}\nnode.id={self.node_id}\n")
        os.replace(tmp, meta)
        return cid


def random_uuid_text() -> str:
    """Kafka's ``Uuid.randomUuid().toString()``: 22 chars of URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def read_properties(path: str | os.PathLike) -> dict[str, str]:
    p = Properties()
    try:
        with open(path, "rb") as f:
            p.load(f, "utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except Exception as e:  # noqa: BLE001 - jproperties raises its own parse errors
        raise ConfigError(f"cannot parse config file {path}: {e}") from None
    return {k.strip(): v for k, v in p.properties.items()}


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override {item!r}: expected key=value")
        out[key.strip()] = value
    return out


def load_config(
    path: str | os.PathLike | None = None,
    overrides: Mapping[str, str] | Iterable[str] = (),
) -> Config:
    """Read ``path`` (optional), apply overrides (a mapping or ``key=value`` strings), validate."""
    raw: dict[str, str] = {}
    if path is not None:
        raw.update(read_properties(path))
    if not isinstance(overrides, Mapping):
        overrides = parse_overrides(overrides)
    raw.update(overrides)
    for key in raw:
        if key not in SETTINGS:
            raise ConfigError(f"{key}: unknown configuration key")
    vals: dict[str, Any] = {}
    for key, (parse, default, _doc) in SETTINGS.items():
        text = raw.get(key, default)
        vals[key] = None if text is None else parse(key, text)
    if vals["cluster.id"] == "":
        vals["cluster.id"] = None
    listeners = vals["listeners"]
    ctl_names = vals["controller.listener.names"]
    roles = vals["process.roles"]
    names = {e.name for e in listeners}
    if "controller" in roles:
        if not any(n in names for n in ctl_names):
            raise ConfigError("controller.listener.names: no listener of the controller role")
    if "broker" in roles and not any(e.name not in ctl_names for e in listeners):
        raise ConfigError("listeners: the broker role needs a non-controller listener")
    adv = vals["advertised.listeners"]
    if adv is None:
        adv = tuple(e for e in listeners if e.name not in ctl_names)
    else:
        for e in adv:
            if e.name not in names:
                raise ConfigError(f"advertised.listeners: {e.name} is not in listeners")
    for key in ("socket.request.max.bytes", "shutdown.timeout.ms"):
        if vals[key] < 0:
            raise ConfigError(f"{key}: must not be negative")
    if vals["log.retention.check.interval.ms"] < 0:
        raise ConfigError("log.retention.check.interval.ms: must not be negative")
    for key in ("log.retention.ms", "log.retention.bytes"):
        if vals[key] < -1:
            raise ConfigError(f"{key}: must be -1 (unlimited) or at least 0")
    if vals["max.inflight.requests.per.connection"] < 1:
        raise ConfigError("max.inflight.requests.per.connection: must be at least 1")
    if not vals["log.dirs"]:
        raise ConfigError("log.dirs: empty")
    # sqlite:// + an absolute path (a relative log.dirs such as the default ./data would
    # otherwise read as /data after the scheme's slashes).
    url = vals["diskless.coordinator.url"] or (
        f"sqlite://{(Path(vals['log.dirs'][0]) / 'coordinator.db').resolve()}"
    )
    return Config(
        raw=dict(raw),
        node_id=vals["node.id"],
        process_roles=roles,
        listeners=listeners,
        advertised_listeners=adv,
        controller_listener_names=ctl_names,
        controller_quorum_voters=vals["controller.quorum.voters"],
        log_dirs=vals["log.dirs"],
        socket_request_max_bytes=vals["socket.request.max.bytes"],
        cluster_id=vals["cluster.id"],
        metrics_port=vals["metrics.port"],
        metrics_host=vals["metrics.host"],
        diskless_coordinator_url=url,
        shutdown_timeout_ms=vals["shutdown.timeout.ms"],
        max_inflight_requests_per_connection=vals["max.inflight.requests.per.connection"],
        log_retention_ms=vals["log.retention.ms"],
        log_retention_bytes=vals["log.retention.bytes"],
        log_retention_check_interval_ms=vals["log.retention.check.interval.ms"],
    )
