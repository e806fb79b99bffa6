"""Kafka's StandardAuthorizer semantics (``org.apache.kafka.metadata.authorizer``) for the APIs
we serve, and the one table of what each API needs (:data:`API_RULES`).

``authorize(principal, host, operation, resource_type, name)`` as
``StandardAuthorizerData.authorize``:

1. a principal of ``super.users`` may do everything;
2. every ACL whose resource pattern matches (LITERAL: the same name or ``*``; PREFIXED: the name
   starts with it) counts as "an ACL for the resource"; of those whose principal (or ``User:*``)
   and host (or ``*``) match, a DENY for the operation (or ALL) denies at once, an ALLOW for
   it (or ALL, or an operation that implies it: READ/WRITE/DELETE/ALTER imply DESCRIBE,
   ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
3. no ACL for the resource at all: ``allow.everyone.if.no.acl.found``; otherwise denied.

On when ``authorizer.class.name`` names the StandardAuthorizer (``config.AUTHORIZER_CLASS_NAMES``);
the embedded default has none and stays open.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "API_RULES",
    "AclBinding",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
    "StandardAuthorizer",
    "authorizer_from_config",
]


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PatternType(enum.IntEnum):
    """Kafka's ``PatternType`` codes."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(enum.IntEnum):
    """Kafka's ``AclPermissionType`` codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # Kafka's ``Resource.CLUSTER_NAME``
WILDCARD = "*"

_IMPLIES = {
    AclOperation.DESCRIBE: (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                            AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.ALTER_CONFIGS,),
}  # fmt: skip


@dataclass(frozen=True)
class AclBinding:
    """One ACL (Kafka's ``StandardAcl``): resource pattern, principal, host, operation,
    permission."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    def matches_resource(self, resource_type: int, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return False


# Per API key: None (no check), ("cluster", operation) or ("topics", operation, cluster_op)
# (every topic the request names needs ``operation`` on it; with ``cluster_op`` allowed on the
# cluster, none is checked, as Kafka's CreateTopics). APIs not listed need CLUSTER_ACTION on the
# cluster (inter-broker / controller APIs, Kafka's ``ControllerApis``).
_CLUSTER_ACTION = ("cluster", AclOperation.CLUSTER_ACTION)
API_RULES: dict[int, tuple | None] = {
    18: None,  # ApiVersions
    17: None,  # SaslHandshake
    36: None,  # SaslAuthenticate
    60: None,  # DescribeCluster (cluster operations are reported, not required)
    10: None,  # FindCoordinator
    3: ("topics", AclOperation.DESCRIBE, None),  # Metadata
    19: ("topics", AclOperation.CREATE, AclOperation.CREATE),  # CreateTopics
    20: ("topics", AclOperation.DELETE, None),  # DeleteTopics
    55: ("cluster", AclOperation.DESCRIBE),  # DescribeQuorum
    64: ("cluster", AclOperation.ALTER),  # UnregisterBroker
    29: ("cluster", AclOperation.DESCRIBE),  # DescribeAcls
    30: ("cluster", AclOperation.ALTER),  # CreateAcls
    31: ("cluster", AclOperation.ALTER),  # DeleteAcls
    # CLUSTER_ACTION, spelled out: Raft (Fetch, FetchSnapshot, Vote, Begin/EndQuorumEpoch),
    # broker lifecycle, producer ids, the Batch Coordinator RPCs and KIP-1114's chunks
    1: _CLUSTER_ACTION,
    59: _CLUSTER_ACTION,
    52: _CLUSTER_ACTION,
    53: _CLUSTER_ACTION,
    54: _CLUSTER_ACTION,
    62: _CLUSTER_ACTION,
    63: _CLUSTER_ACTION,
    67: _CLUSTER_ACTION,
    93: _CLUSTER_ACTION,
    94: _CLUSTER_ACTION,
    95: _CLUSTER_ACTION,
    96: _CLUSTER_ACTION,
    97: _CLUSTER_ACTION,
    98: _CLUSTER_ACTION,
    99: _CLUSTER_ACTION,
    100: _CLUSTER_ACTION,
    101: _CLUSTER_ACTION,
    102: _CLUSTER_ACTION,
    103: _CLUSTER_ACTION,
}


class StandardAuthorizer:
    """The ACLs in memory (fed from the metadata log's AccessControlEntryRecords when there are
    any), ``super.users`` and ``allow.everyone.if.no.acl.found``."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl: bool = True):
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl = allow_everyone_if_no_acl
        self.acls: dict[Any, AclBinding] = {}  # ACL id -> binding, added here (tests, tools)
        #: the metadata log's ACLs: a callable returning the current image's id -> binding map
        self.image_acls: Any = None

    def add_acl(self, acl_id: Any, acl: AclBinding) -> None:
        """Add a binding held by this authorizer only (not in the metadata log: tests, tools);
        the log's ACLs come from :attr:`image_acls`."""
        self.acls[acl_id] = acl

    def remove_acl(self, acl_id: Any) -> None:
        """Remove a binding added with :meth:`add_acl` (an unknown id is ignored)."""
        self.acls.pop(acl_id, None)

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:  # fmt: skip
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource."""
        if principal in self.super_users:
            return True
        found = allowed = False
        implied = _IMPLIES.get(operation, ())
        acls: Iterable[AclBinding] = self.acls.values()
        if self.image_acls is not None:
            acls = itertools.chain(acls, self.image_acls().values())
        for acl in acls:
            if not acl.matches_resource(resource_type, name):
                continue
            found = True
            if acl.principal not in (principal, "User:*") or acl.host not in (host, WILDCARD):
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.operation in (operation, AclOperation.ALL):
                    return False
            elif acl.permission_type == AclPermissionType.ALLOW:
                if acl.operation in (operation, AclOperation.ALL) or acl.operation in implied:
                    allowed = True
        if allowed:
            return True
        return self.allow_everyone_if_no_acl and not found

    def authorize_request(self, principal: str, peer: Any, api_key: int, request: Any) -> int:
        """0 when ``principal`` (connected from ``peer``, an address tuple) may send the request,
        else the error code of its answer, CLUSTER_AUTHORIZATION_FAILED. Topic APIs pass here
        and are answered per topic (:func:`topic_plan`)."""
        rule = API_RULES.get(api_key, _CLUSTER_ACTION)
        if rule is None or principal in self.super_users:
            return 0
        host = peer[0] if peer else ""
        if rule[0] == "cluster":
            if self.authorize(principal, host, rule[1], ResourceType.CLUSTER, CLUSTER_NAME):
                return 0
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return 0  # topic APIs: per topic, :func:`topic_plan`


# ---------------------------------------------------------------------------- per-topic answers
_FAILED = "Authorization failed."


def topic_plan(
    authorizer: StandardAuthorizer, principal: str, peer: Any, api_key: int, request: Any
) -> tuple[Any, Any] | None:
    """Kafka's per-topic authorization of Metadata (3), CreateTopics (19) and DeleteTopics (20):
    ``(request without the denied topics, post)`` where ``post(response)`` adds a
    TOPIC_AUTHORIZATION_FAILED entry for each denied topic (and, for Metadata of all topics,
    drops the topics the principal may not DESCRIBE, as ``KafkaApis.handleTopicMetadataRequest``);
    None when nothing is denied. A CreateTopics principal with CREATE on the cluster is not
    checked per topic."""
    import dataclasses

    from kafka_rpc.protocol import codec

    rule = API_RULES.get(api_key)
    if principal in authorizer.super_users or rule is None or rule[0] != "topics":
        return None
    _kind, op, cluster_op = rule  # the one table says which operation each API needs
    host = peer[0] if peer else ""

    def ok(op: int, name: str) -> bool:
        return authorizer.authorize(principal, host, op, ResourceType.TOPIC, name)

    if api_key == 3:
        mod = codec.module("MetadataResponse")
        topics = request.topics
        denied = [t.name for t in topics or () if t.name and not ok(op, t.name)]
        # every topic named: checked here, so the response holds only allowed ones; all topics
        # or some by id: the response is filtered by name
        by_name = topics is not None and all(t.name for t in topics)
        if by_name and not denied:
            return None
        if denied:
            gone = set(denied)
            keep = tuple(t for t in topics if t.name not in gone)
            request = dataclasses.replace(request, topics=keep)

        def post_metadata(resp: Any) -> Any:
            kept = resp.topics
            if not by_name:
                kept = tuple(t for t in kept if not t.name or ok(op, t.name))
            extra = tuple(
                mod.MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=n)
                for n in denied
            )
            return dataclasses.replace(resp, topics=kept + extra)

        return request, post_metadata
    if api_key == 19:
        if cluster_op is not None and authorizer.authorize(
            principal, host, cluster_op, ResourceType.CLUSTER, CLUSTER_NAME
        ):
            return None
        denied = [t.name for t in request.topics if not ok(op, t.name)]
        if not denied:
            return None
        mod = codec.module("CreateTopicsResponse")
        request = dataclasses.replace(
            request, topics=tuple(t for t in request.topics if t.name not in denied)
        )
        extra = tuple(
            mod.CreatableTopicResult(
                name=n, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=_FAILED
            )
            for n in dict.fromkeys(denied)
        )
        return request, lambda resp: dataclasses.replace(resp, topics=resp.topics + extra)
    if api_key == 20:
        names = list(request.topic_names) + [t.name for t in request.topics if t.name]
        denied = [n for n in names if not ok(op, n)]
        if not denied:
            return None
        mod = codec.module("DeleteTopicsResponse")
        request = dataclasses.replace(
            request,
            topic_names=tuple(n for n in request.topic_names if n not in denied),
            topics=tuple(t for t in request.topics if t.name not in denied),
        )
        extra = tuple(
            mod.DeletableTopicResult(
                name=n, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=_FAILED
            )
            for n in dict.fromkeys(denied)
        )
        return request, lambda resp: dataclasses.replace(resp, responses=resp.responses + extra)
    return None


def authorizer_from_config(config: Any) -> StandardAuthorizer | None:
    """The authorizer ``authorizer.class.name`` asks for, or None (no authorization)."""
    raw = config.raw
    if not raw.get("authorizer.class.name", "").strip():
        return None
    supers = [s.strip() for s in raw.get("super.users", "").split(";") if s.strip()]
    allow = raw.get("allow.everyone.if.no.acl.found", "true").strip().lower() == "true"
    return StandardAuthorizer(supers, allow)
