"""The listener layer: asyncio listeners and connections (Kafka's ``SocketServer``), serving a
filled registry (:mod:`kafka_rpc.api`) with the node's services."""

from kafka_rpc.server.listeners import Listeners, ListenerState, RequestMetrics, install_uvloop

__all__ = ["ListenerState", "Listeners", "RequestMetrics", "install_uvloop"]
