"""The hot-path positional constructors (``kafka_rpc._frozen``) build ordinary frozen instances."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass

import pytest

from kafka_rpc._frozen import frozen_constructor
from kafka_rpc.coordinator.api import (
    CommitBatchRequest,
    CommitBatchResponse,
    Errors,
    TopicIdPartition,
    new_commit_batch_request,
    new_commit_batch_response,
    new_topic_id_partition,
)
from kafka_rpc.protocol import codec


def test_same_objects_as_the_dataclass_init():
    tid = uuid.uuid4()
    tp = new_topic_id_partition(tid, 3)
    assert type(tp) is TopicIdPartition and tp == TopicIdPartition(tid, 3)
    assert hash(tp) == hash(TopicIdPartition(tid, 3))
    args = (tp, 10, 20, 0, 9, 1234, 1, 7, 2, 5, 14, 2)
    r = new_commit_batch_request(*args)
    assert type(r) is CommitBatchRequest and r == CommitBatchRequest(*args)
    assert repr(r) == repr(CommitBatchRequest(*args)) and r.record_count == 10
    a = new_commit_batch_response(Errors.NONE, 5, 6, 7, True)
    assert a == CommitBatchResponse.duplicate(5, 6, 7)


def test_still_frozen():
    tp = new_topic_id_partition(uuid.uuid4(), 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tp.partition = 1  # type: ignore[misc]
    r = new_commit_batch_request(tp, 0, 1, 0, 0, -1, 0, -1, -1, -1, -1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.size = 2  # type: ignore[misc]
    # a new attribute fails exactly as on an __init__-built instance (no __dict__)
    for obj in (r, CommitBatchRequest(tp, 0, 1, 0, 0, -1, 0)):
        with pytest.raises((AttributeError, TypeError)):
            obj.other = 1  # type: ignore[attr-defined]
        assert not hasattr(obj, "__dict__")


def test_generated_wire_classes():
    cls = codec.module("CommitBatchesResponse").CommitBatchesTopicPartitionResults
    new = frozen_constructor(cls)
    assert new(1, 0, 5, 6, 7, True) == cls(
        partition_index=1, error_code=0, assigned_base_offset=5, log_append_time=6,
        log_start_offset=7, is_duplicate=True,
    )  # fmt: skip


def test_refuses_classes_it_cannot_build():
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True, weakref_slot=True)
    class WeakRef:
        a: int

    for cls in (Mutable, NoSlots, PostInit, WeakRef, int):
        with pytest.raises(TypeError):
            frozen_constructor(cls)


@pytest.mark.parametrize("native", [True, False], ids=["native", "twin"])
def test_both_constructions_agree(native, monkeypatch):
    """The native constructor (``_cdecode.Constructor``) and the Python twin build equal
    instances, and both refuse a wrong number of arguments."""
    from kafka_rpc.protocol import primitives

    if native and primitives.NATIVE_CONSTRUCTOR is None:
        pytest.skip("native decoder not built or disabled")
    if not native:
        monkeypatch.setattr(primitives, "NATIVE_CONSTRUCTOR", None)
    new = frozen_constructor(CommitBatchRequest)
    assert ("native" in repr(new)) == native
    tp = TopicIdPartition(uuid.uuid4(), 1)
    args = (tp, 10, 20, 0, 9, 1234, 1, 7, 2, 5, 14, 2)
    made = new(*args)
    assert type(made) is CommitBatchRequest and made == CommitBatchRequest(*args)
    assert hash(made) == hash(CommitBatchRequest(*args)) and repr(made) == repr(
        CommitBatchRequest(*args)
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.size = 1  # type: ignore[misc]
    for wrong in (args[:-1], (*args, 0)):
        with pytest.raises(TypeError):
            new(*wrong)
