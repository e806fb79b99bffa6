"""Hand-checked golden bytes (Kafka's framing and headers, and our new RPCs) and the
codec rules that golden bytes pin down: varints, string limits, nullability, absent and tagged
fields, unknown tags, record framing."""

from __future__ import annotations

import uuid

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import (
    BufferUnderflow,
    DecodeError,
    EncodeError,
    InvalidLength,
    UnsupportedVersionError,
)
from kafka_rpc.protocol.primitives import read_uvarint, uvarint_bytes


def hx(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


def M(name):
    return codec.message_class(name)


def mod(name):
    return codec.module(name)


# ---------------------------------------------------------------- reference section F
def test_f1_api_versions_v3_request_header_and_body():
    header = M("RequestHeader")(request_api_key=18, request_api_version=3, correlation_id=7,
                                client_id="cli")  # fmt: skip
    body = M("ApiVersionsRequest")(client_software_name="py", client_software_version="1.0")
    payload = codec.encode(header, 2) + codec.encode(body, 3)
    assert len(payload) == 0x16
    assert payload == hx("0012 0003 00000007 0003 636c69 00") + hx("03 7079 04 312e30 00")
    assert codec.decode("RequestHeader", 2, payload) == header


def test_f2_unsupported_api_versions_reply_body():
    r = M("ApiVersionsResponse")(
        error_code=35,
        api_keys=(mod("ApiVersionsResponse").ApiVersion(api_key=18, min_version=0, max_version=4),),
    )
    assert codec.encode(r, 0) == hx("0023 00000001 0012 0000 0004")


def test_f3_allocate_producer_ids_response():
    r = M("AllocateProducerIdsResponse")(producer_id_start=1000, producer_id_len=1000)
    assert codec.encode(r, 0) == hx("00000000 0000 00000000000003e8 000003e8 00")


def test_f4_partition_change_record_framed():
    rec = M("PartitionChangeRecord")(partition_id=0, topic_id=uuid.UUID(int=0), isr=(1, 2),
                                     leader=3)  # fmt: skip
    data = codec.encode_record(rec, 0)
    assert data == (
        hx("01 05 00") + hx("00000000") + bytes(16) + hx("02")
        + hx("00 09 03 00000001 00000002") + hx("01 04 00000003")
    )  # fmt: skip
    back, version = codec.decode_record(data)
    assert (back, version) == (rec, 0)
    with pytest.raises(DecodeError, match="garbage"):
        codec.decode_record(data + b"\x00")
    with pytest.raises(DecodeError, match="frame version"):
        codec.decode_record(b"\x00" + data[1:])
    # the same again (the reader of type 5 v0 is now cached: the short path) and with the type
    # and version as longer (non-minimal) uvarints (the full path)
    assert codec.decode_record(data) == (rec, 0)
    with pytest.raises(DecodeError, match="garbage"):
        codec.decode_record(data + b"\x00")
    with pytest.raises(DecodeError):
        codec.decode_record(data[:-1])
    assert codec.decode_record(hx("01 85 00 80 00") + data[3:]) == (rec, 0)


def test_f5_request_header_sizes():
    h = M("RequestHeader")(request_api_key=10, request_api_version=1, correlation_id=10,
                           client_id="")  # fmt: skip
    assert codec.encode(h, 1) == hx("000a 0001 0000000a 0000")
    h3 = M("RequestHeader")(request_api_key=10, request_api_version=3, correlation_id=10,
                            client_id="")  # fmt: skip
    assert codec.encode(h3, 2) == hx("000a 0003 0000000a 0000 00")
    # Null client id: int16 -1 even in header v2 (field-level flexibleVersions "none").
    hn = M("RequestHeader")(request_api_key=10, request_api_version=3, correlation_id=10,
                            client_id=None)  # fmt: skip
    assert codec.encode(hn, 2) == hx("000a 0003 0000000a ffff 00")


# ---------------------------------------------------------------- our new RPCs, by hand
def test_find_coordinator_v7_batch_key():
    key = "write:AAAAAAAAAAAAAAAAAAAAAQ:0"
    assert len(key) == 30
    r = M("FindCoordinatorRequest")(key_type=3, coordinator_keys=(key,))
    assert codec.encode(r, 7) == hx("03 02 1f") + key.encode() + hx("00")
    # v7 has the v4+ layout: the single Key field is gone; setting it is an error there.
    with pytest.raises(UnsupportedVersionError, match="key"):
        codec.encode(M("FindCoordinatorRequest")(key="g", key_type=3), 7)


def test_commit_batches_request_bytes():
    m = mod("CommitBatchesRequest")
    part = m.CommitBatchesTopicPartition(
        partition_index=2, object_key="o", byte_offset=16, size=100, base_offset=0,
        last_offset=9, batch_max_timestamp=-1, message_timestamp_type=1, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, last_sequence=-1,
    )  # fmt: skip
    t = m.CommitBatchesTopic(topic_id=uuid.UUID(int=1), partitions=(part,))
    r = m.CommitBatchesRequest(broker_id=5, batches=(m.Batches(topics=(t,)),))
    expected = (
        hx("00000005")                      # BrokerId
        + hx("02") + hx("02")               # Batches[1], Topics[1]
        + bytes(15) + hx("01")              # TopicId 00..01
        + hx("02")                          # Partitions[1]
        + hx("00000002")                    # PartitionIndex
        + hx("02 6f")                       # ObjectKey "o"
        + hx("00000010")                    # ByteOffset int32
        + hx("0000000000000064")            # Size int64
        + hx("0000000000000000")            # BaseOffset
        + hx("0000000000000009")            # LastOffset
        + hx("ffffffffffffffff")            # BatchMaxTimestamp
        + hx("01")                          # MessageTimestampType
        + hx("ffffffffffffffff") + hx("ffff") + hx("ffffffff") + hx("ffffffff")
        + hx("00")                          # partition tagged section
        + hx("00") + hx("00") + hx("00")    # topic, batch, message tagged sections
    )  # fmt: skip
    assert codec.encode(r, 0) == expected
    assert codec.decode("CommitBatchesRequest", 0, expected) == r


# ---------------------------------------------------------------- primitive rules
@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (63, "3f"), (64, "40"), (127, "7f"), (128, "8001"), (300, "ac02"),
     (8191, "ff3f"), (8192, "8040"), (1048576, "808040"), (2**31 - 1, "ffffffff07"),
     (-1, "ffffffff0f"), (-(2**31), "8080808008")],
)  # fmt: skip
def test_uvarint_vectors(value, encoded):
    assert uvarint_bytes(value) == hx(encoded)
    assert read_uvarint(hx(encoded), 0) == (value, len(hx(encoded)))


