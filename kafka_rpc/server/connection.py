"""One ``asyncio.Protocol`` per client connection, with Kafka's broker semantics.

* Frames: int32 signed size; negative or above ``socket.request.max.bytes`` closes the connection.
* Every complete frame of a read is split, its request header and context built, and, when its
  API has a synchronous handler, decoded, handled and its response framed, in one native call
  (``frames.dispatch``, ``_cframes.c``; pure-Python reference ``dispatch_py`` in frames.py).
  The call stops at the first frame it cannot finish (a rejection, a body that does not decode,
  an async handler, a handler that raised), served here, then resumes after it. The responses
  that are ready are written with one ``transport.write`` per read.
* Header failures (unknown api key, unsupported version, API not served on this listener, body
  that does not decode) close the connection without a response, except ApiVersions with an
  unsupported version: answered at v0 (header v0) with UNSUPPORTED_VERSION and ``[{18, min, max}]``.
* Responses leave in request order even when a later request's handler finishes first.
  Synchronous handlers, and async handlers that finish without suspending, are answered inline;
  only handlers that really await become tasks.
* A handler exception becomes that request's error response (every ErrorCode field of the
  version set to the KafkaError's code or UNKNOWN_SERVER_ERROR), logged; the connection lives on.
* Backpressure: reading pauses while ``max_inflight`` requests are unanswered or the transport's
  write buffer is full.
* Throttling (Kafka's convention, KIP-219; ``SocketServer.Processor`` muting the channel on
  ``ClientQuotaManager.throttle``'s ``ThrottledChannel``): a response whose ``throttle_time_ms``
  is > 0 is sent at once, and from the moment it is handed to the transport the connection
  reads nothing more for that many ms (muted). No new request is started meanwhile; requests
  already started (pipelined with or behind the throttled one before it was written) are
  answered; bytes received but not yet served wait for the end of the mute. A later throttled
  response while muted extends the mute to its own end, never shortens it. Muting is one more
  reason to pause reading, next to backpressure and shutdown (``_update_reading``), so none
  undoes another; the timer is cancelled when the connection closes, and a drain does not wait
  for it. Only the Python paths look at ``throttle_time_ms`` (async handlers, and handlers the
  native table omits): the synchronous handlers that ``frames.dispatch`` serves never throttle
  today, so the per-read fast path is unchanged. An error response built from a handler's
  exception never mutes.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import types
from collections import deque
from typing import TYPE_CHECKING, Any

from kafka_rpc.api.context import RequestContext, error_response
from kafka_rpc.protocol.errors import EncodeError, ErrorCode, KafkaError
from kafka_rpc.protocol.frames import (
    API_VERSIONS_KEY,
    REQUEST_FLEX,
    dispatch,
    encode_response,
)

if TYPE_CHECKING:
    from kafka_rpc.api.registry import ApiEntry
    from kafka_rpc.server.listener_state import ListenerState

log = logging.getLogger("kafka_rpc.server")

_size_unpack = struct.Struct(">i").unpack_from


@types.coroutine
def _resume(coro, yielded):
    """Continue a coroutine that was started inline and suspended on ``yielded`` (so a task is
    only created when a handler really awaits)."""
    while True:
        try:
            yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - forwarded into the coroutine
            try:
                yielded = coro.throw(exc)
            except StopIteration as e:
                return e.value
            continue
        try:
            yielded = coro.send(None)
        except StopIteration as e:
            return e.value


def _throttle_ms(response: Any) -> int:
    """The response's ``ThrottleTimeMs`` when > 0 (ms), else 0: the mute it asks for
    (KIP-219). Responses without the field (most APIs at some version) give 0."""
    ms = getattr(response, "throttle_time_ms", 0)
    return ms if type(ms) is int and ms > 0 else 0


def unsupported_api_versions_response(correlation_id: int, lo: int, hi: int) -> bytes:
    """Kafka's answer to an ApiVersions version it does not support (reference F.2)."""
    body = struct.pack(">ihihhh", correlation_id, ErrorCode.UNSUPPORTED_VERSION, 1, 18, lo, hi)
    return struct.pack(">i", len(body)) + body


