"""What a handler may use of the node that serves it (``RequestContext.services``), as typed
Protocols: the handlers never see the node or the listener layer, only these.

:class:`NodeServices` is what every listener hands its handlers; the node
(:class:`kafka_rpc.node.Node`) satisfies it. It extends the broker role's
:class:`~kafka_rpc.broker.services.BrokerServices` (config, ids, the controller, the Batch
Coordinator, the channel to the active controller, client security, advertised listeners)
with what only handlers ask for: the metadata quorum replica and the other Raft partitions
(the Raft RPCs), the authorizer (the ACL APIs), the bound listeners (DescribeCluster), and
which ``__diskless-metadata`` partitions this node serves (FindCoordinator and the diskless
APIs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kafka_rpc.broker.services import BrokerServices

if TYPE_CHECKING:
    from kafka_rpc.raft.driver import RaftDriver
    from kafka_rpc.raft.routing import RaftPartitions

__all__ = ["BrokerServices", "NodeServices"]


class NodeServices(BrokerServices, Protocol):
    """``raft``: the metadata quorum replica (None before start); ``raft_partitions``: the other
    Raft partitions this node's controller listener routes; ``authorizer``: the
    ``StandardAuthorizer`` or None; ``bound``: listener name -> (host, bound port);
    ``batch_coordinator_partitions(write)`` / ``batch_coordinator_loading(write)``: the
    ``__diskless-metadata`` partitions this node serves (``write``: leads) / still loads."""

    @property
    def raft(self) -> RaftDriver | None: ...

    @property
    def raft_partitions(self) -> RaftPartitions: ...

    @property
    def authorizer(self) -> Any: ...

    @property
    def bound(self) -> dict[str, tuple[str, int]]: ...

    def batch_coordinator_partitions(self, write: bool) -> frozenset[int]: ...

    def batch_coordinator_loading(self, write: bool) -> frozenset[int]: ...
