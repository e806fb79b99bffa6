"""What the broker role's code uses of the node that runs it, as a typed Protocol.

The node (:class:`kafka_rpc.node.Node`) satisfies it; the broker modules and the handlers receive
it as an argument and never import the node or the listener layer. Kafka's brokers pass the
same collaborators to ``ForwardingManager`` and ``ControllerApis`` by constructor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kafka_rpc.broker.channel import ControllerChannel
    from kafka_rpc.config import Config, Endpoint
    from kafka_rpc.controller.quorum_controller import QuorumController

__all__ = ["BrokerServices"]


class BrokerServices(Protocol):
    """``node_id``, ``cluster_id`` (None before start), ``config``; ``controller``: the
    metadata log's state machine (its committed ``image``, and the write path when
    ``is_active``), None before start; ``coordinator``: the KIP-1164 Batch Coordinator of the
    broker role (None without it); ``controller_channel``: requests to the active controller;
    ``client_security(listener)``: how this node connects to another node's listener (None for
    PLAINTEXT); ``advertised(listener)``: the advertised endpoint with bound ports filled in;
    ``quorum_voters()``: the metadata quorum's voters, id -> (host, port) of their controller
    listener, as the node's Raft replica has its voter set (a dynamic quorum's changes with it;
    ``controller.quorum.voters`` before the replica runs)."""

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str | None: ...

    @property
    def config(self) -> Config: ...

    @property
    def controller(self) -> QuorumController | None: ...

    @property
    def coordinator(self) -> Any: ...

    @property
    def controller_channel(self) -> ControllerChannel: ...

    def client_security(self, listener_name: str) -> Any: ...

    def advertised(self, listener_name: str | None = None) -> Endpoint: ...

    def quorum_voters(self) -> dict[int, tuple[str, int]]: ...
