"""Server configuration: Kafka's keys and ``server.properties`` syntax, plus ``--override k=v``.

The file is read with the ``jproperties`` package (Java properties syntax: ``key=value``,
``key: value``, ``#``/``!`` comments, ``\\`` line continuations). Every setting has a documented
default (``SETTINGS``), so no file and no overrides is a working single-node combined server.
An unknown key or a malformed value raises :class:`ConfigError` naming the key (the CLI exits 2).

The cluster id is generated once and persisted in ``<log.dirs>/meta.properties`` like Kafka's
``kafka-storage format`` (``version=1``, ``cluster.id``, ``node.id``, ``directory.id``):
``kafka-rpc storage format`` does it explicitly, ``kafka-rpc serve`` on an empty directory by
itself (:mod:`kafka_rpc.storage.formatter`; this module reads and writes no data directory).
The metadata quorum's settings (``controller.quorum.*``, ``metadata.*``) feed
:meth:`Config.raft_config`. The quorum is static (``controller.quorum.voters``, kraft.version 0)
or dynamic (KIP-853: no static voters, ``controller.quorum.bootstrap.servers`` to find the
leader, the voters from the metadata log or its bootstrap snapshot; :attr:`Config.dynamic_quorum`).
As Kafka's ``KafkaConfig.validateValues`` requires: one of the two is set, a controller's
``node.id`` is one of a non-empty ``controller.quorum.voters``, a broker-only node's is not, and
``controller.quorum.auto.join.enable`` needs the controller role.
"""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jproperties import Properties

__all__ = [
    "SETTINGS",
    "Config",
    "ConfigError",
    "Endpoint",
    "load_config",
    "parse_listeners",
]


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


def _bool(key: str, v: str) -> bool:
    t = v.strip().lower()
    if t not in ("true", "false"):
        raise ConfigError(f"{key}: expected true or false, got {v!r}")
    return t == "true"


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


def parse_listeners(key: str, text: str) -> tuple[Endpoint, ...]:
    """A ``listeners``-style value (``NAME://host:port,...``, names upper-cased, an IPv6 host in
    brackets) as the endpoints it lists; ConfigError naming ``key`` for a malformed one."""
    return _endpoints(key, text)


