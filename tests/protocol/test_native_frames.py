"""The server's native per-frame path (``_cframes.c``) against its pure-Python reference in
frames.py: the same frames, end position and close decision for valid, truncated, mutated and
random input (the error text may differ; whether there is one may not)."""

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_rpc.protocol import frames
from kafka_rpc.server.connection import RequestContext

from .strategies import draw_cut_and_mutation

pytestmark = pytest.mark.skipif(
    not frames.NATIVE_FRAMES, reason="native frames disabled by KAFKA_RPC_PURE_PYTHON"
)
FUZZ = settings(suppress_health_check=list(HealthCheck), deadline=None)
LISTENER = object()


def test_extension_is_built_and_used():
    """CI builds the extension (``pip install -e .``); a silent fallback would hide a slow path."""
    if os.environ.get("KAFKA_RPC_PURE_PYTHON"):
        pytest.skip("pure Python requested")
    from kafka_rpc.protocol import _cframes

    assert frames.scan_frames is _cframes.scan_frames
    assert frames.response_frame is _cframes.response_frame


def both(buf: bytes, max_bytes: int = 1 << 20, max_frames: int = 1 << 20, ctx=tuple):
    args = (buf, 0, max_bytes, max_frames, frames.REQUEST_FLEX, ctx, LISTENER)
    native = frames.scan_frames(*args)
    reference = frames.scan_frames_py(*args)
    assert native[:2] == reference[:2]
    assert (native[2] is None) == (reference[2] is None), (native[2], reference[2])
    assert [type(f) for f in native[0]] == [type(f) for f in reference[0]]
    return native


def header(api_key: int, version: int, corr: int, client_id: bytes | None, tags: bytes) -> bytes:
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + client_id
    flex = frames.REQUEST_FLEX[api_key] if 0 <= api_key < len(frames.REQUEST_FLEX) else None
    out = struct.pack(">hhi", api_key, version, corr) + cid
    return out + tags if flex is not None and version >= flex else out


api_keys = st.sampled_from([k for k, f in enumerate(frames.REQUEST_FLEX) if f is not None])
tag_sections = st.one_of(
    st.just(b"\x00"),
    st.lists(st.tuples(st.integers(0, 300), st.binary(max_size=5)), max_size=3).map(
        lambda ts: (
            bytes([len(ts)])
            + b"".join(
                (bytes([t]) if t < 0x80 else bytes([t & 0x7F | 0x80, t >> 7])) + bytes([len(v)]) + v
                for t, v in ts
            )
        )
    ),
)
frames_st = st.lists(
    st.tuples(
        st.one_of(api_keys, st.integers(-3, 120)),
        st.integers(-1, 20),
        st.integers(-(2**31), 2**31 - 1),
        st.one_of(st.none(), st.binary(max_size=8), st.text(max_size=4).map(str.encode)),
        tag_sections,
        st.binary(max_size=12),
    ),
    min_size=1,
    max_size=6,
)


def wire(parts) -> bytes:
    out = b""
    for key, version, corr, cid, tags, body in parts:
        payload = header(key, version, corr, cid, tags) + body
        out += struct.pack(">i", len(payload)) + payload
    return out


@FUZZ
@given(frames_st, st.integers(1, 8), st.integers(8, 64))
def test_same_frames_as_reference(parts, max_frames, max_bytes):
    buf = wire(parts)
    both(buf, max_frames=max_frames)
    both(buf, max_bytes=max_bytes)
    both(buf, ctx=RequestContext)


@FUZZ
@given(frames_st, st.data())
def test_truncated_and_mutated_input(parts, data):
    cut, mutated = draw_cut_and_mutation(data, wire(parts))
    both(cut)
    both(mutated)


@FUZZ
@given(st.binary(max_size=64))
def test_random_bytes(buf):
    both(buf)


def test_context_fields_and_copies():
    one = struct.pack(">hhi", 18, 3, 9) + b"\x00\x03cli\x00" + b"\x03py\x041.0\x00"
    buf = struct.pack(">i", len(one)) + one
    (ctx,), end, err = both(buf, ctx=RequestContext)
    assert (end, err) == (len(buf), None)
    assert (ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.client_id) == (18, 3, 9, "cli")
    assert ctx.listener is LISTENER and ctx[5] is buf  # a frame that is all of buf: no copy
    two, end, err = both(buf + buf + buf[:7])
    assert end == 2 * len(buf) and err is None and two[0][5] == buf and two[0][5] is not buf
    assert [f[6] for f in two] == [ctx[6], ctx[6]]


def test_close_reasons():
    ok = struct.pack(">hhi", 18, 0, 1) + b"\xff\xff"
    good = struct.pack(">i", len(ok)) + ok
    for bad in (
        struct.pack(">i", -1),  # negative size
        struct.pack(">i", 101),  # above max_bytes
        struct.pack(">i", 4) + b"\x00\x12\x00\x00",  # truncated header
        struct.pack(">i", 10) + struct.pack(">hhih", 9999, 0, 1, -1),  # unknown api key
        struct.pack(">i", 10) + struct.pack(">hhih", 18, 0, 1, -2),  # bad client id length
        struct.pack(">i", 12) + struct.pack(">hhih", 18, 0, 1, 2) + b"\xff\xfe",  # not UTF-8
        struct.pack(">i", 10) + struct.pack(">hhih", 18, 3, 1, -1),  # v2 header, no tag count
    ):
        got, end, err = both(good + bad, max_bytes=100)
        assert len(got) == 1 and end == len(good) and err, bad


@FUZZ
@given(st.integers(-(2**31), 2**31 - 1), st.booleans(), st.binary(max_size=40))
def test_response_frame(corr, v1, body):
    assert frames.response_frame(corr, v1, body) == frames.response_frame_py(corr, v1, body)
