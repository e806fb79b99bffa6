"""The controller listener's lifecycle RPCs: BrokerRegistration (62), BrokerHeartbeat (63),
AllocateProducerIds (67), ControllerRegistration (70), AssignReplicasToDirs (73), and
AlterPartition (56, a partition leader changing its ISR).

API: the versions of our specs, on the controller listener only (the specs name it).
Behavior: each handler passes the decoded request to the node's
:class:`~kafka_rpc.controller.quorum_controller.QuorumController` (``ctx.services.controller``),
which runs it as a write event on the active controller and answers once its records are
committed (Kafka's ``QuorumController``; docs/architecture.md, 'The controller').
Errors: NOT_CONTROLLER (41) when this node runs no controller or is not the active one (also
when leadership is lost before the records commit); the commands' own codes otherwise
(INCONSISTENT_CLUSTER_ID, DUPLICATE_BROKER_REGISTRATION, BROKER_ID_NOT_REGISTERED,
INVALID_REGISTRATION, UNSUPPORTED_VERSION, STALE_BROKER_EPOCH, per-partition
UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER, UNKNOWN_SERVER_ERROR;
AlterPartition's per-partition FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, INVALID_REQUEST,
INELIGIBLE_REPLICA, NEW_LEADER_ELECTED, :func:`kafka_rpc.controller.partitions.alter_partition`);
AllocateProducerIds over
``producer.ids.allocation.max.per.second`` gets THROTTLING_QUOTA_EXCEEDED with ThrottleTimeMs.
"""

from __future__ import annotations

from kafka_rpc.api.registry import default_registry
from kafka_rpc.controller.quorum_controller import not_controller_response


def _to_active_controller(method: str):
    async def handler(ctx, request):
        controller = ctx.services.controller
        if controller is None or not controller.is_active:
            return not_controller_response(request)
        return await getattr(controller, method)(request, ctx.api_version)

    handler.__name__ = method
    return handler


for _name, _method in (
    ("BrokerRegistrationRequest", "register_broker"),
    ("BrokerHeartbeatRequest", "broker_heartbeat"),
    ("AllocateProducerIdsRequest", "allocate_producer_ids"),
    ("ControllerRegistrationRequest", "register_controller"),
    ("AssignReplicasToDirsRequest", "assign_replicas_to_dirs"),
    ("AlterPartitionRequest", "alter_partition"),
):
    default_registry.register(_name, _to_active_controller(_method))