class KafkaConnection(asyncio.Protocol):
    def __init__(self, listener: ListenerState) -> None:
        self.listener = listener
        self.table = listener.table
        self.dispatch_table = listener.dispatch_table
        self.max_bytes = listener.max_request_bytes
        self.max_inflight = listener.max_inflight
        self.metrics = listener.metrics
        self.transport: asyncio.Transport | None = None
        self.peer = None
        self._rest = bytearray()
        self._need = 4
        self._pending: deque = deque()  # bytes (ready) or [bytes | None] slots
        self._slots = 0  # how many of _pending are slots
        self._tasks: set[asyncio.Task] = set()
        self._paused = False
        self._write_paused = False
        self._closed = False
        self._closing = False
        self._drained: asyncio.Future | None = None
        self._muted = False  # throttled (KIP-219): read nothing until _mute_timer fires
        self._mute_timer: asyncio.TimerHandle | None = None

    # -------------------------------------------------------------------------- transport events
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        self.listener.connections.add(self)

    def connection_lost(self, exc) -> None:
        self._closed = True
        self._cancel_mute()
        self.listener.connections.discard(self)
        for t in list(self._tasks):
            t.cancel()
        self._pending.clear()
        self._slots = 0
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if not (self._pending or self._rest or self._paused or self._closed or self._closing):
            # idle connection: the common case, answered without touching the pending queue
            out: list = []
            pos, stop, error = self._dispatch(data, 0, self.max_inflight, out)
            if stop is None and error is None and pos == len(data):
                if out:
                    assert self.transport is not None  # data comes after connection_made
                    self.transport.write(out[0] if len(out) == 1 else b"".join(out))
                return
            self._process(data, pos, stop, error, out)
            return
        if self._closed or self._closing:
            return
        if self._rest:
            self._rest += data
            if len(self._rest) < self._need or self._paused:
                return
            data = bytes(self._rest)
            self._rest = bytearray()
        elif self._paused:
            self._rest += data
            return
        out = []
        pos, stop, error = self._dispatch(data, 0, self.max_inflight - len(self._pending), out)
        self._process(data, pos, stop, error, out)

    # -------------------------------------------------------------------------- frames
    def _dispatch(self, buf: bytes, pos: int, room: int, out: list) -> tuple:
        """``frames.dispatch`` from ``pos`` with at most ``room`` frames: serves every frame whose
        handler is synchronous (natively when built) into ``out`` and stops at the first one it
        cannot finish; returns ``(new_pos, stop, error)``. The responses it frames are not
        checked for ``throttle_time_ms`` (no synchronous handler throttles; only ``_serve`` and
        ``_task_done`` look, see the module docstring), so a throttle never slows this path."""
        return dispatch(
            buf, pos, self.max_bytes, room, REQUEST_FLEX, RequestContext, self.listener,
            self.dispatch_table, out, self.metrics,
        )  # fmt: skip

    def _process(self, buf: bytes, pos: int, stop: Any, error: str | None, out: list) -> None:
        """Carry on from a ``_dispatch`` of ``buf``: queue ``out``, serve the frame it stopped at
        and resume after it, then close on ``error``, keep an incomplete tail and flush."""
        pending = self._pending
        while True:
            if out:
                pending.extend(out)
            if stop is None:
                break
            self._serve_stop(*stop)
            if self._closed:
                return
            out = []
            pos, stop, error = self._dispatch(buf, pos, self.max_inflight - len(pending), out)
        if error is not None:
            log.info("closing %s: %s", self.peer, error)
            self._abort()
            return
        n = len(buf)
        if pos < n:
            self._rest = bytearray(buf[pos:]) if pos else bytearray(buf)
            size = _size_unpack(self._rest, 0)[0] if n - pos >= 4 else -1
            # a size not yet validated (frames left for lack of room) is checked on the next scan
            self._need = 4 + size if 0 <= size <= self.max_bytes else 4
            if len(pending) >= self.max_inflight:
                # out of room: pause; the flush resumes and scans the rest once answers left
                self._update_reading()
        self._flush()

    def _serve_stop(self, kind: int, ctx: RequestContext, request: Any, exc: Any) -> None:
        """A frame ``dispatch`` stopped at (see frames.dispatch_py): 0, served here (rejections,
        async handlers); 1, its body did not decode (close); 2, its handler or writer raised."""
        api_key, version, corr = ctx[0], ctx[1], ctx[2]
        entry = self.table.get(api_key)
        if kind == 0:
            if entry is None or not entry.min_version <= version <= entry.max_version:
                self._reject(entry, api_key, version, corr)
                return
            try:
                request = entry.readers[version](ctx[5], ctx[6])[0]
            except Exception as e:  # noqa: BLE001 - any decode failure closes, as Kafka does
                kind, exc = 1, e
            else:
                self._serve(entry, ctx, request)
                return
        assert entry is not None  # kinds 1 and 2: frames of an api the table serves
        if kind == 1:
            log.info("closing %s: cannot decode %s v%d: %s", self.peer, entry.name, version, exc)
            self._abort()
            return
        data = self._error(entry, ctx, request, exc)
        if data is None:
            self._abort()
            return
        self._pending.append(data)

    def _serve(self, entry: ApiEntry, ctx: RequestContext, request: Any) -> None:
        """Run a handler that ``dispatch`` does not (async, or any handler when its table omits
        it): inline until it really awaits, then in a task whose slot keeps the order."""
        metrics = self.metrics
        t0 = time.perf_counter() if metrics is not None else 0.0
        data: bytes | bytearray | None
        try:
            result = entry.handler(ctx, request)
            if entry.is_async:
                try:
                    yielded = result.send(None)
                except StopIteration as stop:
                    result = stop.value
                else:
                    self._await_in_task(entry, ctx, request, result, yielded, t0)
                    return
            data = self._encode(entry, ctx, result)
        except Exception as exc:  # noqa: BLE001 - becomes the request's error response
            data = self._error(entry, ctx, request, exc)
            if data is None:
                self._abort()
                return
        else:
            throttle_ms = _throttle_ms(result)
            if throttle_ms:
                # a ready slot that carries its throttle: _flush mutes once it is written
                self._pending.append([data, throttle_ms])
                self._slots += 1
                data = None
        if metrics is not None:
            metrics.observe(entry.api_key, ctx.api_version, time.perf_counter() - t0, False)
        if data is not None:
            self._pending.append(data)

    def _reject(self, entry: ApiEntry | None, api_key: int, version: int, corr: int) -> None:
        """An api key not served on this listener or a version out of range: close, except
        ApiVersions, answered at v0 with UNSUPPORTED_VERSION and its range (KIP-511)."""
        if entry is None:
            log.info("closing %s: api key %d not served on %s", self.peer, api_key,
                     self.listener.name)  # fmt: skip
            self._abort()
        elif api_key == API_VERSIONS_KEY:
            self._pending.append(
                unsupported_api_versions_response(corr, entry.min_version, entry.max_version)
            )
        else:
            log.info("closing %s: %s version %d unsupported", self.peer, entry.name, version)
            self._abort()

    def _await_in_task(self, entry, ctx, request, coro, yielded, t0) -> None:
        """A handler that really suspended: finish it in a task; its slot keeps the order."""
        slot = [None]
        self._pending.append(slot)
        self._slots += 1
        task = asyncio.get_running_loop().create_task(_resume(coro, yielded))
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._task_done(t, slot, entry, ctx, request, t0))

    def _encode(self, entry: ApiEntry, ctx: RequestContext, response: Any) -> bytes | bytearray:
        version = ctx.api_version
        return encode_response(
            ctx.correlation_id, version >= entry.resp_header_flex, response, entry.writers[version]
        )

    def _error(self, entry, ctx, request, exc) -> bytes | bytearray | None:
        code = exc.code if isinstance(exc, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
        log.error(
            "error handling %s v%d (api key %d) correlation id %d client id %r from %s -> %s",
            entry.name, ctx.api_version, entry.api_key, ctx.correlation_id, ctx.client_id,
            self.peer, ErrorCode.for_code(int(code)).name,
            exc_info=not isinstance(exc, KafkaError),
        )  # fmt: skip
        if self.metrics is not None:
            self.metrics.observe(entry.api_key, ctx.api_version, 0.0, True)
        try:
            return self._encode(entry, ctx, error_response(entry, request, ctx.api_version, code))
        except (EncodeError, Exception):
            log.exception("cannot build the error response of %s; closing", entry.name)
            return None

    def _task_done(self, task, slot, entry, ctx, request, t0) -> None:
        self._tasks.discard(task)
        if self._closed or task.cancelled():
            return
        exc = task.exception()
        throttle_ms = 0
        data: bytes | bytearray | None
        if exc is None:
            try:
                result = task.result()
                data = self._encode(entry, ctx, result)
                throttle_ms = _throttle_ms(result)
                if self.metrics is not None:
                    elapsed = time.perf_counter() - t0
                    self.metrics.observe(entry.api_key, ctx.api_version, elapsed, False)
            except Exception as e:  # noqa: BLE001
                data = self._error(entry, ctx, request, e)
        else:
            data = self._error(entry, ctx, request, exc)
        if data is None:
            self._abort()
            return
        slot[0] = data
        if throttle_ms:
            slot.append(throttle_ms)
        self._flush()

    # -------------------------------------------------------------------------- output
    def _flush(self) -> None:
        """Write the responses that are ready, in request order (up to the first unfinished
        slot); mute after a throttled one (KIP-219); then pause or resume reading."""
        pending = self._pending
        mute_ms = 0
        out: deque | list
        if not self._slots:  # all ready: the common case
            out = pending
        else:
            out = []
            while pending:
                item = pending[0]
                if type(item) is list:
                    if item[0] is None:
                        break
                    self._slots -= 1
                    if len(item) > 1:  # [data, throttle_ms]
                        mute_ms = max(mute_ms, item[1])
                    item = item[0]
                out.append(item)
                pending.popleft()
        if out:
            if not self._closed:
                assert self.transport is not None  # responses come after connection_made
                self.transport.write(out[0] if len(out) == 1 else b"".join(out))
                if mute_ms:
                    self._mute(mute_ms)
            if out is pending:
                pending.clear()
        self._update_reading()
        if self._closing and not pending and self._drained is not None:
            if not self._drained.done():
                self._drained.set_result(None)

    def _update_reading(self) -> None:
        """Pause reading while any reason holds (shutdown, a throttle mute, a full write buffer,
        ``max_inflight`` unanswered requests); resume, and serve what was kept, when none does."""
        if self._closed or self.transport is None:
            return
        want_pause = (
            self._closing
            or self._muted
            or self._write_paused
            or len(self._pending) >= self.max_inflight
        )
        if want_pause and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        elif not want_pause and self._paused:
            self._paused = False
            self.transport.resume_reading()
            if self._rest and len(self._rest) >= self._need:
                data = bytes(self._rest)
                self._rest = bytearray()
                out: list = []
                pos, stop, error = self._dispatch(
                    data, 0, self.max_inflight - len(self._pending), out
                )
                self._process(data, pos, stop, error, out)

    # -------------------------------------------------------------------------- throttling
    def _mute(self, throttle_ms: int) -> None:
        """Read nothing for ``throttle_ms`` ms from now (a throttled response was just written;
        Kafka's ``ChannelMuteEvent.THROTTLE_STARTED``); an earlier end is pushed back, a later
        one kept. Not while shutting down: reading is paused for good then."""
        if self._closing or self._closed:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + throttle_ms / 1000
        timer = self._mute_timer
        if timer is not None:
            if timer.when() >= until:
                return
            timer.cancel()
        self._muted = True
        self._mute_timer = loop.call_at(until, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        """The throttle time has passed (``THROTTLE_ENDED``): read again unless another reason
        to pause holds."""
        self._mute_timer = None
        self._muted = False
        self._update_reading()

    def _cancel_mute(self) -> None:
        timer, self._mute_timer = self._mute_timer, None
        self._muted = False
        if timer is not None:
            timer.cancel()

    def _abort(self) -> None:
        """Close after writing the responses that are already complete (earlier requests)."""
        if self._closed:
            return
        out = []
        for item in self._pending:
            if type(item) is list:
                item = item[0]
                if item is None:
                    break
            out.append(item)
        assert self.transport is not None  # only a made connection is served or aborted
        if out:
            self.transport.write(b"".join(out))
        self._closed = True
        self._cancel_mute()
        self._pending.clear()
        self._slots = 0
        for t in list(self._tasks):
            t.cancel()
        self.transport.close()

    # -------------------------------------------------------------------------- shutdown
    async def drain_and_close(self) -> None:
        """Stop reading, let in-flight requests finish and their responses go out, then close.
        A throttle mute is dropped (reading stays paused by the shutdown), never waited for."""
        if self._closed:
            return
        self._closing = True
        self._cancel_mute()
        self._update_reading()
        if self._pending:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        if not self._closed:
            self._closed = True
            assert self.transport is not None  # listed in connections by connection_made
            self.transport.close()

    def force_close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        self._closed = True
        self._cancel_mute()
        self._pending.clear()
        self._slots = 0
        if self.transport is not None:
            self.transport.abort()
