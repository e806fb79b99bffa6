"""Spec loader and validated, frozen model of Kafka JSON message specs.

The rules mirror Apache Kafka's generator (``generator/src/main/java/org/apache/kafka/message/``:
``MessageSpec``, ``StructSpec``, ``FieldSpec``, ``Versions``, ``StructRegistry``); everything that
generator rejects raises :class:`SpecError` here,
naming the file and the field.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_VERSION = 32767

PRIMITIVES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "float64",
        "uuid",
        "string",
        "bytes",
        "records",
    }
)
FIXED_WIDTH = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "float64": 8,
    "uuid": 16,
}
INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
SPEC_TYPES = frozenset(
    {"request", "response", "header", "metadata", "data", "coordinator-key", "coordinator-value"}
)
LISTENERS = frozenset({"broker", "controller", "zkBroker"})
ENTITY_TYPES = {
    "transactionalId": "string",
    "groupId": "string",
    "topicName": "string",
    "producerId": "int64",
    "brokerId": "int32",
    "unknown": None,
}

TOP_KEYS = frozenset(
    {
        "apiKey",
        "type",
        "name",
        "validVersions",
        "flexibleVersions",
        "deprecatedVersions",
        "listeners",
        "latestVersionUnstable",
        "fields",
        "commonStructs",
    }
)
FIELD_KEYS = frozenset(
    {
        "name",
        "type",
        "versions",
        "nullableVersions",
        "default",
        "ignorable",
        "mapKey",
        "entityType",
        "about",
        "tag",
        "taggedVersions",
        "flexibleVersions",
        "zeroCopy",
        "fields",
    }
)
_COMMON_KEYS = frozenset({"name", "versions", "fields"})
_FIELD_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


class SpecError(ValueError):
    """A spec violates one of Kafka's generator rules; the message names file and field."""


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``lo > hi`` means the empty range ("none")."""

    lo: int
    hi: int

    NONE_TEXT = "none"

    @staticmethod
    def parse(text: Any, default: Versions | None = None) -> Versions:
        """Parse ``"none"``, ``"N"``, ``"N+"`` or ``"A-B"`` (Kafka ``Versions.parse``)."""
        if text is None or (isinstance(text, str) and text.strip() == ""):
            if default is None:
                raise ValueError("missing version range")
            return default
        if isinstance(text, int) and not isinstance(text, bool):
            text = str(text)
        if not isinstance(text, str):
            raise ValueError(f"invalid version range {text!r}")
        t = text.strip()
        if t == "none":
            return NONE
        try:
            if t.endswith("+"):
                lo = _parse_version(t[:-1])
                return Versions(lo, MAX_VERSION)
            if "-" in t:
                a, b = t.split("-", 1)
                lo, hi = _parse_version(a), _parse_version(b)
                if hi < lo:
                    raise ValueError(f"invalid version range {text!r}")
                return Versions(lo, hi)
            v = _parse_version(t)
            return Versions(v, v)
        except ValueError:
            raise ValueError(f"invalid version range {text!r}") from None

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    @property
    def open_ended(self) -> bool:
        return not self.empty and self.hi == MAX_VERSION

    def __contains__(self, v: object) -> bool:
        return isinstance(v, int) and self.lo <= v <= self.hi

    def intersect(self, other: Versions) -> Versions:
        lo, hi = max(self.lo, other.lo), min(self.hi, other.hi)
        return Versions(lo, hi) if lo <= hi else NONE

    def issubset(self, other: Versions) -> bool:
        return self.empty or (other.lo <= self.lo and self.hi <= other.hi)

    def __iter__(self):
        return iter(range(self.lo, self.hi + 1)) if not self.empty else iter(())

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi == MAX_VERSION:
            return f"{self.lo}+"
        if self.lo == self.hi:
            return str(self.lo)
        return f"{self.lo}-{self.hi}"


def _parse_version(t: str) -> int:
    t = t.strip()
    if not t.isdigit():
        raise ValueError(t)
    v = int(t)
    if v > MAX_VERSION:
        raise ValueError(t)
    return v


NONE = Versions(1, 0)
ALL = Versions(0, MAX_VERSION)


@dataclass(frozen=True, slots=True)
class FieldType:
    """A parsed field type: primitive, struct, or array of either."""

    name: str  # element type for arrays ("int32", "Foo"), the type itself otherwise
    is_array: bool

    @property
    def is_struct(self) -> bool:
        return self.name not in PRIMITIVES

    @property
    def is_primitive(self) -> bool:
        return self.name in PRIMITIVES

    @property
    def can_be_nullable(self) -> bool:
        return self.is_array or self.is_struct or self.name in ("string", "bytes", "records")

    def __str__(self) -> str:
        return ("[]" if self.is_array else "") + self.name


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field: wire facts plus the derived Python name."""

    name: str
    py_name: str
    type: FieldType
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    default: str  # Kafka keeps defaults as strings; "" means the type's default
    ignorable: bool
    map_key: bool
    entity_type: str | None
    about: str
    flexible_versions: Versions | None  # field-level override (string/bytes only)
    zero_copy: bool
    struct: StructSpec | None  # inline or common struct for struct-typed fields


