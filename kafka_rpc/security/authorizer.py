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

A check reads only the ACLs whose pattern can match its resource: they are indexed by resource
type and pattern (LITERAL by name, the wildcard ``*``, PREFIXED by prefix), as
``StandardAuthorizerData`` keeps them (:class:`_AclIndex`).

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

_IMPLIES: dict[int, tuple[AclOperation, ...]] = {
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
    32: ("topics", AclOperation.DESCRIBE_CONFIGS, None),  # DescribeConfigs (per resource)
    37: ("topics", AclOperation.ALTER, None),  # CreatePartitions
    75: ("topics", AclOperation.DESCRIBE, None),  # DescribeTopicPartitions
    55: ("cluster", AclOperation.DESCRIBE),  # DescribeQuorum
    # KIP-853 (ControllerApis.handleAddRaftVoter / handleRemoveRaftVoter): ALTER on the cluster;
    # UpdateRaftVoter, a voter's own request, CLUSTER_ACTION
    80: ("cluster", AclOperation.ALTER),
    81: ("cluster", AclOperation.ALTER),
    82: _CLUSTER_ACTION,
    64: ("cluster", AclOperation.ALTER),  # UnregisterBroker
    # (Incremental)AlterConfigs: Kafka checks ALTER_CONFIGS per resource (the cluster for
    # brokers, the topic for topics); here the cluster's ALTER_CONFIGS covers both
    33: ("cluster", AclOperation.ALTER_CONFIGS),
    44: ("cluster", AclOperation.ALTER_CONFIGS),
    46: ("cluster", AclOperation.DESCRIBE),  # ListPartitionReassignments
    35: ("cluster", AclOperation.DESCRIBE),  # DescribeLogDirs (KafkaApis)
    43: ("cluster", AclOperation.ALTER),  # ElectLeaders
    45: ("cluster", AclOperation.ALTER),  # AlterPartitionReassignments
    51: ("cluster", AclOperation.ALTER),  # AlterUserScramCredentials
    49: ("cluster", AclOperation.ALTER_CONFIGS),  # AlterClientQuotas
    57: ("cluster", AclOperation.ALTER),  # UpdateFeatures
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
    73: _CLUSTER_ACTION,  # AssignReplicasToDirs
    56: _CLUSTER_ACTION,  # AlterPartition
    58: _CLUSTER_ACTION,  # Envelope: the forwarding broker; the inner request is checked too
    # ours, in the private range of message_specs/README.md (10000 + the seed's key)
    10093: _CLUSTER_ACTION,
    10094: _CLUSTER_ACTION,
    10095: _CLUSTER_ACTION,
    10096: _CLUSTER_ACTION,
    10097: _CLUSTER_ACTION,
    10098: _CLUSTER_ACTION,
    10099: _CLUSTER_ACTION,
    10100: _CLUSTER_ACTION,
    10101: _CLUSTER_ACTION,
    10102: _CLUSTER_ACTION,
    10103: _CLUSTER_ACTION,
}


class _AclIndex:
    """ACLs indexed as Kafka's ``StandardAuthorizerData`` keeps them, so a check reads only the
    ACLs that can match its resource: per resource type, LITERAL ones by name (the wildcard
    ``*`` is one more name) and PREFIXED ones by prefix, with the set of prefix lengths present
    (a name of L characters costs at most one dict lookup per distinct prefix length <= L).
    Bindings of other pattern types never match a resource and are not kept. Adding or
    removing one binding is O(its bucket)."""

    __slots__ = ("_lengths", "_literal", "_prefix_lengths", "_prefixed")

    def __init__(self, acls: Iterable[AclBinding] = ()) -> None:
        self._literal: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[int, str], list[AclBinding]] = {}
        #: resource type -> {prefix length: how many PREFIXED bindings have it}
        self._lengths: dict[int, dict[int, int]] = {}
        #: resource type -> the prefix lengths present, ascending
        self._prefix_lengths: dict[int, tuple[int, ...]] = {}
        for acl in acls:
            self.add(acl)

    def add(self, acl: AclBinding) -> None:
        key = (acl.resource_type, acl.resource_name)
        if acl.pattern_type == PatternType.LITERAL:
            self._literal.setdefault(key, []).append(acl)
        elif acl.pattern_type == PatternType.PREFIXED:
            self._prefixed.setdefault(key, []).append(acl)
            counts = self._lengths.setdefault(acl.resource_type, {})
            n = len(acl.resource_name)
            counts[n] = counts.get(n, 0) + 1
            if counts[n] == 1:
                self._prefix_lengths[acl.resource_type] = tuple(sorted(counts))

    def remove(self, acl: AclBinding) -> None:
        """Remove one binding equal to ``acl`` (none: nothing happens)."""
        key = (acl.resource_type, acl.resource_name)
        if acl.pattern_type == PatternType.LITERAL:
            table = self._literal
        elif acl.pattern_type == PatternType.PREFIXED:
            table = self._prefixed
        else:
            return
        bucket = table.get(key)
        if bucket is None or acl not in bucket:
            return
        bucket.remove(acl)
        if not bucket:
            del table[key]
        if table is self._prefixed:
            counts = self._lengths[acl.resource_type]
            n = len(acl.resource_name)
            counts[n] -= 1
            if not counts[n]:
                del counts[n]
                self._prefix_lengths[acl.resource_type] = tuple(sorted(counts))

    def buckets(self, resource_type: int, name: str) -> list[list[AclBinding]]:
        """The non-empty lists of bindings whose pattern matches the resource: LITERAL
        ``name``, LITERAL ``*``, and PREFIXED by every prefix of ``name`` (itself included)."""
        found = []
        literal = self._literal
        bucket = literal.get((resource_type, name))
        if bucket:
            found.append(bucket)
        if name != WILDCARD:
            bucket = literal.get((resource_type, WILDCARD))
            if bucket:
                found.append(bucket)
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed
            size = len(name)
            for n in lengths:
                if n > size:
                    break
                bucket = prefixed.get((resource_type, name[:n]))
                if bucket:
                    found.append(bucket)
        return found


