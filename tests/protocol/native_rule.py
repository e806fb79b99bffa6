"""When the tests of a native (C) codec extension are skipped: only when pure Python was asked
for (``KAFKA_RPC_PURE_PYTHON``, set and not ``0``, as ``kafka_rpc.protocol.primitives`` reads it),
or when the extension is missing outside CI (a developer without a C compiler: ``setup.py``
builds the extensions as optional). In CI (``CI`` set, as ``.ci/run`` sets it) a missing
extension is a failed build, and the tests run and fail instead of being skipped."""

from __future__ import annotations

import os

import pytest

__all__ = ["PURE_PYTHON", "native_tests"]

PURE_PYTHON = os.environ.get("KAFKA_RPC_PURE_PYTHON", "") not in ("", "0")
"""Pure Python was asked for: the native extensions are not loaded."""


def native_tests(built: bool, what: str) -> pytest.MarkDecorator:
    """The ``skipif`` mark of the tests of native extension ``what`` (``built``: it loaded)."""
    if PURE_PYTHON:
        return pytest.mark.skipif(True, reason=f"{what}: pure Python requested")
    in_ci = bool(os.environ.get("CI"))
    return pytest.mark.skipif(
        not built and not in_ci,
        reason=f"{what} not built (no C compiler at install?); in CI this fails",
    )
