"""The oracle bites: break our codec on purpose (inside each test only) and watch Kafka catch it.

Each mutation builds a generated module the way ``python -m codegen`` does, from a spec we alter
(or generated source we alter), and puts it in place of the real one for the test's duration
(``codec.module`` is patched; nothing on disk changes). The same message passes against the real
module first, so a failure can only come from the mutation:

1. a wrong default: MetadataRequest's AllowAutoTopicCreation default ``true`` -> ``false``
   (v4+). Caught by the defaults check: Kafka's default-constructed MetadataRequestData writes 1.
2. a wrong tagged field: ApiVersionsResponse's tags 1 (FinalizedFeaturesEpoch) and 2
   (FinalizedFeatures) swapped (v3+). Caught by check 1: Kafka cannot read our bytes.
3. a wrong nullable length: DescribeClusterResponse's null ErrorMessage written as a zero-length
   compact string (uvarint 1) instead of null (uvarint 0). The bytes still read (as ""), so
   Kafka writes the same bytes back; caught by check 2: Kafka's JSON view says ``""`` where
   ours says null.
"""

from __future__ import annotations

import json
import re
import sys
import types

import pytest

from codegen.emit import emit_module
from codegen.model import load_dir
from kafka_rpc.protocol import codec
from tests.kafka import kafka_specs
from tests.kafka.test_codec_oracle import ROOT, check_against_kafka

pytestmark = pytest.mark.kafka


@pytest.fixture
def oracle(kafka_oracle_newest):
    return kafka_oracle_newest


def field(spec: dict, name: str) -> dict:
    return next(f for f in spec["fields"] if f["name"] == name)


def mutate(monkeypatch, tmp_path, name: str, *, spec_edit=None, source_edit=None):
    """Generate ``name``'s module from its spec altered by ``spec_edit`` (a function of the
    parsed JSON) and/or with its generated source altered by ``source_edit``, and make
    ``codec.module(name)`` return it until the test ends. Returns ``(spec, module)``."""
    base = name.removesuffix("Request").removesuffix("Response")
    pair = {name, base + "Request", base + "Response"}
    for n in pair:
        path = ROOT / "message_specs" / f"{n}.json"
        if path.exists():
            data = kafka_specs.parse_spec(path.read_text())
            if n == name and spec_edit:
                spec_edit(data)
            (tmp_path / f"{n}.json").write_text(json.dumps(data))
    spec = next(s for s in load_dir(tmp_path) if s.name == name)
    source = emit_module(spec, "mutated")
    if source_edit:
        edited = source_edit(source)
        assert edited != source, "the source mutation matched nothing"
        source = edited
    mod = types.ModuleType(f"mutated_{name}")
    monkeypatch.setitem(sys.modules, mod.__name__, mod)  # dataclasses look their module up
    exec(compile(source, f"<mutated {name}>", "exec"), mod.__dict__)  # noqa: S102
    real = codec.module
    monkeypatch.setattr(codec, "module", lambda n: mod if n == name else real(n))
    return spec, mod


def real_spec(name: str):
    return next(s for s in load_dir(ROOT / "message_specs") if s.name == name)


def test_a_wrong_default_is_caught(oracle, monkeypatch, tmp_path):
    name, version = "MetadataRequest", 12
    check_against_kafka(oracle, real_spec(name), version, codec.module(name).MESSAGE(),
                        defaults=True)  # fmt: skip

    def edit(spec):
        assert field(spec, "AllowAutoTopicCreation")["default"] == "true"
        field(spec, "AllowAutoTopicCreation")["default"] = "false"

    spec, mod = mutate(monkeypatch, tmp_path, name, spec_edit=edit)
    with pytest.raises(AssertionError, match="Kafka's defaults differ"):
        check_against_kafka(oracle, spec, version, mod.MESSAGE(), defaults=True)


def test_a_wrong_tag_is_caught(oracle, monkeypatch, tmp_path):
    name, version = "ApiVersionsResponse", 3

    def message(mod):
        return mod.ApiVersionsResponse(
            finalized_features_epoch=5,
            finalized_features=(mod.FinalizedFeatureKey(name="metadata.version",
                                                        max_version_level=21,
                                                        min_version_level=21),),
        )  # fmt: skip

    check_against_kafka(oracle, real_spec(name), version, message(codec.module(name)))

    def edit(spec):
        epoch, features = field(spec, "FinalizedFeaturesEpoch"), field(spec, "FinalizedFeatures")
        assert (epoch["tag"], features["tag"]) == (1, 2)
        epoch["tag"], features["tag"] = 2, 1

    spec, mod = mutate(monkeypatch, tmp_path, name, spec_edit=edit)
    with pytest.raises(AssertionError, match="Kafka cannot read our bytes"):
        check_against_kafka(oracle, spec, version, message(mod))


def test_a_wrong_null_length_is_caught(oracle, monkeypatch, tmp_path):
    name, version = "DescribeClusterResponse", 1
    check_against_kafka(oracle, real_spec(name), version,
                        codec.module(name).MESSAGE(error_message=None))  # fmt: skip

    def edit(source):
        # the writer's "null compact string" branch for ErrorMessage: uvarint 0 -> 1 (= "")
        return re.sub(r"(x = o\.error_message\n\s+if x is None:\n\s+)w\.append\(0\)",
                      r"\1w.append(1)", source)  # fmt: skip

    spec, mod = mutate(monkeypatch, tmp_path, name, source_edit=edit)
    caught = r"JSON views differ:\s+\$\.errorMessage: ours=None Kafka=''"
    with pytest.raises(AssertionError, match=caught):
        check_against_kafka(oracle, spec, version, mod.MESSAGE(error_message=None))
