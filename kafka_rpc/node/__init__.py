"""The node: the composition root of one kafka-rpc process (:class:`Node`)."""

from kafka_rpc.node.node import Node, handlers_registry

__all__ = ["Node", "handlers_registry"]