def test_uvarint_overlong_and_truncated():
    with pytest.raises(InvalidLength):
        read_uvarint(hx("ffffffffff01"), 0)
    with pytest.raises(BufferUnderflow):
        read_uvarint(hx("ff"), 0)


def test_string_length_limit_counts_utf8_bytes():
    ok = "é" * (32767 // 2)  # 32766 bytes
    r = M("FindCoordinatorRequest")(key=ok)
    assert codec.decode("FindCoordinatorRequest", 0, codec.encode(r, 0)).key == ok
    with pytest.raises(EncodeError, match="too long"):
        codec.encode(M("FindCoordinatorRequest")(key="é" * 16384), 0)  # 32768 bytes
    # A classic string length above 0x7fff on the wire is rejected by the reader.
    with pytest.raises(DecodeError):
        codec.decode("FindCoordinatorRequest", 0, hx("8000") + b"x" * 40000)


def test_compact_and_classic_nulls():
    r = M("FindCoordinatorResponse")(error_message=None)
    assert codec.encode(r, 1)[6:8] == hx("ffff")  # classic nullable string
    assert hx("00") in codec.encode(r, 3)
    with pytest.raises(EncodeError, match="null is not allowed"):
        codec.encode(M("FindCoordinatorResponse")(host=None), 1)
    # A null length for a non-nullable field is a decode error.
    with pytest.raises(DecodeError, match="non-nullable"):
        codec.decode("FindCoordinatorRequest", 0, hx("ffff"))


def test_bool_reads_any_nonzero_as_true():
    m = mod("VoteResponse")
    r = M("VoteResponse")(topics=(m.TopicData(topic_name="t", partitions=(
        m.PartitionData(vote_granted=True),)),))  # fmt: skip
    b = bytearray(codec.encode(r, 0))
    assert b[-4] == 1  # VoteGranted, then partition/topic/message tagged sections
    b[-4] = 2
    assert codec.decode("VoteResponse", 0, bytes(b)).topics[0].partitions[0].vote_granted is True


def test_absent_fields_ignorable_dropped_non_ignorable_raise():
    # ThrottleTimeMs is ignorable and absent in ApiVersions v0: silently dropped.
    r = M("ApiVersionsResponse")(throttle_time_ms=100)
    assert codec.encode(r, 0) == hx("0000 00000000")
    # Metadata v13 lacks the v14 partition StartOffset (not ignorable): writing it raises.
    m = mod("MetadataResponse")
    topic = m.MetadataResponseTopic(name="t", partitions=(
        m.MetadataResponsePartition(start_offset=7),))  # fmt: skip
    with pytest.raises(UnsupportedVersionError, match="start_offset"):
        codec.encode(M("MetadataResponse")(topics=(topic,)), 13)
    assert codec.decode("MetadataResponse", 14, codec.encode(M("MetadataResponse")(
        topics=(topic,)), 14)).topics[0].partitions[0].start_offset == 7  # fmt: skip


def test_tagged_fields_written_in_tag_order_and_unknown_tags_skipped():
    rec = M("PartitionChangeRecord")(
        topic_id=uuid.UUID(int=5), directories=(uuid.UUID(int=9),), eligible_leader_replicas=(4,)
    )
    body = codec.encode(rec, 2)
    # tags 6 (ELR) then 8 (Directories), although Directories is declared first.
    i6, i8 = body.index(hx("06 05 02 00000004")), body.index(hx("08 11 02"))
    assert i6 < i8
    # An unknown tag (tag 20, 2 bytes) is skipped by the reader.
    r = M("AllocateProducerIdsResponse")(producer_id_start=7, producer_id_len=3)
    data = codec.encode(r, 0)[:-1] + hx("01 14 02 abcd")
    assert codec.decode("AllocateProducerIdsResponse", 0, data) == r


def test_known_tag_at_wrong_version_is_rejected():
    # FetchSnapshot request v0: PartitionSnapshot's tag 0 (ReplicaDirectoryId) only exists v1+.
    m = mod("FetchSnapshotRequest")
    req = M("FetchSnapshotRequest")(topics=(m.TopicSnapshot(name="t", partitions=(
        m.PartitionSnapshot(partition=0),)),))  # fmt: skip
    data = bytearray(codec.encode(req, 0))
    # the partition's tagged section is the third-last byte: [..., part 00, topic 00, top 00]
    assert data[-3] == 0
    patched = bytes(data[:-3]) + hx("01 00 10") + bytes(16) + bytes(data[-2:])
    with pytest.raises(DecodeError, match="Tag 0 is not valid for version 0"):
        codec.decode("FetchSnapshotRequest", 0, patched)
    assert codec.decode("FetchSnapshotRequest", 1, patched).topics[0].partitions[0] \
        .replica_directory_id == uuid.UUID(int=0)  # fmt: skip


@pytest.mark.parametrize("readers", ["READERS", "PY_READERS"])
def test_a_known_tag_is_read_by_its_type_whatever_its_size(readers):
    # Kafka's generated readers read a known tag's field by its type and ignore the size; only an
    # unknown tag's size must fit (readUnknownTaggedField). Found by tests/kafka's oracle:
    # BrokerRegistrationChangeRecord v1, tag 0 (Fenced, int8) with size 0x6f, past the end.
    read = getattr(mod("BrokerRegistrationChangeRecord"), readers)[1]
    data = hx("0000d4da ffffff44fff74b52 02 00 6f 7e 01 01 cd")
    rec, end = read(data, 0)
    assert (rec.fenced, rec.in_controlled_shutdown, end) == (126, -51, len(data))
    with pytest.raises(BufferUnderflow, match="tagged field runs past the end"):
        read(hx("0000d4da ffffff44fff74b52 01 09 6f 7e"), 0)  # unknown tag 9


def test_tagged_nullable_with_non_null_default_written_as_null():
    # ApiVersions v3 tagged FinalizedFeaturesEpoch default -1: writes only when different.
    r = M("ApiVersionsResponse")(finalized_features_epoch=5)
    assert codec.encode(r, 3).endswith(hx("01 01 08 0000000000000005"))
    assert codec.encode(M("ApiVersionsResponse")(), 3).endswith(hx("00"))


def test_array_count_larger_than_remaining_is_rejected_before_allocation():
    # CoordinatorKeys compact count of 2**30 - 1 with two bytes left; a count that reads as a
    # negative Java int (length - 1 < 0) is a null, which this field does not allow.
    with pytest.raises(InvalidLength, match="Tried to allocate a collection of size"):
        codec.decode("FindCoordinatorRequest", 4, hx("00 8080808004 00 00"))
    with pytest.raises(DecodeError):
        codec.decode("FindCoordinatorRequest", 4, hx("00 feffffff0f 00"))


def test_tagged_nullable_array_null_and_empty_are_distinct():
    # PartitionRecord v2 EligibleLeaderReplicas: tagged, nullable, default null. Null is not
    # written at all; an empty array is (tag 1, compact count 1), and both read back as given.
    rec = M("PartitionRecord")(eligible_leader_replicas=None)
    assert codec.encode(rec, 2).endswith(hx("01 00"))  # empty Directories, no tagged fields
    assert codec.decode("PartitionRecord", 2, codec.encode(rec, 2)) == rec
    rec2 = M("PartitionRecord")(eligible_leader_replicas=())
    assert codec.encode(rec2, 2).endswith(hx("01 01 01 01 01"))  # 1 tag: tag 1, size 1, []
    assert codec.decode("PartitionRecord", 2, codec.encode(rec2, 2)).eligible_leader_replicas == ()


def test_unknown_version_and_name():
    with pytest.raises(UnsupportedVersionError):
        codec.encode(M("ApiVersionsResponse")(), 9)
    with pytest.raises(DecodeError):
        codec.decode("ApiVersionsResponse", 9, b"")
    with pytest.raises(DecodeError):
        codec.decode("NoSuchMessage", 0, b"")
