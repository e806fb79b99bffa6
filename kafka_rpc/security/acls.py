"""The ACL APIs' read side: Kafka's ``AclBindingFilter`` matching, DescribeAcls, and the
error answers of CreateAcls / DeleteAcls / DescribeAcls.

The ACLs themselves live in the metadata log: their records, replay, snapshot part and the
CreateAcls / DeleteAcls commands are :mod:`kafka_rpc.controller.acls` (Kafka's
``AclControlManager``); the authorizer reading them is :mod:`kafka_rpc.security.authorizer`.

* Filters (``AclBindingFilter.matches``): ANY matches every value, a null name / principal /
  host matches any; pattern type MATCH matches the bindings that apply to the name (the same
  literal name, the wildcard ``*``, a prefix of it).
* DescribeAcls answers from the node's image.
"""

from __future__ import annotations

from typing import Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.security.authorizer import (
    WILDCARD,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = [
    "acl_error_response",
    "describe_acls",
    "filter_matches",
    "invalid_filter",
]

_R = codec.message_class


def filter_matches(f: Any, acl: AclBinding) -> bool:
    """Kafka's ``AclBindingFilter.matches`` for a DescribeAcls request or DeleteAcls filter
    ``f`` (fields ``resource_type_filter``, ``resource_name_filter``, ``pattern_type_filter``,
    ``principal_filter``, ``host_filter``, ``operation``, ``permission_type``)."""
    if f.resource_type_filter != ResourceType.ANY and f.resource_type_filter != acl.resource_type:
        return False
    name, pt = f.resource_name_filter, f.pattern_type_filter
    if pt == PatternType.MATCH:
        if name is not None:
            if acl.pattern_type == PatternType.LITERAL:
                if acl.resource_name not in (name, WILDCARD):
                    return False
            elif not name.startswith(acl.resource_name):
                return False
    else:
        if pt != PatternType.ANY and pt != acl.pattern_type:
            return False
        if name is not None and name != acl.resource_name:
            return False
    if f.principal_filter is not None and f.principal_filter != acl.principal:
        return False
    if f.host_filter is not None and f.host_filter != acl.host:
        return False
    if f.operation != AclOperation.ANY and f.operation != acl.operation:
        return False
    return f.permission_type == AclPermissionType.ANY or f.permission_type == acl.permission_type


def invalid_filter(f: Any) -> str | None:
    """Why a DescribeAcls / DeleteAcls filter is invalid (an UNKNOWN pattern, resource,
    operation or permission type: INVALID_REQUEST), or None."""
    if f.pattern_type_filter == PatternType.UNKNOWN or f.resource_type_filter == 0:
        return "Unknown pattern type or resource type"
    if f.operation == AclOperation.UNKNOWN or f.permission_type == AclPermissionType.UNKNOWN:
        return "Unknown operation or permission type"
    return None


def describe_acls(image: Any, request: Any) -> Any:
    """DescribeAcls from ``image``: the matching bindings grouped by resource pattern."""
    mod = codec.module("DescribeAclsResponse")
    why = invalid_filter(request)
    if why is not None:
        return mod.DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=why)
    groups: dict[tuple, list] = {}
    for acl in image.acls.values():
        if filter_matches(request, acl):
            key = (acl.resource_type, acl.resource_name, acl.pattern_type)
            groups.setdefault(key, []).append(mod.AclDescription(
                principal=acl.principal, host=acl.host, operation=acl.operation,
                permission_type=acl.permission_type,
            ))  # fmt: skip
    resources = tuple(
        mod.DescribeAclsResource(
            resource_type=t, resource_name=n, pattern_type=p, acls=tuple(sorted(acls, key=repr))
        )
        for (t, n, p), acls in sorted(groups.items())
    )
    return mod.DescribeAclsResponse(error_code=0, resources=resources)


def acl_error_response(request: Any, code: int, message: str | None = None) -> Any:
    """CreateAcls / DeleteAcls / DescribeAcls answered with ``code`` for every entry."""
    name = type(request).__spec_name__
    if name == "CreateAclsRequest":
        mod = codec.module("CreateAclsResponse")
        return mod.CreateAclsResponse(results=tuple(
            mod.AclCreationResult(error_code=code, error_message=message)
            for _ in request.creations
        ))  # fmt: skip
    if name == "DeleteAclsRequest":
        mod = codec.module("DeleteAclsResponse")
        return mod.DeleteAclsResponse(filter_results=tuple(
            mod.DeleteAclsFilterResult(error_code=code, error_message=message)
            for _ in request.filters
        ))  # fmt: skip
    return _R("DescribeAclsResponse")(error_code=code, error_message=message)
