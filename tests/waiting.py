"""The one way a test waits for something to happen: poll a predicate until it holds.

A test that must see an event waits for that event, never for a fixed time: :func:`until` (in a
coroutine) and :func:`wait_until` (in plain code and threads) call ``predicate`` every
``interval`` seconds until it returns something truthy, and return that value. The bound
``timeout`` (seconds) is a cap against a hang, not an expectation: a loaded 2-core CI machine
may be many times slower than an idle one, so caps are generous, and a wait that took longer
than :data:`SLOW` seconds prints how long it took (shown by ``pytest -s`` and in a failure's
captured output), so a slow start is visible without failing the test.

``predicate`` may be a plain function or a coroutine function (its result is awaited).
A missed cap raises ``AssertionError("timed out after <timeout> s waiting for <what>")`` with
the last value the predicate returned.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SLOW", "until", "wait_until"]

SLOW = 5.0
"""s: a wait longer than this prints its duration."""


def _timed_out(what: str, timeout: float, last: Any) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")


def _report(what: str, t0: float) -> None:
    took = time.monotonic() - t0
    if took > SLOW:
        print(f"waited {took:.1f} s for {what}", flush=True)


async def until(predicate: Callable[[], Any], what: str, timeout: float = 30.0,
                interval: float = 0.05) -> Any:  # fmt: skip
    """Await ``predicate()`` (plain or coroutine function) until it is truthy, at most
    ``timeout`` s; returns its value. Raises AssertionError on the cap."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            _report(what, t0)
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, value)
        await asyncio.sleep(interval)


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 30.0,
               interval: float = 0.2) -> Any:  # fmt: skip
    """Block until ``predicate()`` (a plain function) is truthy, at most ``timeout`` s; returns
    its value. Raises AssertionError on the cap."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while True:
        value = predicate()
        if value:
            _report(what, t0)
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, value)
        time.sleep(interval)