class StandardAuthorizer:
    """The ACLs in memory (fed from the metadata log's AccessControlEntryRecords when there are
    any), ``super.users`` and ``allow.everyone.if.no.acl.found``.

    Checks read an index (:class:`_AclIndex`, as Kafka's ``StandardAuthorizerData``): the
    bindings added here are indexed as they come and go; the image's are re-indexed only when
    :attr:`image_acls` returns a different map object (the image's ACL map is persistent, so an
    unchanged map is the same object). :meth:`authorize_scan` is the plain scan of every binding
    with the same answers, kept as the reference (tests, bench/authorizer.py)."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl: bool = True):
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl = allow_everyone_if_no_acl
        self.acls: dict[Any, AclBinding] = {}  # ACL id -> binding, added here (tests, tools)
        #: the metadata log's ACLs: a callable returning the current image's id -> binding map
        self.image_acls: Any = None
        self._index = _AclIndex()
        self._image_map: Any = None  # the image map that _image_index was built from
        self._image_index = _AclIndex()

    def add_acl(self, acl_id: Any, acl: AclBinding) -> None:
        """Add a binding held by this authorizer only (not in the metadata log: tests, tools);
        the log's ACLs come from :attr:`image_acls`. An id already present is replaced."""
        old = self.acls.get(acl_id)
        if old is not None:
            self._index.remove(old)
        self.acls[acl_id] = acl
        self._index.add(acl)

    def remove_acl(self, acl_id: Any) -> None:
        """Remove a binding added with :meth:`add_acl` (an unknown id is ignored)."""
        acl = self.acls.pop(acl_id, None)
        if acl is not None:
            self._index.remove(acl)

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:  # fmt: skip
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource (Kafka's
        ``StandardAuthorizerData.authorize``; the rules are in the module docstring)."""
        if principal in self.super_users:
            return True
        buckets = self._index.buckets(resource_type, name)
        if self.image_acls is not None:
            image = self.image_acls()
            if image is not self._image_map:
                self._image_index = _AclIndex(image.values())
                self._image_map = image
            buckets += self._image_index.buckets(resource_type, name)
        if not buckets:  # no ACL on the resource at all
            return self.allow_everyone_if_no_acl
        implied = _IMPLIES.get(operation, ())
        allowed = False
        for bucket in buckets:
            for acl in bucket:
                if acl.principal not in (principal, "User:*") or acl.host not in (host, WILDCARD):
                    continue
                if acl.permission_type == AclPermissionType.DENY:
                    if acl.operation in (operation, AclOperation.ALL):
                        return False  # DENY wins
                elif acl.permission_type == AclPermissionType.ALLOW and not allowed:
                    allowed = acl.operation in (operation, AclOperation.ALL) or (
                        acl.operation in implied
                    )
        return allowed

    def authorize_scan(self, principal: str, host: str, operation: int, resource_type: int,
                       name: str) -> bool:  # fmt: skip
        """:meth:`authorize` by scanning every binding (no index): the reference the index is
        tested against and benchmarked with; same arguments and answer."""
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
    """Kafka's per-topic authorization of Metadata (3), CreateTopics (19), DeleteTopics (20),
    CreatePartitions (37, ALTER on each topic), DescribeConfigs (32) and DescribeTopicPartitions
    (75): ``(request without the denied topics, post)`` where ``post(response)`` adds a
    TOPIC_AUTHORIZATION_FAILED entry for each denied topic (and, for Metadata of all topics,
    drops the topics the principal may not DESCRIBE, as ``KafkaApis.handleTopicMetadataRequest``);
    None when nothing is denied. A CreateTopics principal with CREATE on the cluster is not
    checked per topic.

    DescribeConfigs (``ConfigHelper.handleDescribeConfigsRequest``): a TOPIC resource needs
    DESCRIBE_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED), a BROKER, BROKER_LOGGER or
    CLIENT_METRICS one DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED), a
    GROUP one on the group (else GROUP_AUTHORIZATION_FAILED); the denied results follow the
    others, with Kafka's messages. DescribeTopicPartitions
    (``DescribeTopicPartitionsRequestHandler``): a named topic needs DESCRIBE (else a
    TOPIC_AUTHORIZATION_FAILED entry with the zero topic id, after the others); for all topics
    the ones it may not DESCRIBE are left out of the answer (after paging, so a page may hold
    fewer partitions than the limit; Kafka drops them before); every listed topic's
    TopicAuthorizedOperations is the set of TOPIC operations the principal may perform."""
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
    if api_key == 37:  # ControllerApis.createPartitions: ALTER on each topic
        denied = [t.name for t in request.topics if not ok(op, t.name)]
        if not denied:
            return None
        mod = codec.module("CreatePartitionsResponse")
        request = dataclasses.replace(
            request, topics=tuple(t for t in request.topics if t.name not in denied)
        )
        extra = tuple(
            mod.CreatePartitionsTopicResult(
                name=n, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None
            )
            for n in dict.fromkeys(denied)
        )
        return request, lambda resp: dataclasses.replace(resp, results=resp.results + extra)
    if api_key == 32:
        return _describe_configs_plan(request, lambda op, rtype, name: authorizer.authorize(
            principal, host, op, rtype, name))  # fmt: skip
    if api_key == 75:
        return _topic_partitions_plan(request, lambda name: ok(op, name), lambda name: sum(
            1 << o for o in _TOPIC_OPERATIONS if ok(o, name)))  # fmt: skip
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


#: ``AclEntry.supportedOperations(TOPIC)``: what TopicAuthorizedOperations reports on.
_TOPIC_OPERATIONS = (
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
)
#: ConfigResource.Type ids -> (ACL resource type, the error of a denied resource)
_CONFIG_RESOURCES = {
    2: (ResourceType.TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    4: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    8: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    16: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    32: (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
}
#: Kafka's ``Errors.message()`` of the authorization errors DescribeConfigs answers with.
_AUTH_MESSAGES: dict[int, str] = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
}


def _describe_configs_plan(request: Any, allowed: Any) -> tuple[Any, Any] | None:
    import dataclasses

    from kafka_rpc.protocol import codec

    denied = []
    for r in request.resources:
        rtype, code = _CONFIG_RESOURCES.get(r.resource_type, (None, 0))
        if rtype is None:
            continue  # the handler answers an unknown type
        name = CLUSTER_NAME if rtype == ResourceType.CLUSTER else r.resource_name
        if not allowed(AclOperation.DESCRIBE_CONFIGS, rtype, name):
            denied.append((r, code))
    if not denied:
        return None
    mod = codec.module("DescribeConfigsResponse")
    gone = {id(r) for r, _ in denied}
    request = dataclasses.replace(
        request, resources=tuple(r for r in request.resources if id(r) not in gone)
    )
    extra = tuple(
        mod.DescribeConfigsResult(
            error_code=code,
            error_message=_AUTH_MESSAGES[code],
            resource_type=r.resource_type,
            resource_name=r.resource_name,
        )
        for r, code in denied
    )
    return request, lambda resp: dataclasses.replace(resp, results=resp.results + extra)


def _topic_partitions_plan(request: Any, may_describe: Any, operations: Any) -> tuple[Any, Any]:
    import dataclasses
    from uuid import UUID

    from kafka_rpc.protocol import codec

    mod = codec.module("DescribeTopicPartitionsResponse")
    fetch_all = not request.topics
    denied = [] if fetch_all else [t.name for t in request.topics if not may_describe(t.name)]
    gone = set(denied)
    cursor = request.cursor
    keep = tuple(t for t in request.topics if t.name not in gone)
    if keep and (cursor is None or cursor.topic_name not in gone):
        # the handler pages over the allowed topics only; otherwise (every named topic, or the
        # cursor's, denied) it runs on the request as sent, so its cursor checks stay Kafka's,
        # and the denied topics' entries are dropped below
        request = dataclasses.replace(request, topics=keep)

    def post(resp: Any) -> Any:
        kept = tuple(
            dataclasses.replace(t, topic_authorized_operations=operations(t.name))
            for t in resp.topics
            if t.name not in gone and not (fetch_all and not may_describe(t.name))
        )
        extra = tuple(
            mod.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=n, topic_id=UUID(int=0)
            )
            for n in dict.fromkeys(denied)
        )
        return dataclasses.replace(resp, topics=kept + extra)

    return request, post


def authorizer_from_config(config: Any) -> StandardAuthorizer | None:
    """The authorizer ``authorizer.class.name`` asks for, or None (no authorization)."""
    raw = config.raw
    if not raw.get("authorizer.class.name", "").strip():
        return None
    supers = [s.strip() for s in raw.get("super.users", "").split(";") if s.strip()]
    allow = raw.get("allow.everyone.if.no.acl.found", "true").strip().lower() == "true"
    return StandardAuthorizer(supers, allow)
