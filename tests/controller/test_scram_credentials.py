"""AlterUserScramCredentials on the pure command (ScramControlManager.alterCredentials): the
controller derives the stored and server keys from the client's salted password, so the
credential then authenticates a real SCRAM exchange; Kafka's per-user errors."""

from __future__ import annotations

import hashlib

from kafka_rpc.controller import scram
from kafka_rpc.controller.snapshot import image_records, load
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from kafka_rpc.security.sasl import ImageScramCredentials, SaslClient, ScramServer
from tests.controller.harness import Cluster

R = codec.message_class
AU = codec.module("AlterUserScramCredentialsRequest")


def at_mv(level=25) -> Cluster:
    c = Cluster()
    c.apply([R("FeatureLevelRecord")(name="metadata.version", feature_level=level)])
    return c


def upsert(name, password="pw", mechanism=1, iterations=4096, salt=b"sixteen-byte-slt"):
    h = "sha256" if mechanism == 1 else "sha512"
    salted = hashlib.pbkdf2_hmac(h, password.encode(), salt, iterations)
    return AU.ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations,
                                       salt=salt, salted_password=salted)  # fmt: skip


def alter(c: Cluster, deletions=(), upsertions=()):
    req = R("AlterUserScramCredentialsRequest")(
        deletions=tuple(AU.ScramCredentialDeletion(name=n, mechanism=m) for n, m in deletions),
        upsertions=tuple(upsertions),
    )
    return c.run(scram.alter_user_scram_credentials, req)


def results(res):
    return [(r.user, r.error_code) for r in res.response.results]


def authenticates(c: Cluster, mechanism: str, user: str, password: str) -> bool:
    server = ScramServer(mechanism, ImageScramCredentials(lambda: c.image))
    client = SaslClient(mechanism, user, password)
    try:
        final = client.step(server.step(client.first()))
        server.step(final)
        return True
    except Exception:  # noqa: BLE001 - any refusal
        return False


def test_upsert_authenticates_then_delete():
    c = at_mv()
    res = alter(c, upsertions=[upsert("alice", "secret"), upsert("bob", "pw2", mechanism=2,
                                                                   iterations=8192)])
    assert results(res) == [("alice", 0), ("bob", 0)]
    assert authenticates(c, "SCRAM-SHA-256", "alice", "secret")
    assert not authenticates(c, "SCRAM-SHA-256", "alice", "wrong")
    assert authenticates(c, "SCRAM-SHA-512", "bob", "pw2")
    # snapshots keep them
    snap = load(image_records(c.image), c.image.last_offset, 1)
    assert snap.scram == c.image.scram
    res = alter(c, deletions=[("alice", 1)])
    assert results(res) == [("alice", 0)]
    assert [type(r).__name__ for r in res.records] == ["RemoveUserScramCredentialRecord"]
    assert not authenticates(c, "SCRAM-SHA-256", "alice", "secret")


def test_per_user_errors_write_nothing():
    c = at_mv()
    alter(c, upsertions=[upsert("carol")])
    res = alter(
        c,
        deletions=[("carol", 1), ("nobody", 1), ("", 1), ("dave", 9)],
        upsertions=[upsert("carol"), upsert("few", iterations=1000),
                    upsert("many", iterations=20000)],
    )  # fmt: skip
    # the refused users in the order they were refused
    assert results(res) == [("nobody", E.RESOURCE_NOT_FOUND), ("", E.UNACCEPTABLE_CREDENTIAL),
                            ("dave", E.UNSUPPORTED_SASL_MECHANISM), ("carol", E.DUPLICATE_RESOURCE),
                            ("few", E.UNACCEPTABLE_CREDENTIAL),
                            ("many", E.UNACCEPTABLE_CREDENTIAL)]  # fmt: skip
    assert not res.records
    old = at_mv(10)  # before 3.5-IV2
    assert results(alter(old, upsertions=[upsert("x")])) == [("x", E.UNSUPPORTED_VERSION)]