def _protocol_map(key: str, v: str) -> dict[str, str]:
    out = {}
    for item in _list(key, v):
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or proto not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{key}: malformed entry {item!r} (expected NAME:PROTOCOL, PROTOCOL one of "
                f"{', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in out:
            raise ConfigError(f"{key}: listener {name} appears twice")
        out[name] = proto
    return out


#: Kafka's ``Utils.HOST_PORT_PATTERN`` (``getHost``/``getPort``, matched whole) and
#: ``Utils.VALID_HOST_CHARACTERS`` (``validHostPattern``).
_HOST_PORT_RE = re.compile(r"(?:[0-9a-zA-Z\-%._]*://)?\[?([0-9a-zA-Z\-%._:]*)]?:([0-9]+)")
_VALID_HOST_RE = re.compile(r"[0-9a-zA-Z\-%._:]*")


def _bootstrap_servers(key: str, v: str) -> tuple[tuple[str, int], ...]:
    """``controller.quorum.bootstrap.servers``: ``host:port`` entries (Kafka
    ``QuorumConfig.parseBootstrapServer``, its messages); a host may be ``[ipv6]``."""
    out = []
    for item in _list(key, v):
        m = _HOST_PORT_RE.fullmatch(item)
        if m is None or not _VALID_HOST_RE.fullmatch(m.group(1)):
            raise ConfigError(
                f"Failed to parse host name from {item} for the configuration {key}. Each entry "
                'should be in the form "{host}:{port}"'
            )
        port = int(m.group(2))
        if port > 65535:  # Java's InetSocketAddress.createUnresolved
            raise ConfigError(f"{key}: port out of range:{port} in {item}")
        out.append((m.group(1), port))
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
    "controller.quorum.voters": (
        _voters,
        None,
        "The static controller quorum, id@host:port,... (kraft.version 0). Default: "
        "1@127.0.0.1:9093 (one combined node), none when controller.quorum.bootstrap.servers "
        "is set (a dynamic quorum, KIP-853).",
    ),
    "controller.quorum.bootstrap.servers": (
        _bootstrap_servers,
        "",
        "host:port,... of controllers to find the quorum's leader from (KIP-853): with no "
        "static voters the voters come from the metadata log, formatted with kafka-rpc storage "
        "format --standalone, --initial-controllers or --no-initial-controllers.",
    ),
    "controller.quorum.auto.join.enable": (
        _bool,
        "false",
        "Kafka 4.2+: a controller that is an observer of a dynamic quorum adds itself as a "
        "voter (AddRaftVoter) once it follows the leader; needs the controller role.",
    ),
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
        "Batch Coordinator (KIP-1164). Default: the topic-based one on __diskless-metadata from "
        "the metadata log, importing <log.dirs>/coordinator.db of the standalone SQLite one; "
        "sqlite:///path, memory://, postgresql://..., raft:///dir choose another.",
    ),
    "shutdown.timeout.ms": (_int, "5000", "Time to finish in-flight requests on shutdown."),
    "server.max.startup.time.ms": (
        _int,
        "9223372036854775807",
        "Kafka's: how long a start may wait for the node to be ready to serve (the broker caught "
        "up with the metadata log, a node alone its Batch Coordinator running) before it fails; "
        "Kafka's default, Long.MAX_VALUE, waits for ever.",
    ),
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
    # ---- the metadata quorum (KRaft), Kafka's keys and defaults (QuorumConfig, KRaftConfigs,
    # MetadataLogConfig)
    "controller.quorum.election.timeout.ms": (
        _int,
        "1000",
        "Raft election timeout T, ms: each election timer draws uniformly from [T, 2T).",
    ),
    "controller.quorum.fetch.timeout.ms": (
        _int,
        "2000",
        "A follower with no successful Fetch response for this long becomes a candidate, ms; "
        "the leader resigns without fetches from a majority for 1.5 times this.",
    ),
    "controller.quorum.election.backoff.max.ms": (
        _int,
        "1000",
        "Cap of the backoff before a new election, ms.",
    ),
    "controller.quorum.request.timeout.ms": (
        _int,
        "2000",
        "Timeout of one Raft request to another voter, ms.",
    ),
    "controller.quorum.retry.backoff.ms": (
        _int,
        "20",
        "Wait before retrying a destination whose request failed, ms.",
    ),
    "controller.quorum.append.linger.ms": (
        _int,
        "25",
        "How long the leader gathers appends into one batch before writing it, ms.",
    ),
    "metadata.log.dir": (
        _str,
        None,
        "Directory of the metadata log (__cluster_metadata-0/ inside). Default: first of log.dirs.",
    ),
    "metadata.log.max.record.bytes.between.snapshots": (
        _int,
        "20971520",
        "Snapshot after this many bytes of committed records since the last one (at least 1).",
    ),
    "metadata.log.max.snapshot.interval.ms": (
        _int,
        "3600000",
        "Snapshot when this long has passed since the last one and new records are committed, "
        "ms; 0 disables the time trigger.",
    ),
    "controller.snapshot.minimum.records": (
        _int,
        "0",
        "Snapshot after this many committed records since the last one (KIP-630 draft); 0: off.",
    ),
    "metadata.max.retention.bytes": (
        _int,
        "104857600",
        "Delete metadata log segments before the latest snapshot beyond this size, bytes; "
        "-1: no size limit.",
    ),
    "metadata.max.retention.ms": (
        _int,
        "604800000",
        "Delete metadata log segments before the latest snapshot older than this, ms; "
        "-1: no time limit.",
    ),
    "metadata.log.retention.check.interval.ms": (
        _int,
        "60000",
        "How often metadata log retention runs, ms (Kafka's fixed 60000).",
    ),
    "max.replication.lag.ms": (
        _int,
        "30000",
        "The log start offset does not pass the fetch offset of a replica that fetched within "
        "this long, ms (unless the snapshot is older).",
    ),
    "metadata.max.idle.interval.ms": (
        _int,
        "500",
        "The active controller appends a NoOpRecord after this long without a write, ms; "
        "0 disables it.",
    ),
    "metadata.log.segment.bytes": (
        _int,
        "1073741824",
        "Largest metadata log segment file, bytes.",
    ),
    "broker.heartbeat.interval.ms": (
        _int,
        "2000",
        "A broker sends BrokerHeartbeat to the active controller this often, ms.",
    ),
    "broker.session.timeout.ms": (
        _int,
        "9000",
        "The active controller fences a broker that sent no heartbeat for this long, ms.",
    ),
    "producer.ids.allocation.max.per.second": (
        _int,
        "10",
        "AllocateProducerIds blocks one broker may get per second (0: no limit); over it the "
        "answer is THROTTLING_QUOTA_EXCEEDED with ThrottleTimeMs.",
    ),
    "auto.create.topics.enable": (
        _bool,
        "true",
        "Metadata requests that allow it create the missing topics they name.",
    ),
    "num.partitions": (_int, "1", "Partitions of a topic created without a count."),
    "default.replication.factor": (
        _int,
        "1",
        "Replication factor of a topic created without one.",
    ),
    # ---- leader elections by the active controller (Kafka's QuorumController periodic tasks)
    "unclean.leader.election.enable": (
        _bool,
        "false",
        "Whether a partition with no live ISR member may elect a replica outside the ISR (data "
        "may be lost); the default of the topic config of that name.",
    ),
    "auto.leader.rebalance.enable": (
        _bool,
        "true",
        "The active controller moves leadership back to each partition's first replica every "
        "leader.imbalance.check.interval.seconds.",
    ),
    "leader.imbalance.check.interval.seconds": (
        _int,
        "300",
        "Period of the preferred-leader rebalance, s.",
    ),
    "unclean.leader.election.interval.ms": (
        _int,
        "300000",
        "Period of the unclean election of leaderless partitions whose topic allows it, ms.",
    ),
    # ---- the Batch Coordinators' internal topic (KIP-1164; docs/batch-coordinator.md)
    "diskless.metadata.topic.num.partitions": (
        _int,
        "1",
        "Partitions of the internal __diskless-metadata topic (one Batch Coordinator each), set "
        "when the active controller creates it; like Kafka's offsets.topic.num.partitions it "
        "should not change after deployment.",
    ),
    "replica.lag.time.max.ms": (
        _int,
        "30000",
        "Kafka's: a follower that has not reached the leader's log end within this many ms is "
        "out of the ISR. Here for the __diskless-metadata partitions, whose Raft leader reports "
        "its caught-up voters as the ISR (docs/batch-coordinator.md).",
    ),
    "diskless.metadata.topic.replication.factor": (
        _int,
        None,
        "Replication factor of the internal __diskless-metadata topic (at least 1): the active "
        "controller creates it once that many brokers running the Batch Coordinator are "
        "registered and unfenced, never with fewer, as Kafka creates __consumer_offsets with "
        "offsets.topic.replication.factor. Default: 3, or the number of controller.quorum.voters "
        "when they are fewer (1 for the default single-node server).",
    ),
    # ---- features (docs/features.md)
    "kafka.compatible": (
        _bool,
        "false",
        "Ours: when this node formats an empty data directory by itself (the first serve), or "
        "finds no bootstrap.checkpoint in metadata.log.dir, the cluster is formatted "
        "Kafka-compatible: our features (kafka_rpc.*) stay at 0, so Apache Kafka brokers and "
        "controllers can join (no chunks, no Batch Coordinator mapping records). Like "
        "`kafka-rpc storage format --kafka-compatible`.",
    ),
    # ---- security (Kafka's keys; docs/security.md). The ssl.* and sasl.* keys, and
    # connections.max.reauth.ms, may be overridden per listener as
    # listener.name.<listener name in lower case>.<key> (Kafka's ListenerName.configPrefix).
    "listener.security.protocol.map": (
        _protocol_map,
        None,
        "Listener name -> PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL as NAME:PROTOCOL,... "
        "Default: Kafka's (each protocol's own name), controller listeners PLAINTEXT.",
    ),
    "inter.broker.listener.name": (
        _str,
        None,
        "The broker listener other nodes use to reach this broker. Default: the first "
        "advertised broker listener.",
    ),
    "ssl.keystore.type": (_str, "PEM", "Only PEM: private key and certificate chain in one file."),
    "ssl.keystore.location": (_str, "", "PEM file with the PKCS#8 private key and certificates."),
    "ssl.keystore.password": (_str, "", "Accepted for Kafka compatibility; unused with PEM."),
    "ssl.key.password": (_str, "", "Password of an encrypted private key in the keystore."),
    "ssl.truststore.type": (_str, "PEM", "Only PEM: the trusted CA certificates."),
    "ssl.truststore.location": (_str, "", "PEM file of trusted CA certificates."),
    "ssl.truststore.password": (_str, "", "Accepted for Kafka compatibility; unused with PEM."),
    "ssl.client.auth": (
        _str,
        "none",
        "none, requested or required: whether TLS listeners ask clients for a certificate.",
    ),
    "ssl.enabled.protocols": (_list, "TLSv1.2,TLSv1.3", "TLS versions accepted."),
    "ssl.protocol": (_str, "TLSv1.3", "Accepted for Kafka compatibility (see enabled)."),
    "ssl.cipher.suites": (
        _list,
        "",
        "TLS 1.2 cipher suites, IANA (Kafka's) or OpenSSL names; empty: OpenSSL's defaults.",
    ),
    "ssl.endpoint.identification.algorithm": (
        _str,
        "https",
        "https: outbound TLS connections check the server certificate's host name; empty: not.",
    ),
    "ssl.principal.mapping.rules": (
        _str,
        "DEFAULT",
        "Certificate subject -> principal name rules (Kafka's RULE:pattern/replacement/[LU]).",
    ),
    "sasl.enabled.mechanisms": (
        _list,
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "SASL mechanisms SASL listeners accept (Kafka's default GSSAPI is not supported).",
    ),
    "sasl.mechanism.inter.broker.protocol": (
        _str,
        "PLAIN",
        "SASL mechanism this node uses to reach a SASL broker listener.",
    ),
    "sasl.mechanism.controller.protocol": (
        _str,
        "PLAIN",
        "SASL mechanism this node uses to reach a SASL controller listener.",
    ),
    "sasl.jaas.config": (
        _str,
        "",
        "JAAS-style login options: username/password for outbound connections, "
        'user_<name>="<password>" entries for PLAIN.',
    ),
    "sasl.server.max.receive.size": (
        _int,
        "524288",
        "Largest frame accepted before SASL authentication completes, bytes.",
    ),
    "connections.max.reauth.ms": (
        _int,
        "0",
        "SASL session lifetime, ms (KIP-368): clients re-authenticate before it ends, a "
        "connection that does not is closed at its next request; 0: sessions never expire.",
    ),
    "authorizer.class.name": (
        _str,
        "",
        "Empty: no authorization. org.apache.kafka.metadata.authorizer.StandardAuthorizer: "
        "Kafka's ACL authorizer (ours).",
    ),
    "super.users": (_str, "", "Principals allowed everything, separated by ';'."),
    "allow.everyone.if.no.acl.found": (
        _bool,
        "true",
        "With an authorizer: allow a resource that has no ACL at all.",
    ),
}

