"""The API layer between the listeners and the handlers: the registry of what is served
(:mod:`~kafka_rpc.api.registry`), the request context and error responses
(:mod:`~kafka_rpc.api.context`), and the typed services a handler may use of the node that
serves it (:mod:`~kafka_rpc.api.services`). Handlers import this package, never
``kafka_rpc.server`` or ``kafka_rpc.node``."""

from kafka_rpc.api.context import RequestContext, error_response
from kafka_rpc.api.registry import ApiEntry, Registry, default_registry, dispatch_table, handles

__all__ = [
    "ApiEntry",
    "Registry",
    "RequestContext",
    "default_registry",
    "dispatch_table",
    "error_response",
    "handles",
]
