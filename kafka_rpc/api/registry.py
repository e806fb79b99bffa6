"""The one source of truth for what is served: handlers register here, and both the per-listener
dispatch tables and each listener's ApiVersions answer are derived from it plus the specs'
``listeners`` (practice 6).

Usage::

    from kafka_rpc.api.registry import handles

    @handles("FindCoordinatorRequest")
    async def find_coordinator(ctx, request): ...   # -> FindCoordinatorResponse

A handler may also be a plain (synchronous) function; the connection then answers without creating
a task. Duplicate registration is an import-time error.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.messages import SPECS

__all__ = ["ApiEntry", "Registry", "default_registry", "dispatch_table", "handles"]

Handler = Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class ApiEntry:
    """Everything the connection needs to serve one API on one listener."""

    api_key: int
    name: str  # request spec name
    response_name: str
    min_version: int
    max_version: int
    handler: Handler
    is_async: bool
    error_response: Callable[[Any, int, int], Any] | None  # (request, version, code) -> response
    resp_header_flex: int  # response header v1 from this version on (ApiVersions: never)
    readers: dict  # version -> raw reader
    writers: dict  # version -> raw writer
    advertised: bool = True  # listed in this listener's ApiVersions answer


class Registry:
    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._error_builders: dict[str, Callable[[Any, int, int], Any]] = {}
        #: request name -> listener roles it is also served on without being advertised there
        self._unadvertised: dict[str, frozenset[str]] = {}

    def handles(
        self,
        request_name: str,
        error_response: Callable[[Any, int, int], Any] | None = None,
    ) -> Callable[[Handler], Handler]:
        """Register a handler. ``error_response(request, version, code)`` optionally builds the
        error response (like Kafka's ``getErrorResponse``); without it, the connection walks a
        default response and sets every ErrorCode field the version has."""
        spec = SPECS.get(request_name)
        if spec is None or spec[1] != "request" or spec[3] is None:
            raise ValueError(f"{request_name!r} is not a request spec with valid versions")

        def deco(fn: Handler) -> Handler:
            if request_name in self._handlers:
                raise ValueError(f"duplicate handler for {request_name}")
            self._handlers[request_name] = fn
            if error_response is not None:
                self._error_builders[request_name] = error_response
            return fn

        return deco

    def register(
        self,
        request_name: str,
        fn: Handler,
        error_response: Callable[[Any, int, int], Any] | None = None,
        unadvertised_on: frozenset[str] = frozenset(),
    ) -> None:
        """:meth:`handles` for ``fn``; ``unadvertised_on``: listener roles (beyond the spec's
        ``listeners``) that also serve it but leave it out of their ApiVersions answer (what a
        Kafka node of that role would not list, served for our own peers: the Raft RPCs of
        ``__diskless-metadata`` partitions on the broker listener)."""
        self.handles(request_name, error_response)(fn)
        if unadvertised_on:
            self._unadvertised[request_name] = frozenset(unadvertised_on)

    def handled(self) -> frozenset[str]:
        return frozenset(self._handlers)

    def served_versions(self, request_name: str) -> tuple[int, int]:
        spec = SPECS[request_name]
        lo, hi = spec[3]
        if spec[6] and hi > lo:  # latestVersionUnstable: do not advertise the newest
            hi -= 1
        return lo, hi

    def table(self, listener_role: str) -> dict[int, ApiEntry]:
        """Dispatch table for a listener role (``"broker"`` or ``"controller"``): APIs that have a
        handler AND list the role, or are registered ``unadvertised_on`` it (``advertised``
        False)."""
        out: dict[int, ApiEntry] = {}
        for name, fn in self._handlers.items():
            spec = SPECS[name]
            advertised = listener_role in spec[5]
            if not advertised and listener_role not in self._unadvertised.get(name, ()):
                continue
            key = spec[2]
            assert key is not None  # a request spec has its api key
            resp = codec.RESPONSES_BY_KEY[key]
            lo, hi = self.served_versions(name)
            out[key] = ApiEntry(
                api_key=key,
                name=name,
                response_name=resp,
                min_version=lo,
                max_version=hi,
                handler=fn,
                is_async=inspect.iscoroutinefunction(fn),
                error_response=self._error_builders.get(name),
                resp_header_flex=_resp_header_flex(key, resp),
                readers={v: codec.reader(name, v) for v in range(lo, hi + 1)},
                writers={v: codec.writer(resp, v) for v in range(lo, hi + 1)},
                advertised=advertised,
            )
        return dict(sorted(out.items()))

    def api_versions(self, listener_role: str) -> list[tuple[int, int, int]]:
        """``[(api_key, min, max)]`` for the ApiVersions answer of a listener role."""
        return [
            (e.api_key, e.min_version, e.max_version)
            for e in self.table(listener_role).values()
            if e.advertised
        ]


def dispatch_table(table: dict[int, ApiEntry]) -> tuple:
    """The table ``frames.dispatch`` serves from: a tuple indexed by api key of None (no entry, or
    an async handler: the connection serves those) or ``(min_version, max_version, readers,
    handler, resp_header_flex, writers)`` with readers and writers as tuples indexed by
    ``version - min_version``."""
    out: list[tuple | None] = [None] * (max(table, default=-1) + 1)
    for key, e in table.items():
        if e.is_async:
            continue
        versions = range(e.min_version, e.max_version + 1)
        out[key] = (
            e.min_version,
            e.max_version,
            tuple(e.readers[v] for v in versions),
            e.handler,
            e.resp_header_flex,
            tuple(e.writers[v] for v in versions),
        )
    return tuple(out)


def _resp_header_flex(api_key: int, response_name: str) -> int:
    flex = SPECS[response_name][4]
    if api_key == 18 or flex is None:
        return 1 << 30
    return flex


default_registry = Registry()
handles = default_registry.handles
