"""RecordBatch v2 decoding (``kafka_rpc.protocol.record_batch``): our batches and batches built by
an independent encoder (kafka-python's ``DefaultRecordBatchBuilder``: record timestamps, offset
deltas and headers of any size) decode to the same records, and corrupted batches raise
CorruptRecordError and nothing else."""

from __future__ import annotations

import struct

import pytest
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


def _independent_batch(records) -> bytes:
    """``records`` ((timestamp, key, value, headers) each) as one batch by kafka-python's
    encoder, offsets spaced out so offset deltas take several varint bytes too."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 24)
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(i * 100, 1_700_000_000_000 + ts, key, value, headers)
    return bytes(builder.build())


@given(base=st.integers(0, 2**40), records=st.lists(record, min_size=1, max_size=40))
def test_batches_of_an_independent_encoder_decode(base, records):
    raw = _independent_batch(records)
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


# ------------------------------------------------------- native records (_crecords.c) = reference
from kafka_rpc.protocol import record_batch as rb  # noqa: E402
from tests.protocol.native_rule import PURE_PYTHON, native_tests  # noqa: E402

native = native_tests(rb.NATIVE_RECORDS, "_crecords")


def test_native_records_extension_is_built_and_used():
    """CI builds the extension (``pip install -e .``): a silent fallback would skip every
    native-vs-reference test below and hide a slow path."""
    if PURE_PYTHON:
        pytest.skip("pure Python requested")
    from kafka_rpc.protocol import _crecords

    assert rb._native is _crecords and rb.NATIVE_RECORDS


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except CorruptRecordError as e:
        return ("corrupt", str(e))
    except ValueError as e:
        return ("value", str(e))


@native
@given(values=st.lists(blob, max_size=300), data=st.data())
def test_native_records_encode_as_the_reference(values, data):
    keys = data.draw(st.one_of(st.none(), st.lists(blob, min_size=len(values),
                                                   max_size=len(values))))  # fmt: skip
    assert rb._native.encode_records(keys, values) == bytes(rb._records_py(keys, values))
    # bytes-like values are accepted the same way
    mixed = [bytearray(v) if v is not None else None for v in values]
    assert rb._native.encode_records(None, mixed) == bytes(rb._records_py(None, mixed))


@native
def test_native_records_reject_keys_of_another_length():
    assert _outcome(rb._native.encode_records, [b"k"], [b"a", b"b"])[0] == "value"
    assert _outcome(rb._records_py, [b"k"], [b"a", b"b"])[0] == "value"


@native
@given(base=st.integers(0, 2**40), records=st.lists(record, min_size=1, max_size=40))
def test_native_records_decode_an_independent_encoders_batch_as_the_reference(base, records):
    raw = _independent_batch(records)
    args = (raw, 61, len(raw), len(records))
    assert _outcome(rb._native.decode_records, *args) == _outcome(rb._decode_records_py, *args)


@native
@settings(max_examples=1000)
@given(
    values=st.lists(blob, min_size=1, max_size=10),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    count_delta=st.integers(-2, 2),
    cut=st.integers(0, 12),
)
def test_native_records_meet_damage_as_the_reference(values, flips, count_delta, cut):
    """Damaged record bytes, a wrong record count and a short section: the native decoder
    answers what the reference answers, the same records or the same error message."""
    data = bytearray(encode_batch(0, 1, values, 0).data)
    for pos, byte in flips:
        data[61 + pos % (len(data) - 61)] = byte
    raw = bytes(data)
    args = (raw, 61, max(61, len(raw) - cut), max(0, len(values) + count_delta))
    assert _outcome(rb._native.decode_records, *args) == _outcome(rb._decode_records_py, *args)


@native
@given(st.binary(max_size=64), st.integers(0, 5))
def test_native_records_read_any_bytes_as_the_reference(raw, count):
    """Arbitrary bytes (long varints, lengths past 64 bits, negative lengths, header runs)."""
    args = (raw, 0, len(raw), count)
    assert _outcome(rb._native.decode_records, *args) == _outcome(rb._decode_records_py, *args)


@native
@pytest.mark.parametrize(
    "raw",
    [
        b"\xff" * 10 + b"\x01",  # a varint longer than 10 bytes
        b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # a length past 64 bits (positive)
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # ... and negative
        b"\x1a\x00\x00\x00\xfe" + b"\xff" * 8 + b"\x7f",  # a key length past 64 bits
        b"\x1a\x00\x00\x00\xff" + b"\xff" * 8 + b"\x7f",  # ... negative: a null key
        b"\x14\x00\x00\x00\x01\x01\x02\x04AA\x01",  # one header (key "AA", null value)
        b"\x16\x00\x00\x00\x01\x01\x02\xc8\x01AA\x01",  # a header key past the record
    ],
)
def test_native_records_edge_varints_as_the_reference(raw):
    for count in (1, 2):
        args = (raw, 0, len(raw), count)
        assert _outcome(rb._native.decode_records, *args) == _outcome(rb._decode_records_py, *args)
