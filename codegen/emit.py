"""Python emitter: validated :class:`~codegen.model.MessageSpec` -> module source text.

For every spec the module holds

* one *full* class per struct (``FindCoordinatorResponse``, ``Coordinator``): a frozen, slotted,
  keyword-only dataclass with every field of every version and Kafka's defaults. Handlers build
  these; decoders return them; the encoder writes them at any valid version (Kafka's one-class-
  per-message ergonomics);
* one *versioned* class per struct and version (``FindCoordinatorResponseV6``, ``CoordinatorV6``)
  following kio's entity conventions (``__api_key__``, ``__version__``, ``__flexible__``, field
  metadata ``kafka_type``/``tag``) with exactly the fields of that version, so kio's native reader
  and writer can process them (used as the byte-for-byte oracle and in ``bench/codec.py``);
* straight-line reader and writer functions per version: adjacent fixed-width fields batched into
  one precompiled ``struct.Struct``, single-byte fast paths for varints and compact lengths,
  counts checked against the bytes remaining before any allocation, tagged sections written in
  tag order with a one-byte fast path when nothing is tagged.
"""

from __future__ import annotations

import uuid

from codegen.model import (
    FIXED_WIDTH,
    FieldSpec,
    MessageSpec,
    StructSpec,
    Versions,
    python_default,
)

_STRUCT_CODE = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
    "uuid": "16s",
}
# Field kinds of the native decoder (the K_* enum in kafka_rpc/protocol/_cdecode.c).
_NATIVE_KIND = {
    "bool": 1,
    "int8": 2,
    "int16": 3,
    "uint16": 4,
    "int32": 5,
    "uint32": 6,
    "int64": 7,
    "float64": 8,
    "uuid": 9,
    "string": 10,
    "bytes": 11,
    "records": 11,
    "struct": 12,
}
_PY_TYPE = {
    "bool": "bool",
    "int8": "int",
    "int16": "int",
    "uint16": "int",
    "int32": "int",
    "uint32": "int",
    "int64": "int",
    "float64": "float",
    "uuid": "UUID",
    "string": "str",
    "bytes": "bytes",
    "records": "bytes",
}


