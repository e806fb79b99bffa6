"""What the connections of one listener share (:class:`ListenerState`), and its per-API
metrics (:class:`ApiMetrics`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafka_rpc.api.registry import ApiEntry, dispatch_table

if TYPE_CHECKING:
    from kafka_rpc.api.services import NodeServices

__all__ = ["ApiMetrics", "ListenerState"]


class ApiMetrics:
    """Prometheus children for one listener: ``kafka_rpc_requests_total{listener, api,
    version}`` (requests answered, per API and request version, as Kafka's
    ``RequestMetrics`` ``RequestsPerSec`` has ``request`` and ``version`` tags),
    ``kafka_rpc_request_errors_total{listener, api}`` and ``kafka_rpc_request_seconds{listener,
    api}`` (handler latency, seconds). Children are bound once per api key (and version)."""

    def __init__(self, listener: str, table: dict[int, ApiEntry], reqs, errs, lat) -> None:
        self._listener = listener
        self._reqs = reqs
        self._names = {key: e.name[: -len("Request")] for key, e in table.items()}
        self._children = {
            key: (errs.labels(listener, name), lat.labels(listener, name))
            for key, name in self._names.items()
        }
        self._counted: dict[tuple[int, int], Any] = {}

    def observe(self, api_key: int, version: int, seconds: float, error: bool) -> None:
        """One request of ``api_key`` at ``version`` answered after ``seconds``; ``error``: the
        handler raised (counted as an error, not as a request)."""
        e, h = self._children[api_key]
        if error:
            e.inc()
            return
        r = self._counted.get((api_key, version))
        if r is None:
            r = self._counted[api_key, version] = self._reqs.labels(
                self._listener, self._names[api_key], str(version)
            )
        r.inc()
        h.observe(seconds)


@dataclass(eq=False)
class ListenerState:
    """One bound listener: its name and role (``broker`` or ``controller``), address, dispatch
    table (from the filled registry), limits, metrics, security and live connections."""

    name: str
    role: str
    host: str
    port: int  # the bound port once started
    #: what the handlers of this listener may use of the node (``RequestContext.services``)
    services: NodeServices
    table: dict[int, ApiEntry]
    max_request_bytes: int
    max_inflight: int
    metrics: ApiMetrics | None = None
    connections: set = field(default_factory=set)
    asyncio_server: Any = None
    #: ApiVersions: version -> encoded body, valid while the committed metadata image is
    #: ``api_versions_image`` (kafka_rpc.handlers.api_versions)
    api_versions_bodies: dict[int, bytes] = field(default_factory=dict)
    api_versions_image: Any = None
    dispatch_table: tuple = field(init=False, repr=False)  # registry.dispatch_table(table)
    #: ``kafka_rpc.security.listener.ListenerSecurity`` when the listener is not plain
    #: PLAINTEXT (TLS, SASL or an authorizer): its connections are ``SecureConnection``s
    security: Any = None
    #: the dispatch table of an authenticated SASL connection: SaslHandshake and
    #: SaslAuthenticate left to the connection (re-authentication)
    secure_dispatch_table: tuple = field(default=(), repr=False)

    def __post_init__(self) -> None:
        self.dispatch_table = dispatch_table(self.table)
        self.secure_dispatch_table = tuple(
            None if key in (17, 36) else e for key, e in enumerate(self.dispatch_table)
        )

    @property
    def api_versions(self) -> list[tuple[int, int, int]]:
        """``[(api_key, min, max)]`` this listener advertises (its table without the entries
        served unadvertised, ``ApiEntry.advertised``)."""
        return [(e.api_key, e.min_version, e.max_version) for e in self.table.values()
                if e.advertised]  # fmt: skip
