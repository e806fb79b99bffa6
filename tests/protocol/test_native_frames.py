"""The server's native per-frame path (``_cframes.c``) against its pure-Python reference in
frames.py: the same frames, end position and close decision for valid, truncated, mutated and
random input (the error text may differ; whether there is one may not)."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_rpc.api.context import RequestContext
from kafka_rpc.protocol import codec, frames

from .native_rule import PURE_PYTHON, native_tests
from .strategies import draw_cut_and_mutation, message_strategy
from .test_fuzz import SPECS

pytestmark = native_tests(frames.NATIVE_FRAMES, "_cframes")
FUZZ = settings(suppress_health_check=list(HealthCheck), deadline=None)
LISTENER = object()


def test_extension_is_built_and_used():
    """CI builds the extension (``pip install -e .``); a silent fallback would hide a slow path."""
    if PURE_PYTHON:
        pytest.skip("pure Python requested")
    from kafka_rpc.protocol import _cframes

    assert frames.scan_frames is _cframes.scan_frames
    assert frames.response_frame is _cframes.response_frame
    assert frames.dispatch is _cframes.dispatch


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


# ------------------------------------------------------------------ dispatch: serving in C
# A synthetic table that reaches every outcome: the body's first byte chooses it. Readers return
# the body; 0xEE fails to decode, 0xDD makes the handler raise, 0xCC makes the writer raise,
# 0x01 makes the handler return encoded bytes; anything else is written by the writer.
class Calls(list):
    def reader(self, frame, pos):
        body = bytes(frame[pos:])
        if body[:1] == b"\xee":
            raise ValueError("bad body")
        return body, len(frame)

    def handler(self, ctx, request):
        self.append((tuple(ctx[:4]), request))
        if request[:1] == b"\xdd":
            raise KeyError("handler failed")
        return request if request[:1] == b"\x01" else bytearray(request)

    def writer(self, result, w):
        if result[:1] == b"\xcc":
            raise RuntimeError("writer failed")
        w += result


class Metrics(list):
    def observe(self, api_key, version, seconds, error):
        assert seconds >= 0.0 and error is False
        self.append((api_key, version))


def synthetic_table(calls: Calls) -> tuple:
    table = [None] * 40
    for key, (lo, hi, flex) in {18: (0, 4, 1 << 30), 3: (1, 12, 9), 10: (0, 6, 3)}.items():
        n = hi - lo + 1
        table[key] = (lo, hi, (calls.reader,) * n, calls.handler, flex, (calls.writer,) * n)
    return tuple(table)


def serve_all(fn, buf: bytes, max_frames: int, metrics: bool, max_bytes: int = 1 << 20):
    """Drive ``fn`` as the connection does: after a stop, resume past the stopped frame."""
    calls, m = Calls(), Metrics() if metrics else None
    table, pos, log = synthetic_table(calls), 0, []
    while True:
        out: list = []
        pos, stop, error = fn(buf, pos, max_bytes, max_frames, frames.REQUEST_FLEX,
                              RequestContext, LISTENER, table, out, m)  # fmt: skip
        log.append(([bytes(d) for d in out], [type(d) for d in out], pos, error is None))
        if stop is None:
            break
        kind, ctx, request, exc = stop
        assert type(ctx) is RequestContext
        log.append((kind, tuple(ctx), request, type(exc), str(exc) if exc else None))
    return log, list(calls), m


def dispatch_both(buf: bytes, max_frames: int = 1 << 20, metrics: bool = False, **kw):
    native = serve_all(frames.dispatch, buf, max_frames, metrics, **kw)
    reference = serve_all(frames.dispatch_py, buf, max_frames, metrics, **kw)
    assert native == reference
    return native


bodies = st.one_of(
    st.binary(max_size=12),
    st.sampled_from([b"\xee", b"\xdd\x00", b"\xcc", b"\x01ok"]).flatmap(
        lambda p: st.binary(max_size=4).map(lambda tail: p + tail)
    ),
)
served = st.lists(
    st.tuples(
        st.sampled_from([18, 3, 10, 0, 19, 60]),  # three in the table, three not
        st.integers(-1, 14),
        st.integers(-(2**31), 2**31 - 1),
        st.one_of(st.none(), st.binary(max_size=6)),
        tag_sections,
        bodies,
    ),
    min_size=1,
    max_size=8,
)


@FUZZ
@given(served, st.integers(1, 9), st.booleans())
def test_dispatch_same_as_reference(parts, max_frames, metrics):
    dispatch_both(wire(parts), max_frames=max_frames, metrics=metrics)


@FUZZ
@given(served, st.data())
def test_dispatch_truncated_and_mutated_input(parts, data):
    cut, mutated = draw_cut_and_mutation(data, wire(parts))
    dispatch_both(cut)
    dispatch_both(mutated, max_bytes=data.draw(st.integers(0, 80)))


def test_dispatch_outcomes():
    """Every kind of stop, in order, with the responses before each; the walk resumes after it."""

    def one(key, version, corr, body):
        return wire([(key, version, corr, b"c", b"\x00", body)])

    buf = b"".join([
        one(18, 3, 1, b"\x01body"),  # handler returned bytes: header v0 (flex never)
        one(3, 9, 2, b"obj"),  # written by the writer, header v1 (flex from 9)
        one(3, 13, 3, b""),  # version out of range: kind 0
        one(19, 0, 4, b""),  # not in the table: kind 0
        one(10, 1, 5, b"\xee"),  # reader raised: kind 1
        one(10, 1, 6, b"\xdd"),  # handler raised: kind 2
        one(10, 4, 7, b"\xcc"),  # writer raised: kind 2
        one(18, 0, 8, b"end"),
    ])  # fmt: skip
    log, calls, m = dispatch_both(buf, metrics=True)
    out, types_ = log[0][0], log[0][1]
    assert out == [
        struct.pack(">ii", 9, 1) + b"\x01body",
        struct.pack(">iib", 8, 2, 0) + b"obj",
    ]
    assert types_ == [bytes, bytearray]
    kinds = [(s[0], s[1][2], s[3]) for s in log[1::2]]
    assert kinds == [(0, 3, type(None)), (0, 4, type(None)), (1, 5, ValueError),
                     (2, 6, KeyError), (2, 7, RuntimeError)]  # fmt: skip
    assert log[-1][0] == [struct.pack(">ii", 7, 8) + b"end"] and log[-1][2] == len(buf)
    assert [c[0][2] for c in calls] == [1, 2, 6, 7, 8]  # each handler ran once, in order
    assert m == [(18, 3), (3, 9), (18, 0)]  # observed after each response served


def test_dispatch_stops_at_a_bad_frame_after_serving_the_ones_before():
    good = wire([(18, 0, 1, None, b"", b"\x01a")])
    log, calls, _ = dispatch_both(good + struct.pack(">i", -5), max_bytes=100)
    assert log == [([struct.pack(">ii", 6, 1) + b"\x01a"], [bytes], len(good), False)]


def test_dispatch_max_frames_counts_the_stop_frame():
    buf = wire(
        [(19, 0, 1, None, b"", b""), (18, 0, 2, None, b"", b"\x01"), (18, 0, 3, None, b"", b"\x01")]
    )
    out = []
    args = (frames.REQUEST_FLEX, RequestContext, LISTENER, synthetic_table(Calls()), out, None)
    for fn in (frames.dispatch, frames.dispatch_py):
        pos, stop, err = fn(buf, 0, 1 << 20, 1, *args)
        assert stop[0] == 0 and err is None and out == []
        pos, stop, err = fn(buf, pos, 1 << 20, 1, *args)
        assert stop is None and len(out) == 1 and pos < len(buf)
        out.clear()


def test_dispatch_lets_base_exceptions_through():
    class Stop(BaseException):
        pass

    def handler(ctx, request):
        raise Stop

    calls = Calls()
    table = list(synthetic_table(calls))
    table[18] = (0, 4, (calls.reader,) * 5, handler, 1 << 30, (calls.writer,) * 5)
    buf = wire([(18, 0, 1, None, b"", b"x")])
    for fn in (frames.dispatch, frames.dispatch_py):
        with pytest.raises(Stop):
            fn(buf, 0, 1 << 20, 8, frames.REQUEST_FLEX, tuple, LISTENER, tuple(table), [], None)


# The real broker table: the synchronous handlers this server has, fed hypothesis-built requests
# at every version they serve, then mutated; the native and the reference walk must answer alike.
def _real_listener():
    import kafka_rpc.handlers  # noqa: F401 - registers the handlers
    from kafka_rpc.api.registry import default_registry
    from kafka_rpc.config import load_config
    from kafka_rpc.node import Node
    from kafka_rpc.server.listeners import ListenerState

    table = default_registry.table("broker")
    server = Node(load_config(None, []))
    return ListenerState(name="PLAINTEXT", role="broker", host="127.0.0.1", port=9092,
                         services=server, table=table, max_request_bytes=1 << 20,
                         max_inflight=100)  # fmt: skip


REAL = _real_listener()
SPEC_BY_NAME = {s.name: s for s in SPECS}
SYNC = [
    (SPEC_BY_NAME[e.name], v)
    for e in REAL.table.values()
    if not e.is_async
    for v in range(e.min_version, e.max_version + 1)
]


def _serve_real(fn, buf: bytes):
    pos, log = 0, []
    while True:
        out: list = []
        pos, stop, error = fn(buf, pos, 1 << 20, 64, frames.REQUEST_FLEX, RequestContext, REAL,
                              REAL.dispatch_table, out, None)  # fmt: skip
        log.append(([bytes(d) for d in out], pos, error is None))
        if stop is None:
            return log
        log.append((stop[0], tuple(stop[1][:4]), type(stop[3])))


@pytest.mark.parametrize(("spec", "version"), SYNC, ids=[f"{s.name}-v{v}" for s, v in SYNC])
def test_dispatch_real_handlers_same_as_reference(spec, version):
    mod = codec.module(spec.name)
    key = spec.api_key

    @FUZZ
    @given(st.lists(message_strategy(spec, version, mod), min_size=1, max_size=3), st.data())
    def check(msgs, data):
        buf = b"".join(
            frames.frame(
                frames.request_header_bytes(key, version, i, "t") + codec.encode(m, version)
            )
            for i, m in enumerate(msgs)
        )
        log = _serve_real(frames.dispatch, buf)
        assert log == _serve_real(frames.dispatch_py, buf)
        assert sum(len(entry[0]) for entry in log[0::2]) >= 1  # something was served natively
        _cut, mutated = draw_cut_and_mutation(data, buf)
        assert _serve_real(frames.dispatch, mutated) == _serve_real(frames.dispatch_py, mutated)

    check()
