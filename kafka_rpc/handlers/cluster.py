"""UnregisterBroker (key 64) and DescribeCluster (key 60).

**UnregisterBroker** v0, both listeners (Kafka's ``ControllerApis.handleUnregisterBroker`` on the
controller listener, ``KafkaApis`` forwarding on the broker listener):

- on the node of the active controller (either listener): ``controller.unregister_broker``
  (:func:`kafka_rpc.controller.replication.unregister_broker`), answered once the records commit;
- on the controller listener of any other node: NOT_CONTROLLER;
- on the broker listener of any other node: sent on, at the same version, to the active
  controller's controller listener and its answer relayed
  (:class:`kafka_rpc.broker.channel.ControllerChannel`, which looks the leader up again after a
  NOT_CONTROLLER or a lost connection); the local controller losing leadership mid-request is
  forwarded the same way.

Errors (ErrorCode + ErrorMessage): BROKER_ID_NOT_REGISTERED (102) for an id with no registration;
NOT_CONTROLLER (41) as above; REQUEST_TIMED_OUT (7) when a forwarding broker reaches no active
controller.

**DescribeCluster** v0-2, both listeners (``KafkaApis.handleDescribeCluster`` /
``ControllerApis.handleDescribeCluster`` through ``AuthHelper.computeDescribeClusterResponse``,
KIP-919 and KIP-1073), answered from this node's committed image without a write:

- EndpointType (v1+; v0 always means 1) other than 1 (brokers) or 2 (controllers):
  UNSUPPORTED_ENDPOINT_TYPE (115), "Unsupported endpoint type N"; a type the listener does not
  serve (2 on a broker listener, 1 on a controller listener): MISMATCHED_ENDPOINT_TYPE (114),
  "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type
  CONTROLLER" (or the reverse). At v0 both are INVALID_REQUEST (42), so a v0 request on a
  controller listener always fails, as in Kafka (controllers serve v1+). An error answer carries
  only ErrorCode and ErrorMessage.
- Broker listener (EndpointType 1): ClusterId, and Brokers and ControllerId exactly as Metadata
  reports them on that listener (:func:`kafka_rpc.handlers.metadata.metadata_response`: the
  unfenced registered brokers at their endpoint for the listener, by id, with their rack; this
  node alone at its advertised endpoint while none is registered; ControllerId the active
  controller when it is a listed broker, else this node or the lowest listed id). With
  IncludeFencedBrokers (v2+) the fenced registered brokers that have the listener are listed
  too, with IsFenced true.
- Controller listener (EndpointType 2): the registered controllers of the committed image
  (RegisterControllerRecords, KIP-919) that have an endpoint of the listener's name, by id, at
  that endpoint, Rack null, as Kafka's ``ControllerRegistrationsPublisher.
  describeClusterControllers``; ControllerId = the Raft leader when it is listed, else -1. While
  no controller has registered yet (a fresh cluster), the metadata quorum's voters
  (``services.quorum_voters()``: the Raft replica's voter set, static or dynamic) at their
  address there (this node at the address its listener is bound to).
- ClusterAuthorizedOperations: -2147483648 unless IncludeClusterAuthorizedOperations; then every
  operation Kafka defines on the CLUSTER resource (there is no authorizer, and Kafka without one
  reports all of them: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
  IDEMPOTENT_WRITE as bits of their AclOperation codes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka_rpc.api.registry import handles
from kafka_rpc.broker.forwarding import FORWARD_ERROR_MESSAGES, answer_or_forward
from kafka_rpc.controller.image import EMPTY
from kafka_rpc.handlers.metadata import metadata_response
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kafka_rpc.api.services import NodeServices

__all__ = [
    "CLUSTER_AUTHORIZED_OPERATIONS",
    "ENDPOINT_BROKER",
    "ENDPOINT_CONTROLLER",
    "describe_cluster",
    "describe_cluster_response",
    "unregister_broker",
]


_Describe = codec.module("DescribeClusterResponse")
_MetadataRequest = codec.message_class("MetadataRequest")
_UnregisterResponse = codec.message_class("UnregisterBrokerResponse")

ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
"""Kafka's ``EndpointType`` ids (0 is UNKNOWN)."""
_ENDPOINT_NAMES = {ENDPOINT_BROKER: "BROKER", ENDPOINT_CONTROLLER: "CONTROLLER"}

#: ``AclOperation`` codes CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10,
#: ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12 as a bit field (Kafka's ``Utils.to32BitField`` of
#: ``AclEntry.supportedOperations(CLUSTER)``): what Kafka reports without an authorizer.
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
_NOT_REQUESTED = -(1 << 31)


