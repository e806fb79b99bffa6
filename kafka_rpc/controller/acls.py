"""ACLs in the metadata log (Kafka's ``AclControlManager``).

* ``AccessControlEntryRecord`` (type 18) adds a binding under a fresh id,
  ``RemoveAccessControlEntryRecord`` (19) removes one; every node replays them into its image's
  ``acls`` (id -> :class:`~kafka_rpc.security.authorizer.AclBinding`), which the
  StandardAuthorizer reads (:data:`REPLAY`); snapshots carry them (:func:`acl_records`).
* CreateAcls / DeleteAcls run on the active controller (forwarded from a broker listener) and
  are answered once their records commit (:func:`create_acls`, :func:`delete_acls`).
* Validation as ``AclControlManager.validateNewAcl``: resource type, pattern type (LITERAL or
  PREFIXED), operation and permission must be concrete (not ANY/UNKNOWN/MATCH), the principal
  ``<type>:<name>``, the host non-empty; a failure answers INVALID_REQUEST (42) for that
  binding. A binding equal to an existing one is answered success and not written again.

DescribeAcls, the filter matching (``AclBindingFilter.matches``) and the error answers of the
three ACL APIs are in :mod:`kafka_rpc.security.acls`; the authorizer in
:mod:`kafka_rpc.security.authorizer`.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from kafka_rpc.controller.base import ControllerResult, ReplayError
from kafka_rpc.controller.image import MetadataImage, evolve
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.security.acls import filter_matches, invalid_filter
from kafka_rpc.security.authorizer import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = [
    "REPLAY",
    "SNAPSHOT",
    "acl_records",
    "create_acls",
    "delete_acls",
    "replay_access_control_entry",
    "replay_remove_access_control_entry",
]

_R = codec.message_class


# ------------------------------------------------------------------------------ replay
def replay_access_control_entry(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """AclControlManager.replay(AccessControlEntryRecord): the binding under its id."""
    acl = AclBinding(r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host,
                     r.operation, r.permission_type)  # fmt: skip
    return evolve(img, acls=img.acls.set(r.id, acl))


def replay_remove_access_control_entry(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """AclControlManager.replay(RemoveAccessControlEntryRecord): an unknown id is a
    ReplayError (Kafka: "Tried to remove ACL ... which did not exist")."""
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
    mod = codec.module("CreateAclsResponse")
    existing = set(image.acls.values())
    records, results = [], []
    taken: set[UUID] = set()
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


def delete_acls(image: Any, request: Any, ctx: Any) -> Any:
    """DeleteAcls on the active controller: a RemoveAccessControlEntryRecord per binding that
    any filter matches (once), a result per filter listing what it removed."""
    mod = codec.module("DeleteAclsResponse")
    records, results, removed = [], [], set()
    for f in request.filters:
        why = invalid_filter(f)
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


REPLAY = {
    "AccessControlEntryRecord": replay_access_control_entry,
    "RemoveAccessControlEntryRecord": replay_remove_access_control_entry,
}


SNAPSHOT = (acl_records,)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""
