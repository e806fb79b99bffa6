"""This node's controller registration (KIP-919; Kafka's ``ControllerRegistrationManager``).

Every controller of the quorum, the active one included, registers its controller listeners and
supported features with the active controller, which writes a RegisterControllerRecord
(``kafka_rpc.controller.cluster.register_controller``, or a Kafka active controller's
``ClusterControlManager.registerController``). Kafka's tools list only registered controllers
(DescribeCluster with EndpointType CONTROLLER), and a Kafka active controller refuses feature
upgrades while a controller of the quorum has not registered.

:class:`ControllerRegistrationManager` does as Kafka's: once this node's committed image has a
``metadata.version`` of 3.7-IV0 or more and holds no registration of this node with this process
run's incarnation id, it sends ControllerRegistration (70, v0) to the active controller through a
:class:`~kafka_rpc.broker.channel.ControllerChannel` (the Raft leader's controller listener;
itself when it leads), one request at a time; any failure (NOT_CONTROLLER after the channel's
tries, UNSUPPORTED_VERSION, a lost connection) is retried after an exponential backoff from
``controller.quorum.retry.backoff.ms`` up to ``controller.quorum.request.timeout.ms``
(``scheduleNextCommunicationAfterFailure``). A success is done only when the record shows up in
the committed image; a new incarnation (a restart) registers again.

**The registered endpoints** (Kafka's ``ControllerServer`` registers
``ListenerInfo.withWildcardHostnamesResolved()`` of its advertised controller listeners): per
controller listener, its entry of ``advertised.listeners`` when it has one (a port 0 there is the
bound port), else the bound listener; a host that names no one machine (empty, ``0.0.0.0``,
``::``) is this machine's canonical host name (``socket.getfqdn()``, as Kafka's
``InetAddress.getLocalHost().getCanonicalHostName()``), never ``127.0.0.1``, which no other
machine can reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from typing import TYPE_CHECKING, Any

from kafka_rpc.protocol import codec

if TYPE_CHECKING:
    from kafka_rpc.broker.channel import ControllerChannel

__all__ = ["ControllerRegistrationManager", "supported_features"]

log = logging.getLogger("kafka_rpc.controller.registration")

_Req = codec.module("ControllerRegistrationRequest")
_POLL_S = 0.1
_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")
"""Hosts that name no one machine (a listener bound to every address, or none given)."""


def supported_features() -> dict[str, tuple[int, int]]:
    """The feature ranges this controller supports, name -> (min, max) levels (every feature
    of :func:`kafka_rpc.controller.features.supported_features`, Kafka's and ours)."""
    from kafka_rpc.controller import features

    return dict(features.supported_features())


class ControllerRegistrationManager:
    """Registers ``server``'s controller role (see the module docstring); :meth:`start` /
    :meth:`stop` on the server's loop."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.node_id = server.node_id
        self.incarnation_id = uuid.uuid4()
        cfg = server.config
        self.min_backoff = max(cfg.quorum_retry_backoff_ms, 1) / 1000
        self.max_backoff = max(cfg.quorum_request_timeout_ms, 100) / 1000
        self.registered = False
        self.attempts = 0
        self._task: asyncio.Task | None = None
        self._channel: ControllerChannel | None = None

    def request(self) -> Any:
        """The ControllerRegistration request of this node and process run."""
        server, cfg = self.server, self.server.config
        listeners = []
        advertised = {e.name: e for e in cfg.advertised_listeners}
        for name in cfg.controller_listener_names:
            ls = server.listeners.get(name)
            if ls is None:
                continue
            host, port = ls.host, ls.port
            adv = advertised.get(name)
            if adv is not None:
                host, port = adv.host, adv.port or ls.port
            if host in _WILDCARD_HOSTS:
                host = socket.getfqdn()
            proto = _SECURITY_PROTOCOL_IDS.get(cfg.security_protocol(name), 0)
            listeners.append(_Req.Listener(name=name, host=host, port=port,
                                           security_protocol=proto))  # fmt: skip
        return _Req.ControllerRegistrationRequest(
            controller_id=self.node_id,
            incarnation_id=self.incarnation_id,
            zk_migration_ready=False,
            listeners=tuple(listeners),
            features=tuple(
                _Req.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                for n, (lo, hi) in sorted(supported_features().items())
            ),
        )

    def _image(self) -> Any:
        ctl = getattr(self.server, "controller", None)
        return getattr(ctl, "image", None)

    def _needed(self) -> bool:
        """Whether a registration must be sent now: the image knows a metadata.version that
        supports it and holds no registration of this incarnation."""
        from kafka_rpc.controller.cluster import controller_registration_supported

        img = self._image()
        if img is None or not controller_registration_supported(img):
            return False
        reg = img.controllers.get(self.node_id)
        self.registered = reg is not None and reg.incarnation_id == self.incarnation_id
        return not self.registered

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._channel is not None:
            with contextlib.suppress(Exception):
                await self._channel.close()
            self._channel = None

    async def _run(self) -> None:
        from kafka_rpc.broker.channel import ControllerUnavailableError

        backoff = self.min_backoff
        while True:
            if not self._needed():
                await asyncio.sleep(_POLL_S)
                continue
            if self._channel is None:
                self._channel = self.server.new_controller_channel()
            self.attempts += 1
            try:
                node, resp = await self._channel.send(self.request(), version=0,
                                                      attempts=3)  # fmt: skip
            except ControllerUnavailableError as e:
                log.info("controller registration: %s; retrying in %.2f s", e, backoff)
                resp = None
            except Exception:
                log.exception("controller registration failed; retrying in %.2f s", backoff)
                resp = None
            if resp is not None and resp.error_code == 0:
                log.info("controller registration of incarnation %s acknowledged by node %d",
                         self.incarnation_id, node)  # fmt: skip
                backoff = self.min_backoff
                # done once the record is committed here too
                for _ in range(int(self.max_backoff / _POLL_S) + 1):
                    if not self._needed():
                        break
                    await asyncio.sleep(_POLL_S)
                continue
            if resp is not None:
                log.info("controller registration answered %d (%s); retrying in %.2f s",
                         resp.error_code, resp.error_message, backoff)  # fmt: skip
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff)
