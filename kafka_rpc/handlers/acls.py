"""CreateAcls (30), DeleteAcls (31) and DescribeAcls (29), on both listeners.

Kafka's ``AclApis`` with the ACLs in the metadata log (``kafka_rpc.controller.acls``; filters and
DescribeAcls in ``kafka_rpc.security.acls``):

- without an authorizer (``authorizer.class.name`` empty) every binding / filter / the request
  is answered SECURITY_DISABLED (54), as Kafka answers "No Authorizer is configured";
- CreateAcls and DeleteAcls run on the active controller and are answered once their records
  commit; from a broker listener elsewhere they are forwarded to it, on a controller listener
  elsewhere answered NOT_CONTROLLER (41), REQUEST_TIMED_OUT (7) when no controller answers
  (:func:`kafka_rpc.broker.channel.answer_or_forward`);
- DescribeAcls answers from this node's committed image.

The operations they need (ALTER / DESCRIBE on the cluster) are in
``kafka_rpc.security.authorizer.API_RULES``.
"""

from __future__ import annotations

from typing import Any

from kafka_rpc.api.registry import handles
from kafka_rpc.broker.forwarding import FORWARD_ERROR_MESSAGES, answer_or_forward
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.security.acls import acl_error_response, describe_acls

_NO_AUTHORIZER = "No Authorizer is configured."


def _error(request: Any, version: int, code: int) -> Any:
    return acl_error_response(request, code, FORWARD_ERROR_MESSAGES.get(code))


async def _write(ctx: Any, request: Any, local: str) -> Any:
    if ctx.services.authorizer is None:
        return acl_error_response(request, ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
    return await answer_or_forward(
        ctx.services, ctx.listener.role, request, ctx.api_version, local,
        lambda code: _error(request, ctx.api_version, code),
    )  # fmt: skip


@handles("CreateAclsRequest", error_response=_error)
async def create_acls(ctx: Any, request: Any) -> Any:
    """One result per binding (see the module docstring)."""
    return await _write(ctx, request, "create_acls")


@handles("DeleteAclsRequest", error_response=_error)
async def delete_acls(ctx: Any, request: Any) -> Any:
    """One result per filter with the bindings it removed."""
    return await _write(ctx, request, "delete_acls")


@handles("DescribeAclsRequest", error_response=_error)
def describe(ctx: Any, request: Any) -> Any:
    """The bindings of this node's image that match the filter."""
    services = ctx.services
    if getattr(services, "authorizer", None) is None:
        return acl_error_response(request, ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
    return describe_acls(services.controller.image, request)
