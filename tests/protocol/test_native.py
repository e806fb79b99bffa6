"""The native decoder (``kafka_rpc/protocol/_cdecode.c``) against the generated Python readers.

Both are driven by the same model: codegen emits Python ``read_vN`` functions and a program per
version that the C ``Reader`` runs. For every message and version we define, hypothesis-built
messages, their truncations and byte-mutations, and random bytes must give the *same* outcome
from both: equal messages with the same end offset, or the same exception class of the
documented DecodeError family.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_rpc.protocol import codec, primitives
from kafka_rpc.protocol.errors import BufferUnderflow, DecodeError, InvalidLength
from tests.protocol.native_rule import PURE_PYTHON, native_tests
from tests.protocol.strategies import draw_cut_and_mutation, message_strategy
from tests.protocol.test_fuzz import CASES, HOSTILE, IDS

pytestmark = native_tests(primitives.NATIVE_DECODER, "_cdecode")
FUZZ = settings(suppress_health_check=list(HealthCheck), deadline=None)


def test_extension_is_built_and_used():
    """CI builds the extension (``pip install -e .``); a silent fallback would hide a slow path."""
    if PURE_PYTHON:
        pytest.skip("pure Python requested")
    from kafka_rpc.protocol import _cdecode

    mod = codec.module("CommitBatchesRequest")
    assert all(isinstance(r, _cdecode.Reader) for r in mod.READERS.values())
    assert mod.PY_READERS[0] is mod.read_v0


def _outcome(reader, data):
    try:
        msg, end = reader(data, 0)
    except DecodeError as e:
        return ("error", type(e))
    return ("ok", type(msg), repr(msg), end)


def _same(mod, version, data):
    native = _outcome(mod.READERS[version], data)
    python = _outcome(mod.PY_READERS[version], data)
    assert native == python, f"native {native} != python {python} for {data.hex()}"
    return native


@pytest.mark.parametrize(("spec", "version"), CASES, ids=IDS)
def test_native_equals_python(spec, version):
    mod = codec.module(spec.name)

    @FUZZ
    @given(message_strategy(spec, version, mod), st.data())
    def check(msg, data):
        wire = codec.encode(msg, version)
        out = _same(mod, version, wire)
        assert out[0] == "ok" and out[3] == len(wire)
        # the decoded message re-encodes to the same bytes
        assert codec.encode(mod.READERS[version](wire)[0], version) == wire
        if wire:
            prefix, mutated = draw_cut_and_mutation(data, wire)
            assert _same(mod, version, prefix)[0] == "error"
            _same(mod, version, mutated)
        _same(mod, version, data.draw(st.binary(max_size=64)))

    check()


@pytest.mark.parametrize(("name", "version", "data"), HOSTILE)
def test_hostile_frames_same_error(name, version, data):
    out = _same(codec.module(name), version, data)
    assert out[0] == "error"


def test_error_classes():
    mod = codec.module("FindCoordinatorRequest")
    r = mod.READERS[6]
    with pytest.raises(InvalidLength, match="collection of size"):
        r(bytes([0, 0xFE, 0xFF, 0xFF, 0xFF, 0x07]))
    with pytest.raises(DecodeError, match="serialized as null"):  # uvarint 2**32-2 is int -2
        r(bytes([0, 0xFE, 0xFF, 0xFF, 0xFF, 0x0F]))
    with pytest.raises(BufferUnderflow):
        r(b"")
    with pytest.raises(InvalidLength, match="varint"):
        r(bytes([0]) + bytes([0xFF] * 6))
    with pytest.raises(DecodeError, match="UTF-8"):
        r(bytes([0, 2, 2, 0xFF, 0]))
    with pytest.raises(BufferUnderflow, match="start position"):
        r(b"\x00\x01\x00", 4)
    with pytest.raises(TypeError):
        r("not bytes")


def test_decodes_from_any_buffer_and_offset():
    msg = codec.message_class("FindCoordinatorRequest")(key_type=3, coordinator_keys=("a", "b"))
    wire = codec.encode(msg, 7)
    r = codec.module("FindCoordinatorRequest").READERS[7]
    for buf in (b"xyz" + wire, bytearray(b"xyz" + wire), memoryview(b"xyz" + wire)):
        assert r(buf, 3) == (msg, 3 + len(wire))


def test_uuids_are_uuid_objects():
    """kio maps the zero UUID to None; we keep uuid.UUID (Kafka's Uuid.ZERO_UUID) everywhere."""
    mod = codec.module("DeleteDisklessTopicsRequest")
    for tid in (uuid.UUID(int=0), uuid.uuid4()):
        msg = mod.MESSAGE(topics=(mod.DeleteDisklessTopic(topic_id=tid),))
        got = codec.decode("DeleteDisklessTopicsRequest", 0, codec.encode(msg, 0))
        u = got.topics[0].topic_id
        assert u == tid and type(u) is uuid.UUID and hash(u) == hash(tid) and str(u) == str(tid)


def test_malformed_programs_rejected():
    from kafka_rpc.protocol import _cdecode

    cls = codec.message_class("FindCoordinatorRequest")
    good = codec.module("FindCoordinatorRequest")._P7_FindCoordinatorRequest
    _cdecode.Reader(good)
    with pytest.raises(ValueError):
        _cdecode.Reader(good[:6])
    with pytest.raises(ValueError, match="slots"):
        _cdecode.Reader(good[:6] + ((),))  # a slot left unwritten
    with pytest.raises(TypeError, match="no slot"):
        _cdecode.Reader((cls, 7, True, (("nope", 2, 0, None, "x"),), (), (), good[6]))
    with pytest.raises(ValueError, match="malformed field"):
        _cdecode.Reader((cls, 7, True, (("key_type", 99, 0, None, "x"),), (), (), good[6]))
