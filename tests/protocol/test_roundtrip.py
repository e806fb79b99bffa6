"""Hypothesis round trip for every message and version we define (message_specs/), plus the
checks that generated code is fresh and that kio agrees wherever it knows the message."""

from __future__ import annotations

import importlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from codegen.model import load_dir
from kafka_rpc.protocol import codec
from tests.protocol.strategies import message_strategy

ROOT = Path(__file__).resolve().parents[2]
SPECS = [s for s in load_dir(ROOT / "message_specs") if not s.removed]
CASES = [(s, v) for s in SPECS for v in s.valid_versions]


def _kio_class(spec, version):
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", spec.name).lower()
    if spec.type in ("request", "response"):
        mod = f"kio.schema.{snake.rsplit('_', 1)[0]}.v{version}.{spec.type}"
    elif spec.type == "header":
        mod = f"kio.schema.{snake}.v{version}.header"
    elif spec.type == "data":
        mod = f"kio.schema.{snake}.v{version}.data"
    else:
        return None
    try:
        return getattr(importlib.import_module(mod), spec.name)
    except (ImportError, AttributeError):
        return None


@pytest.mark.parametrize(("spec", "version"), CASES, ids=[f"{s.name}-v{v}" for s, v in CASES])
def test_roundtrip(spec, version):
    mod = codec.module(spec.name)
    # kio's own class where kio knows the message; otherwise our per-version class, which
    # follows kio's entity conventions, so kio's native reader and writer still act as oracle.
    kio_cls = _kio_class(spec, version) or mod.VERSION_CLASSES[version]
    opts = {"int64_bounds": (0, 2**47)}

    @settings(suppress_health_check=list(HealthCheck), deadline=None)
    @given(message_strategy(spec, version, mod, **opts))
    def check(msg):
        data = codec.encode(msg, version)
        back, end = codec.decode_from(spec.name, version, data)
        assert end == len(data)
        assert back == msg
        from kio.serial import entity_reader, entity_writer

        kmsg, used = entity_reader(kio_cls)(data, 0)
        assert used == len(data)
        out = io.BytesIO()
        entity_writer(kio_cls)(out, kmsg)
        assert out.getvalue() == data

    check()


def test_generated_code_is_fresh():
    res = subprocess.run(
        [sys.executable, "-m", "codegen", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
