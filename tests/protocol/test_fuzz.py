"""Decode fuzzing: random, truncated and mutated frames raise only the documented DecodeError
family (never IndexError, struct.error, MemoryError, a hang, or a crash), for every request and
response version we define. Includes the 6-byte frame that aborts kio's native reader."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen.model import load_dir
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import DecodeError
from tests.protocol.strategies import draw_cut_and_mutation, message_strategy
from tests.protocol.test_roundtrip import ROOT

SPECS = [s for s in load_dir(ROOT / "message_specs") if not s.removed]
CASES = [(s, v) for s in SPECS for v in s.valid_versions]
IDS = [f"{s.name}-v{v}" for s, v in CASES]
FUZZ = settings(suppress_health_check=list(HealthCheck), deadline=None)


def _decode_or_decode_error(name, version, data):
    try:
        msg, end = codec.decode_from(name, version, data)
    except DecodeError:
        return None
    assert 0 <= end <= len(data)
    return msg


@pytest.mark.parametrize(("spec", "version"), CASES, ids=IDS)
def test_random_bytes(spec, version):
    @FUZZ
    @given(st.binary(max_size=200))
    def check(data):
        _decode_or_decode_error(spec.name, version, data)

    check()


@pytest.mark.parametrize(("spec", "version"), CASES, ids=IDS)
def test_truncated_and_mutated(spec, version):
    mod = codec.module(spec.name)

    @FUZZ
    @given(message_strategy(spec, version, mod), st.data())
    def check(msg, data):
        wire = codec.encode(msg, version)
        if wire:
            prefix, mutated = draw_cut_and_mutation(data, wire)
            with pytest.raises(DecodeError):
                codec.decode_from(spec.name, version, prefix)
            _decode_or_decode_error(spec.name, version, mutated)

    check()


HOSTILE = [
    # compact array count 2**32 - 2: kio 0.6.5's native reader aborts the process on this.
    ("FindCoordinatorRequest", 6, bytes([0, 0xFE, 0xFF, 0xFF, 0xFF, 0x0F])),
    # classic array count 2**31 - 1 with nothing behind it.
    ("FindCoordinatorRequest", 0, bytes([0x7F, 0xFF]) + b"x"),
    ("MetadataRequest", 1, bytes([0x7F, 0xFF, 0xFF, 0xFF])),
    # compact string length 2**31 - 2.
    ("ApiVersionsRequest", 3, bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x07])),
    # tagged section claiming 2**31 - 1 fields, and a tagged field larger than the buffer.
    ("AllocateProducerIdsRequest", 0, bytes(12) + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x07])),
    ("AllocateProducerIdsRequest", 0, bytes(12) + bytes([0x01, 0x05, 0xFF, 0xFF, 0x03])),
    # overlong varint.
    ("ApiVersionsRequest", 3, bytes([0xFF] * 6)),
]


@pytest.mark.parametrize(("name", "version", "data"), HOSTILE)
def test_hostile_lengths_raise_decode_error(name, version, data):
    with pytest.raises(DecodeError):
        codec.decode(name, version, data)
