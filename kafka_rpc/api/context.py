"""What a handler sees besides its request: the :class:`RequestContext`, and the error response
the connection answers when a handler raises (:func:`error_response`, Kafka's
``AbstractRequest.getErrorResponse``)."""

from __future__ import annotations

import collections
import dataclasses
from typing import TYPE_CHECKING, Any

from kafka_rpc.protocol import codec

if TYPE_CHECKING:
    from kafka_rpc.api.registry import ApiEntry
    from kafka_rpc.api.services import NodeServices

__all__ = ["RequestContext", "error_response"]

_RequestContextFields = collections.namedtuple(
    "_RequestContextFields",
    "api_key api_version correlation_id client_id listener frame body_pos",
)


class RequestContext(_RequestContextFields):
    """What a handler sees besides the request: the request header, the listener and the node's
    services (:attr:`services`).

    A tuple ``(api_key, api_version, correlation_id, client_id, listener, frame, body_pos)``
    built by :func:`~kafka_rpc.protocol.frames.dispatch` (natively, one allocation per
    request); ``frame`` is the request's frame (4-byte size included) and ``body_pos`` where its
    body starts in it. Read it through the named fields (a namedtuple's field access costs
    the same as indexing; ``property(itemgetter)`` cost about 20 ns more per read).
    ``listener`` is the :class:`kafka_rpc.server.listeners.ListenerState` the request came in
    on (its ``name``, ``role``, ``table``).
    """

    __slots__ = ()

    @property
    def services(self) -> NodeServices:
        """The services of the node serving this listener (:mod:`kafka_rpc.api.services`)."""
        return self[4].services


def error_response(entry: ApiEntry, request: Any, version: int, code: int) -> Any:
    """The error response of ``request``: the handler's own builder, or a default response with
    every ErrorCode field that exists at ``version`` set to ``code`` (nested arrays included)."""
    if entry.error_response is not None:
        return entry.error_response(request, version, code)
    mod = codec.module(entry.response_name)
    return _set_codes(codec.message_class(entry.response_name)(), mod, version, code)


def _set_codes(obj: Any, mod: Any, version: int, code: int) -> Any:
    vcls = getattr(mod, f"{type(obj).__name__}V{version}", None)
    present = vcls.__dataclass_fields__ if vcls is not None else {}
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "error_code" and f.name in present:
            changes[f.name] = code
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            changes[f.name] = tuple(_set_codes(x, mod, version, code) for x in value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes[f.name] = _set_codes(value, mod, version, code)
    return dataclasses.replace(obj, **changes) if changes else obj
