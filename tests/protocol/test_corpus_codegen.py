"""The generator over Apache Kafka's whole spec corpus (``../shared/kafka-specs``).

Every spec of message/, metadata/, raft/ and generator-test/ is generated into a temporary
package and imported. For every message and version: hypothesis instances round-trip through our
codec exactly; and where kio 0.6.x knows the same message and version, our bytes are decoded by
kio's native reader consuming every byte, and kio's own writer re-encodes them to exactly the
same bytes (kio is the independent oracle: it was generated from the same upstream specs by other
people).
"""

from __future__ import annotations

import importlib
import io
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from codegen.__main__ import generate
from codegen.model import load_dir
from tests.protocol.strategies import message_strategy

SHARED = Path(__file__).resolve().parents[3] / "shared" / "kafka-specs"
DIRS = ["message", "metadata", "raft", "generator-test"]

pytestmark = pytest.mark.skipif(not SHARED.exists(), reason="../shared/kafka-specs not present")


def _specs():
    if not SHARED.exists():
        return []
    return [s for s in load_dir(*(SHARED / d for d in DIRS)) if not s.removed]


SPECS = _specs()


@pytest.fixture(scope="module")
def corpus_pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    generate([SHARED / d for d in DIRS], root / "corpus_messages")
    sys.path.insert(0, str(root))
    try:
        yield "corpus_messages"
    finally:
        sys.path.remove(str(root))


def _kio_class(spec, version):
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", spec.name).lower()
    if spec.type in ("request", "response"):
        base = snake.rsplit("_", 1)[0]
        mod, cls = f"kio.schema.{base}.v{version}.{spec.type}", spec.name
    elif spec.type == "header":
        mod, cls = f"kio.schema.{snake}.v{version}.header", spec.name
    elif spec.type == "data":
        mod, cls = f"kio.schema.{snake}.v{version}.data", spec.name
    else:
        return None
    try:
        return getattr(importlib.import_module(mod), cls)
    except (ImportError, AttributeError):
        return None


def test_corpus_loads_completely():
    # 234 files: every one loads and validates (8 removed APIs have no versions).
    total = load_dir(*(SHARED / d for d in DIRS))
    assert len(total) == sum(len(list((SHARED / d).glob("*.json"))) for d in DIRS)


def test_corpus_modules_import(corpus_pkg):
    for s in SPECS:
        mod = importlib.import_module(f"{corpus_pkg}.{_module(s.name)}")
        assert s.name == mod.SPEC_NAME


def _module(name):
    from codegen.emit import module_name

    return module_name(name)


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_roundtrip_and_kio_oracle(spec, corpus_pkg):
    mod = importlib.import_module(f"{corpus_pkg}.{_module(spec.name)}")
    examples = max(3, settings().max_examples // 5)
    for version in spec.valid_versions:
        kio_cls = _kio_class(spec, version)
        # kio maps some int64 fields to datetimes (rejecting negatives) and timedeltas: keep
        # int64 values in the range kio can represent when it is the oracle.
        opts = {"int64_bounds": (0, 2**47)} if kio_cls is not None else {}
        strat = message_strategy(spec, version, mod, **opts)

        _check(mod, version, kio_cls, strat, examples)


def _check(mod, version, kio_cls, strat, examples):
    from kio.serial import entity_reader, entity_writer

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(strat)
    def check(msg):
        w = bytearray()
        mod.WRITERS[version](msg, w)
        data = bytes(w)
        back, end = mod.READERS[version](data, 0)
        assert end == len(data)
        assert back == msg
        if kio_cls is not None:
            kmsg, used = entity_reader(kio_cls)(data, 0)
            assert used == len(data), f"kio consumed {used} of {len(data)} bytes"
            out = io.BytesIO()
            entity_writer(kio_cls)(out, kmsg)
            assert out.getvalue() == data, "kio re-encodes different bytes"

    check()


def test_kio_oracle_covers_most_of_the_corpus():
    covered = sum(
        1 for s in SPECS for v in s.valid_versions if _kio_class(s, v) is not None
    )
    total = sum(1 for s in SPECS for _ in s.valid_versions)
    # kio 0.6.5 is generated from an upstream at most a few versions older than the corpus.
    assert covered / total > 0.8, (covered, total)