#: ``controller.quorum.voters`` when neither it nor ``controller.quorum.bootstrap.servers`` is
#: given: this node alone (the default ``node.id`` 1 on the default controller listener).
_DEFAULT_VOTERS = "1@127.0.0.1:9093"
DISKLESS_METADATA_REPLICATION_FACTOR = 3
"""The default of ``diskless.metadata.topic.replication.factor`` (Kafka's
``offsets.topic.replication.factor`` default), lowered to the number of static controller voters
when they are fewer."""
#: Hosts that name no one machine (a listener bound to every address, or none given).
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")

#: Security protocols of ``listener.security.protocol.map`` (Kafka's ``SecurityProtocol``).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: SASL mechanisms we serve and use (``sasl.enabled.mechanisms``; Kafka's GSSAPI and
#: OAUTHBEARER are not supported).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}
#: Keys that ``listener.name.<name>.<key>`` may override (Kafka's per-listener configs).
_LISTENER_KEYS = frozenset(
    k for k in SETTINGS if k.startswith(("ssl.", "sasl.")) or k == "connections.max.reauth.ms"
)
_MECH_JAAS_RE = re.compile(r"^[a-z0-9-]+\.sasl\.jaas\.config$")

#: The quorum settings whose value must be at least 0 (the retention ones take -1 as well).
_NON_NEGATIVE = (
    "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.timeout.ms",
    "controller.quorum.election.backoff.max.ms",
    "controller.quorum.request.timeout.ms",
    "controller.quorum.retry.backoff.ms",
    "controller.quorum.append.linger.ms",
    "metadata.log.max.snapshot.interval.ms",
    "controller.snapshot.minimum.records",
    "metadata.log.retention.check.interval.ms",
    "max.replication.lag.ms",
    "metadata.max.idle.interval.ms",
    "producer.ids.allocation.max.per.second",
)
#: ... and those that must be at least 1.
_POSITIVE = (
    "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.timeout.ms",
    "controller.quorum.request.timeout.ms",
    "metadata.log.max.record.bytes.between.snapshots",
    "metadata.log.retention.check.interval.ms",
    "metadata.log.segment.bytes",
    "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms",
    "num.partitions",
    "default.replication.factor",
    "leader.imbalance.check.interval.seconds",
    "unclean.leader.election.interval.ms",
    "diskless.metadata.topic.num.partitions",
)


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
    server_max_startup_time_ms: int = 9223372036854775807
    # the metadata quorum (SETTINGS documents each; all times ms, sizes bytes)
    metadata_log_dir: str = "./data"
    quorum_election_timeout_ms: int = 1000
    quorum_fetch_timeout_ms: int = 2000
    quorum_election_backoff_max_ms: int = 1000
    quorum_request_timeout_ms: int = 2000
    quorum_retry_backoff_ms: int = 20
    quorum_append_linger_ms: int = 25
    metadata_snapshot_max_record_bytes: int = 20971520
    metadata_snapshot_interval_ms: int = 3600000
    controller_snapshot_minimum_records: int = 0
    metadata_max_retention_bytes: int = 104857600
    metadata_max_retention_ms: int = 604800000
    metadata_retention_check_interval_ms: int = 60000
    max_replication_lag_ms: int = 30000
    metadata_max_idle_interval_ms: int = 500
    metadata_log_segment_bytes: int = 1073741824
    broker_heartbeat_interval_ms: int = 2000
    broker_session_timeout_ms: int = 9000
    producer_ids_allocation_max_per_second: int = 10
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    unclean_leader_election_interval_ms: int = 300000
    diskless_metadata_topic_num_partitions: int = 1
    #: ``replica.lag.time.max.ms`` (ms): the ISR a ``__diskless-metadata`` leader reports
    replica_lag_time_max_ms: int = 30000
    #: ``diskless.metadata.topic.replication.factor`` (its default follows the static voters)
    diskless_metadata_topic_replication_factor: int = 3
    #: listener name -> security protocol (every listener of ``listeners`` has one)
    security_protocol_map: Mapping[str, str] = dataclasses.field(default_factory=dict)
    inter_broker_listener_name: str | None = None
    kafka_compatible: bool = False
    #: ``controller.quorum.bootstrap.servers`` as (host, port) pairs (empty: not set)
    controller_quorum_bootstrap_servers: tuple[tuple[str, int], ...] = ()
    #: ``controller.quorum.auto.join.enable``
    quorum_auto_join_enable: bool = False

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener (``listener.security.protocol.map``)."""
        return self.security_protocol_map.get(listener_name, "PLAINTEXT")

    def listener_value(self, listener_name: str, key: str) -> str:
        """A security setting as text for one listener: Kafka's
        ``listener.name.<name lower case>.<key>`` override, else ``key``, else its default."""
        raw = self.raw
        v = raw.get(f"listener.name.{listener_name.lower()}.{key}")
        if v is None:
            v = raw.get(key)
        if v is None:
            v = SETTINGS[key][1] if key in SETTINGS else None
        return "" if v is None else v.strip()

    @property
    def metadata_partition_dir(self) -> Path:
        """``<metadata.log.dir>/__cluster_metadata-0``: the metadata log's segments, snapshots
        and ``quorum-state``."""
        return Path(self.metadata_log_dir) / "__cluster_metadata-0"

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    def voters(self) -> dict[int, tuple[str, int]]:
        """``controller.quorum.voters`` as voter id -> (host, port) of its controller listener."""
        return {vid: (host, port) for vid, host, port in self.controller_quorum_voters}

    @property
    def dynamic_quorum(self) -> bool:
        """No static voters (``controller.quorum.voters`` empty): the voter set is the metadata
        log's (KIP-853), found through ``controller.quorum.bootstrap.servers``; Kafka's
        ``StorageTool`` calls this ``hasDynamicQuorum``."""
        return not self.controller_quorum_voters

    def advertised_controller_listeners(self) -> tuple[Endpoint, ...]:
        """Kafka's ``KafkaConfig.effectiveAdvertisedControllerListeners``: for each name of
        ``controller.listener.names`` in order, its ``advertised.listeners`` entry, else its
        ``listeners`` entry with a ``0.0.0.0`` host made empty (unknown); names in neither are
        skipped. Empty on a broker-only node (its listeners have no controller name)."""
        adv = {e.name: e for e in self.advertised_listeners}
        own = {e.name: e for e in self.listeners}
        out = []
        for name in self.controller_listener_names:
            ep = adv.get(name)
            if ep is None and name in own:
                ep = own[name]
                if ep.host == "0.0.0.0":
                    ep = Endpoint(ep.name, "", ep.port)
            if ep is not None:
                out.append(ep)
        return tuple(out)

    def local_controller_endpoints(
        self, bound: Mapping[str, tuple[str, int]] | None = None
    ) -> dict[str, tuple[str, int]]:
        """This node's controller endpoints, listener name -> (host, port), as the voter
        entries of a dynamic quorum carry them (Kafka ``KafkaRaftManager`` ``localListeners``
        from :meth:`advertised_controller_listeners`). ``bound``: the bound listeners
        (name -> (host, port)) replace a port 0, and an unknown host (empty, ``0.0.0.0``,
        ``::``) by the bound one, else by this machine's name as Kafka's reverse look-up
        (``ListenerInfo.withWildcardHostnamesResolved``)."""
        import socket

        out: dict[str, tuple[str, int]] = {}
        for ep in self.advertised_controller_listeners():
            host, port = ep.host, ep.port
            b = (bound or {}).get(ep.name)
            if port == 0 and b is not None:
                port = b[1]
            if host in _WILDCARD_HOSTS:
                known = b is not None and b[0] not in _WILDCARD_HOSTS
                host = b[0] if b is not None and known else socket.getfqdn()
            out[ep.name] = (host, port)
        return out

    def raft_config(
        self,
        cluster_id: str,
        directory_id: uuid.UUID,
        bound: Mapping[str, tuple[str, int]] | None = None,
    ):
        """The metadata partition's :class:`kafka_rpc.raft.core.RaftConfig` from these settings
        (the core's own defaults for what Kafka hard-codes: fetch wait, fetch size);
        ``directory_id``: the replica's directory id, the ``directory.id`` of
        ``metadata.log.dir``'s ``meta.properties``
        (:func:`kafka_rpc.storage.meta_properties.metadata_directory_id`); ``bound``: the
        node's bound listeners, for :meth:`local_controller_endpoints`. The static voters
        (empty for a dynamic quorum), ``controller.quorum.bootstrap.servers``, the controller
        role (Kafka ``canBecomeVoter``) and ``controller.quorum.auto.join.enable`` as they
        are."""
        from kafka_rpc.raft.core import RaftConfig

        return RaftConfig(
            node_id=self.node_id,
            voters=self.voters(),
            cluster_id=cluster_id,
            election_timeout_ms=self.quorum_election_timeout_ms,
            fetch_timeout_ms=self.quorum_fetch_timeout_ms,
            election_backoff_max_ms=self.quorum_election_backoff_max_ms,
            request_timeout_ms=self.quorum_request_timeout_ms,
            retry_backoff_ms=self.quorum_retry_backoff_ms,
            append_linger_ms=self.quorum_append_linger_ms,
            snapshot_max_record_bytes=self.metadata_snapshot_max_record_bytes,
            snapshot_interval_ms=self.metadata_snapshot_interval_ms,
            snapshot_min_records=self.controller_snapshot_minimum_records,
            max_retention_bytes=self.metadata_max_retention_bytes,
            max_retention_ms=self.metadata_max_retention_ms,
            retention_check_interval_ms=self.metadata_retention_check_interval_ms,
            max_replication_lag_ms=self.max_replication_lag_ms,
            listener_name=self.controller_listener_names[0],
            directory_id=directory_id,
            bootstrap_servers=self.controller_quorum_bootstrap_servers,
            local_listeners=self.local_controller_endpoints(bound),
            can_become_voter=self.is_controller,
            auto_join=self.quorum_auto_join_enable,
        )

    @property
    def data_dir(self) -> Path:
        return Path(self.log_dirs[0])

    def role_of(self, listener_name: str) -> str:
        return "controller" if listener_name in self.controller_listener_names else "broker"

    def served_listeners(self) -> tuple[Endpoint, ...]:
        """Listeners whose role this process plays."""
        return tuple(e for e in self.listeners if self.role_of(e.name) in self.process_roles)

    def storage_dirs(self) -> list[Path]:
        """Every directory ``kafka-rpc storage format`` writes ``meta.properties`` into: each of
        ``log.dirs``, then ``metadata.log.dir`` when it is not one of them."""
        dirs = [Path(d) for d in self.log_dirs]
        meta_dir = Path(self.metadata_log_dir)
        if all(meta_dir.resolve() != d.resolve() for d in dirs):
            dirs.append(meta_dir)
        return dirs


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


def default_coordinator_url(log_dir: str) -> str:
    """The default ``diskless.coordinator.url``: the topic-based Batch Coordinator (KIP-1164's
    reference design, docs/batch-coordinator.md) from the metadata log, its
    ``__diskless-metadata-<p>`` directories in ``log_dir`` (the first of ``log.dirs``), importing
    ``<log_dir>/coordinator.db`` -- where the standalone SQLite coordinator, the default before,
    kept its state -- on first start (``kafka_rpc.coordinator.replicated``). The path is made
    absolute: a relative ``log.dirs`` such as the default ``./data`` would otherwise read as
    ``/data`` after the scheme's slashes."""
    from urllib.parse import quote

    root = Path(log_dir).resolve()
    return f"raft://{quote(str(root))}?import_path={quote(str(root / 'coordinator.db'), safe='')}"


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
        if key not in SETTINGS and not _listener_key_ok(key):
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
    for key in ("socket.request.max.bytes", "shutdown.timeout.ms", "server.max.startup.time.ms"):
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
    for key in _NON_NEGATIVE:
        if vals[key] < 0:
            raise ConfigError(f"{key}: must not be negative")
    for key in _POSITIVE:
        if vals[key] < 1:
            raise ConfigError(f"{key}: must be at least 1")
    for key in ("metadata.max.retention.bytes", "metadata.max.retention.ms"):
        if vals[key] < -1:
            raise ConfigError(f"{key}: must be -1 (unlimited) or at least 0")
    bootstrap_servers = vals["controller.quorum.bootstrap.servers"]
    voters = vals["controller.quorum.voters"]
    if voters is None:  # the one-node default, unless the quorum is found by bootstrap servers
        voters = () if bootstrap_servers else _voters("controller.quorum.voters", _DEFAULT_VOTERS)
    vals["controller.quorum.voters"] = voters
    voter_ids = [v[0] for v in voters]
    if len(set(voter_ids)) != len(voter_ids):
        raise ConfigError("controller.quorum.voters: a voter id appears twice")
    key = "diskless.metadata.topic.replication.factor"
    if vals[key] is None:  # 3, or fewer static voters (a node alone: 1); a dynamic quorum: 3
        vals[key] = min(DISKLESS_METADATA_REPLICATION_FACTOR, len(voters) or 3)
    elif vals[key] < 1:
        raise ConfigError(f"{key}: must be at least 1")
    if not voters and not bootstrap_servers:
        # KafkaConfig.validateQuorumVotersAndQuorumBootstrapServerForKRaft, for every role
        raise ConfigError(
            "If using process.roles, either controller.quorum.bootstrap.servers must contain "
            "the set of bootstrap controllers or controller.quorum.voters must contain a "
            "parseable set of controllers."
        )
    if "controller" in roles:
        # KafkaConfig.validateControllerQuorumVotersMustContainNodeIdForKRaftController: only
        # a static quorum names its voters; a dynamic one's come from the metadata log
        if voters and vals["node.id"] not in voter_ids:
            # Kafka (KafkaConfig): "If process.roles contains the 'controller' role, the node
            # id ... must be included in the set of voters controller.quorum.voters=..."
            given = raw.get("controller.quorum.voters", _DEFAULT_VOTERS)
            raise ConfigError(
                f"node.id: {vals['node.id']} must be included in the set of voters "
                f"controller.quorum.voters={given} when process.roles contains controller"
            )
    elif "broker" in roles:
        if vals["node.id"] in voter_ids:
            raise ConfigError(
                f"node.id: {vals['node.id']} is a voter in controller.quorum.voters but "
                "process.roles does not contain controller"
            )
        if vals["controller.quorum.auto.join.enable"]:
            raise ConfigError(
                "controller.quorum.auto.join.enable is only supported when process.roles "
                "contains the 'controller' role."
            )
    protocol_map = _effective_protocol_map(vals, "listener.security.protocol.map" in raw)
    ibl = vals["inter.broker.listener.name"]
    if ibl:
        ibl = ibl.upper()
        if ibl not in names or ibl in ctl_names:
            raise ConfigError(f"inter.broker.listener.name: {ibl} is not a broker listener")
    else:
        ibl = adv[0].name if adv else None
    _check_security(vals)
    metadata_log_dir = vals["metadata.log.dir"] or vals["log.dirs"][0]
    url = vals["diskless.coordinator.url"] or default_coordinator_url(vals["log.dirs"][0])
    return Config(
        raw=dict(raw),
        node_id=vals["node.id"],
        process_roles=roles,
        listeners=listeners,
        advertised_listeners=adv,
        controller_listener_names=ctl_names,
        controller_quorum_voters=vals["controller.quorum.voters"],
        controller_quorum_bootstrap_servers=bootstrap_servers,
        quorum_auto_join_enable=vals["controller.quorum.auto.join.enable"],
        log_dirs=vals["log.dirs"],
        socket_request_max_bytes=vals["socket.request.max.bytes"],
        cluster_id=vals["cluster.id"],
        metrics_port=vals["metrics.port"],
        metrics_host=vals["metrics.host"],
        diskless_coordinator_url=url,
        shutdown_timeout_ms=vals["shutdown.timeout.ms"],
        server_max_startup_time_ms=vals["server.max.startup.time.ms"],
        max_inflight_requests_per_connection=vals["max.inflight.requests.per.connection"],
        log_retention_ms=vals["log.retention.ms"],
        log_retention_bytes=vals["log.retention.bytes"],
        log_retention_check_interval_ms=vals["log.retention.check.interval.ms"],
        metadata_log_dir=metadata_log_dir,
        quorum_election_timeout_ms=vals["controller.quorum.election.timeout.ms"],
        quorum_fetch_timeout_ms=vals["controller.quorum.fetch.timeout.ms"],
        quorum_election_backoff_max_ms=vals["controller.quorum.election.backoff.max.ms"],
        quorum_request_timeout_ms=vals["controller.quorum.request.timeout.ms"],
        quorum_retry_backoff_ms=vals["controller.quorum.retry.backoff.ms"],
        quorum_append_linger_ms=vals["controller.quorum.append.linger.ms"],
        metadata_snapshot_max_record_bytes=vals["metadata.log.max.record.bytes.between.snapshots"],
        metadata_snapshot_interval_ms=vals["metadata.log.max.snapshot.interval.ms"],
        controller_snapshot_minimum_records=vals["controller.snapshot.minimum.records"],
        metadata_max_retention_bytes=vals["metadata.max.retention.bytes"],
        metadata_max_retention_ms=vals["metadata.max.retention.ms"],
        metadata_retention_check_interval_ms=vals["metadata.log.retention.check.interval.ms"],
        max_replication_lag_ms=vals["max.replication.lag.ms"],
        metadata_max_idle_interval_ms=vals["metadata.max.idle.interval.ms"],
        metadata_log_segment_bytes=vals["metadata.log.segment.bytes"],
        broker_heartbeat_interval_ms=vals["broker.heartbeat.interval.ms"],
        broker_session_timeout_ms=vals["broker.session.timeout.ms"],
        producer_ids_allocation_max_per_second=vals["producer.ids.allocation.max.per.second"],
        auto_create_topics_enable=vals["auto.create.topics.enable"],
        num_partitions=vals["num.partitions"],
        default_replication_factor=vals["default.replication.factor"],
        unclean_leader_election_enable=vals["unclean.leader.election.enable"],
        auto_leader_rebalance_enable=vals["auto.leader.rebalance.enable"],
        leader_imbalance_check_interval_seconds=vals["leader.imbalance.check.interval.seconds"],
        unclean_leader_election_interval_ms=vals["unclean.leader.election.interval.ms"],
        diskless_metadata_topic_num_partitions=vals["diskless.metadata.topic.num.partitions"],
        replica_lag_time_max_ms=vals["replica.lag.time.max.ms"],
        diskless_metadata_topic_replication_factor=vals[
            "diskless.metadata.topic.replication.factor"
        ],
        security_protocol_map=protocol_map,
        inter_broker_listener_name=ibl,
        kafka_compatible=vals["kafka.compatible"],
    )


def _listener_key_ok(key: str) -> bool:
    """``listener.name.<name>.<key>`` with a per-listener key, or ``<mechanism>.sasl.jaas.config``
    (Kafka's ``listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config``)."""
    if not key.startswith("listener.name."):
        return False
    name, _, rest = key[len("listener.name.") :].partition(".")
    return bool(name) and (rest in _LISTENER_KEYS or bool(_MECH_JAAS_RE.match(rest)))


def _effective_protocol_map(vals: dict[str, Any], explicit: bool) -> dict[str, str]:
    """Every listener's security protocol. As Kafka (``KafkaConfig``
    ``effectiveListenerSecurityProtocolMap``): without an explicit map, Kafka's default map and
    PLAINTEXT for controller listeners it does not name; with one, every listener must be in it."""
    given = vals["listener.security.protocol.map"]
    pmap = dict(given) if given is not None else dict(_DEFAULT_PROTOCOL_MAP)
    out = {}
    for e in vals["listeners"]:
        proto = pmap.get(e.name)
        if proto is None:
            if explicit or e.name not in vals["controller.listener.names"]:
                raise ConfigError(
                    f"listener.security.protocol.map: no security protocol for listener {e.name}"
                )
            proto = "PLAINTEXT"
        out[e.name] = proto
    return out


def _check_security(vals: dict[str, Any]) -> None:
    """The security keys whose values are closed sets (checked per listener when used)."""
    if vals["ssl.client.auth"].lower() not in ("none", "requested", "required"):
        raise ConfigError("ssl.client.auth: expected none, requested or required")
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if vals[key].upper() != "PEM":
            raise ConfigError(f"{key}: only PEM is supported, got {vals[key]!r}")
    for p in vals["ssl.enabled.protocols"]:
        if p not in ("TLSv1.2", "TLSv1.3"):
            raise ConfigError(f"ssl.enabled.protocols: {p!r} is not TLSv1.2 or TLSv1.3")
    for m in vals["sasl.enabled.mechanisms"]:
        if m not in SASL_MECHANISMS:
            raise ConfigError(f"sasl.enabled.mechanisms: {m} is not supported")
    if vals["connections.max.reauth.ms"] < 0:
        raise ConfigError("connections.max.reauth.ms: must not be negative")
    if vals["sasl.server.max.receive.size"] < 1:
        raise ConfigError("sasl.server.max.receive.size: must be at least 1")
    name = vals["authorizer.class.name"]
    if name and name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(
            f"authorizer.class.name: {name} is not supported (use "
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer)"
        )


#: Names ``authorizer.class.name`` accepts for our StandardAuthorizer (Kafka's class name, ours).
AUTHORIZER_CLASS_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka_rpc.security.authorizer.StandardAuthorizer",
)
