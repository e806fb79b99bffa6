"""The broker role's registration and heartbeats (Kafka's ``BrokerLifecycleManager``).

Every node with the broker role, the active controller's own node included in combined mode,
registers with the active controller over the controller listener exactly as a Kafka broker
does, through :class:`kafka_rpc.broker.channel.ControllerChannel`:

1. **BrokerRegistration**: BrokerId = ``node.id``, the ClusterId, an IncarnationId drawn once per
   process start (uuid4), Listeners = this node's advertised broker listeners (ports resolved
   once bound, SecurityProtocol the id of the listener's ``listener.security.protocol.map``
   entry), Features = every feature range this code supports, Kafka's and ours
   (:func:`registration_features`: ``metadata.version`` 3.3-IV3 to 4.2-IV1,
   ``kafka_rpc.diskless.version`` and ``kafka_rpc.chunks.version`` 0-1), so a kafka-rpc broker
   passes the controller's feature check wherever our features are finalized, Rack null.
   Failures and errors are retried with exponential backoff.
2. **BrokerHeartbeat** with the broker epoch of the registration, CurrentMetadataOffset = the
   offset this node's committed image has reached (the controller's ``image.last_offset``) and
   WantFence false. While the controller keeps the broker fenced (it has not caught up to its
   registration) heartbeats go every 10 ms, as Kafka's STARTING/RECOVERY states; once unfenced,
   every ``broker.heartbeat.interval.ms``.
   STALE_BROKER_EPOCH -> register again (the controller lost or replaced the registration).
   NOT_CONTROLLER or a lost connection -> the channel finds the leader again.
3. **Controlled shutdown** (:meth:`BrokerLifecycleManager.stop`): heartbeats with WantShutDown
   until the answer says ShouldShutDown (the controller moved the broker's leaderships away and
   fenced it) or the timeout passes.

``registered`` / ``unfenced`` are events tests and callers can wait on; ``caught_up`` is set once,
by the first heartbeat answer saying IsCaughtUp (Kafka's ``initialCatchUpFuture``: the broker's
committed image reached its registration record), and is what the broker listener waits for
before it accepts connections (``Server.start``); ``state`` follows Kafka's
``BrokerState`` names (STARTING, RECOVERY, RUNNING, PENDING_CONTROLLED_SHUTDOWN, SHUTTING_DOWN).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any

from kafka_rpc.broker.channel import ControllerUnavailableError
from kafka_rpc.controller.features import supported_features
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.storage.meta_properties import directory_ids

if TYPE_CHECKING:
    from kafka_rpc.broker.services import BrokerServices

__all__ = [
    "PLAINTEXT",
    "BrokerLifecycleManager",
    "registration_features",
]

log = logging.getLogger("kafka_rpc.broker.lifecycle")

PLAINTEXT = 0
"""SecurityProtocol id of PLAINTEXT (Kafka's ``SecurityProtocol.PLAINTEXT.id``)."""
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
"""Kafka's ``SecurityProtocol`` ids by name."""

_FENCED_INTERVAL = 0.01
_MIN_BACKOFF, _MAX_BACKOFF = 0.05, 1.0

_Reg = codec.module("BrokerRegistrationRequest")
_HB = codec.message_class("BrokerHeartbeatRequest")


def registration_features() -> tuple:
    """The Features of this broker's BrokerRegistration: every feature range this code supports,
    Kafka's and ours (:func:`kafka_rpc.controller.features.supported_features`), so a kafka-rpc
    broker passes the controller's feature check wherever our features are finalized. Listing
    ``kafka_rpc.diskless.version`` (it runs our Batch Coordinator) is also how the controller
    tells a kafka-rpc broker from a Kafka broker (:mod:`kafka_rpc.controller.placement`)."""
    return tuple(
        _Reg.Feature(name=name, min_supported_version=lo, max_supported_version=hi)
        for name, (lo, hi) in sorted(supported_features().items())
    )


class BrokerLifecycleManager:
    def __init__(self, services: BrokerServices) -> None:
        """``services``: the node's config, node id, cluster id, advertised listeners,
        committed image (``controller``) and its channel to the active controller."""
        self._services = services
        cfg = services.config
        self.node_id = services.node_id
        self.incarnation_id = uuid.uuid4()
        self.heartbeat_interval = cfg.broker_heartbeat_interval_ms / 1000
        self.broker_epoch = -1
        self.state = "STARTING"
        self.is_fenced = True
        self.is_caught_up = False
        self.registered = asyncio.Event()
        self.unfenced = asyncio.Event()
        self.caught_up = asyncio.Event()
        self.shut_down = asyncio.Event()
        self._wake = asyncio.Event()
        self._want_shutdown = False
        self._task: asyncio.Future | None = None
        self._backoff = _MIN_BACKOFF

    # ------------------------------------------------------------------ requests
    def registration_request(self) -> Any:
        cfg = self._services.config
        ctl_names = set(cfg.controller_listener_names)
        listeners = []
        for ep in cfg.advertised_listeners:
            if ep.name in ctl_names:
                continue
            adv = self._services.advertised(ep.name)
            protocol = SECURITY_PROTOCOL_IDS.get(cfg.security_protocol(ep.name), PLAINTEXT)
            listeners.append(
                _Reg.Listener(
                    name=adv.name, host=adv.host, port=adv.port, security_protocol=protocol
                )
            )
        return _Reg.BrokerRegistrationRequest(
            broker_id=self.node_id,
            cluster_id=self._services.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=tuple(listeners),
            features=registration_features(),
            rack=None,
            log_dirs=directory_ids(cfg.log_dirs),
        )

    def _metadata_offset(self) -> int:
        ctl = self._services.controller
        image = getattr(ctl, "image", None)
        return image.last_offset if image is not None else -1

    def heartbeat_request(self, want_shut_down: bool = False) -> Any:
        return _HB(
            broker_id=self.node_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self._metadata_offset(),
            want_fence=False,
            want_shut_down=want_shut_down,
        )

    # ------------------------------------------------------------------ loop
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _sleep(self, seconds: float) -> None:
        """Sleep, or less if :meth:`stop` asks for a controlled shutdown."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _failed(self, what: str, detail: object) -> None:
        log.info("broker %d: %s failed (%s); retrying in %.2fs", self.node_id, what, detail,
                 self._backoff)  # fmt: skip
        await self._sleep(self._backoff)
        self._backoff = min(self._backoff * 2, _MAX_BACKOFF)

    async def _register(self) -> bool:
        channel = self._services.controller_channel
        try:
            node, resp = await channel.send(
                self.registration_request(), attempts=len(channel.voters) or 1
            )
        except ControllerUnavailableError as e:
            await self._failed("registration", e)
            return False
        if resp.error_code != ErrorCode.NONE:
            await self._failed("registration", f"error {resp.error_code} from node {node}")
            return False
        self.broker_epoch = resp.broker_epoch
        self._backoff = _MIN_BACKOFF
        self.state = "RECOVERY"
        self.registered.set()
        log.info("broker %d registered with controller %d, broker epoch %d, incarnation %s",
                 self.node_id, node, self.broker_epoch, self.incarnation_id)  # fmt: skip
        return True

    async def _heartbeat(self, want_shut_down: bool) -> Any | None:
        channel = self._services.controller_channel
        try:
            _node, resp = await channel.send(
                self.heartbeat_request(want_shut_down), attempts=len(channel.voters) or 1
            )
        except ControllerUnavailableError as e:
            await self._failed("heartbeat", e)
            return None
        if resp.error_code == ErrorCode.STALE_BROKER_EPOCH:
            log.info("broker %d: heartbeat with stale broker epoch %d; registering again",
                     self.node_id, self.broker_epoch)  # fmt: skip
            self.broker_epoch = -1
            self.registered.clear()
            self.unfenced.clear()
            self.is_fenced = True
            self.state = "STARTING"
            return None
        if resp.error_code != ErrorCode.NONE:
            await self._failed("heartbeat", f"error {resp.error_code}")
            return None
        self._backoff = _MIN_BACKOFF
        self.is_caught_up = resp.is_caught_up
        if resp.is_caught_up and not self.caught_up.is_set():
            log.info("broker %d caught up with the metadata log (broker epoch %d)",
                     self.node_id, self.broker_epoch)  # fmt: skip
            self.caught_up.set()
        self.is_fenced = resp.is_fenced
        if resp.is_fenced:
            self.unfenced.clear()
        else:
            if not self.unfenced.is_set():
                log.info("broker %d unfenced (broker epoch %d)", self.node_id, self.broker_epoch)
            self.unfenced.set()
            if self.state == "RECOVERY":
                self.state = "RUNNING"
        return resp

    async def _run(self) -> None:
        while not self._want_shutdown:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                    continue
                resp = await self._heartbeat(False)
                if resp is not None:
                    fenced = resp.is_fenced
                    await self._sleep(_FENCED_INTERVAL if fenced else self.heartbeat_interval)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug: log it, keep heartbeating (or be fenced)
                log.exception("broker %d: lifecycle step failed", self.node_id)
                await self._failed("lifecycle step", e)

    async def _controlled_shutdown(self, timeout: float) -> bool:
        """WantShutDown heartbeats until ShouldShutDown; False on timeout."""
        if self.broker_epoch < 0:
            return True
        self.state = "PENDING_CONTROLLED_SHUTDOWN"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            resp = await self._heartbeat(True)
            if resp is not None and resp.should_shut_down:
                return True
            if self.broker_epoch < 0:  # the registration is gone: nothing to shut down
                return True
            await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
        return False

    async def stop(self, timeout: float = 5.0) -> None:
        """Controlled shutdown (bounded by ``timeout`` seconds), then stop heartbeating."""
        self._want_shutdown = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(task, min(timeout, 2.0))
            except (TimeoutError, asyncio.CancelledError):
                pass
        try:
            done = await asyncio.wait_for(self._controlled_shutdown(timeout), timeout)
        except TimeoutError:
            done = False
        if not done:
            log.warning("broker %d: controlled shutdown did not complete within %.1fs",
                        self.node_id, timeout)  # fmt: skip
        self.state = "SHUTTING_DOWN"
        self.shut_down.set()
