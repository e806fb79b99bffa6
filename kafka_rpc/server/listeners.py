"""The listener layer (Kafka's ``SocketServer``): one asyncio server per configured listener
whose role the process plays, its connections, and per-API metrics.

:class:`Listeners` binds every listener at once (port 0 picks a free port; the bound ports are
what the node advertises and registers), opens the controller listeners for requests at once and
the broker listeners only when the node says so (:meth:`Listeners.start_serving`, Kafka's
``enableRequestProcessing``), and on shutdown stops accepting, lets each connection finish its
in-flight requests within a bound, then force-closes the rest. It takes a filled registry and the
node's services; it knows nothing of Raft, the controller or the coordinator.

Per-API request/error counters and latency histograms are kept with prometheus-client
(:class:`RequestMetrics`) when the node asks for them (``metrics.port`` >= 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafka_rpc.api.registry import ApiEntry, Registry
from kafka_rpc.server.connection import KafkaConnection
from kafka_rpc.server.listener_state import ApiMetrics, ListenerState
from kafka_rpc.server.secure_connection import SecureConnection, tls_protocol_factory

if TYPE_CHECKING:
    from kafka_rpc.api.services import NodeServices
    from kafka_rpc.config import Config
    from kafka_rpc.security.listener import ListenerSecurity

log = logging.getLogger("kafka_rpc.server")

__all__ = ["ApiMetrics", "ListenerState", "Listeners", "RequestMetrics", "install_uvloop"]


def install_uvloop() -> bool:
    """Use uvloop's event loop policy if it is importable."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


class RequestMetrics:
    """The node's request metrics in a prometheus-client ``CollectorRegistry``
    (``registry``): ``kafka_rpc_requests_total{listener, api, version}``,
    ``kafka_rpc_request_errors_total{listener, api}`` and ``kafka_rpc_request_seconds{listener,
    api}`` (handler latency in seconds), children made per listener by :meth:`for_listener`."""

    def __init__(self) -> None:
        import prometheus_client as prom

        self.registry = prom.CollectorRegistry()
        labels = ["listener", "api"]
        self._reqs = prom.Counter("kafka_rpc_requests", "Requests answered", [*labels, "version"],
                                  registry=self.registry)  # fmt: skip
        self._errs = prom.Counter("kafka_rpc_request_errors", "Requests answered with a handler "
                                  "error", labels, registry=self.registry)  # fmt: skip
        self._lat = prom.Histogram("kafka_rpc_request_seconds", "Handler latency", labels,
                                   registry=self.registry,
                                   buckets=(1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05,
                                            0.1, 0.5, 1.0, 5.0))  # fmt: skip

    def for_listener(self, listener: str, table: dict[int, ApiEntry]) -> ApiMetrics:
        return ApiMetrics(listener, table, self._reqs, self._errs, self._lat)


class Listeners:
    """The node's bound listeners by name (a ``dict`` of :class:`ListenerState`).

    ``config``: the node's settings (``served_listeners``, ``role_of``, the request limits);
    ``registry``: the filled registry whose per-role tables the listeners serve; ``services``:
    what the handlers get (``RequestContext.services``); ``security_for(name)``: the listener's
    ``ListenerSecurity`` or None for plain PLAINTEXT; ``metrics``: request metrics or None."""

    def __init__(
        self,
        config: Config,
        registry: Registry,
        services: NodeServices,
        security_for: Callable[[str], ListenerSecurity | None],
        metrics: RequestMetrics | None = None,
    ) -> None:
        self._config = config
        self._registry = registry
        self._services = services
        self._security_for = security_for
        self._metrics = metrics
        self.by_name: dict[str, ListenerState] = {}

    @property
    def bound(self) -> dict[str, tuple[str, int]]:
        """Listener name -> (host, bound port)."""
        return {n: (ls.host, ls.port) for n, ls in self.by_name.items()}

    async def bind(self) -> None:
        """Bind every listener of a role this process plays. Controller listeners serve at
        once; broker listeners are bound (their ports are advertised and registered) but accept
        only after :meth:`start_serving`. Raises OSError when a port cannot be bound."""
        loop = asyncio.get_running_loop()
        cfg = self._config
        for ep in cfg.served_listeners():
            role = cfg.role_of(ep.name)
            table = self._registry.table(role)
            ls = ListenerState(
                name=ep.name,
                role=role,
                host=ep.host,
                port=ep.port,
                services=self._services,
                table=table,
                max_request_bytes=cfg.socket_request_max_bytes,
                max_inflight=cfg.max_inflight_requests_per_connection,
            )
            if self._metrics is not None:
                ls.metrics = self._metrics.for_listener(ep.name, table)
            ls.security = sec = self._security_for(ep.name)
            if sec is None:
                factory = lambda ls=ls: KafkaConnection(ls)  # noqa: E731
            elif sec.ssl_context is None:
                factory = lambda ls=ls: SecureConnection(ls)  # noqa: E731
            else:
                factory = tls_protocol_factory(ls, SecureConnection, sec.ssl_context)
            where: dict[str, Any] = (
                {"sock": _any_address_socket(ep.port)} if not ep.host
                else {"host": ep.host, "port": ep.port, "reuse_address": True}
            )  # fmt: skip
            srv = await loop.create_server(
                factory,
                backlog=1024,
                start_serving=role != "broker",
                **where,
            )
            ls.asyncio_server = srv
            ls.port = srv.sockets[0].getsockname()[1]
            self.by_name[ep.name] = ls

    async def start_serving(self, role: str) -> None:
        """Accept connections on every bound listener of ``role``."""
        for ls in self.by_name.values():
            if ls.role == role:
                await ls.asyncio_server.start_serving()

    def close(self) -> None:
        """Stop accepting new connections (existing ones live on)."""
        for ls in self.by_name.values():
            if ls.asyncio_server is not None:
                ls.asyncio_server.close()

    def force_close_connections(self) -> None:
        """Close every connection now, answered or not."""
        for ls in self.by_name.values():
            for conn in list(ls.connections):
                conn.force_close()

    async def drain(self, timeout: float) -> None:
        """Let every connection finish its in-flight requests for up to ``timeout`` s; those
        still busy are left to :meth:`release`."""
        conns = [c for ls in self.by_name.values() for c in ls.connections]
        if not conns:
            return
        drains = [asyncio.ensure_future(c.drain_and_close()) for c in conns]
        _done, not_done = await asyncio.wait(drains, timeout=timeout)
        if not_done:
            log.warning("shutdown: %d connection(s) still busy after %.1fs; closing "
                        "them", len(not_done), timeout)  # fmt: skip
            for d in not_done:
                d.cancel()

    async def release(self) -> None:
        """Stop accepting, force-close every connection and wait (1 s at most per listener)
        for the servers to close."""
        self.close()
        self.force_close_connections()
        for ls in self.by_name.values():
            if ls.asyncio_server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ls.asyncio_server.wait_closed(), 1.0)


def _any_address_socket(port: int) -> socket.socket:
    """A listening socket on every address for a listener with no host (``PLAINTEXT://:9092``):
    one dual-stack IPv6 socket where the system has them (IPv4 clients too, as Kafka's
    ``new InetSocketAddress(port)``), else IPv4's 0.0.0.0 -- one socket, so port 0 gives one
    port (asyncio's ``host=None`` binds each family on a port of its own). The standard
    library's ``socket.create_server`` (SO_REUSEADDR set). Raises ``OSError`` when the port
    cannot be bound."""
    if socket.has_dualstack_ipv6():
        return socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True)
    return socket.create_server(("0.0.0.0", port))
