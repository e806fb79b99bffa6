"""asyncio listeners, connections and the dispatch registry."""

from kafka_rpc.server.registry import Registry, default_registry, handles
from kafka_rpc.server.server import Server, install_uvloop

__all__ = ["Registry", "Server", "default_registry", "handles", "install_uvloop"]
