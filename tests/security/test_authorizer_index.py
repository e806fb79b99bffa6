"""The indexed StandardAuthorizer (Kafka's ``StandardAuthorizerData``) against the plain scan
of every ACL (``authorize_scan``): random ACL sets (added, removed, and in the image's map) and
random queries give the same answers."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyrsistent import pmap

from kafka_rpc.security.authorizer import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
)


# small alphabets, so that names, prefixes, principals and hosts collide often; the common
# values most of the time, any code of the enum some of the time
def _mostly(common: list, every: list) -> st.SearchStrategy:
    return st.sampled_from(common) | st.sampled_from(common) | st.sampled_from(every)


_NAMES = st.sampled_from(["*", "a", "ab", "abc", "b"]) | st.sampled_from(
    ["", "abd", "ba", "kafka-cluster", "a*"]
)
_PRINCIPALS = st.sampled_from(["User:alice", "User:*", "User:bob"])
_HOSTS = st.sampled_from(["10.0.0.1", "*"]) | st.just("10.0.0.2")
_RTYPES = _mostly([ResourceType.TOPIC], [ResourceType.CLUSTER, ResourceType.ANY])
_OPS = _mostly(
    [AclOperation.READ, AclOperation.DESCRIBE, AclOperation.ALL, AclOperation.DESCRIBE_CONFIGS,
     AclOperation.ALTER_CONFIGS],
    list(AclOperation),
)  # fmt: skip
_ACLS = st.builds(
    AclBinding,
    resource_type=_RTYPES,
    resource_name=_NAMES,
    pattern_type=_mostly([PatternType.LITERAL, PatternType.PREFIXED], list(PatternType)),
    principal=_PRINCIPALS,
    host=_HOSTS,
    operation=_OPS,
    permission_type=_mostly([AclPermissionType.ALLOW, AclPermissionType.DENY],
                            list(AclPermissionType)),
)  # fmt: skip
_QUERIES = st.tuples(
    st.sampled_from(["User:alice", "User:bob"]) | st.sampled_from(["User:root", "User:eve"]),
    st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
    _OPS,
    _RTYPES,
    _NAMES | st.text(alphabet="ab*", max_size=4),
)


def _check(a: StandardAuthorizer, queries) -> None:
    for q in queries:
        assert a.authorize(*q) == a.authorize_scan(*q), q


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    local=st.lists(st.tuples(st.integers(0, 15), _ACLS), max_size=25),
    removed=st.lists(st.integers(0, 15), max_size=6),
    images=st.lists(st.dictionaries(st.integers(0, 30), _ACLS, max_size=20), max_size=3),
    queries=st.lists(_QUERIES, min_size=1, max_size=25),
    allow_everyone=st.booleans(),
)
def test_index_answers_as_the_scan(local, removed, images, queries, allow_everyone):
    a = StandardAuthorizer(["User:root"], allow_everyone_if_no_acl=allow_everyone)
    for acl_id, acl in local:  # repeated ids replace, as a dict does
        a.add_acl(acl_id, acl)
    _check(a, queries)
    for acl_id in removed:
        a.remove_acl(acl_id)
    _check(a, queries)
    current = {"map": pmap()}
    a.image_acls = lambda: current["map"]
    _check(a, queries)
    for image in images:  # each a new image map object: the image index is rebuilt
        current["map"] = pmap(image)
        _check(a, queries)


def test_image_index_follows_the_map_object():
    """The image's index is rebuilt when the map object changes, and only then."""
    grant = AclBinding(ResourceType.TOPIC, "ord", PatternType.PREFIXED, "User:bob", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    deny = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:bob", "*",
                      AclOperation.READ, AclPermissionType.DENY)  # fmt: skip
    a = StandardAuthorizer(allow_everyone_if_no_acl=False)
    current = {"map": pmap({1: grant})}
    a.image_acls = lambda: current["map"]
    q = ("User:bob", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders")
    assert a.authorize(*q)
    built = a._image_index
    assert a.authorize(*q) and a._image_index is built  # same map: not rebuilt
    current["map"] = current["map"].set(2, deny)
    assert not a.authorize(*q) and a._image_index is not built  # DENY wins
    current["map"] = current["map"].remove(2)
    assert a.authorize(*q)
    current["map"] = pmap()
    assert not a.authorize(*q)  # no ACL on the resource, allow.everyone... false
