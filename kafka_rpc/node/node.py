"""The node: one kafka-rpc process and every role it plays (:class:`Node`).

This is the composition root. It reads the settings, builds each collaborator (the metadata
quorum replica, the controller on it, the Batch Coordinator, the broker lifecycle, the metadata
publisher, security, metrics, retention) and hands each the others it needs as arguments; the
listener layer (:mod:`kafka_rpc.server`) gets a filled registry and this node as the handlers'
services. Nothing below reaches back up here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafka_rpc.api.registry import Registry, default_registry
from kafka_rpc.broker.channel import ControllerChannel
from kafka_rpc.broker.lifecycle import BrokerLifecycleManager
from kafka_rpc.broker.metadata_publisher import (
    MIRROR_FILE_NAME,
    BrokerMetadataPublisher,
    caught_up_when_registered,
)
from kafka_rpc.config import Config, Endpoint
from kafka_rpc.coordinator import ownership
from kafka_rpc.node.controller_registration import ControllerRegistrationManager
from kafka_rpc.raft.routing import RaftPartitions
from kafka_rpc.server.listeners import Listeners, ListenerState, RequestMetrics
from kafka_rpc.storage.formatter import ensure_cluster_id
from kafka_rpc.storage.meta_properties import metadata_directory_id

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from kafka_rpc.api.services import NodeServices
    from kafka_rpc.controller.quorum_controller import QuorumController
    from kafka_rpc.raft.driver import RaftDriver

log = logging.getLogger("kafka_rpc.node")

__all__ = ["Node", "handlers_registry"]


class Node:
    """One kafka-rpc process (Kafka's ``KafkaRaftServer`` with its ``SharedServer``,
    ``ControllerServer`` and ``BrokerServer``): the one composition root that builds and wires
    every role of ``config`` and starts and stops them in order.

    :meth:`start`: directory locks, metrics, the Batch Coordinator (broker role), security, the
    listeners (bound; broker ones not yet accepting), the metadata quorum replica and its
    controller, the controller registration (controller role), the broker lifecycle and
    metadata publisher, then the wait until the broker may serve (:meth:`_wait_until_ready`),
    then the broker listeners accept and ``started`` is set. A failed start releases what it
    took, the directory locks included. :meth:`serve` runs until ``should_exit`` (SIGTERM /
    SIGINT with ``install_signals``), then :meth:`shutdown`.

    ``registry``: the filled registry the listeners serve (every handler module's by default,
    :func:`handlers_registry`). The node is what the handlers get as ``ctx.services``
    (:class:`kafka_rpc.api.services.NodeServices`)."""

    def __init__(self, config: Config, registry: Registry | None = None) -> None:
        self.config = config
        self.registry = registry if registry is not None else handlers_registry()
        self.node_id = config.node_id
        self.cluster_id: str | None = None
        #: the listener layer (``kafka_rpc.server.listeners.Listeners``), bound by start
        self._sockets: Listeners | None = None
        self.started = asyncio.Event()
        self.should_exit = asyncio.Event()
        self.force_exit = False
        self.metrics_registry: Any = None
        self.metrics_port: int | None = None
        self._metrics_httpd: WSGIServer | None = None
        #: The KIP-1164 Batch Coordinator this node serves (broker role), started with the
        #: server from ``diskless.coordinator.url`` and closed after connections drain.
        self.coordinator: Any = None
        self._retention_task: asyncio.Future | None = None
        #: The metadata quorum replica (``kafka_rpc.raft.driver.RaftDriver``): a voter when the
        #: process has the controller role, an observer when it is broker-only; None until
        #: started.
        self.raft: RaftDriver | None = None
        #: the Raft partitions other than the metadata log whose RPCs this node's controller
        #: listener routes (``kafka_rpc.raft.routing.RaftPartitions``)
        self.raft_partitions = RaftPartitions()
        #: this controller's registration with the active controller (KIP-919;
        #: ``kafka_rpc.node.controller_registration``), with the controller role
        self.controller_registration: ControllerRegistrationManager | None = None
        #: the ``.lock`` files this node holds (``_lock_dirs``)
        self._dir_locks: list[Any] = []
        #: The state machine on the metadata log
        #: (``kafka_rpc.controller.quorum_controller.QuorumController``): the committed image on
        #: every node, the active controller's write path on the leader; None until started.
        self.controller: QuorumController | None = None
        #: The broker role's registration and heartbeats
        #: (``kafka_rpc.broker.lifecycle.BrokerLifecycleManager``).
        self.broker_lifecycle: BrokerLifecycleManager | None = None
        #: requests to the active controller (``kafka_rpc.broker.channel.ControllerChannel``;
        #: forwarding and the broker lifecycle), made at start, closed at the end of shutdown
        self._controller_channel: ControllerChannel | None = None
        #: ``kafka_rpc.broker.metadata_publisher.BrokerMetadataPublisher``: mirrors the image's
        #: diskless topics into the coordinator, garbage-collects deleted topic ids
        self.metadata_publisher: BrokerMetadataPublisher | None = None
        #: ``kafka_rpc.security.authorizer.StandardAuthorizer`` (``authorizer.class.name``) or
        #: None; the SCRAM credentials SASL listeners check (``ScramCredentials``)
        self.authorizer: Any = None
        self.scram_credentials: Any = None

    # ------------------------------------------------------------------ Batch Coordinators
    def batch_coordinator_partitions(self, write: bool) -> frozenset[int]:
        """The ``__diskless-metadata`` partitions (KIP-1164 Batch Coordinators,
        docs/batch-coordinator.md) this node serves: with ``write``, those whose writes it decides
        (the leader's); otherwise those it can answer reads for (any replica). The diskless handlers
        answer NOT_COORDINATOR (16) for an entry whose partition maps elsewhere
        (``kafka_rpc.controller.coordinator_mapping.coordinator_partition``). A coordinator
        that knows its partitions says so (``served_partitions(write)``: the topic-based one,
        the default); any other local coordinator is coordinator partition 0."""
        return ownership.served_partitions(self.coordinator, write)

    def batch_coordinator_loading(self, write: bool) -> frozenset[int]:
        """The ``__diskless-metadata`` partitions this node has a replica of that cannot answer
        yet (``loading_partitions(write)`` of the topic-based coordinator: starting, or led here
        and still replaying or importing); the diskless handlers answer their entries
        COORDINATOR_LOAD_IN_PROGRESS (14), retriable, as Kafka's group coordinator does while
        it loads. Empty for any other coordinator."""
        return ownership.loading_partitions(self.coordinator, write)

    # ------------------------------------------------------------------ addresses
    @property
    def listeners(self) -> dict[str, ListenerState]:
        """The bound listeners by name (empty before start)."""
        return self._sockets.by_name if self._sockets is not None else {}

    @property
    def bound(self) -> dict[str, tuple[str, int]]:
        """Listener name -> (host, bound port)."""
        return {n: (ls.host, ls.port) for n, ls in self.listeners.items()}

    @property
    def controller_channel(self) -> ControllerChannel:
        """Requests to the active controller (made on first use before start)."""
        if self._controller_channel is None:
            self._controller_channel = self.new_controller_channel()
        return self._controller_channel

    def new_controller_channel(self) -> ControllerChannel:
        """A channel to the active controller's controller listener, as this node sees the
        leader, with the controller listener's client security."""
        names = self.config.controller_listener_names
        return ControllerChannel(
            self.config,
            self.node_id,
            active_controller_id=self._active_controller_id,
            security=self.client_security(names[0]) if names else None,
            bound=lambda: self.bound,
            voters=self.quorum_voters,
        )

    def quorum_voters(self) -> dict[int, tuple[str, int]]:
        """The metadata quorum's voters, id -> (host, port) of their controller listener: the
        Raft replica's voter set once it runs (KIP-853: it changes with the log), else
        ``controller.quorum.voters``."""
        raft = self.raft
        return dict(raft.core.voters) if raft is not None else self.config.voters()

    def _active_controller_id(self) -> int:
        ctl = self.controller
        return getattr(ctl, "active_controller_id", -1) if ctl is not None else -1

    def advertised(self, listener_name: str | None = None) -> Endpoint:
        """The advertised endpoint of a broker listener (the named one if advertised), with
        port 0 replaced by the bound port and a wildcard host by this machine's name."""
        adv = {e.name: e for e in self.config.advertised_listeners}
        ep = adv.get(listener_name) if listener_name else None
        if ep is None:
            ep = next(iter(adv.values()), None)
        if ep is None:
            return Endpoint("", "", -1)
        host, port = ep.host, ep.port
        ls = self.listeners.get(ep.name)
        if port == 0 and ls is not None:
            port = ls.port
        if host in ("", "0.0.0.0", "::"):
            host = socket.getfqdn()
        return Endpoint(ep.name, host, port)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.cluster_id is None:
            self.cluster_id = ensure_cluster_id(self.config)
        self._lock_dirs()
        metrics = None
        if self.config.metrics_port >= 0:
            import prometheus_client as prom

            metrics = RequestMetrics()
            self.metrics_registry = metrics.registry
            self._metrics_httpd, _ = prom.start_http_server(
                self.config.metrics_port, self.config.metrics_host, registry=self.metrics_registry
            )
            self.metrics_port = self._metrics_httpd.server_port
        if self.coordinator is None and "broker" in self.config.process_roles:
            from kafka_rpc.coordinator.factory import create_coordinator

            coordinator = create_coordinator(self.config.diskless_coordinator_url)
            await coordinator.start()
            self.coordinator = coordinator
            if self.config.log_retention_check_interval_ms > 0:
                self._retention_task = asyncio.ensure_future(self._retention_loop())
        if metrics is not None:  # the coordinator replicas' starts (AssignedBatchCoordinator)
            from kafka_rpc.coordinator.replica_starts import register_metrics

            register_metrics(self.metrics_registry, self.coordinator)
        try:
            self._setup_security()
            # bound now (their ports are advertised and registered), but a broker listener
            # accepts only once the node is ready (:meth:`_wait_until_ready`)
            self._sockets = Listeners(self.config, self.registry, self, self._listener_security,
                                      metrics)  # fmt: skip
            await self._sockets.bind()
            self._start_raft()  # after the listeners are bound, so peers can reach us
            attach = getattr(self.coordinator, "attach_metadata", None)
            if attach is not None:  # the topic-based coordinator from the metadata log
                # its Raft groups talk over the inter-broker listener, so any broker can hold a
                # replica (a broker-only node too)
                ibl = self.config.inter_broker_listener_name
                names = [ibl] if ibl else self.config.controller_listener_names
                attach(self.config, self.node_id, self.cluster_id, self.controller,
                       self.client_security(names[0]) if names else None,
                       voters=self.quorum_voters,
                       directory_id=metadata_directory_id(self.coordinator.log_dir),
                       alter_partition=self._alter_partition,
                       raft_listener=ibl)  # fmt: skip
            if "broker" in self.config.process_roles:
                # registers with the active controller, then heartbeats
                self.broker_lifecycle = BrokerLifecycleManager(self)
                self.broker_lifecycle.start()
            self._start_publisher()
            await self._wait_until_ready()
            await self._sockets.start_serving("broker")
        except BaseException:
            await self._stop_broker()
            await self._stop_raft()
            await self._close_listeners()
            await self._close_coordinator()
            await self._close_controller_channel()
            self._unlock_dirs()
            raise
        self.started.set()

    async def _alter_partition(self, request: Any) -> Any:
        """An AlterPartitionRequest to the active controller, its response (a
        ``__diskless-metadata`` leader's ISR report); raises ``ControllerUnavailableError``."""
        _, resp = await self.controller_channel.send(request, timeout=5.0)
        return resp

    def _start_publisher(self) -> None:
        """The broker metadata publisher on the started quorum replica: its coordinator (None
        without the broker role), its log directories, the mirror file in the first log
        directory, caught up once the image holds this process's broker registration."""
        cfg = self.config
        publisher = BrokerMetadataPublisher(
            self.coordinator,
            cfg.storage_dirs(),
            mirror_file=cfg.data_dir / MIRROR_FILE_NAME,
            caught_up=caught_up_when_registered(
                self.node_id, lambda: getattr(self.broker_lifecycle, "incarnation_id", None)
            ),
        )
        publisher.start(self.controller)
        self.metadata_publisher = publisher

    def _lock_dirs(self) -> None:
        """Hold ``<dir>/.lock`` (``kafka_rpc.storage.meta_properties.DirectoryLock``, a POSIX
        lock as Kafka's) on the metadata log directory, as Kafka's ``KafkaRaftManager`` does,
        and with the broker role on every ``log.dirs`` entry too, as its ``LogManager`` does;
        released at shutdown. Another process holding one (Kafka or ours) stops the start with
        Kafka's message (ConfigError)."""
        from kafka_rpc.storage.meta_properties import DirectoryLock

        cfg = self.config
        dirs = [Path(cfg.metadata_log_dir)]
        if "broker" in cfg.process_roles:
            dirs += [Path(d) for d in cfg.log_dirs]
        seen: set[Path] = set()
        try:
            for d in dirs:
                key = d.resolve()
                if key not in seen:
                    seen.add(key)
                    self._dir_locks.append(DirectoryLock(d).acquire())
        except BaseException:
            self._unlock_dirs()
            raise

    def _unlock_dirs(self) -> None:
        locks, self._dir_locks = self._dir_locks, []
        for lock in locks:
            lock.release()

    def _alone(self) -> bool:
        """This node is the whole cluster: the only controller voter, with the broker role, and
        its controller listener takes its own BrokerRegistration (a registry without it, as some
        tests build, never gets a coordinator)."""
        cfg = self.config
        return (
            "broker" in cfg.process_roles
            and self.quorum_voter_ids() == {self.node_id}
            and 62 in self.registry.table("controller")
        )

    def quorum_voter_ids(self) -> set[int]:
        """The ids of :meth:`quorum_voters` (empty for a dynamic quorum before the replica
        runs)."""
        return set(self.quorum_voters())

    async def _wait_until_ready(self) -> None:
        """Block :meth:`start` until the node can serve its broker listeners, as Kafka's
        ``BrokerServer.startup`` blocks before ``enableRequestProcessing``: the broker has
        caught up with the metadata log (the active controller's heartbeat answer says
        IsCaughtUp: its image holds every record up to its registration, the SCRAM credentials
        of ``storage format --add-scram`` among them), and on a node that is the whole cluster
        the topic-based Batch Coordinator runs too (the controller created
        ``__diskless-metadata`` with one replica here, the replica leads it and any import is
        done). A node without the broker role is ready at once. Every 10 s a log line says what
        is awaited; past ``server.max.startup.time.ms`` (Kafka's; by default never) the start
        fails with ``TimeoutError``, as Kafka's ``FutureUtils.waitWithLogging`` does. A
        coordinator replica that cannot start (logged by the coordinator) does not block: the
        diskless RPCs answer COORDINATOR_NOT_AVAILABLE (15) then."""
        waits: list[tuple[str, Any]] = []
        lifecycle = self.broker_lifecycle
        if lifecycle is not None and not self._never_caught_up():
            waits.append(("the controller to acknowledge that the broker caught up with the "
                          "metadata log", lifecycle.caught_up))  # fmt: skip
        started = getattr(self.coordinator, "started", None)
        failed = getattr(self.coordinator, "start_failed", None)
        # alone, the coordinator can run only with a replication factor of 1: with more, its
        # topic is never created (Kafka's rule), and the node starts without it, as a lone Kafka
        # broker starts with offsets.topic.replication.factor=3 (COORDINATOR_NOT_AVAILABLE)
        if (getattr(self.coordinator, "attach_metadata", None) is not None and self._alone()
                and self.config.diskless_metadata_topic_replication_factor <= 1
                and started is not None and failed is not None):  # fmt: skip
            waits.append(("the Batch Coordinator to run", _EitherEvent(started, failed)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.server_max_startup_time_ms / 1000
        t0 = loop.time()
        for what, event in waits:
            while not event.is_set():
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError(f"timed out after {loop.time() - t0:.1f} s waiting for "
                                       f"{what} (server.max.startup.time.ms)")  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(10.0, left))
                if not event.is_set():
                    log.info("start: waiting for %s (%.0f s so far)", what, loop.time() - t0)
        if failed is not None and failed.is_set() and started is not None and not started.is_set():
            log.error("the Batch Coordinator could not start; the diskless RPCs answer "
                      "COORDINATOR_NOT_AVAILABLE")  # fmt: skip

    def _never_caught_up(self) -> bool:
        """This node is the only voter and its controller listener does not take
        BrokerRegistration (a registry some tests build): its broker can never register, so
        nothing waits for it."""
        return self.quorum_voter_ids() == {self.node_id} and (
            62 not in self.registry.table("controller")
        )

    def _setup_security(self) -> None:
        """The authorizer (``authorizer.class.name``), the SCRAM credentials written at format
        time and the TLS/SASL settings of this node's own outbound connections.
        Nothing is imported when every listener is PLAINTEXT and no authorizer is set."""
        cfg = self.config
        if not cfg.raw.get("authorizer.class.name", "").strip() and all(
            cfg.security_protocol(e.name) == "PLAINTEXT" for e in cfg.listeners
        ):
            return
        from kafka_rpc.controller.image import EMPTY
        from kafka_rpc.security.authorizer import authorizer_from_config
        from kafka_rpc.security.sasl import ImageScramCredentials

        self.authorizer = authorizer_from_config(cfg)
        if self.authorizer is not None:  # the metadata log's ACLs, as this node's image has them
            self.authorizer.image_acls = lambda: (
                self.controller.image.acls if self.controller is not None else EMPTY.acls
            )
        # SCRAM credentials: the UserScramCredentialRecords of this node's image
        self.scram_credentials = ImageScramCredentials(
            lambda: self.controller.image if self.controller is not None else EMPTY
        )

    def _listener_security(self, name: str) -> Any:
        """The listener's ``ListenerSecurity``, None for PLAINTEXT without an authorizer."""
        if self.authorizer is None and self.config.security_protocol(name) == "PLAINTEXT":
            return None
        from kafka_rpc.security.listener import listener_security

        return listener_security(self.config, name, self.scram_credentials, self.authorizer)

    def client_security(self, listener_name: str) -> Any:
        """How this node connects to another node's ``listener_name`` listener
        (``kafka_rpc.security.client.ClientSecurity``: TLS context, SASL mechanism and
        credentials), None for PLAINTEXT."""
        if self.config.security_protocol(listener_name) == "PLAINTEXT":
            return None
        from kafka_rpc.security.client import client_security

        return client_security(self.config, listener_name)

    def _start_raft(self) -> None:
        """Open the metadata log at ``<metadata.log.dir>/__cluster_metadata-0`` and run its Raft
        replica (:meth:`Config.raft_config <kafka_rpc.config.Config.raft_config>` with the bound
        listeners, so the replica knows its own controller endpoints): a voter when the voter
        set names it, else an observer that fetches from the leader. Broker-only nodes are
        always observers; so is a controller of a dynamic quorum (KIP-853) formatted with
        ``--no-initial-controllers`` or not listed in ``--initial-controllers``, which finds
        the leader through ``controller.quorum.bootstrap.servers`` until an AddRaftVoter makes
        it a voter. Its state machine is the QuorumController: on the active node (the leader)
        it runs the controller's write events, the bootstrap records of
        ``bootstrap.checkpoint``, NoOpRecords and the broker session check."""
        from kafka_rpc.controller.quorum_controller import QuorumController, RaftCoreKRaftVersion
        from kafka_rpc.raft.driver import monotonic_ms
        from kafka_rpc.raft.replica import open_raft_replica

        assert self.cluster_id is not None  # start() sets it first
        cfg = self.config
        bootstrap = self._read_bootstrap() if cfg.is_controller else None
        directory = cfg.metadata_partition_dir
        directory.mkdir(parents=True, exist_ok=True)
        from kafka_rpc.raft.api import METADATA_TOPIC_ID
        from kafka_rpc.storage import partition_metadata

        partition_metadata.ensure(directory, METADATA_TOPIC_ID)  # InconsistentTopicIdError

        def core() -> Any:  # the metadata replica's Raft core (the replica is opened below)
            return replica.driver.core

        state = QuorumController(
            self.node_id,
            self.cluster_id,
            session_timeout_ms=cfg.broker_session_timeout_ms,
            idle_interval_ms=cfg.metadata_max_idle_interval_ms,
            producer_ids_max_per_second=cfg.producer_ids_allocation_max_per_second,
            num_partitions=cfg.num_partitions,
            default_replication_factor=cfg.default_replication_factor,
            # KIP-1164: the controller creates __diskless-metadata once its replication factor
            # of brokers running the Batch Coordinator are registered and unfenced
            diskless_metadata_partitions=cfg.diskless_metadata_topic_num_partitions,
            diskless_metadata_replication_factor=cfg.diskless_metadata_topic_replication_factor,
            unclean_leader_election_enable=cfg.unclean_leader_election_enable,
            leader_imbalance_check_interval_ms=(
                cfg.leader_imbalance_check_interval_seconds * 1000
                if cfg.auto_leader_rebalance_enable
                else None
            ),
            unclean_leader_election_interval_ms=cfg.unclean_leader_election_interval_ms,
            bootstrap=bootstrap,
            # a fault in its own records renounces and resigns the Raft leadership (Kafka's
            # renounce -> raftClient.resign), so another controller takes over
            resign=lambda epoch: replica.driver.resign(epoch),
            # kraft.version and the voters as the metadata log has them (KIP-853)
            kraft=RaftCoreKRaftVersion(core, monotonic_ms),
            voter_ids=lambda: core().voters,
        )
        raft_config = cfg.raft_config(
            self.cluster_id, metadata_directory_id(cfg.metadata_log_dir), self.bound
        )
        replica = open_raft_replica(
            directory,
            raft_config,
            state,
            segment_bytes=cfg.metadata_log_segment_bytes,
            request_timeout_ms=cfg.quorum_request_timeout_ms,
            shutdown_timeout_ms=cfg.shutdown_timeout_ms,
            retry_backoff_ms=cfg.quorum_retry_backoff_ms,
            client_security=self.client_security(cfg.controller_listener_names[0]),
        )
        driver = replica.driver
        state.attach(driver)
        driver.start()
        self.raft, self.controller = driver, state
        if self.metrics_registry is not None:  # the active controller's shortfall gauge
            from kafka_rpc.controller.metrics import register_controller_metrics

            register_controller_metrics(self.metrics_registry, state)
        if cfg.is_controller:
            state.start()
            self.controller_registration = ControllerRegistrationManager(self)
            self.controller_registration.start()

    def _read_bootstrap(self) -> Any:
        """The bootstrap metadata of ``<metadata.log.dir>/bootstrap.checkpoint`` (written by
        ``kafka-rpc storage format`` or Kafka's ``kafka-storage format``: the feature levels and
        the ``--add-scram`` credentials the first active controller of an empty log writes);
        without the file, the default bootstrap (``kafka.compatible``: our features at 0).
        Raises ConfigError when the file cannot be used (a level we do not support ...)."""
        from kafka_rpc.config import ConfigError
        from kafka_rpc.storage.bootstrap import BootstrapFileError, read_bootstrap

        try:
            bootstrap = read_bootstrap(self.config.metadata_log_dir, self.config.kafka_compatible)
        except (BootstrapFileError, OSError) as e:
            raise ConfigError(f"metadata.log.dir: {e}") from None
        log.info("bootstrap metadata from %s: %s", bootstrap.source,
                 ", ".join(f"{k}={v}" for k, v in sorted(bootstrap.levels.items())))  # fmt: skip
        return bootstrap

    async def _stop_broker(self) -> None:
        """Controlled shutdown of the broker role (bounded by ``shutdown.timeout.ms``)."""
        manager, self.broker_lifecycle = self.broker_lifecycle, None
        if manager is not None:
            try:
                await manager.stop(self.config.shutdown_timeout_ms / 1000)
            except Exception:
                log.exception("broker lifecycle: stopping failed")

    async def _close_controller_channel(self) -> None:
        channel, self._controller_channel = self._controller_channel, None
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.close()

    async def _stop_raft(self) -> None:
        registration, self.controller_registration = self.controller_registration, None
        if registration is not None:
            await registration.stop()
        controller = self.controller
        if controller is not None:
            await controller.stop()  # pending requests: NOT_CONTROLLER
        driver = self.raft
        if driver is not None:
            try:
                await driver.stop()
            except Exception:
                log.exception("raft: stopping the driver failed")
            self.raft = None

    async def enforce_retention_once(self) -> int:
        """Apply retention to every diskless partition whose Batch Coordinator this node leads
        (whole batches, Inkless ``enforce_retention_v2`` semantics); returns batches deleted.
        The limits are the topic's ``retention.ms`` / ``retention.bytes`` in the metadata image,
        else ``log.retention.ms`` / ``log.retention.bytes`` (``broker.retention``). Inactive
        chunks (KIP-1114) that end below a partition's log start offset are then removed
        (``broker.chunk_deletion``)."""
        coordinator = self.coordinator
        if coordinator is None:
            return 0
        from kafka_rpc.broker.retention import retention_requests
        from kafka_rpc.handlers.diskless_routing import owner_check

        image = self.controller.image if self.controller is not None else None
        all_reqs = retention_requests(
            image, await coordinator.list_partitions(), self.config.log_retention_ms,
            self.config.log_retention_bytes, owner_check(self, True),
        )  # fmt: skip
        deleted = 0
        moved = []
        for i in range(0, len(all_reqs), 500):
            reqs = all_reqs[i : i + 500]
            answers = await coordinator.enforce_retention(reqs, max_batches_per_request=2000)
            for q, r in zip(reqs, answers, strict=True):
                deleted += max(r.batches_deleted, 0)
                tp = q.topic_id_partition
                moved.append((tp.topic_id, tp.partition, r.log_start_offset))
        from kafka_rpc.broker.chunk_deletion import remove_expired_chunks

        try:  # KIP-1114: inactive chunks ending below a log start offset are removed
            await remove_expired_chunks(self, moved)
        except Exception:
            log.exception("automatic chunk deletion failed; retrying next interval")
        return deleted

    async def _retention_loop(self) -> None:
        """:meth:`enforce_retention_once` every ``log.retention.check.interval.ms``; a failed
        pass is reported by ``broker.retention.RetentionFailures`` (quietly on a node with no
        coordinator replica, once per distinct failure otherwise)."""
        from kafka_rpc.broker.retention import RetentionFailures

        failures = RetentionFailures(log)
        interval = self.config.log_retention_check_interval_ms / 1000
        while not self.should_exit.is_set():
            try:
                await asyncio.wait_for(self.should_exit.wait(), interval)
                return
            except TimeoutError:
                pass
            try:
                deleted = await self.enforce_retention_once()
            except Exception as e:  # noqa: BLE001 - reported (RetentionFailures), retried
                failures.failed(e)
                continue
            failures.succeeded()
            if deleted:
                log.info("retention: deleted %d diskless batches", deleted)

    async def _close_coordinator(self) -> None:
        publisher, self.metadata_publisher = self.metadata_publisher, None
        if publisher is not None:  # its task uses the coordinator
            await publisher.stop()
        task, self._retention_task = self._retention_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.coordinator is not None:
            coordinator, self.coordinator = self.coordinator, None
            await coordinator.close()

    async def serve(self, install_signals: bool = False) -> None:
        await self.start()
        if install_signals:
            self._install_signals()
        try:
            await self.should_exit.wait()
        finally:
            await self.shutdown()

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.handle_exit)

    def handle_exit(self) -> None:
        """First call: graceful shutdown. Second call: force."""
        if self.should_exit.is_set():
            self.force_exit = True
            if self._sockets is not None:
                self._sockets.force_close_connections()
        self.should_exit.set()

    async def _close_listeners(self) -> None:
        if self._sockets is not None:
            self._sockets.close()

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop in order: the broker's controlled shutdown (while the controller still runs),
        the metadata quorum (a leader resigns while its peers can reach it), the listeners,
        then in-flight requests drain for up to ``timeout`` s (``shutdown.timeout.ms``). The
        connections, listeners, Batch Coordinator and metrics are released in any case, even
        if this coroutine is cancelled midway (the coordinator's SQLite threads would otherwise
        keep the process alive)."""
        if timeout is None:
            timeout = self.config.shutdown_timeout_ms / 1000
        try:
            await self._stop_broker()
            await self._stop_raft()
            await self._close_listeners()
            if self._sockets is not None and not self.force_exit:
                await self._sockets.drain(timeout)
        finally:
            await self._release(timeout)

    async def _release(self, timeout: float) -> None:
        """What shutdown must do even when cut short: force-close connections and listeners,
        stop a quorum replica still running, close the coordinator and the controller channel,
        stop the metrics server."""
        if self._sockets is not None:
            await self._sockets.release()
        if self.raft is not None:
            driver, self.raft = self.raft, None
            with contextlib.suppress(Exception):
                await driver.stop(timeout_ms=0)  # no graceful wait: close clients and log
        await self._close_coordinator()
        await self._close_controller_channel()
        if self._metrics_httpd is not None:
            self._metrics_httpd.shutdown()
            self._metrics_httpd = None
        self._unlock_dirs()


class _EitherEvent:
    """Set when either of two ``asyncio.Event`` is (the coordinator ran, or could not start)."""

    def __init__(self, a: asyncio.Event, b: asyncio.Event) -> None:
        self._events = (a, b)

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)

    async def wait(self) -> None:
        waits = [asyncio.ensure_future(e.wait()) for e in self._events]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()


def handlers_registry() -> Registry:
    """The default registry with every handler module imported (their ``@handles``)."""
    import kafka_rpc.handlers  # noqa: F401

    return default_registry


if TYPE_CHECKING:

    def _check_node_services(n: Node) -> NodeServices:
        """For mypy only: the node is the NodeServices its listeners hand to the handlers."""
        return n
