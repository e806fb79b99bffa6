"""RecordBatch v2 decoding (``kafka_rpc.protocol.record_batch``): our batches and batches built by
an independent encoder (kafka-python's ``DefaultRecordBatchBuilder``: record timestamps, offset
deltas and headers of any size) decode to the same records, and corrupted batches raise
CorruptRecordError and nothing else."""

from __future__ import annotations

import struct

from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafka_rpc.protocol.record_batch import CorruptRecordError, decode_batches, encode_batch

blob = st.one_of(st.none(), st.binary(max_size=300))


@given(
    base=st.integers(0, 2**40),
    values=st.lists(blob, min_size=1, max_size=80),
    data=st.data(),
)
def test_our_batches_round_trip(base, values, data):
    keys = data.draw(st.lists(blob, min_size=len(values), max_size=len(values)))
    b = encode_batch(base, 7, values, 1_700_000_000_000, keys=keys)
    (got,) = decode_batches(b.data)
    assert (got.base_offset, got.last_offset, got.epoch) == (base, base + len(values) - 1, 7)
    assert got.records == tuple(values) and got.keys == tuple(keys) and got.data == b.data


record = st.tuples(
    st.integers(0, 2**31),  # timestamp delta (ms): one to five varint bytes
    blob,
    blob,
    st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=40))),
             max_size=3),
)  # fmt: skip


@given(base=st.integers(0, 2**40), records=st.lists(record, min_size=1, max_size=40))
def test_batches_of_an_independent_encoder_decode(base, records):
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 24)
    for i, (ts, key, value, headers) in enumerate(records):
        # offsets spaced out so offset deltas take several varint bytes too
        builder.append(i * 100, 1_700_000_000_000 + ts, key, value, headers)
    raw = bytes(builder.build())
    raw = struct.pack(">q", base) + raw[8:]  # the base offset is outside the CRC
    (got,) = decode_batches(raw)
    assert got.records == tuple(r[2] for r in records)
    assert got.keys == tuple(r[1] for r in records)


@settings(max_examples=300)
@given(
    values=st.lists(blob, min_size=1, max_size=10),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_a_corrupted_batch_with_a_fixed_crc_raises_only_corrupt_record_error(values, flips):
    """Bytes of the records are changed and the CRC recomputed, so the record parser (not the
    CRC check) meets the damage: it must answer CorruptRecordError or decode something."""
    data = bytearray(encode_batch(0, 1, values, 0).data)
    body = 61  # BATCH_OVERHEAD: the records start here
    for pos, byte in flips:
        if len(data) > body:
            data[body + pos % (len(data) - body)] = byte
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))
    try:
        decode_batches(bytes(data))
    except CorruptRecordError:
        pass
