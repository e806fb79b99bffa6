"""``kafka_rpc.broker.channel.error_codes`` (per-class plan of the fields worth reading) finds the
same ErrorCodes, in the same order, as a plain walk of every field, on hypothesis messages of
every response spec and version we define."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from kafka_rpc.broker.channel import error_codes
from kafka_rpc.protocol import codec
from tests.protocol.strategies import message_strategy
from tests.protocol.test_fuzz import CASES

RESPONSES = [(s, v) for s, v in CASES if s.name.endswith("Response")]


def _every_field(obj):
    """The reference: every field of every struct, arrays of anything."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "error_code":
            yield value
        elif isinstance(value, tuple):
            for x in value:
                yield from _every_field(x)
        elif dataclasses.is_dataclass(value):
            yield from _every_field(value)


@pytest.mark.parametrize(
    ("spec", "version"), RESPONSES, ids=[f"{s.name}-v{v}" for s, v in RESPONSES]
)
def test_error_codes_equal_a_walk_of_every_field(spec, version):
    mod = codec.module(spec.name)

    @settings(max_examples=15, suppress_health_check=list(HealthCheck), deadline=None)
    @given(message_strategy(spec, version, mod))
    def check(msg):
        assert error_codes(msg) == list(_every_field(msg))

    check()


def test_a_mutated_plan_is_caught():
    """The check above fails when the plan skips a field that holds codes."""
    from kafka_rpc.broker import channel

    m = codec.module("ListDisklessOffsetsResponse")
    part = m.ListDisklessOffsetsTopicPartitionResult(partition_index=0, error_code=16)
    resp = m.ListDisklessOffsetsResponse(
        responses=(m.ListDisklessOffsetsTopicResult(partitions=(part,)),)
    )
    assert error_codes(resp) == [16] == list(_every_field(resp))
    saved = dict(channel._CODE_FIELDS)
    try:
        channel._CODE_FIELDS[type(resp.responses[0])] = ()  # a plan that misses "partitions"
        assert error_codes(resp) != list(_every_field(resp))
    finally:
        channel._CODE_FIELDS.clear()
        channel._CODE_FIELDS.update(saved)
