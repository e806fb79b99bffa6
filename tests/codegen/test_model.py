"""Negative generator tests: every rule of Kafka's generator (reference A.12) is rejected with the
file and the field named, in the style of Kafka's MessageDataGeneratorTest."""

from __future__ import annotations

import copy

import pytest

from codegen.model import SpecError, Versions, build_spec, check_cross_spec, parse_json

BASE = {
    "apiKey": 250,
    "type": "request",
    "listeners": ["broker"],
    "name": "FooRequest",
    "validVersions": "0-2",
    "flexibleVersions": "1+",
    "fields": [
        {"name": "Id", "type": "int32", "versions": "0+", "about": "x"},
        {
            "name": "Items",
            "type": "[]Item",
            "versions": "0+",
            "about": "x",
            "fields": [{"name": "Key", "type": "string", "versions": "0+", "about": "x"}],
        },
        {"name": "Note", "type": "string", "versions": "1+", "nullableVersions": "1+",
         "tag": 0, "taggedVersions": "1+", "about": "x"},  # fmt: skip
    ],
}


def spec_with(**changes):
    s = copy.deepcopy(BASE)
    for k, v in changes.items():
        if v is None:
            s.pop(k, None)
        else:
            s[k] = v
    return s


def field_with(index=0, **changes):
    s = copy.deepcopy(BASE)
    for k, v in changes.items():
        if v is None:
            s["fields"][index].pop(k, None)
        else:
            s["fields"][index][k] = v
    return s


def rejects(raw, fragment):
    with pytest.raises(SpecError) as e:
        build_spec(raw, "specs/Foo.json")
    msg = str(e.value)
    assert "specs/Foo.json" in msg
    assert fragment in msg, msg
    return msg


def test_base_is_valid():
    spec = build_spec(copy.deepcopy(BASE), "specs/Foo.json")
    assert spec.valid_versions == Versions(0, 2)
    assert [f.py_name for f in spec.struct.fields] == ["id", "items", "note"]


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (spec_with(bogus=1), "unknown top-level key"),
        (spec_with(type=None), "missing type"),
        (spec_with(validVersions=None), "You must specify the version"),
        (spec_with(validVersions="0+"), "does not specify a maximum version"),
        (spec_with(flexibleVersions=None), "flexibleVersions"),
        (spec_with(flexibleVersions="0-1"), "open-ended"),
        (spec_with(name="Foo"), "must end in Request"),
        (spec_with(type="response", name="FooResponse"), "only valid for messages with type"),
        (spec_with(type="request", apiKey=None), "needs an apiKey"),
        (spec_with(listeners=["nowhere"]), "invalid listeners"),
        (spec_with(validVersions="2-1"), "validVersions"),
        (spec_with(validVersions="-1"), "validVersions"),
        (field_with(0, name="1d"), "Invalid field name"),
        (field_with(0, type="int33"), "Can't parse type"),
        (field_with(0, type="[][]int32"), "arrays of arrays"),
        (field_with(0, nullableVersions="0+"), "cannot be nullable"),
        (field_with(0, default="abc"), "invalid default"),
        (field_with(0, default="2147483648"), "out of range"),
        (field_with(0, default="null"), "null cannot be the default"),
        (field_with(1, default="x"), "only \"\" or \"null\""),
        (field_with(0, fields=[]), "only allowed on struct types"),
        (field_with(0, mapKey=True), "Cannot set mapKey on top level fields"),
        (field_with(0, zeroCopy=True), "zeroCopy"),
        (field_with(0, entityType="topicName"), "entityType topicName requires type string"),
        (field_with(0, entityType="nope"), "unknown entityType"),
        (field_with(0, bogus=1), "unknown field key"),
        (field_with(0, tag=1), "must specify taggedVersions"),
        (field_with(0, taggedVersions="1+"), "no tag"),
        (field_with(2, tag=-1), "non-negative"),
        (field_with(2, taggedVersions="1-2"), "open-ended"),
        (field_with(2, taggedVersions="0+", versions="0+"), "not a subset of the flexible"),
        (field_with(2, versions="2+", taggedVersions="1+"), "not a subset of versions"),
        (field_with(2, nullableVersions="2+"), "nullable in all or none"),
        (field_with(2, tag=1), "not contiguous"),
        (field_with(0, flexibleVersions="1+"), "only valid on string or bytes"),
        (field_with(2, flexibleVersions="0+"), "subset of the message"),
    ],
)
def test_rejections(raw, fragment):
    rejects(raw, fragment)


