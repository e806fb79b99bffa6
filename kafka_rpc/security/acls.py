"""ACLs in the metadata log (issue 15): Kafka's ``AclControlManager`` and the ACL APIs.

* ``AccessControlEntryRecord`` (type 18) adds a binding under a fresh id,
  ``RemoveAccessControlEntryRecord`` (19) removes one; every node replays them into its image's
  ``acls`` (id -> :class:`~kafka_rpc.security.authorizer.AclBinding`), which the
  StandardAuthorizer reads, and snapshots carry them.
* CreateAcls / DeleteAcls run on the active controller (forwarded from a broker listener) and
  are answered once their records commit; DescribeAcls answers from the node's image.
* Validation as ``AclControlManager.validateNewAcl``: resource type, pattern type (LITERAL or
  PREFIXED), operation and permission must be concrete (not ANY/UNKNOWN/MATCH), the principal
  ``<type>:<name>``, the host non-empty; a failure answers INVALID_REQUEST (42) for that
  binding. A binding equal to an existing one is answered success and not written again.
* Filters (``AclBindingFilter.matches``): ANY matches every value, a null name / principal /
  host matches any; pattern type MATCH matches the bindings that apply to the name (the same
  literal name, the wildcard ``*``, a prefix of it).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

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
    "create_acls",
    "delete_acls",
    "describe_acls",
    "filter_matches",
    "replay_access_control_entry",
    "replay_remove_access_control_entry",
]

_R = codec.message_class


# ------------------------------------------------------------------------------ replay
def replay_access_control_entry(img: Any, r: Any, offset: int) -> Any:
    """AclControlManager.replay(AccessControlEntryRecord): the binding under its id."""
    from kafka_rpc.controller.image import evolve

    acl = AclBinding(r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host,
                     r.operation, r.permission_type)  # fmt: skip
    return evolve(img, acls=img.acls.set(r.id, acl))


def replay_remove_access_control_entry(img: Any, r: Any, offset: int) -> Any:
    """AclControlManager.replay(RemoveAccessControlEntryRecord): an unknown id is a
    ReplayError (Kafka: "Tried to remove ACL ... which did not exist")."""
    from kafka_rpc.controller.image import evolve
    from kafka_rpc.controller.replay import ReplayError

    if r.id not in img.acls:
        raise ReplayError(f"Tried to remove ACL {r.id}, which did not exist")
    return evolve(img, acls=img.acls.discard(r.id))


def _entry_record(acl_id: UUID, a: AclBinding) -> Any:
    """The AccessControlEntryRecord of binding ``a`` under ``acl_id``."""
    return _R("AccessControlEntryRecord")(
        id=acl_id,
        resource_type=a.resource_type,
        resource_name=a.resource_name,
        pattern_type=a.pattern_type,
        principal=a.principal,
        host=a.host,
        operation=a.operation,
        permission_type=a.permission_type,
    )


def acl_records(image: Any) -> list:
    """The AccessControlEntryRecords that rebuild ``image.acls`` (snapshots), by id."""
    return [_entry_record(i, a) for i, a in sorted(image.acls.items(), key=lambda kv: str(kv[0]))]


# ------------------------------------------------------------------------------ validation
def _invalid(a: Any) -> str | None:
    """Why a CreateAcls binding is invalid (``validateNewAcl``), or None."""
    if a.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or a.resource_type not in set(
        ResourceType
    ):
        return "Invalid resourceType " + str(a.resource_type)
    if a.resource_pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid patternType " + str(a.resource_pattern_type)
    if a.operation in (AclOperation.ANY, AclOperation.UNKNOWN) or a.operation not in set(
        AclOperation
    ):
        return "Invalid operation " + str(a.operation)
    if a.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return "Invalid permissionType " + str(a.permission_type)
    if not a.resource_name:
        return "Resource name should not be empty"
    kind, sep, name = a.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{a.principal}` (no colon is present separating "
    if not a.host:
        return "Invalid host: the host should not be empty"
    return None


def _binding(a: Any) -> AclBinding:
    return AclBinding(a.resource_type, a.resource_name, a.resource_pattern_type, a.principal,
                      a.host, a.operation, a.permission_type)  # fmt: skip


def _new_id(image: Any, taken: set, rng: Any) -> UUID:
    while True:
        u = UUID(int=rng.getrandbits(128))
        if u.int > 1 and u not in image.acls and u not in taken:
            return u


# ------------------------------------------------------------------------------ commands
def create_acls(image: Any, request: Any, ctx: Any) -> Any:
    """CreateAcls on the active controller: one AccessControlEntryRecord per new valid binding
    (all in one batch), a result per binding in request order."""
    from kafka_rpc.controller.commands import ControllerResult

    mod = codec.module("CreateAclsResponse")
    existing = set(image.acls.values())
    records, results, taken = [], [], set()
    for a in request.creations:
        why = _invalid(a)
        if why is not None:
            results.append(mod.AclCreationResult(error_code=ErrorCode.INVALID_REQUEST,
                                                 error_message=why))  # fmt: skip
            continue
        b = _binding(a)
        if b not in existing:
            existing.add(b)
            acl_id = _new_id(image, taken, ctx.rng)
            taken.add(acl_id)
            records.append(_entry_record(acl_id, b))
        results.append(mod.AclCreationResult(error_code=0, error_message=None))
    return ControllerResult(records, mod.CreateAclsResponse(results=tuple(results)))


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


def _bad_filter(f: Any) -> str | None:
    if f.pattern_type_filter == PatternType.UNKNOWN or f.resource_type_filter == 0:
        return "Unknown pattern type or resource type"
    if f.operation == AclOperation.UNKNOWN or f.permission_type == AclPermissionType.UNKNOWN:
        return "Unknown operation or permission type"
    return None


def delete_acls(image: Any, request: Any, ctx: Any) -> Any:
    """DeleteAcls on the active controller: a RemoveAccessControlEntryRecord per binding that
    any filter matches (once), a result per filter listing what it removed."""
    from kafka_rpc.controller.commands import ControllerResult

    mod = codec.module("DeleteAclsResponse")
    records, results, removed = [], [], set()
    for f in request.filters:
        why = _bad_filter(f)
        if why is not None:
            results.append(mod.DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST,
                                                      error_message=why))  # fmt: skip
            continue
        matching = []
        for acl_id, acl in sorted(image.acls.items(), key=lambda kv: str(kv[0])):
            if acl_id in removed or not filter_matches(f, acl):
                continue
            removed.add(acl_id)
            records.append(_R("RemoveAccessControlEntryRecord")(id=acl_id))
            matching.append(mod.DeleteAclsMatchingAcl(
                error_code=0, error_message=None, resource_type=acl.resource_type,
                resource_name=acl.resource_name, pattern_type=acl.pattern_type,
                principal=acl.principal, host=acl.host, operation=acl.operation,
                permission_type=acl.permission_type,
            ))  # fmt: skip
        results.append(mod.DeleteAclsFilterResult(error_code=0, error_message=None,
                                                  matching_acls=tuple(matching)))  # fmt: skip
    return ControllerResult(records, mod.DeleteAclsResponse(filter_results=tuple(results)))


def describe_acls(image: Any, request: Any) -> Any:
    """DescribeAcls from ``image``: the matching bindings grouped by resource pattern."""
    mod = codec.module("DescribeAclsResponse")
    why = _bad_filter(request)
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
