"""RecordBatch v2 both ways against Apache Kafka's own record classes (``tests/kafka/oracle.py``).

- Batches we write (``record_batch.encode_batch`` / ``encode_control_batch``) are read with
  ``MemoryRecords.readableRecords``: every batch passes ``ensureValid()`` (CRC32C), and its header
  fields and records (offsets, timestamps, keys, values, headers, control types) are what we meant.
- Batches Kafka writes (``MemoryRecordsBuilder`` with keys, values, headers, per-record
  timestamps, idempotent and transactional producer fields, log-append time; and its control
  batches: LeaderChangeMessage, SnapshotHeader/Footer, COMMIT/ABORT markers) are read by our
  ``record_batch.decode_batches`` to the same offsets, epoch, timestamps, keys and values, and the
  control records' bodies decode with our codec to the message Kafka was given.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen.model import load_dir
from kafka_rpc.protocol import codec, record_batch
from kafka_rpc.protocol.json_view import to_kafka_json
from tests.kafka.test_codec_oracle import EXAMPLES, ROOT
from tests.protocol.strategies import message_strategy

pytestmark = pytest.mark.kafka

SETTINGS = settings(max_examples=4 * EXAMPLES, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))  # fmt: skip
SPECS = {s.name: s for s in load_dir(ROOT / "message_specs")}
CONTROLS = {
    "LEADER_CHANGE": (record_batch.CONTROL_LEADER_CHANGE, "LeaderChangeMessage"),
    "SNAPSHOT_HEADER": (record_batch.CONTROL_SNAPSHOT_HEADER, "SnapshotHeaderRecord"),
    "SNAPSHOT_FOOTER": (record_batch.CONTROL_SNAPSHOT_FOOTER, "SnapshotFooterRecord"),
}
END_TXN = {"ABORT": 0, "COMMIT": 1}

nbytes = st.one_of(st.none(), st.binary(max_size=40))
offsets = st.integers(0, 2**50)
epochs = st.integers(-1, 2**31 - 1)
timestamps = st.integers(0, 2**45)


def control_message(name: str):
    return message_strategy(SPECS[name], 0, codec.module(name))


# ---------------------------------------------------------------------------------- ours -> Kafka


@pytest.fixture(scope="module")
def oracle(kafka_oracle_newest):
    return kafka_oracle_newest


def kafka_reads(oracle, data: bytes) -> list[dict]:
    seen = oracle.ok({"op": "batches_read", "hex": data.hex()})
    assert seen["sizeInBytes"] == len(data)
    assert seen["bytesInBatches"] == len(data), "Kafka sees bytes outside whole batches"
    for b in seen["batches"]:
        assert b["valid"], f"Kafka rejects our batch: {b.get('error')}"
    return seen["batches"]


def hex_or_none(b: bytes | None):
    return None if b is None else b.hex()


@SETTINGS
@given(
    batches=st.lists(
        st.tuples(epochs, timestamps, st.lists(st.tuples(nbytes, nbytes), min_size=1, max_size=6)),
        min_size=1, max_size=3,
    ),
    base=offsets,
)  # fmt: skip
def test_kafka_reads_our_data_batches(oracle, batches, base):
    data = b""
    expected = []
    for epoch, ts, recs in batches:
        keys = [k for k, _ in recs]
        values = [v for _, v in recs]
        data += record_batch.encode_batch(base, epoch, values, ts, keys=keys).data
        expected.append((base, epoch, ts, recs))
        base += len(recs)
    seen = kafka_reads(oracle, data)
    assert len(seen) == len(expected)
    for b, (base, epoch, ts, recs) in zip(seen, expected):
        assert (b["baseOffset"], b["lastOffset"], b["partitionLeaderEpoch"], b["magic"]) == (
            base, base + len(recs) - 1, epoch, 2)  # fmt: skip
        assert (b["compression"], b["timestampType"], b["transactional"], b["control"]) == (
            "none", "CreateTime", False, False)  # fmt: skip
        assert (b["producerId"], b["producerEpoch"], b["baseSequence"]) == (-1, -1, -1)
        assert (b["maxTimestamp"], b["count"]) == (ts, len(recs))
        assert [(r["offset"], r["timestamp"], r["key"], r["value"], r["headers"])
                for r in b["records"]] == [
            (base + i, ts, hex_or_none(k), hex_or_none(v), []) for i, (k, v) in enumerate(recs)
        ]  # fmt: skip


@SETTINGS
@given(
    data=st.data(),
    kinds=st.lists(st.sampled_from(sorted(CONTROLS)), min_size=1, max_size=3),
    base=offsets, epoch=epochs, ts=timestamps,
)  # fmt: skip
def test_kafka_reads_our_control_batches(oracle, data, kinds, base, epoch, ts):
    messages = [data.draw(control_message(CONTROLS[k][1])) for k in kinds]
    bodies = [codec.encode(m, 0) for m in messages]
    batch = record_batch.encode_control_batch(
        base, epoch, [(CONTROLS[k][0], body) for k, body in zip(kinds, bodies)], ts
    )
    (b,) = kafka_reads(oracle, batch.data)
    assert b["control"] and b["lastOffset"] == base + len(kinds) - 1
    assert b["partitionLeaderEpoch"] == epoch
    assert [(r["controlTypeName"], r["value"]) for r in b["records"]] == [
        (k, body.hex()) for k, body in zip(kinds, bodies)
    ]
    # and each body is the message to Kafka's own class at version 0
    answers = oracle.many([
        {"op": "read", "kind": "data", "name": CONTROLS[k][1], "version": 0, "hex": body.hex()}
        for k, body in zip(kinds, bodies)
    ])  # fmt: skip
    for k, body, m, a in zip(kinds, bodies, messages, answers):
        assert a["ok"], f"{k}: {a.get('error')}"
        assert a["hex"] == body.hex()
        assert a["json"] == to_kafka_json(m, 0)


# ---------------------------------------------------------------------------------- Kafka -> ours

producers = st.one_of(
    st.just({}),
    st.builds(lambda pid, pe, seq: {"producerId": pid, "producerEpoch": pe, "baseSequence": seq},
              st.integers(0, 2**62), st.integers(0, 2**15 - 1), st.integers(0, 2**30)),
    st.builds(lambda pid, pe, seq: {"producerId": pid, "producerEpoch": pe, "baseSequence": seq,
                                    "transactional": True},
              st.integers(0, 2**62), st.integers(0, 2**15 - 1), st.integers(0, 2**30)),
)  # fmt: skip
headers = st.lists(
    st.fixed_dictionaries({"key": st.text(max_size=8), "value": nbytes}), max_size=3
)
records = st.lists(st.tuples(st.integers(0, 10**6), nbytes, nbytes, headers),
                   min_size=1, max_size=6)  # fmt: skip


@SETTINGS
@given(base=offsets, epoch=epochs, ts=timestamps, recs=records, producer=producers,
       log_append=st.booleans())  # fmt: skip
def test_we_read_kafka_data_batches(oracle, base, epoch, ts, recs, producer, log_append):
    spec = {
        "baseOffset": base, "partitionLeaderEpoch": epoch, "timestamp": ts,
        "logAppendTime": log_append, **producer,
        "records": [
            {"offset": base + i, "timestamp": ts + d, "key": hex_or_none(k),
             "value": hex_or_none(v),
             "headers": [{"key": h["key"], "value": hex_or_none(h["value"])} for h in hs]}
            for i, (d, k, v, hs) in enumerate(recs)
        ],
    }  # fmt: skip
    data = bytes.fromhex(oracle.ok({"op": "batches_build", "batches": [spec]})["hex"])
    (b,) = record_batch.decode_batches(data)
    (k,) = kafka_reads(oracle, data)
    assert (b.base_offset, b.last_offset, b.epoch, b.is_control) == (
        base, base + len(recs) - 1, epoch, False)  # fmt: skip
    max_ts = ts if log_append else ts + max(r[0] for r in recs)
    assert b.max_timestamp == k["maxTimestamp"] == max_ts
    assert b.keys == tuple(r[1] for r in recs)
    assert b.records == tuple(r[2] for r in recs)
    assert b.data == data
    # the header fields we do not model are where RecordBatch v2 puts them
    pid, pepoch, seq = struct.unpack_from(">qhi", data, 43)
    assert (pid, pepoch, seq) == (k["producerId"], k["producerEpoch"], k["baseSequence"])
    assert (pid, pepoch, seq) == (producer.get("producerId", -1),
                                  producer.get("producerEpoch", -1),
                                  producer.get("baseSequence", -1))  # fmt: skip
    assert k["transactional"] == producer.get("transactional", False)


@SETTINGS
@given(data=st.data(), kind=st.sampled_from(sorted(CONTROLS) + sorted(END_TXN)),
       base=offsets, epoch=epochs, ts=timestamps)  # fmt: skip
def test_we_read_kafka_control_batches(oracle, data, kind, base, epoch, ts):
    spec = {"baseOffset": base, "partitionLeaderEpoch": epoch, "timestamp": ts, "control": kind}
    if kind in CONTROLS:
        msg = data.draw(control_message(CONTROLS[kind][1]))
        spec["message"] = to_kafka_json(msg, 0, records="base64")
    else:
        spec.update(producerId=data.draw(st.integers(0, 2**62)),
                    producerEpoch=data.draw(st.integers(0, 2**15 - 1)),
                    coordinatorEpoch=data.draw(st.integers(0, 2**31 - 1)))  # fmt: skip
    out = bytes.fromhex(oracle.ok({"op": "batches_build", "batches": [spec]})["hex"])
    (b,) = record_batch.decode_batches(out)
    assert (b.base_offset, b.last_offset, b.epoch, b.is_control) == (base, base, epoch, True)
    (key,) = b.keys
    (value,) = b.records
    if kind in CONTROLS:
        ctype, name = CONTROLS[kind]
        assert record_batch.control_type(key) == ctype
        assert codec.decode(name, 0, value) == msg
    else:
        assert record_batch.control_type(key) == END_TXN[kind]
        assert struct.unpack(">hi", value) == (0, spec["coordinatorEpoch"])


def test_we_refuse_a_kafka_gzip_batch_clearly(oracle):
    spec = {"baseOffset": 0, "compression": "gzip",
            "records": [{"offset": 0, "timestamp": 1, "key": None,
                         "value": "00" * 64}]}  # fmt: skip
    data = bytes.fromhex(oracle.ok({"op": "batches_build", "batches": [spec]})["hex"])
    assert kafka_reads(oracle, data)[0]["compression"] == "gzip"
    with pytest.raises(record_batch.CorruptRecordError, match="compressed"):
        record_batch.decode_batches(data)


def test_kafka_rejects_a_batch_whose_crc_we_break(oracle):
    data = bytearray(record_batch.encode_batch(5, 1, [b"v"], 7).data)
    data[-1] ^= 0xFF
    (b,) = oracle.ok({"op": "batches_read", "hex": bytes(data).hex()})["batches"]
    assert not b["valid"]
    assert "crc" in b["error"].lower(), b["error"]
    with pytest.raises(record_batch.CorruptRecordError, match="CRC"):
        record_batch.decode_batches(bytes(data))