def test_duplicate_field_name():
    s = copy.deepcopy(BASE)
    s["fields"].append({"name": "Id", "type": "int8", "versions": "0+", "about": "y"})
    rejects(s, "duplicate field name")


def test_duplicate_tag():
    s = copy.deepcopy(BASE)
    s["fields"].append({"name": "Other", "type": "int8", "versions": "1+", "tag": 0,
                        "taggedVersions": "1+", "about": "y"})  # fmt: skip
    rejects(s, "duplicate tag ID 0")


def test_duplicate_struct_name():
    s = copy.deepcopy(BASE)
    s["fields"].append({"name": "More", "type": "[]Item", "versions": "0+", "about": "y",
                        "fields": [{"name": "A", "type": "int8", "versions": "0+"}]})  # fmt: skip
    rejects(s, "Struct Item was specified twice")


def test_struct_name_not_capitalised():
    s = copy.deepcopy(BASE)
    s["fields"][1]["type"] = "[]item"
    rejects(s, "Can't parse type")


def test_common_struct_rules():
    s = copy.deepcopy(BASE)
    s["commonStructs"] = [
        {"name": "Item", "versions": "0+",
         "fields": [{"name": "K", "type": "int8", "versions": "0+"}]}  # fmt: skip
    ]
    rejects(s, "re-specify the common struct Item")
    s2 = copy.deepcopy(BASE)
    s2["commonStructs"] = [{"name": "C", "versions": "0+", "fields": []}] * 2
    rejects(s2, "common struct C was specified twice")


def test_tagged_records_rejected():
    s = copy.deepcopy(BASE)
    s["fields"][2]["type"] = "records"
    rejects(s, "records fields cannot be tagged")


def test_tagged_map_key_rejected():
    s = copy.deepcopy(BASE)
    s["fields"][1]["fields"].append({"name": "T", "type": "int8", "versions": "1+", "tag": 0,
                                     "taggedVersions": "1+", "mapKey": True})  # fmt: skip
    rejects(s, "Tagged fields cannot be used as keys")


def test_json_syntax_rules():
    with pytest.raises(SpecError, match="duplicate key"):
        parse_json('{"name": "A", "name": "B"}', "x.json")
    with pytest.raises(SpecError, match="invalid JSON"):
        parse_json('{"name": "A",}', "x.json")
    # Comments are allowed, also inside the object, but not inside strings.
    d = parse_json('// header\n{"name": /* c */ "A // not a comment"}', "x.json")
    assert d["name"] == "A // not a comment"


def test_default_coercions():
    s = copy.deepcopy(BASE)
    s["fields"][0]["default"] = 16  # a JSON number becomes "16", as Jackson does
    s["fields"][2]["ignorable"] = "true"
    spec = build_spec(s, "specs/Foo.json")
    assert spec.struct.fields[0].default == "16"
    assert spec.struct.fields[2].ignorable is True


def test_removed_api_needs_no_fields():
    spec = build_spec(
        {"apiKey": 4, "type": "request", "name": "GoneRequest", "validVersions": "none"}, "g.json"
    )
    assert spec.removed and spec.struct.fields == ()


def test_cross_spec_pairing():
    req = build_spec(copy.deepcopy(BASE), "specs/Foo.json")
    with pytest.raises(SpecError, match="has no response"):
        check_cross_spec([req])
    resp = build_spec(
        {"apiKey": 250, "type": "response", "name": "FooResponse", "validVersions": "0",
         "flexibleVersions": "0+", "fields": []}, "specs/FooResponse.json")  # fmt: skip
    check_cross_spec([req, resp])
    with pytest.raises(SpecError, match="is also used by"):
        check_cross_spec([req, resp, build_spec(copy.deepcopy(BASE), "specs/Foo2.json")])
    other = build_spec(spec_with(name="BarRequest"), "specs/Bar.json")
    with pytest.raises(SpecError, match="more than one request with apiKey 250"):
        check_cross_spec([req, resp, other])


def test_versions_parse():
    assert str(Versions.parse("3+")) == "3+"
    assert str(Versions.parse(" 1-4 ")) == "1-4"
    assert Versions.parse("none").empty
    assert Versions.parse("2").intersect(Versions.parse("0-1")).empty
    for bad in ("a", "1-", "-1", "40000", "3-1"):
        with pytest.raises(ValueError):
            Versions.parse(bad)