class Buf:
    """Indent-aware line buffer."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.level = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append(("    " * self.level + line) if line else "")

    def indent(self) -> _Indent:
        return _Indent(self)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, b: Buf):
        self.b = b

    def __enter__(self) -> None:
        self.b.level += 1

    def __exit__(self, *a: object) -> None:
        self.b.level -= 1


def module_name(spec_name: str) -> str:
    out = []
    for i, ch in enumerate(spec_name):
        if (ch.isupper() and i > 0 and (not spec_name[i - 1].isupper())) or (
            ch.isupper()
            and i > 0
            and spec_name[i - 1].isupper()
            and i + 1 < len(spec_name)
            and spec_name[i + 1].islower()
        ):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _py_literal(value: object) -> str:
    if isinstance(value, uuid.UUID):
        return f"UUID(int={value.int:#x})"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return f"float({str(value)!r})"
        return repr(value)
    return repr(value)



class ModuleEmitter:
    def __init__(self, spec: MessageSpec, source_label: str):
        self.spec = spec
        self.label = source_label
        self.b = Buf()
        self.structs: dict[str, StructSpec] = {}
        self._collect(spec.struct)
        for c in spec.common_structs:
            self._collect(c)
        self.struct_consts: dict[str, str] = {}
        self.fmt_counter = 0

    # ----------------------------------------------------------------- helpers
    def _collect(self, st: StructSpec) -> None:
        if st.name not in self.structs:
            self.structs[st.name] = st
        for f in st.fields:
            if f.struct is not None:
                self._collect(f.struct)

    def flexible(self, v: int) -> bool:
        return v in self.spec.flexible_versions

    def compact(self, f: FieldSpec, v: int) -> bool:
        if f.flexible_versions is not None:
            return v in f.flexible_versions
        return self.flexible(v)

    def struct_const(self, fmt: str) -> str:
        if fmt not in self.struct_consts:
            self.struct_consts[fmt] = f"_S{len(self.struct_consts)}"
        return self.struct_consts[fmt]

    def fields_at(self, st: StructSpec, v: int) -> list[FieldSpec]:
        return [f for f in st.fields if v in f.versions]

    def layout(
        self, st: StructSpec, v: int
    ) -> tuple[list[FieldSpec], list[FieldSpec], list[FieldSpec], list[int]]:
        """``(regular, tagged, absent, other_tags)`` of ``st`` at ``v``: untagged fields in wire
        order, tagged fields by tag, fields the version lacks, and tags that belong to other
        versions (rejected on read). The Python reader and the native program both use it."""
        fields = self.fields_at(st, v)
        tagged = sorted(
            (f for f in fields if f.tag is not None and v in f.tagged_versions),
            key=lambda f: f.tag,
        )
        regular = [f for f in fields if f not in tagged]
        absent = [f for f in st.fields if v not in f.versions]
        other_tags = sorted(
            {f.tag for f in st.fields if f.tag is not None and f not in tagged}
            - {f.tag for f in tagged}
        )
        return regular, tagged, absent, other_tags

    def default_expr(self, f: FieldSpec) -> str:
        """A Python expression for the field's default value in the full class."""
        if f.type.is_struct and not f.type.is_array:
            if f.default == "null":
                return "None"
            return f"_D_{f.type.name}"
        return _py_literal(python_default(f))

    def default_fingerprint(self, st: StructSpec) -> dict[str, object]:
        d: dict[str, object] = {}
        for f in st.fields:
            if f.type.is_struct and not f.type.is_array:
                d[f.py_name] = None if f.default == "null" else self.default_fingerprint(f.struct)
            else:
                d[f.py_name] = python_default(f)
        return d

    def type_hint(self, f: FieldSpec, suffix: str, nullable: bool) -> str:
        t = f.type
        if t.is_struct:
            inner = f"{t.name}{suffix}"
        else:
            inner = _PY_TYPE[t.name]
        h = f"tuple[{inner}, ...]" if t.is_array else inner
        if nullable:
            h += " | None"
        return h

    # ----------------------------------------------------------------- module
    def emit(self) -> str:
        b = self.b
        spec = self.spec
        body = Buf()
        self._emit_body(body)
        b(f"# Code generated by codegen from {self.label}. DO NOT EDIT.")
        doc = f"{spec.name}"
        if spec.api_key is not None:
            doc += f" (apiKey {spec.api_key})"
        doc += f", type {spec.type}, versions {spec.valid_versions}"
        if not spec.valid_versions.empty:
            doc += f", flexible {spec.flexible_versions}"
        b(f'"""{doc}."""')
        b()
        b("import struct as _struct")
        b("from dataclasses import dataclass, field")
        b("from typing import ClassVar")
        b("from uuid import UUID")
        b()
        b("from kafka_rpc.protocol import primitives as _p")
        b("from kafka_rpc.protocol.errors import BufferUnderflow as _Underflow")
        b("from kafka_rpc.protocol.errors import DecodeError as _DecodeError")
        b("from kafka_rpc.protocol.errors import EncodeError as _EncodeError")
        b()
        b("_new = object.__new__")
        b("_ruv = _p.read_uvarint_slow")
        b("_uvb = _p.uvarint_bytes")
        b("_uuid = _p.uuid_from_bytes")
        b("_ub = _p.uuid_to_bytes")
        b("_s_h = _p.s_h")
        b("_s_i = _p.s_i")
        for fmt, name in sorted(self.struct_consts.items(), key=lambda kv: int(kv[1][2:])):
            b(f"{name} = _struct.Struct({fmt!r})")
        b()
        self.b.lines.extend(body.lines)
        return b.text()

    def _emit_body(self, b: Buf) -> None:
        spec = self.spec
        b()
        b(f"SPEC_NAME = {spec.name!r}")
        b(f"SPEC_TYPE = {spec.type!r}")
        b(f"API_KEY = {spec.api_key!r}")
        vv = spec.valid_versions
        b(f"VALID_VERSIONS = {(vv.lo, vv.hi) if not vv.empty else None!r}")
        fv = spec.flexible_versions
        b(f"FLEXIBLE_VERSIONS = {(fv.lo, fv.hi) if not fv.empty else None!r}")
        b(f"LISTENERS = {spec.listeners!r}")
        b(f"LATEST_VERSION_UNSTABLE = {spec.latest_version_unstable!r}")
        b()
        if vv.empty:
            b("MESSAGE = None")
            b("READERS: dict = {}")
            b("WRITERS: dict = {}")
            b("VERSION_CLASSES: dict = {}")
            return
        # Full classes, children first.
        order = self._struct_order()
        for name in order:
            self._emit_full_class(b, self.structs[name], name == spec.struct.name)
        # Versioned (kio-convention) classes.
        for v in vv:
            emitted: set[str] = set()
            self._emit_version_classes(b, spec.struct, v, emitted, top=True)
        # Codecs.
        for v in vv:
            done: set[str] = set()
            self._emit_codecs(b, spec.struct, v, done)
            self._emit_entry_points(b, v)
            self._emit_programs(b, spec.struct, v, set())
        b(f"MESSAGE = {spec.name}")
        b("PY_READERS = {" + ", ".join(f"{v}: read_v{v}" for v in vv) + "}")
        b("PROGRAMS = {" + ", ".join(f"{v}: _P{v}_{spec.struct.name}" for v in vv) + "}")
        b("READERS = _p.native_readers(PY_READERS, PROGRAMS)")
        b("WRITERS = {" + ", ".join(f"{v}: write_v{v}" for v in vv) + "}")
        b("VERSION_CLASSES = {" + ", ".join(f"{v}: {spec.name}V{v}" for v in vv) + "}")

    def _struct_order(self) -> list[str]:
        seen: list[str] = []

        def visit(st: StructSpec) -> None:
            for f in st.fields:
                if f.struct is not None:
                    visit(f.struct)
            if st.name not in seen:
                seen.append(st.name)

        visit(self.spec.struct)
        for c in self.spec.common_structs:
            visit(c)
        return seen

    # ----------------------------------------------------------- declarations
    def _emit_full_class(self, b: Buf, st: StructSpec, top: bool) -> None:
        spec = self.spec
        b()
        b()
        b("@dataclass(frozen=True, slots=True, kw_only=True)")
        b(f"class {st.name}:")
        with b.indent():
            if top:
                b(f'"""{spec.name}: all fields of versions {spec.valid_versions} with Kafka\'s')
                b('defaults; build this, then encode it at the negotiated version."""')
                b()
                b(f"__api_key__: ClassVar[int | None] = {spec.api_key!r}")
                b(f"__spec_name__: ClassVar[str] = {spec.name!r}")
                b(f"__spec_type__: ClassVar[str] = {spec.type!r}")
            else:
                b(f'"""Struct {st.name} of {spec.name} (all versions)."""')
                b()
            if not st.fields:
                b("pass")
            for f in st.fields:
                nullable = not f.nullable_versions.empty
                hint = self.type_hint(f, "", nullable)
                meta = self._meta(f)
                if f.type.is_struct and not f.type.is_array and f.default != "null":
                    b(f"{f.py_name}: {hint} = field(default_factory=lambda: {f.type.name}(), "
                      f"metadata={meta})")
                else:
                    b(f"{f.py_name}: {hint} = field(default={self.default_expr(f)}, "
                      f"metadata={meta})")
                if f.about:
                    b(f'"""{_doc(f.about)} (versions {f.versions})"""')
        b()
        b()
        b(f"_D_{st.name} = {st.name}()")
        # Decoding builds a plain slotted twin with a positional __init__ and then switches its
        # __class__ to the frozen dataclass (identical slot layout): about half the cost of
        # setting each slot through its descriptor.
        b()
        b()
        b(f"class _M_{st.name}:")
        with b.indent():
            names = [f.py_name for f in st.fields]
            b(f"__slots__ = {tuple(names)!r}")
            b()
            b(f"def __init__(self{''.join(', ' + n for n in names)}):")
            with b.indent():
                if not names:
                    b("pass")
                for n in names:
                    b(f"self.{n} = {n}")

    def _meta(self, f: FieldSpec, v: int | None = None) -> str:
        parts = [f'"kafka_type": {f.type.name if not f.type.is_struct else "struct"!r}']
        if f.tag is not None and (v is None or v in f.tagged_versions):
            parts.append(f'"tag": {f.tag}')
        return "{" + ", ".join(parts) + "}"

    def _emit_version_classes(
        self, b: Buf, st: StructSpec, v: int, emitted: set[str], top: bool = False
    ) -> None:
        fields = self.fields_at(st, v)
        for f in fields:
            if f.struct is not None and f.struct.name not in emitted:
                self._emit_version_classes(b, f.struct, v, emitted)
        if st.name in emitted:
            return
        emitted.add(st.name)
        spec = self.spec
        b()
        b()
        b("@dataclass(frozen=True, slots=True, kw_only=True)")
        b(f"class {st.name}V{v}:")
        with b.indent():
            b(f'"""{st.name} at version {v} (kio entity conventions)."""')
            b()
            b(f"__type__: ClassVar[str] = {spec.type if top else 'nested'!r}")
            b(f"__version__: ClassVar[int] = {v}")
            b(f"__flexible__: ClassVar[bool] = {self.flexible(v)}")
            b(f"__api_key__: ClassVar[int] = {spec.api_key if spec.api_key is not None else -1}")
            for f in fields:
                nullable = v in f.nullable_versions
                hint = self.type_hint(f, f"V{v}", nullable)
                tagged = f.tag is not None and v in f.tagged_versions
                if f.type.is_struct and not f.type.is_array:
                    if f.default == "null" and nullable:
                        dflt = "default=None"
                    else:
                        dflt = f"default_factory=lambda: {f.type.name}V{v}()"
                elif f.type.name == "uuid" and not f.type.is_array:
                    dflt = f"default={_py_literal(python_default(f))}"
                else:
                    dflt = f"default={_py_literal(python_default(f))}"
                    if python_default(f) is None and not nullable:
                        dflt = "default=b''" if f.type.name in ("records", "bytes") else dflt
                meta = self._meta(f, v)
                if tagged and "tag" not in meta:
                    meta = meta[:-1] + f', "tag": {f.tag}' + "}"
                b(f"{f.py_name}: {hint} = field({dflt}, metadata={meta})")

    # ----------------------------------------------------------------- codecs
    def _emit_codecs(self, b: Buf, st: StructSpec, v: int, done: set[str]) -> None:
        fields = self.fields_at(st, v)
        for f in fields:
            if f.struct is not None and f.struct.name not in done:
                self._emit_codecs(b, f.struct, v, done)
        if st.name in done:
            return
        done.add(st.name)
        self._emit_reader(b, st, v)
        self._emit_writer(b, st, v)

    def _emit_entry_points(self, b: Buf, v: int) -> None:
        name = self.spec.struct.name
        b()
        b()
        b(f"def read_v{v}(b: bytes, p: int = 0) -> tuple[{name}, int]:")
        with b.indent():
            b(f'"""Decode {name} v{v} from ``b`` at ``p``; returns ``(message, end)``.')
            b()
            b("Raises DecodeError (or a subclass) on any malformed or truncated input.")
            b('"""')
            b("try:")
            with b.indent():
                b(f"return _r{v}_{name}(b, p)")
            b("except _DecodeError:")
            with b.indent():
                b("raise")
            b("except (IndexError, _struct.error) as e:")
            with b.indent():
                b(f"raise _Underflow(f'{name} v{v}: truncated input ({{e}})') from None")
            b("except (UnicodeDecodeError, ValueError, OverflowError, MemoryError) as e:")
            with b.indent():
                b(f"raise _DecodeError(f'{name} v{v}: {{e}}') from None")
        b()
        b()
        b(f"def write_v{v}(o: {name}, w: bytearray) -> None:")
        with b.indent():
            b(f'"""Append {name} v{v} to ``w``; raises EncodeError for a value that cannot be')
            b("written at this version (UnsupportedVersionError for a non-default field absent")
            b('in it)."""')
            b("try:")
            with b.indent():
                b(f"_w{v}_{name}(o, w)")
            b("except _EncodeError:")
            with b.indent():
                b("raise")
            b("except (AttributeError, TypeError, ValueError, OverflowError, _struct.error) as e:")
            with b.indent():
                b(f"raise _EncodeError(f'{name} v{v}: {{e}}') from None")

    # -- native decoder programs (data for kafka_rpc/protocol/_cdecode.c)
    def _emit_programs(self, b: Buf, st: StructSpec, v: int, done: set[str]) -> None:
        """Emit ``_P{v}_{Struct}``: the program the native decoder runs for ``st`` at ``v``,
        children first. Layout (documented in ``_cdecode.c``): ``(cls, version, flexible,
        regular, tagged, other_tags, defaults)``; it encodes exactly what ``_emit_reader``
        writes as Python, so the two decoders are interchangeable (tests compare them)."""
        if st.name in done:
            return
        done.add(st.name)
        for f in self.fields_at(st, v):
            if f.struct is not None:
                self._emit_programs(b, f.struct, v, done)
        regular, tagged, absent, other_tags = self.layout(st, v)

        def spec_of(f: FieldSpec) -> str:
            t = f.type
            kind = _NATIVE_KIND["struct" if t.is_struct else t.name]
            flags = (
                (1 if v in f.nullable_versions else 0)
                | (2 if self.compact(f, v) else 0)
                | (4 if t.is_array else 0)
            )
            sub = f"_P{v}_{t.name}" if t.is_struct else "None"
            return f"{f.py_name!r}, {kind}, {flags}, {sub}, {st.name + '.' + f.name!r}"

        b()
        b(f"_P{v}_{st.name} = (")
        with b.indent():
            b(f"{st.name},")
            b(f"{v},")
            b(f"{self.flexible(v)!r},")
            b("(" + "".join(f"({spec_of(f)}), " for f in regular) + "),")
            b("(" + "".join(f"({f.tag}, {spec_of(f)}), " for f in tagged) + "),")
            b(f"{tuple(other_tags)!r},")
            b(
                "("
                + "".join(
                    f"({f.py_name!r}, {self._default_ref(st, f)}), " for f in absent + tagged
                )
                + "),"
            )
        b(")")

    # -- reader
    def _emit_reader(self, b: Buf, st: StructSpec, v: int) -> None:
        flex = self.flexible(v)
        regular, tagged, absent, other_tags = self.layout(st, v)
        b()
        b()
        b(f"def _r{v}_{st.name}(b, p):")
        with b.indent():
            vals: dict[str, str] = {}
            i = 0
            while i < len(regular):
                f = regular[i]
                if self._is_fixed(f):
                    run = [f]
                    j = i + 1
                    while j < len(regular) and self._is_fixed(regular[j]):
                        run.append(regular[j])
                        j += 1
                    self._emit_fixed_read(b, run, vals)
                    i = j
                    continue
                self._emit_read_value(b, f, v, f"f_{f.py_name}", f"{st.name}.{f.name}")
                vals[f.py_name] = f"f_{f.py_name}"
                i += 1
            for f in absent + tagged:
                vals[f.py_name] = self._default_ref(st, f)
            args = ", ".join(vals[f.py_name] for f in st.fields)
            b(f"o = _M_{st.name}({args})")
            b(f"o.__class__ = {st.name}")
            if flex:
                b("n = b[p]")
                b("if n < 0x80:")
                with b.indent():
                    b("p += 1")
                b("else:")
                with b.indent():
                    b("n, p = _ruv(b, p)")
                b("if n > 0:")
                with b.indent():
                    b(f"p = _rt{v}_{st.name}(b, p, n, o)")
            b("return o, p")
        if flex:
            self._emit_tag_reader(b, st, v, tagged, other_tags)
        # setters and default refs (module level)
        b()
        for f in st.fields:
            name = f"_set_{st.name}_{f.py_name}"
            if name not in self._declared:
                self._declared.add(name)
                b(f"{name} = {st.name}.__dict__[{f.py_name!r}].__set__")
        for f in st.fields:
            ref = f"_DF_{st.name}_{f.py_name}"
            if ref not in self._declared:
                self._declared.add(ref)
                b(f"{ref} = {self.default_expr(f)}")

    @property
    def _declared(self) -> set[str]:
        if not hasattr(self, "_decl"):
            self._decl: set[str] = set()
        return self._decl

    def _default_ref(self, st: StructSpec, f: FieldSpec) -> str:
        return f"_DF_{st.name}_{f.py_name}"

    def _is_fixed(self, f: FieldSpec) -> bool:
        return not f.type.is_array and f.type.name in FIXED_WIDTH

    def _emit_fixed_read(self, b: Buf, run: list[FieldSpec], vals: dict[str, str]) -> None:
        fmt = ">" + "".join(_STRUCT_CODE[f.type.name] for f in run)
        size = sum(FIXED_WIDTH[f.type.name] for f in run)
        const = self.struct_const(fmt)
        names = [f"f_{f.py_name}" for f in run]
        lhs = ", ".join(names) + ("," if len(run) == 1 else "")
        b(f"{lhs} = {const}.unpack_from(b, p)")
        b(f"p += {size}")
        for nm, f in zip(names, run):
            vals[f.py_name] = f"_uuid({nm})" if f.type.name == "uuid" else nm

    def _emit_len(self, b: Buf, compact: bool, classic_fmt: str, var: str = "n") -> None:
        """Read a length into ``var`` with Kafka's "length - 1 for compact" applied."""
        if compact:
            b(f"{var} = b[p]")
            b(f"if {var} < 0x80:")
            with b.indent():
                b("p += 1")
            b("else:")
            with b.indent():
                b(f"{var}, p = _ruv(b, p)")
            b(f"{var} -= 1")
        else:
            b(f"({var},) = {classic_fmt}.unpack_from(b, p)")
            b(f"p += {2 if classic_fmt == '_s_h' else 4}")

    def _emit_read_value(self, b: Buf, f: FieldSpec, v: int, out: str, what: str) -> None:
        t = f.type
        nullable = v in f.nullable_versions
        compact = self.compact(f, v)
        if t.is_array:
            self._emit_len(b, compact, "_s_i", "n")
            b("if n < 0:")
            with b.indent():
                if nullable:
                    b(f"{out} = None")
                else:
                    b(f"raise _p.null_error({what!r})")
            b("else:")
            with b.indent():
                b("if n > len(b) - p:")
                with b.indent():
                    b(f"raise _p.collection_too_large({what!r}, n, len(b) - p)")
                self._emit_read_array_items(b, f, v, out, what)
            return
        if t.is_struct:
            if nullable:
                b("if b[p] >= 0x80:")
                with b.indent():
                    b(f"{out} = None")
                    b("p += 1")
                b("else:")
                with b.indent():
                    b(f"{out}, p = _r{v}_{t.name}(b, p + 1)")
            else:
                b(f"{out}, p = _r{v}_{t.name}(b, p)")
            return
        n = t.name
        if n in ("string", "bytes", "records"):
            classic = "_s_h" if n == "string" else "_s_i"
            self._emit_len(b, compact, classic, "n")
            b("if n < 0:")
            with b.indent():
                if nullable:
                    b(f"{out} = None")
                else:
                    b(f"raise _p.null_error({what!r})")
            b("else:")
            with b.indent():
                if n == "string":
                    b("if n > 0x7FFF:")
                    with b.indent():
                        b(f"raise _p.InvalidLength({what!r} + ' had invalid length ' + str(n))")
                b("e = p + n")
                b("if e > len(b):")
                with b.indent():
                    b(f"raise _p.underflow({what!r})")
                if n == "string":
                    b(f"{out} = b[p:e].decode()")
                else:
                    b(f"{out} = b[p:e]")
                b("p = e")
            return
        # fixed width alone (tagged payloads)
        fmt = ">" + _STRUCT_CODE[n]
        const = self.struct_const(fmt)
        b(f"({out},) = {const}.unpack_from(b, p)")
        b(f"p += {FIXED_WIDTH[n]}")
        if n == "uuid":
            b(f"{out} = _uuid({out})")

    def _emit_read_array_items(self, b: Buf, f: FieldSpec, v: int, out: str, what: str) -> None:
        t = f.type
        n = t.name
        if n in ("int8", "int16", "int32", "int64", "uint16", "uint32", "float64"):
            code = _STRUCT_CODE[n]
            b(f"{out} = _p.array_struct({code!r}, n).unpack_from(b, p)")
            b(f"p += {FIXED_WIDTH[n]} * n")
            return
        b("a = []")
        b("ap = a.append")
        b("for _ in range(n):")
        with b.indent():
            if t.is_struct:
                b(f"y, p = _r{v}_{n}(b, p)")
            elif n == "uuid":
                b("if p + 16 > len(b):")
                with b.indent():
                    b(f"raise _p.underflow({what!r})")
                b("y = _uuid(b[p:p + 16])")
                b("p += 16")
            elif n == "bool":
                b("y = b[p] != 0")
                b("p += 1")
            else:
                # string / bytes elements are never null in Kafka
                elem = FieldSpec(
                    name=f.name,
                    py_name=f.py_name,
                    type=type(t)(n, False),
                    versions=f.versions,
                    nullable_versions=Versions(1, 0),
                    tagged_versions=Versions(1, 0),
                    tag=None,
                    default="",
                    ignorable=False,
                    map_key=False,
                    entity_type=None,
                    about="",
                    flexible_versions=f.flexible_versions,
                    zero_copy=False,
                    struct=None,
                )
                self._emit_read_value(b, elem, v, "y", what + "[]")
            b("ap(y)")
        b(f"{out} = tuple(a)")

    def _emit_tag_reader(
        self, b: Buf, st: StructSpec, v: int, tagged: list[FieldSpec], other_tags: list[int]
    ) -> None:
        b()
        b()
        b(f"def _rt{v}_{st.name}(b, p, count, o):")
        with b.indent():
            b("for _ in range(count):")
            with b.indent():
                b("tag, size, p = _p.read_tag_prefix(b, p)")
                first = True
                for f in tagged:
                    kw = "if" if first else "elif"
                    first = False
                    b(f"{kw} tag == {f.tag}:")
                    with b.indent():
                        if f.type.is_struct and not f.type.is_array and v in f.nullable_versions:
                            b("m = b[p]")
                            b("if m < 0x80:")
                            with b.indent():
                                b("p += 1")
                            b("else:")
                            with b.indent():
                                b("m, p = _ruv(b, p)")
                            b("if m <= 0:")
                            with b.indent():
                                b("x = None")
                            b("else:")
                            with b.indent():
                                b(f"x, p = _r{v}_{f.type.name}(b, p)")
                        elif f.type.is_struct and not f.type.is_array:
                            b(f"x, p = _r{v}_{f.type.name}(b, p)")
                        else:
                            self._emit_read_value(b, f, v, "x", f"{st.name}.{f.name}")
                        b(f"_set_{st.name}_{f.py_name}(o, x)")
                if other_tags:
                    kw = "if" if first else "elif"
                    first = False
                    b(f"{kw} tag in {tuple(other_tags)!r}:")
                    with b.indent():
                        b(f"raise _p.tag_not_valid(tag, {v})")
                if first:
                    b("p = _p.skip_tagged(b, p, size)")
                else:
                    b("else:")
                    with b.indent():
                        b("p = _p.skip_tagged(b, p, size)")
            b("return p")

    # -- writer
    def _emit_writer(self, b: Buf, st: StructSpec, v: int) -> None:
        fields = self.fields_at(st, v)
        flex = self.flexible(v)
        regular = [f for f in fields if not (f.tag is not None and v in f.tagged_versions)]
        tagged = sorted(
            (f for f in fields if f.tag is not None and v in f.tagged_versions),
            key=lambda f: f.tag,
        )
        absent = [f for f in st.fields if v not in f.versions and not f.ignorable]
        b()
        b()
        b(f"def _w{v}_{st.name}(o, w):")
        with b.indent():
            for f in absent:
                b(f"x = o.{f.py_name}")
                b(f"if {self._nondefault_expr(f, 'x')}:")
                with b.indent():
                    b(f"raise _p.cannot_write({f.py_name!r}, {v})")
            i = 0
            while i < len(regular):
                f = regular[i]
                if self._is_fixed(f):
                    run = [f]
                    j = i + 1
                    while j < len(regular) and self._is_fixed(regular[j]):
                        run.append(regular[j])
                        j += 1
                    fmt = ">" + "".join(_STRUCT_CODE[g.type.name] for g in run)
                    const = self.struct_const(fmt)
                    args = ", ".join(
                        f"_ub(o.{g.py_name})" if g.type.name == "uuid" else f"o.{g.py_name}"
                        for g in run
                    )
                    b(f"w += {const}.pack({args})")
                    i = j
                    continue
                b(f"x = o.{f.py_name}")
                self._emit_write_value(b, f, v, "x", "w", f"{st.name}.{f.name}")
                i += 1
            if flex:
                if not tagged:
                    b("w.append(0)")
                else:
                    b("tg = None")
                    for f in tagged:
                        b(f"x = o.{f.py_name}")
                        b(f"if {self._nondefault_expr(f, 'x')}:")
                        with b.indent():
                            b("tb = bytearray()")
                            if (
                                f.type.is_struct
                                and not f.type.is_array
                                and v in f.nullable_versions
                            ):
                                b("if x is None:")
                                with b.indent():
                                    b("tb.append(0)")
                                b("else:")
                                with b.indent():
                                    b("tb.append(1)")
                                    b(f"_w{v}_{f.type.name}(x, tb)")
                            elif f.type.is_struct and not f.type.is_array:
                                b(f"_w{v}_{f.type.name}(x, tb)")
                            else:
                                self._emit_write_value(b, f, v, "x", "tb", f"{st.name}.{f.name}")
                            b("if tg is None:")
                            with b.indent():
                                b("tg = []")
                            b(f"tg.append(({f.tag}, tb))")
                    b("if tg is None:")
                    with b.indent():
                        b("w.append(0)")
                    b("else:")
                    with b.indent():
                        b("w += _uvb(len(tg))")
                        b("for tag, tb in tg:")
                        with b.indent():
                            b("w += _uvb(tag)")
                            b("w += _uvb(len(tb))")
                            b("w += tb")
            elif not regular:
                b("return")
            else:
                pass
            # tagged fields in a non-flexible version cannot exist (model rule)

    def _nondefault_expr(self, f: FieldSpec, x: str) -> str:
        t = f.type
        if f.default == "null":
            return f"{x} is not None"
        if t.is_array or t.name in ("bytes", "records"):
            return f"({x} is None or len({x}) != 0)"
        if t.is_struct:
            fp = self.default_fingerprint(f.struct)
            return f"({x} is None or not _p.is_default_struct({x}, {self._fp_literal(fp)}))"
        if t.name == "uuid":
            d = python_default(f)
            return f"({x} is not None and {x}.int != {d.int:#x})"
        return f"{x} != {_py_literal(python_default(f))}"

    def _fp_literal(self, fp: dict[str, object]) -> str:
        parts = []
        for k, val in fp.items():
            if isinstance(val, dict):
                parts.append(f"{k!r}: {self._fp_literal(val)}")
            else:
                parts.append(f"{k!r}: {_py_literal(val)}")
        return "{" + ", ".join(parts) + "}"

    def _emit_write_len(self, b: Buf, compact: bool, classic: str, expr: str, w: str) -> None:
        if compact:
            b(f"if {expr} < 0x7F:")
            with b.indent():
                b(f"{w}.append({expr} + 1)")
            b("else:")
            with b.indent():
                b(f"{w} += _uvb({expr} + 1)")
        else:
            b(f"{w} += {classic}.pack({expr})")

    def _emit_write_value(self, b: Buf, f: FieldSpec, v: int, x: str, w: str, what: str) -> None:
        t = f.type
        nullable = v in f.nullable_versions
        compact = self.compact(f, v)
        if t.is_array or t.name in ("string", "bytes", "records") or (
            t.is_struct and nullable
        ):
            b(f"if {x} is None:")
            with b.indent():
                if not nullable:
                    b(f"raise _p.null_not_allowed({what!r}, {v})")
                elif t.is_struct and not t.is_array:
                    b(f"{w}.append(0xFF)")
                elif compact:
                    b(f"{w}.append(0)")
                elif t.name == "string" and not t.is_array:
                    b(f"{w} += b'\\xff\\xff'")
                else:
                    b(f"{w} += b'\\xff\\xff\\xff\\xff'")
            b("else:")
            with b.indent():
                self._emit_write_nonnull(b, f, v, x, w, what, compact)
            return
        self._emit_write_nonnull(b, f, v, x, w, what, compact)

    def _emit_write_nonnull(
        self, b: Buf, f: FieldSpec, v: int, x: str, w: str, what: str, compact: bool
    ) -> None:
        t = f.type
        n = t.name
        if t.is_array:
            b(f"n = len({x})")
            self._emit_write_len(b, compact, "_s_i", "n", w)
            if n in ("int8", "int16", "int32", "int64", "uint16", "uint32", "float64"):
                code = _STRUCT_CODE[n]
                b(f"{w} += _p.array_struct({code!r}, n).pack(*{x})")
            elif t.is_struct:
                b(f"for y in {x}:")
                with b.indent():
                    b(f"_w{v}_{n}(y, {w})")
            elif n == "uuid":
                b(f"for y in {x}:")
                with b.indent():
                    b(f"{w} += _ub(y)")
            elif n == "bool":
                b(f"for y in {x}:")
                with b.indent():
                    b(f"{w}.append(1 if y else 0)")
            else:
                b(f"for y in {x}:")
                with b.indent():
                    self._emit_write_scalar_var(b, n, compact, "y", w, what + "[]")
            return
        if t.is_struct:
            if v in f.nullable_versions:
                b(f"{w}.append(1)")
            b(f"_w{v}_{n}({x}, {w})")
            return
        self._emit_write_scalar_var(b, n, compact, x, w, what)

    def _emit_write_scalar_var(self, b: Buf, n: str, compact: bool, x: str, w: str, what: str):
        if n == "string":
            b(f"s = {x}.encode()")
            b("k = len(s)")
            b("if k > 0x7FFF:")
            with b.indent():
                b(f"raise _p.string_too_long({what!r}, k)")
            self._emit_write_len(b, compact, "_s_h", "k", w)
            b(f"{w} += s")
        elif n in ("bytes", "records"):
            b(f"k = len({x})")
            self._emit_write_len(b, compact, "_s_i", "k", w)
            b(f"{w} += {x}")
        elif n == "uuid":
            b(f"{w} += _ub({x})")
        else:
            const = self.struct_const(">" + _STRUCT_CODE[n])
            b(f"{w} += {const}.pack({x})")


def _doc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', "'''").replace("\n", " ").strip()


def emit_module(spec: MessageSpec, source_label: str) -> str:
    return ModuleEmitter(spec, source_label).emit()


def emit_index(specs: list[MessageSpec]) -> str:
    """The package ``__init__``: a table of every spec (module, type, key, versions, listeners)."""
    b = Buf()
    b("# Code generated by codegen from message_specs/. DO NOT EDIT.")
    b('"""Index of the generated message modules (see ``kafka_rpc.protocol.codec``)."""')
    b()
    b("# name: (module, type, apiKey, (lowest, highest) or None, flexible-from or None,")
    b("#        listeners, latestVersionUnstable)")
    b("SPECS = {")
    with b.indent():
        for s in sorted(specs, key=lambda s: s.name):
            vv = s.valid_versions
            fv = s.flexible_versions
            b(
                f"{s.name!r}: ({module_name(s.name)!r}, {s.type!r}, {s.api_key!r}, "
                f"{(vv.lo, vv.hi) if not vv.empty else None!r}, "
                f"{fv.lo if not fv.empty else None!r}, {s.listeners!r}, "
                f"{s.latest_version_unstable!r}),"
            )
    b("}")
    return b.text()