@dataclass(frozen=True, slots=True)
class StructSpec:
    name: str
    versions: Versions
    fields: tuple[FieldSpec, ...]
    is_common: bool = False


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """A whole spec file, validated."""

    path: str
    name: str
    type: str
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    deprecated_versions: Versions
    listeners: tuple[str, ...]
    latest_version_unstable: bool
    struct: StructSpec
    common_structs: tuple[StructSpec, ...] = field(default=())

    @property
    def removed(self) -> bool:
        return self.valid_versions.empty


def to_snake_case(name: str) -> str:
    """Kafka ``MessageGenerator.toSnakeCase``: ``_`` before an upper-case letter that follows a
    non-upper-case one (``KRaftVersion`` -> ``kraft_version``)."""
    out: list[str] = []
    prev_upper = True
    for i, ch in enumerate(name):
        if ch.isupper():
            if i > 0 and not prev_upper:
                out.append("_")
            out.append(ch.lower())
            prev_upper = True
        else:
            out.append(ch)
            prev_upper = False
    s = "".join(out)
    if keyword.iskeyword(s) or s in ("self",):
        s += "_"
    return s


def strip_comments(text: str) -> str:
    """Remove ``//`` and ``/* */`` comments outside JSON strings (Jackson ``ALLOW_COMMENTS``)."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if c == '"':
            in_str = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ValueError("unterminated /* comment")
            i = j + 2
            out.append(" ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def parse_json(text: str, path: str = "<spec>") -> dict[str, Any]:
    try:
        obj = json.loads(strip_comments(text), object_pairs_hook=_reject_duplicate_keys)
    except ValueError as e:
        raise SpecError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise SpecError(f"{path}: the root must be a JSON object")
    return obj


def load_file(path: str | Path) -> MessageSpec:
    p = Path(path)
    return build_spec(parse_json(p.read_text(encoding="utf-8"), str(p)), str(p))


def load_dir(*dirs: str | Path) -> list[MessageSpec]:
    """Load and cross-validate every ``*.json`` of the given directories, sorted by file name."""
    specs = []
    for d in dirs:
        for p in sorted(Path(d).glob("*.json")):
            specs.append(load_file(p))
    check_cross_spec(specs)
    return specs


def check_cross_spec(specs: list[MessageSpec]) -> None:
    """Request/response pairing per apiKey and unique record types (Kafka
    ``ApiMessageTypeGenerator.registerMessageType``, ``MetadataRecordTypeGenerator``)."""
    reqs: dict[int, MessageSpec] = {}
    resps: dict[int, MessageSpec] = {}
    records: dict[tuple[str, int], MessageSpec] = {}
    names: dict[str, MessageSpec] = {}
    for s in specs:
        if s.name in names:
            raise SpecError(f"{s.path}: message name {s.name} is also used by {names[s.name].path}")
        names[s.name] = s
        if s.type in ("request", "response"):
            table = reqs if s.type == "request" else resps
            if s.api_key in table:
                raise SpecError(
                    f"{s.path}: Found more than one {s.type} with apiKey {s.api_key} "
                    f"({table[s.api_key].path})"
                )
            table[s.api_key] = s
        elif s.type in ("metadata", "coordinator-key", "coordinator-value"):
            key = (s.type, s.api_key)
            if key in records:
                raise SpecError(
                    f"{s.path}: duplicate {s.type} record type {s.api_key} ({records[key].path})"
                )
            records[key] = s
    for k, s in reqs.items():
        if k not in resps:
            raise SpecError(f"{s.path}: request apiKey {k} has no response")
    for k, s in resps.items():
        if k not in reqs:
            raise SpecError(f"{s.path}: response apiKey {k} has no request")


class _Ctx:
    def __init__(self, path: str, valid: Versions, flexible: Versions, common: dict[str, Any]):
        self.path = path
        self.valid = valid
        self.flexible = flexible
        self.common_raw = common
        self.common: dict[str, StructSpec] = {}
        self.struct_names: set[str] = set()
        self.building: set[str] = set()

    def err(self, where: str, msg: str) -> SpecError:
        return SpecError(f"{self.path}: {where}: {msg}")


def build_spec(raw: dict[str, Any], path: str) -> MessageSpec:
    """Validate a parsed spec into a :class:`MessageSpec` or raise :class:`SpecError`."""
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise SpecError(f"{path}: unknown top-level key(s) {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{path}: missing name")
    stype = raw.get("type")
    if stype is None:
        raise SpecError(f"{path}: {name}: missing type")
    if stype not in SPEC_TYPES:
        raise SpecError(f"{path}: {name}: unknown type {stype!r}")
    if "validVersions" not in raw:
        raise SpecError(f"{path}: You must specify the version of the {name} structure")
    try:
        valid = Versions.parse(raw["validVersions"])
    except ValueError as e:
        raise SpecError(f"{path}: {name}: validVersions: {e}") from None
    if not valid.empty and valid.hi == MAX_VERSION:
        raise SpecError(f"{path}: {name}: validVersions does not specify a maximum version")
    if stype in ("request", "response") and not name.endswith(stype.capitalize()):
        raise SpecError(f"{path}: {name}: a {stype} name must end in {stype.capitalize()}")
    if stype != "request":
        for k in ("listeners", "latestVersionUnstable"):
            if k in raw:
                raise SpecError(f"{path}: {name}: {k} is only valid for messages with type request")
    api_key = raw.get("apiKey")
    if api_key is not None:
        if isinstance(api_key, bool) or not isinstance(api_key, int) or not 0 <= api_key <= 32767:
            raise SpecError(f"{path}: {name}: apiKey must be an int16 >= 0")
    if stype in ("request", "response", "metadata", "coordinator-key", "coordinator-value"):
        if api_key is None:
            raise SpecError(f"{path}: {name}: a {stype} spec needs an apiKey")
    listeners_raw = raw.get("listeners", [])
    if isinstance(listeners_raw, str):
        listeners_raw = [listeners_raw]
    if not isinstance(listeners_raw, list) or any(x not in LISTENERS for x in listeners_raw):
        raise SpecError(f"{path}: {name}: invalid listeners {listeners_raw!r}")
    unstable = raw.get("latestVersionUnstable", False)
    if not isinstance(unstable, bool):
        raise SpecError(f"{path}: {name}: latestVersionUnstable must be a boolean")
    try:
        deprecated = Versions.parse(raw.get("deprecatedVersions"), NONE)
    except ValueError as e:
        raise SpecError(f"{path}: {name}: deprecatedVersions: {e}") from None

    if valid.empty:
        flexible = NONE
        listeners: tuple[str, ...] = ()
    else:
        if "flexibleVersions" not in raw:
            raise SpecError(
                f"{path}: {name}: You must specify a value for flexibleVersions. "
                "Please use 0+ for all new messages."
            )
        try:
            flexible = Versions.parse(raw["flexibleVersions"])
        except ValueError as e:
            raise SpecError(f"{path}: {name}: flexibleVersions: {e}") from None
        if not flexible.empty and not flexible.open_ended:
            raise SpecError(
                f"{path}: {name}: flexibleVersions must be either none, or an open-ended range "
                f"(that ends with a plus sign)"
            )
        listeners = tuple(listeners_raw)
    if stype == "coordinator-key" and (not (valid.lo == valid.hi == 0) or not flexible.empty):
        raise SpecError(f"{path}: {name}: coordinator-key must have validVersions 0, no flexible")

    commons_raw = raw.get("commonStructs", [])
    if not isinstance(commons_raw, list):
        raise SpecError(f"{path}: {name}: commonStructs must be a list")
    common_by_name: dict[str, Any] = {}
    for c in commons_raw:
        if not isinstance(c, dict):
            raise SpecError(f"{path}: {name}: commonStructs entries must be objects")
        bad = set(c) - _COMMON_KEYS
        if bad:
            raise SpecError(f"{path}: common struct: unknown key(s) {sorted(bad)}")
        cname = c.get("name")
        if not isinstance(cname, str):
            raise SpecError(f"{path}: common struct without a name")
        if cname in common_by_name:
            raise SpecError(f"{path}: common struct {cname} was specified twice")
        common_by_name[cname] = c
    ctx = _Ctx(path, valid, flexible, common_by_name)
    for cname in common_by_name:
        _build_common(ctx, cname)
    commons = [ctx.common[c] for c in common_by_name]

    fields_raw = raw.get("fields", [])
    if fields_raw is None:
        fields_raw = []
    fields = _build_fields(ctx, fields_raw, name, ALL, top_level=True)
    struct = StructSpec(name, valid, fields)
    return MessageSpec(
        path=path,
        name=name,
        type=stype,
        api_key=api_key,
        valid_versions=valid,
        flexible_versions=flexible,
        deprecated_versions=deprecated,
        listeners=listeners,
        latest_version_unstable=unstable,
        struct=struct,
        common_structs=tuple(commons),
    )


def _build_common(ctx: _Ctx, cname: str) -> StructSpec:
    """Build a common struct on first use (common structs may refer to each other in any order)."""
    if cname in ctx.common:
        return ctx.common[cname]
    if cname in ctx.building:
        raise ctx.err(f"common struct {cname}", "common structs refer to each other in a cycle")
    ctx.building.add(cname)
    c = ctx.common_raw[cname]
    _check_struct_name(ctx, cname)
    try:
        cv = Versions.parse(c.get("versions"))
    except ValueError as e:
        raise ctx.err(f"common struct {cname}", str(e)) from None
    ctx.struct_names.add(cname)
    st = StructSpec(cname, cv, _build_fields(ctx, c.get("fields", []), cname, cv), True)
    ctx.common[cname] = st
    return st


def _check_struct_name(ctx: _Ctx, name: str) -> None:
    if not _FIELD_NAME.match(name) or not name[0].isupper():
        raise ctx.err(f"struct {name}", "struct names must be capitalised identifiers")


def _build_fields(
    ctx: _Ctx, raw_fields: Any, owner: str, owner_versions: Versions, top_level: bool = False
) -> tuple[FieldSpec, ...]:
    if not isinstance(raw_fields, list):
        raise ctx.err(owner, "fields must be a list")
    out: list[FieldSpec] = []
    names: set[str] = set()
    py_names: set[str] = set()
    tags: dict[int, str] = {}
    for rf in raw_fields:
        f = _build_field(ctx, rf, owner, top_level)
        if f.name in names:
            raise ctx.err(f"{owner}.{f.name}", "duplicate field name")
        if f.py_name in py_names:
            raise ctx.err(f"{owner}.{f.name}", f"field name collides as {f.py_name}")
        names.add(f.name)
        py_names.add(f.py_name)
        if f.tag is not None:
            if f.tag in tags:
                raise ctx.err(
                    f"{owner}.{f.name}", f"duplicate tag ID {f.tag} (also {tags[f.tag]})"
                )
            tags[f.tag] = f.name
        out.append(f)
    if tags and sorted(tags) != list(range(len(tags))):
        raise ctx.err(owner, f"the tag IDs are not contiguous: {sorted(tags)}")
    return tuple(out)


def _build_field(ctx: _Ctx, rf: Any, owner: str, top_level: bool) -> FieldSpec:
    if not isinstance(rf, dict):
        raise ctx.err(owner, "each field must be an object")
    fname = rf.get("name")
    where = f"{owner}.{fname}"
    bad = set(rf) - FIELD_KEYS
    if bad:
        raise ctx.err(where, f"unknown field key(s) {sorted(bad)}")
    if not isinstance(fname, str) or not _FIELD_NAME.match(fname):
        raise ctx.err(where, f"Invalid field name {fname!r}")
    traw = rf.get("type")
    if not isinstance(traw, str) or not traw:
        raise ctx.err(where, "missing type")
    ftype = _parse_type(ctx, where, traw)

    # Tagging.
    tag = rf.get("tag")
    tagged_raw = rf.get("taggedVersions")
    if tag is not None:
        if isinstance(tag, bool) or not isinstance(tag, int) or tag < 0:
            raise ctx.err(where, f"tag must be a non-negative integer, got {tag!r}")
        if tagged_raw is None:
            raise ctx.err(where, "a field with a tag must specify taggedVersions")
    if tagged_raw is not None and tag is None:
        raise ctx.err(where, "taggedVersions is set but the field has no tag")
    try:
        tagged = Versions.parse(tagged_raw, NONE)
    except ValueError as e:
        raise ctx.err(where, f"taggedVersions: {e}") from None
    try:
        versions = Versions.parse(rf.get("versions"), tagged if tag is not None else None)
    except ValueError as e:
        raise ctx.err(where, f"versions: {e}") from None
    try:
        nullable = Versions.parse(rf.get("nullableVersions"), NONE)
    except ValueError as e:
        raise ctx.err(where, f"nullableVersions: {e}") from None
    if not nullable.empty and not ftype.can_be_nullable:
        raise ctx.err(where, f"Type {ftype} cannot be nullable")
    if tag is not None:
        if not tagged.open_ended:
            raise ctx.err(where, "taggedVersions must be an open-ended range (N+)")
        if not tagged.issubset(versions):
            raise ctx.err(where, f"taggedVersions {tagged} is not a subset of versions {versions}")
        if not tagged.issubset(ctx.flexible):
            raise ctx.err(
                where,
                f"taggedVersions {tagged} is not a subset of the flexible versions {ctx.flexible}",
            )
        tn = tagged.intersect(nullable)
        if not tn.empty and tn != tagged:
            raise ctx.err(where, "a tagged field must be nullable in all or none of its versions")
        if ftype.name == "records" and not ftype.is_array:
            raise ctx.err(where, "records fields cannot be tagged")

    # Flags.
    ignorable = rf.get("ignorable", False)
    if ignorable == "true":
        ignorable = True
    elif ignorable == "false":
        ignorable = False
    if not isinstance(ignorable, bool):
        raise ctx.err(where, f"ignorable must be a boolean, got {ignorable!r}")
    map_key = rf.get("mapKey", False)
    if not isinstance(map_key, bool):
        raise ctx.err(where, "mapKey must be a boolean")
    if map_key and tag is not None:
        raise ctx.err(where, "Tagged fields cannot be used as keys")
    if map_key and top_level:
        raise ctx.err(where, "Cannot set mapKey on top level fields")
    zero_copy = rf.get("zeroCopy", False)
    if zero_copy and (ftype.name != "bytes" or ftype.is_array):
        raise ctx.err(where, "zeroCopy is only valid on bytes fields")
    fflex_raw = rf.get("flexibleVersions")
    fflex = None
    if fflex_raw is not None:
        if ftype.is_array or ftype.name not in ("string", "bytes"):
            raise ctx.err(where, "field-level flexibleVersions is only valid on string or bytes")
        try:
            fflex = Versions.parse(fflex_raw)
        except ValueError as e:
            raise ctx.err(where, f"flexibleVersions: {e}") from None
        if not fflex.issubset(ctx.flexible):
            raise ctx.err(where, "field flexibleVersions must be a subset of the message's")
    entity = rf.get("entityType")
    if entity is not None:
        if entity not in ENTITY_TYPES:
            raise ctx.err(where, f"unknown entityType {entity!r}")
        want = ENTITY_TYPES[entity]
        if want is not None and ftype.name != want:
            raise ctx.err(where, f"entityType {entity} requires type {want}, not {ftype}")
    about = rf.get("about", "")
    if not isinstance(about, str):
        raise ctx.err(where, "about must be a string")

    # Structs.
    struct: StructSpec | None = None
    sub = rf.get("fields")
    if ftype.is_struct:
        if ftype.name in ctx.common:
            if sub is not None:
                raise ctx.err(
                    where, f"Can't re-specify the common struct {ftype.name} as an inline struct"
                )
            struct = ctx.common[ftype.name]
        elif ftype.name in ctx.common_raw:
            if sub is not None:
                raise ctx.err(
                    where, f"Can't re-specify the common struct {ftype.name} as an inline struct"
                )
            struct = _build_common(ctx, ftype.name)
        else:
            if sub is None:
                raise ctx.err(where, f"struct type {ftype.name} has no fields and is not common")
            _check_struct_name(ctx, ftype.name)
            if ftype.name in ctx.struct_names:
                raise ctx.err(where, f"Struct {ftype.name} was specified twice")
            ctx.struct_names.add(ftype.name)
            struct = StructSpec(ftype.name, versions, _build_fields(ctx, sub, ftype.name, versions))
    elif sub is not None:
        raise ctx.err(where, f"fields are only allowed on struct types, not {ftype}")

    default = _check_default(ctx, where, rf.get("default"), ftype, versions, nullable)
    return FieldSpec(
        name=fname,
        py_name=to_snake_case(fname),
        type=ftype,
        versions=versions,
        nullable_versions=nullable,
        tagged_versions=tagged,
        tag=tag,
        default=default,
        ignorable=ignorable,
        map_key=map_key,
        entity_type=entity,
        about=about,
        flexible_versions=fflex,
        zero_copy=bool(zero_copy),
        struct=struct,
    )


def _parse_type(ctx: _Ctx, where: str, t: str) -> FieldType:
    is_array = t.startswith("[]")
    inner = t[2:] if is_array else t
    if inner.startswith("[]"):
        raise ctx.err(where, f"arrays of arrays are not supported: {t}")
    if inner in PRIMITIVES:
        return FieldType(inner, is_array)
    if inner and inner[0].isupper() and _FIELD_NAME.match(inner):
        return FieldType(inner, is_array)
    raise ctx.err(where, f"Can't parse type {t!r}")


def _check_default(
    ctx: _Ctx, where: str, raw: Any, ftype: FieldType, versions: Versions, nullable: Versions
) -> str:
    if raw is None:
        return ""
    if isinstance(raw, bool):
        raw = "true" if raw else "false"
    elif isinstance(raw, int | float):
        raw = str(raw)
    if not isinstance(raw, str):
        raise ctx.err(where, f"invalid default {raw!r}")
    d = raw
    if d == "":
        return ""
    if d == "null":
        if not ftype.can_be_nullable:
            raise ctx.err(where, f"null cannot be the default for a {ftype} field")
        if not versions.issubset(nullable):
            raise ctx.err(
                where, "null cannot be the default because not all versions of this field are "
                "nullable",
            )
        return d
    if ftype.is_array or ftype.is_struct or ftype.name in ("bytes", "records"):
        raise ctx.err(where, f"invalid default {d!r}: only \"\" or \"null\" for {ftype}")
    n = ftype.name
    if n in INT_RANGES:
        try:
            v = int(d[2:], 16) if d.lower().startswith("0x") else int(d, 10)
        except ValueError:
            raise ctx.err(where, f"invalid default {d!r} for {n}") from None
        lo, hi = INT_RANGES[n]
        if not lo <= v <= hi:
            raise ctx.err(where, f"default {d!r} is out of range for {n}")
    elif n == "bool":
        if d.lower() not in ("true", "false"):
            raise ctx.err(where, f"invalid default {d!r} for bool")
    elif n == "float64":
        try:
            float(d)
        except ValueError:
            raise ctx.err(where, f"invalid default {d!r} for float64") from None
    elif n == "uuid":
        import base64

        try:
            b = base64.urlsafe_b64decode(d + "=" * (-len(d) % 4))
        except ValueError:
            raise ctx.err(where, f"invalid default {d!r} for uuid") from None
        if len(b) != 16:
            raise ctx.err(where, f"invalid default {d!r} for uuid")
    return d


def field_present(f: FieldSpec, v: int) -> bool:
    return v in f.versions


def field_tagged(f: FieldSpec, v: int) -> bool:
    return f.tag is not None and v in f.tagged_versions


def field_nullable(f: FieldSpec, v: int) -> bool:
    return v in f.nullable_versions


def python_default(f: FieldSpec) -> Any:
    """The field's default as a Python value (structs excluded: callers build them)."""
    d = f.default
    t = f.type
    if d == "null":
        return None
    if t.is_array:
        return ()
    n = t.name
    if n in INT_RANGES:
        if d == "":
            return 0
        return int(d[2:], 16) if d.lower().startswith("0x") else int(d, 10)
    if n == "bool":
        return d.lower() == "true"
    if n == "float64":
        return float(d) if d else 0.0
    if n == "string":
        return d
    if n in ("bytes",):
        return b""
    if n == "records":
        return None if f.versions.issubset(f.nullable_versions) else b""
    if n == "uuid":
        import base64
        import uuid

        if d == "":
            return uuid.UUID(int=0)
        return uuid.UUID(bytes=base64.urlsafe_b64decode(d + "=" * (-len(d) % 4)))
    return None
