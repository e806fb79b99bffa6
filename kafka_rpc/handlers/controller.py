"""The controller listener's broker-lifecycle RPCs: BrokerRegistration (62), BrokerHeartbeat (63),
AllocateProducerIds (67).

API: the versions of our specs, on the controller listener only (the specs name it).
Behavior: each handler passes the decoded request to the node's
:class:`~kafka_rpc.controller.quorum_controller.QuorumController` (``ctx.server.controller``),
which runs it as a write event on the active controller and answers once its records are
committed (DESIGN.md section 7, ``reference/kraft.md`` 3).
Errors: NOT_CONTROLLER (41) when this node runs no controller or is not the active one (also
when leadership is lost before the records commit); the commands' own codes otherwise
(INCONSISTENT_CLUSTER_ID, DUPLICATE_BROKER_REGISTRATION, UNSUPPORTED_VERSION,
STALE_BROKER_EPOCH, UNKNOWN_SERVER_ERROR); AllocateProducerIds over
``producer.ids.allocation.max.per.second`` gets THROTTLING_QUOTA_EXCEEDED with ThrottleTimeMs.
"""

from __future__ import annotations

from kafka_rpc.controller.quorum_controller import not_controller_response
from kafka_rpc.server.registry import handles


def _controller(ctx):
    controller = getattr(ctx.server, "controller", None)
    if controller is None or not controller.is_active:
        return None
    return controller


@handles("BrokerRegistrationRequest")
async def broker_registration(ctx, request):
    controller = _controller(ctx)
    if controller is None:
        return not_controller_response(request)
    return await controller.register_broker(request, ctx.api_version)


@handles("BrokerHeartbeatRequest")
async def broker_heartbeat(ctx, request):
    controller = _controller(ctx)
    if controller is None:
        return not_controller_response(request)
    return await controller.broker_heartbeat(request, ctx.api_version)


@handles("AllocateProducerIdsRequest")
async def allocate_producer_ids(ctx, request):
    controller = _controller(ctx)
    if controller is None:
        return not_controller_response(request)
    return await controller.allocate_producer_ids(request, ctx.api_version)
