"""Hypothesis strategies built from the validated spec model (codegen.model).

``message_strategy(spec, version, module)`` draws *full* message objects whose fields present at
``version`` carry random values and whose other fields keep their defaults, so that
``decode(encode(m, v)) == m`` must hold exactly.
"""

from __future__ import annotations

import uuid

from hypothesis import strategies as st

from codegen.model import INT_RANGES, FieldSpec, MessageSpec, StructSpec
from kafka_rpc.protocol.errors import ErrorCode

_ERROR_CODES = [int(c) for c in ErrorCode]


def _int_strategy(name: str, f: FieldSpec, int64_bounds: tuple[int, int] | None):
    if f.name.endswith("ErrorCode") and name == "int16":
        return st.sampled_from(_ERROR_CODES)
    lo, hi = INT_RANGES[name]
    if name == "int64" and int64_bounds is not None:
        lo, hi = int64_bounds
    return st.integers(lo, hi)


def _scalar(f: FieldSpec, name: str, opts: dict):
    if name in INT_RANGES:
        return _int_strategy(name, f, opts.get("int64_bounds"))
    if name == "bool":
        return st.booleans()
    if name == "float64":
        return st.floats(allow_nan=False)
    if name == "uuid":
        return st.binary(min_size=16, max_size=16).map(lambda b: uuid.UUID(bytes=b))
    if name == "string":
        return st.text(max_size=opts.get("max_text", 12))
    if name in ("bytes", "records"):
        return st.binary(max_size=opts.get("max_bytes", 24))
    raise AssertionError(name)


def struct_strategy(module, st_spec: StructSpec, version: int, opts: dict, flexible: bool):
    cls = getattr(module, st_spec.name)
    kwargs = {}
    for f in st_spec.fields:
        if version not in f.versions:
            continue
        kwargs[f.py_name] = field_strategy(module, f, version, opts, flexible)
    return st.builds(cls, **kwargs)


def field_strategy(module, f: FieldSpec, version: int, opts: dict, flexible: bool):
    t = f.type
    nullable = version in f.nullable_versions
    if t.is_array:
        if t.is_struct:
            elem = struct_strategy(module, f.struct, version, opts, flexible)
        else:
            elem = _scalar(f, t.name, opts)
        base = st.lists(elem, max_size=opts.get("max_items", 3)).map(tuple)
    elif t.is_struct:
        base = struct_strategy(module, f.struct, version, opts, flexible)
    else:
        base = _scalar(f, t.name, opts)
    if nullable:
        return st.one_of(st.none(), base)
    return base


def draw_cut_and_mutation(data, wire: bytes) -> tuple[bytes, bytes]:
    """From a non-empty encoding, draw a strict prefix and a copy with up to 4 bytes replaced
    (hypothesis ``st.data()``); the decode fuzz and the native-vs-Python tests share them."""
    cut = data.draw(st.integers(0, len(wire) - 1))
    flips = data.draw(
        st.lists(st.tuples(st.integers(0, len(wire) - 1), st.integers(0, 255)), max_size=4)
    )
    mutated = bytearray(wire)
    for i, b in flips:
        mutated[i] = b
    return wire[:cut], bytes(mutated)


def message_strategy(spec: MessageSpec, version: int, module, **opts):
    """Full message objects of ``spec`` with random values in the fields ``version`` has."""
    flexible = version in spec.flexible_versions
    return struct_strategy(module, spec.struct, version, opts, flexible)
