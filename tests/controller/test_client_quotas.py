"""AlterClientQuotas on the pure command (ClientQuotaControlManager.alterClientQuotas):
ClientQuotaRecords, Kafka's per-entity INVALID_REQUEST messages, snapshots."""

from __future__ import annotations

from kafka_rpc.controller import client_quotas
from kafka_rpc.controller.snapshot import image_records, load
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from tests.controller.harness import Cluster

R = codec.message_class
AQ = codec.module("AlterClientQuotasRequest")


def entry(parts, *ops):
    return AQ.EntryData(
        entity=tuple(AQ.EntityData(entity_type=t, entity_name=n) for t, n in parts),
        ops=tuple(AQ.OpData(key=k, value=v, remove=v is None) for k, v in ops),
    )


def alter(c: Cluster, *entries, validate_only=False):
    req = R("AlterClientQuotasRequest")(entries=entries, validate_only=validate_only)
    return c.run(client_quotas.alter_client_quotas, req)


def codes(res):
    return [(e.error_code, e.error_message) for e in res.response.entries]


def test_set_change_remove_and_snapshot():
    c = Cluster()
    res = alter(c, entry([("user", "alice")], ("producer_byte_rate", 1024.0),
                         ("request_percentage", 12.5)),
                entry([("user", None), ("client-id", "app")], ("consumer_byte_rate", 2048.0)),
                entry([("ip", "10.0.0.1")], ("connection_creation_rate", 5.0)))  # fmt: skip
    assert codes(res) == [(0, None)] * 3 and len(res.records) == 4
    q = c.image.client_quotas
    assert dict(q[(("user", "alice"),)]) == {"producer_byte_rate": 1024.0,
                                             "request_percentage": 12.5}  # fmt: skip
    assert dict(q[(("client-id", "app"), ("user", None))]) == {"consumer_byte_rate": 2048.0}
    assert load(image_records(c.image), c.image.last_offset, 1).client_quotas == q
    # unchanged values write nothing; removing an unset key writes nothing
    assert not alter(c, entry([("user", "alice")], ("producer_byte_rate", 1024.0),
                              ("consumer_byte_rate", None))).records  # fmt: skip
    res = alter(c, entry([("user", "alice")], ("producer_byte_rate", None),
                         ("request_percentage", None)))  # fmt: skip
    assert [r.remove for r in res.records] == [True, True]
    assert (("user", "alice"),) not in c.image.client_quotas
    assert not alter(c, entry([("user", "bob")], ("producer_byte_rate", 1.0)),
                     validate_only=True).records  # fmt: skip


def test_invalid_entities_keys_and_values():
    c = Cluster()
    res = alter(
        c,
        entry([], ("producer_byte_rate", 1.0)),
        entry([("user", "a"), ("user", "b")], ("producer_byte_rate", 1.0)),
        entry([("group", "g")], ("producer_byte_rate", 1.0)),
        entry([("user", "")], ("producer_byte_rate", 1.0)),
        entry([("ip", "1.2.3.4"), ("user", "u")], ("connection_creation_rate", 1.0)),
        entry([("ip", "not-an-ip")], ("connection_creation_rate", 1.0)),
        entry([("user", "x")], ("no_such_quota", 1.0)),
        entry([("user", "y")], ("producer_byte_rate", 0.0)),
        entry([("user", "z")], ("producer_byte_rate", 1.5)),
        entry([("ip", "1.2.3.4")], ("connection_creation_rate", 3e9)),
        entry([("user", "d")], ("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)),
        entry([("user", "d")], ("consumer_byte_rate", 1.0)),
    )
    assert [code for code, _ in codes(res)] == [E.INVALID_REQUEST] * 12
    msgs = [m for _, m in codes(res)]
    assert msgs[0] == "Invalid empty client quota entity"
    assert msgs[1] == "Invalid client quota entity, duplicate entity entry user"
    assert msgs[6] == "Invalid configuration key no_such_quota"
    assert msgs[7] == "Quota producer_byte_rate must be greater than 0"
    assert msgs[8] == "producer_byte_rate cannot be a fractional value."
    assert msgs[9] == "Proposed value for connection_creation_rate is too large for an INT."
    assert msgs[10].startswith("Duplicate quota key producer_byte_rate")
    assert msgs[11].startswith("Ignoring duplicate entity")
    assert not res.records and not c.image.client_quotas