# ------------------------------------------------------------------ UnregisterBroker
async def route_unregister(services: NodeServices, role: str, request: Any, version: int) -> Any:
    """Answer an UnregisterBroker that came in on a listener of ``role``: at the active
    controller, NOT_CONTROLLER on a controller listener elsewhere, else forwarded
    (:func:`~kafka_rpc.broker.channel.answer_or_forward`)."""

    def error(code: int) -> Any:
        return _UnregisterResponse(error_code=code, error_message=FORWARD_ERROR_MESSAGES[code])

    return await answer_or_forward(services, role, request, version, "unregister_broker", error)


@handles("UnregisterBrokerRequest")
async def unregister_broker(ctx, request):
    return await route_unregister(ctx.services, ctx.listener.role, request, ctx.api_version)


# ------------------------------------------------------------------ DescribeCluster
def _endpoint_error(request: Any, version: int, expected: int) -> Any | None:
    """AuthHelper.computeDescribeClusterResponse's checks: the error response, or None."""
    wanted = request.endpoint_type if version >= 1 else ENDPOINT_BROKER
    if wanted not in _ENDPOINT_NAMES:
        code = ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        return _Describe.DescribeClusterResponse(
            error_code=code, error_message=f"Unsupported endpoint type {wanted}"
        )
    if wanted != expected:
        code = ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE
        return _Describe.DescribeClusterResponse(
            error_code=code,
            error_message=(
                f"The request was sent to an endpoint of type {_ENDPOINT_NAMES[expected]}, but "
                f"we wanted an endpoint of type {_ENDPOINT_NAMES[wanted]}"
            ),
        )
    return None


def _broker_nodes(image, request, version, listener, **metadata_kw) -> tuple[list, int]:
    md, _ = metadata_response(image, _MetadataRequest(topics=()), 12, listener, **metadata_kw)
    nodes = {
        b.node_id: _Describe.DescribeClusterBroker(
            broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack, is_fenced=False
        )
        for b in md.brokers
    }
    if version >= 2 and request.include_fenced_brokers:
        for bid in sorted(image.brokers):
            b = image.brokers[bid]
            ep = b.endpoint(listener)
            if b.fenced and ep is not None and bid not in nodes:
                nodes[bid] = _Describe.DescribeClusterBroker(
                    broker_id=bid, host=ep.host, port=ep.port, rack=b.rack, is_fenced=True
                )
    return [nodes[i] for i in sorted(nodes)], md.controller_id


def _controller_nodes(services: NodeServices, listener: str) -> list:
    ctl = services.controller
    image = getattr(ctl, "image", None) or EMPTY
    if image.controllers:
        out = []
        for cid, reg in sorted(image.controllers.items()):
            ep = next((e for e in reg.endpoints if e.name == listener), None)
            if ep is not None:
                out.append(_Describe.DescribeClusterBroker(broker_id=cid, host=ep.host,
                                                           port=ep.port))  # fmt: skip
        return out
    voters = services.quorum_voters()
    out = []
    for vid in sorted(voters):
        host, port = voters[vid]
        if vid == services.node_id:
            bound_host, bound_port = services.bound.get(listener, (host, port))
            if bound_host not in ("", "0.0.0.0", "::"):
                host = bound_host
            port = bound_port
        out.append(_Describe.DescribeClusterBroker(broker_id=vid, host=host, port=port))
    return out


def describe_cluster_response(
    services: NodeServices, request: Any, version: int, listener: Any
) -> Any:
    """The DescribeClusterResponse for ``request`` at ``version`` arriving on ``listener`` (a
    listener state with ``name`` and ``role``) of the node ``services``; see the module
    docstring."""
    expected = ENDPOINT_CONTROLLER if listener.role == "controller" else ENDPOINT_BROKER
    error = _endpoint_error(request, version, expected)
    if error is not None:
        return error
    ctl = services.controller
    leader = getattr(ctl, "active_controller_id", -1) if ctl is not None else -1
    if expected == ENDPOINT_CONTROLLER:
        nodes = _controller_nodes(services, listener.name)
        controller_id = leader if any(n.broker_id == leader for n in nodes) else -1
    else:
        image = getattr(ctl, "image", None) or EMPTY
        ep = services.advertised(listener.name)
        nodes, controller_id = _broker_nodes(
            image,
            request,
            version,
            listener.name,
            cluster_id=services.cluster_id,
            node_id=services.node_id,
            fallback_endpoint=(ep.host, ep.port),
            active_controller_id=leader,
        )
    return _Describe.DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        endpoint_type=expected,
        cluster_id=services.cluster_id or "",
        controller_id=controller_id,
        brokers=tuple(nodes),
        cluster_authorized_operations=(
            CLUSTER_AUTHORIZED_OPERATIONS
            if request.include_cluster_authorized_operations
            else _NOT_REQUESTED
        ),
    )


@handles("DescribeClusterRequest")
def describe_cluster(ctx, request):
    return describe_cluster_response(ctx.services, request, ctx.api_version, ctx.listener)
