"""Golden bytes for framing and headers (Kafka's ``RequestHeader``, ``ResponseHeader``)."""

import pytest

from kafka_rpc.protocol import codec, frames
from kafka_rpc.server.connection import unsupported_api_versions_response

F1 = bytes.fromhex("000000160012000300000007000363 6c690003707904312e3000".replace(" ", ""))


def test_f1_api_versions_v3_request_parses():
    assert frames.parse_request_header(F1, 4) == (18, 3, 7, "cli", 18)
    req = codec.decode("ApiVersionsRequest", 3, F1[18:])
    assert (req.client_software_name, req.client_software_version) == ("py", "1.0")


def test_f1_request_encodes():
    hdr = frames.request_header_bytes(18, 3, 7, "cli")
    req = codec.message_class("ApiVersionsRequest")(
        client_software_name="py", client_software_version="1.0"
    )
    assert frames.frame(hdr + codec.encode(req, 3)) == F1


def test_f2_unsupported_api_versions_answer():
    assert unsupported_api_versions_response(7, 0, 4) == bytes.fromhex(
        "0000001000000007002300000001001200000004"
    )


def test_f5_headers():
    assert frames.request_header_bytes(10, 1, 10, "") == bytes.fromhex("000a00010000000a0000")
    assert frames.request_header_bytes(10, 3, 10, "") == bytes.fromhex("000a00030000000a000000")
    assert frames.parse_request_header(bytes.fromhex("000a00010000000a0000")) == (10, 1, 10, "", 10)
    assert frames.parse_request_header(bytes.fromhex("000a00030000000a000000")) == (
        10,
        3,
        10,
        "",
        11,
    )


def test_null_client_id_is_empty():
    assert frames.parse_request_header(bytes.fromhex("000a00010000000affff"))[3] == ""


def test_header_versions():
    assert frames.request_header_version(18, 2) == 1
    assert frames.request_header_version(18, 9) == 2  # threshold rule above the max
    assert frames.response_header_version(18, 3) == 0  # ApiVersions: always v0
    assert frames.response_header_version(10, 3) == 1
    assert frames.response_header_version(10, 2) == 0


def test_unknown_api_key_and_truncation():
    with pytest.raises(frames.UnknownApiKeyError):
        frames.parse_request_header(bytes.fromhex("7fff00000000000a0000"))
    with pytest.raises(frames.HeaderError):
        frames.parse_request_header(bytes.fromhex("000a0001"))
    with pytest.raises(frames.HeaderError):
        frames.parse_request_header(bytes.fromhex("000a00010000000a0005ab"))
    with pytest.raises(Exception, match="tagged|truncated|varint"):
        frames.parse_request_header(bytes.fromhex("000a00030000000a0000"))
