"""Run a sans-io :class:`~kafka_rpc.raft.core.RaftCore` on the server's asyncio loop.

One task (:meth:`RaftDriver.start`) owns the core's timers: it sleeps until
``core.next_deadline_ms()`` or until an input wakes it, then calls ``core.poll(now)``, starts an
fsync of the log if the core appended (``core.handle_flushed(now)`` once it is done), drains
``core.take_outbound()`` and settles :meth:`RaftDriver.wait_committed` waiters. Inputs are fed to
the core directly, on the loop thread, and then wake the task:

* inbound Raft requests (:meth:`RaftDriver.handle`, called by ``kafka_rpc.handlers.raft``): the
  core answers through a reply callback, at once or later (a Fetch long-poll completes from a
  later poll or append); the response is fixed up for the request's version
  (:func:`~kafka_rpc.raft.wire.for_version`);
* responses to the core's outbound requests: each :class:`~kafka_rpc.raft.core.Outbound` is sent
  through one :class:`~kafka_rpc.client.KafkaRpcClient` per destination (connected lazily to the
  address ``core.address_of(destination)`` names: a voter's controller listener from the latest
  voter set, a bootstrap server, the leader's advertised endpoint, or the node an AddRaftVoter
  probes; no address fails the request as BROKER_NOT_AVAILABLE; the client negotiates versions
  with ApiVersions, and a client whose destination moved to another address is replaced). The
  AddRaftVoter probe (api key 18) is sent as ApiVersionsRequest v4 when the peer takes it (so
  that ``SupportedFeatures`` lists kraft.version) and the parsed response goes to the core. Every
  other request is sent with the version's topic field fixed by ``for_version`` and a
  timeout of ``controller.quorum.request.timeout.ms``; any failure (connect, timeout, decode,
  unsupported API) is fed back as ``handle_response(..., None)``. A request timeout also closes
  that voter's connection (Kafka's ``NetworkClient``), so the next request connects again. On an
  open connection the request is written at once (``KafkaRpcClient.request_nowait``) and the
  response handled in the future's done callback, bounded by a timer; only a connection still to
  be made takes a task;
* appends (:meth:`RaftDriver.append`) from the state machine side.

An inbound request, a response and a finished fsync step the core at once, in the callback that
brought them (:meth:`RaftDriver._step_inline`), so a follower appends, fsyncs and sends its next
Fetch, and a leader moves its high watermark and settles commit waiters, without waiting a loop
iteration for the task; appends wake the task (every append of one loop iteration then goes
into one batch, as with ``append.linger.ms`` 0 in Kafka).

Time is ``time.monotonic()`` in integer ms (:func:`monotonic_ms`), the same clock the core was
built with; the core turns it into wall-clock ms (its ``wall_offset_ms``) wherever Kafka reports
wall-clock time (record timestamps, DescribeQuorum's LastFetch/LastCaughtUp timestamps).

A leader with followers flushes on a thread of its own (:meth:`RaftDriver._start_flush`):
``log.begin_flush()`` on the loop, the fsyncs on the ``raft-fsync`` thread (a thread of its own
fed by a queue, reporting back with ``call_soon_threadsafe``) while the loop goes on
(answering the followers' Fetches with the new batches, taking appends), then ``log.end_flush()``
and ``core.handle_flushed`` back on the loop; at most one flush is in flight, and the core never
counts an offset that is not flushed (a voter fetches, and the leader counts its own end offset
toward the high watermark, only up to ``log.flushed_offset``). Other nodes flush inline.

An exception from the core or the log is logged and the loop keeps going after
``controller.quorum.retry.backoff.ms`` (a bad peer must not kill the quorum).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol.errors import ErrorCode, KafkaError
from kafka_rpc.raft.base import CONTROLLER_ONLY_REPLICATION_RPCS
from kafka_rpc.raft.core import NotLeaderError  # one type for the append and commit sides
from kafka_rpc.raft.wire import for_version

__all__ = ["NotLeaderError", "RaftDriver", "monotonic_ms"]

log = logging.getLogger("kafka_rpc.raft.driver")


def _wake_up(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


_VOTE = 52
_API_VERSIONS = 18
_PRE_VOTE_FROM_VERSION = 2  # Vote v2 carries PreVote (KIP-996), not ignorable


def _local_answer(out: Any, version: int) -> Any:
    """The answer to ``out`` made here without sending it, when the peer's versions cannot
    carry it (Kafka's ``NetworkClient.doSend`` does the same): a pre-vote to a peer whose Vote
    stops below v2 gets a top-level UNSUPPORTED_VERSION, on which the core stands at once as
    Kafka's ``handleVoteResponse`` does. None: send it."""
    if out.api_key != _VOTE or version >= _PRE_VOTE_FROM_VERSION:
        return None
    if not any(p.pre_vote for t in out.request.topics for p in t.partitions):
        return None
    from kafka_rpc.protocol import codec

    return codec.module("VoteResponse").VoteResponse(error_code=int(ErrorCode.UNSUPPORTED_VERSION))


_VOTER_CHANGE_RESPONSES = {
    80: "AddRaftVoterResponse",
    81: "RemoveRaftVoterResponse",
    82: "UpdateRaftVoterResponse",
}


def _unsupported_answer(out: Any, exc: KafkaError) -> Any:
    """The answer to an AddRaftVoter, RemoveRaftVoter or UpdateRaftVoter the peer does not
    serve at all (a Kafka 3.x controller): UNSUPPORTED_VERSION, made here as Kafka's
    ``NetworkClient`` makes it (which an UpdateRaftVoter sender takes as done). None for any
    other request or error."""
    name = _VOTER_CHANGE_RESPONSES.get(out.api_key)
    if name is None or exc.code != ErrorCode.UNSUPPORTED_VERSION:
        return None
    from kafka_rpc.protocol import codec

    return getattr(codec.module(name), name)(error_code=int(ErrorCode.UNSUPPORTED_VERSION))


def monotonic_ms() -> int:
    """The driver's clock: ``time.monotonic()`` in whole ms."""
    return int(time.monotonic() * 1000)


class RaftDriver:
    """Drives ``core`` (see the module docstring).

    ``log`` is the core's :class:`~kafka_rpc.raft.api.ReplicatedLog` (flushed and closed here);
    ``request_timeout_ms`` bounds one outbound request, connecting included;
    ``shutdown_timeout_ms`` bounds :meth:`stop`'s graceful resignation;
    ``retry_backoff_ms`` is the pause after an unexpected exception in the loop;
    ``thread_flush_alone``: a single-voter leader fsyncs on the fsync thread as a leader with
    followers does (default: inline); ``background_snapshots``: a snapshot the core finds due is
    encoded, written and fsynced on the loop's default executor (``RaftCore.snapshot_writer``),
    only the state machine's records are taken on the loop (default: all inline);
    ``unadvertised_raft_rpcs``: the peers serve the replication RPCs unadvertised (see the
    attribute); ``resolve_address``: where a node is now, asked before the core's
    ``address_of`` (a coordinator partition's replicas at their registered inter-broker
    endpoints, which change when a broker restarts on another port)."""

    def __init__(
        self,
        core: Any,
        log: Any,
        node_id: int,
        *,
        request_timeout_ms: int = 2000,
        shutdown_timeout_ms: int = 5000,
        retry_backoff_ms: int = 20,
        client_id: str | None = None,
        client_security: Any = None,
        thread_flush_alone: bool = False,
        background_snapshots: bool = False,
        unadvertised_raft_rpcs: bool = False,
        resolve_address: Callable[[int], tuple[str, int] | None] | None = None,
    ) -> None:
        self.core = core
        #: node id -> (host, port) its peers are at now, asked before the core's voter set
        #: (whose recorded endpoints may be stale); None: the core's only
        self.resolve_address = resolve_address
        #: the peers serve Vote, BeginQuorumEpoch, EndQuorumEpoch and FetchSnapshot at our
        #: spec's newest version even when their ApiVersions does not list them (kafka-rpc
        #: brokers, for a coordinator partition's group on the inter-broker listener)
        self.unadvertised_raft_rpcs = unadvertised_raft_rpcs
        self.log = log
        self.node_id = node_id
        self.request_timeout_ms = request_timeout_ms
        self.shutdown_timeout_ms = shutdown_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.client_id = client_id or f"raft-{node_id}"
        #: TLS/SASL settings of the voters' controller listener
        #: (``kafka_rpc.security.client.ClientSecurity``), None for PLAINTEXT
        self.client_security = client_security
        self._clients: dict[int, KafkaRpcClient] = {}
        self._client_addr: dict[int, tuple[str, int]] = {}
        self._sends: set[asyncio.Task] = set()
        self._pending_replies: set[asyncio.Future] = set()
        # (offset, epoch, future, deadline in loop time); one timer (_expiry, armed for the
        # earliest deadline or earlier) fails the late ones (_expire_waiters)
        self._commit_waiters: list[tuple[int, int, asyncio.Future, float]] = []
        self._expiry: asyncio.TimerHandle | None = None
        # the loop task sleeps on _waiter (a plain future and a timer, not asyncio.wait_for,
        # which costs a task and three loop iterations per wake-up) until _sleep_until (ms);
        # _woken: an input arrived while it was stepping
        self._waiter: asyncio.Future | None = None
        self._sleep_until = 0
        self._woken = False
        self._task: asyncio.Task | None = None
        self._stopping = False
        # requests in flight on the direct path (_send_out): future -> (client, correlation id)
        self._out: dict[asyncio.Future, tuple[KafkaRpcClient, int]] = {}
        # one thread of our own for the log's fsyncs, fed by a queue (no executor: its future
        # chain costs two loop iterations per flush); at most one flush in flight (_flushing)
        self._fsync_queue: queue.SimpleQueue = queue.SimpleQueue()
        self._fsync_thread: threading.Thread | None = None
        self._flushing: asyncio.Future | None = None
        self.thread_flushes = 0  # flushes run on the fsync thread (a leader with followers)
        #: a single-voter leader fsyncs on the fsync thread too (see :meth:`_start_flush`)
        self.thread_flush_alone = thread_flush_alone
        # the state machine gets committed batches after the step that committed them has sent
        # its requests and settled the commit waiters (_step, _deliver_committed)
        core.defer_delivery = True
        self._delivery_scheduled = False
        # background_snapshots: a due snapshot's file work (encode, write, fsync, rename) runs
        # on the loop's default executor, not the loop (RaftCore.snapshot_writer)
        self._snapshot_fut: asyncio.Future | None = None
        if background_snapshots:
            core.snapshot_writer = self._write_snapshot

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the loop task (call once the controller listener is bound, so peers reach us)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self, timeout_ms: int | None = None) -> None:
        """Graceful stop: ``core.begin_shutdown`` (a leader resigns with EndQuorumEpoch), wait
        until ``core.shutdown_complete`` or ``timeout_ms`` (default ``shutdown_timeout_ms``)
        passes, then stop the loop, fail parked requests and commit waiters, close the clients,
        flush and close the log."""
        timeout_ms = self.shutdown_timeout_ms if timeout_ms is None else timeout_ms
        if self._task is not None and not self._stopping:
            try:
                self.core.begin_shutdown(monotonic_ms(), timeout_ms)
            except Exception:
                log.exception("raft: begin_shutdown failed")
            self._input_done()
            deadline = time.monotonic() + timeout_ms / 1000
            while not self._shutdown_complete() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            if not self._shutdown_complete():
                log.warning("raft: shutdown did not complete within %d ms", timeout_ms)
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            self._input_done()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for fut, (client, corr) in list(self._out.items()):
            client.abandon(corr)
            fut.cancel()
        self._out.clear()
        for t in list(self._sends):
            t.cancel()
        if self._sends:
            await asyncio.gather(*self._sends, return_exceptions=True)
        err = KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "the metadata quorum is shutting down")
        for fut in list(self._pending_replies):
            if not fut.done():
                fut.set_exception(err)
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        for _, _, fut, _ in self._commit_waiters:
            if not fut.done():
                fut.set_exception(NotLeaderError("the metadata quorum is shutting down"))
        self._commit_waiters.clear()
        for client in list(self._clients.values()):
            with contextlib.suppress(Exception):
                await client.close()
        self._clients.clear()
        if self._flushing is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait([self._flushing])
        if self._snapshot_fut is not None:  # its file is the snapshot's own: let it finish
            with contextlib.suppress(Exception):
                await asyncio.wait([self._snapshot_fut])
            await asyncio.sleep(0)  # its done callback tells the core
        if self._fsync_thread is not None:
            self._fsync_queue.put(None)
            self._fsync_thread.join()
            self._fsync_thread = None
        try:
            if self.core.needs_flush:
                self.log.flush()
        except Exception:
            log.exception("raft: final log flush failed")
        self.log.close()

    def _write_snapshot(self, write: Callable[[], None]) -> None:
        """``RaftCore.snapshot_writer``: run ``write`` on the default executor; the core hears
        of the end on the loop (:meth:`_snapshot_done`)."""
        self._snapshot_fut = asyncio.get_running_loop().run_in_executor(None, write)
        self._snapshot_fut.add_done_callback(self._snapshot_done)

    def _snapshot_done(self, fut: asyncio.Future) -> None:
        self._snapshot_fut = None
        error = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        try:
            self.core.snapshot_written(error)
        except Exception:
            log.exception("raft: finishing a snapshot failed")
        if not self._stopping:
            self._input_done()

    def _shutdown_complete(self) -> bool:
        try:
            return bool(self.core.shutdown_complete)
        except Exception:
            log.exception("raft: shutdown_complete failed")
            return True

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            self._woken = False
            try:
                self._step()
                deadline = self.core.next_deadline_ms()
            except Exception:
                log.exception("raft: driver step failed; continuing")
                deadline = monotonic_ms() + self.retry_backoff_ms
            if self._woken:
                continue
            waiter = self._waiter = loop.create_future()
            self._sleep_until = deadline
            timer = loop.call_later(max(0, deadline - monotonic_ms()) / 1000, _wake_up, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None

    def _step_inline(self) -> None:
        """Step at once, in the caller's callback (an inbound request, a response, a finished
        flush) rather than a loop iteration later in the loop task; wake the task only when the
        step moved the core's next deadline before the one it sleeps until."""
        if self._task is None or self._stopping:
            self._input_done()
            return
        try:
            self._step()
            if self.core.next_deadline_ms() < self._sleep_until:
                self._input_done()
        except Exception:
            log.exception("raft: driver step failed; continuing")
            self._input_done()

    def _step(self) -> None:
        """poll, start a flush if the core appended, send, settle waiters."""
        core = self.core
        core.poll(monotonic_ms())
        if core.needs_flush and self._flushing is None:
            self._start_flush()
        for out in core.take_outbound():
            self._send_out(out)
        self._settle_waiters()
        if core.delivery_due and not self._delivery_scheduled:
            # after the send tasks just created have written their requests (call_soon is FIFO)
            self._delivery_scheduled = True
            asyncio.get_running_loop().call_soon(self._deliver_committed)

    def _deliver_committed(self) -> None:
        """Hand the state machine the batches committed by the last step (Kafka's
        ``KafkaRaftClient`` hands them to the listener's thread; here they wait until the step's
        Fetch answers and requests are on their way, so applying them is not on the path of the
        next round of replication)."""
        self._delivery_scheduled = False
        if self._stopping:
            return
        try:
            self.core.deliver_committed(monotonic_ms())
        except Exception:
            log.exception("raft: delivering committed batches failed")
        self._input_done()

    def _start_flush(self) -> None:
        """Flush what the log holds so far. A leader with followers fsyncs on the fsync thread
        and the loop goes on meanwhile, so the new batches reach the followers (parked Fetches
        are answered) while the leader's own fsync runs: the high watermark needs a majority,
        and the two proceed in parallel as in Kafka, where the leader's flush and the followers'
        fetches are independent. Anyone else (a follower, an observer, a single voter) has
        nothing to overlap with its fsync and flushes inline, which spares the thread handoff
        (:meth:`_flush_done` tells the core in both cases), unless ``thread_flush_alone``: a
        single-voter leader whose state machine has work to do while the fsync waits on the disk
        (the replicated Batch Coordinator: decoding the next requests, applying the previous
        group). A log without ``begin_flush`` is always flushed inline."""
        core = self.core
        begin = getattr(self.log, "begin_flush", None)
        alone_inline = len(core.voters) < 2 and not self.thread_flush_alone
        if begin is None or not core.is_leader or alone_inline:
            self.log.flush()
            now = monotonic_ms()
            core.handle_flushed(now)
            core.poll(now)
            return
        ticket = begin()
        loop = asyncio.get_running_loop()
        if self._fsync_thread is None:
            self._fsync_thread = threading.Thread(
                target=self._fsync_loop, args=(loop,), name=f"raft-fsync-{self.node_id}",
                daemon=True,
            )  # fmt: skip
            self._fsync_thread.start()
        self._flushing = loop.create_future()
        self.thread_flushes += 1
        self._fsync_queue.put(ticket)

    def _fsync_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The fsync thread: sync each ticket, hand the outcome back to the loop (None: stop)."""
        while True:
            ticket = self._fsync_queue.get()
            if ticket is None:
                return
            try:
                ticket.sync()
                exc = None
            except BaseException as e:  # noqa: BLE001 - reported on the loop
                exc = e
            try:
                loop.call_soon_threadsafe(self._flush_done, ticket, exc)
            except RuntimeError:  # the loop is closed: nobody waits any more
                return

    def _flush_done(self, ticket: Any, exc: BaseException | None) -> None:
        flushing, self._flushing = self._flushing, None
        try:
            self.log.end_flush(ticket, exc is None)
            if exc is None:
                self.core.handle_flushed(monotonic_ms())
            else:
                log.error("raft: log flush failed: %r", exc)
        except Exception:
            log.exception("raft: concluding a log flush failed")
        if flushing is not None and not flushing.done():
            flushing.set_result(None)
        self._step_inline()

    def _input_done(self) -> None:
        """After feeding an input: let the loop task poll, flush and send."""
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------------ outbound
    def _address(self, dest: int) -> tuple[str, int] | None:
        try:
            addr = None
            if self.resolve_address is not None and dest >= 0:
                addr = self.resolve_address(dest)
            if addr is None:
                addr = self.core.address_of(dest)
        except Exception:
            log.exception("raft: address_of(%d) failed", dest)
            return None
        return tuple(addr) if addr is not None else None  # type: ignore[return-value]

    def _client(self, dest: int) -> KafkaRpcClient:
        addr = self._address(dest)
        if addr is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"no address for {dest}")
        client = self._clients.get(dest)
        if client is not None and self._client_addr.get(dest) != addr:
            # the destination moved (another leader endpoint, a re-used probe id): reconnect
            old = self._clients.pop(dest)
            task = asyncio.ensure_future(old.close())
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
            client = None
        if client is None:
            host, port = addr
            self._client_addr[dest] = addr
            timeout = self.request_timeout_ms / 1000
            client = KafkaRpcClient(
                f"{host}:{port}",
                client_id=self.client_id,
                security=self.client_security,
                request_timeout=timeout,
                connect_timeout=timeout,
            )
            self._clients[dest] = client
        return client

    def _send_out(self, out: Any) -> None:
        """Send ``out``: on an open, negotiated connection directly (the request is written now,
        the response comes back through a done callback and a timer bounds the wait), else in
        a task that connects first (:meth:`_send`)."""
        client = self._clients.get(out.destination)
        started = None
        if (
            client is not None
            and out.api_key != _API_VERSIONS
            and self._address(out.destination) == self._client_addr.get(out.destination)
        ):
            try:
                version = self._version(client, out.api_key)
                local = _local_answer(out, version)
                if local is not None:
                    asyncio.get_running_loop().call_soon(self._local_response, out, local)
                    return
                request = for_version(out.api_key, version, out.request)
                started = client.request_nowait(request, version)
            except Exception:  # noqa: BLE001 - the task path retries and reports the failure
                started = None
        if started is None:
            task = asyncio.ensure_future(self._send(out))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
            return
        corr, fut = started
        assert client is not None  # started is only set by a request on a client
        self._out[fut] = (client, corr)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.request_timeout_ms / 1000, self._out_expired, client, corr,
                                fut)  # fmt: skip
        fut.add_done_callback(functools.partial(self._out_done, out, timer))

    def _version(self, client: KafkaRpcClient, api_key: int) -> int:
        """The version to send ``api_key`` at: the negotiated one, else (the peer's ApiVersions
        does not list it) with ``unadvertised_raft_rpcs`` our spec's newest for the replication
        RPCs; raises ``KafkaError`` UNSUPPORTED_VERSION otherwise."""
        try:
            return client.version_for(api_key)
        except KafkaError:
            if not self.unadvertised_raft_rpcs or api_key not in CONTROLLER_ONLY_REPLICATION_RPCS:
                raise
            from kafka_rpc.protocol import codec

            versions = codec.valid_versions(codec.REQUESTS_BY_KEY[api_key])
            assert versions is not None
            return versions[1]

    def _local_response(self, out: Any, resp: Any) -> None:
        if self._stopping:
            return
        self._response(out, resp)
        self._step_inline()

    @staticmethod
    def _out_expired(client: KafkaRpcClient, corr: int, fut: asyncio.Future) -> None:
        """The request timeout: fail the request and close its connection, as Kafka's
        ``NetworkClient`` does, so the next request to that voter goes on a new connection
        rather than behind a stalled one (after a link was down, TCP may not retransmit for
        seconds)."""
        client.abandon(corr)
        if not fut.done():
            fut.set_exception(TimeoutError("no response within the request timeout"))
        client.disconnect()

    def _out_done(self, out: Any, timer: asyncio.TimerHandle, fut: asyncio.Future) -> None:
        timer.cancel()
        self._out.pop(fut, None)
        if self._stopping or fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.debug("raft: request %d to node %d failed: %r", out.api_key, out.destination, exc)
        self._response(out, None if exc is not None else fut.result())
        self._step_inline()

    def _response(self, out: Any, resp: Any) -> None:
        """Hand the core the response to ``out`` (None: the request failed)."""
        try:
            self.core.handle_response(monotonic_ms(), out.destination, out.correlation, resp)
        except Exception:
            log.exception("raft: handling a response from node %d failed", out.destination)

    async def _send(self, out: Any) -> None:
        resp = None
        try:
            resp = await asyncio.wait_for(self._exchange(out), self.request_timeout_ms / 1000)
        except asyncio.CancelledError:
            raise
        except TimeoutError as e:  # as in _out_expired: the next request gets a new connection
            log.debug("raft: request %d to node %d timed out: %r", out.api_key, out.destination, e)
            client = self._clients.get(out.destination)
            if client is not None:
                client.disconnect()
            resp = None
        except Exception as e:  # noqa: BLE001 - any failure is a failed response to the core
            log.debug("raft: request %d to node %d failed: %r", out.api_key, out.destination, e)
            resp = None
        if self._stopping:
            return
        self._response(out, resp)
        self._input_done()

    async def _exchange(self, out: Any) -> Any:
        client = self._client(out.destination)  # BROKER_NOT_AVAILABLE without an address
        await client._ensure_connected()  # lazy connect + ApiVersions, so the version is known
        if out.api_key == _API_VERSIONS:
            # the AddRaftVoter probe: v4, whose SupportedFeatures carries kraft.version
            return await client.request(out.request, version=min(4, client.version_for(18)))
        try:
            version = self._version(client, out.api_key)
        except KafkaError as e:
            local = _unsupported_answer(out, e)
            if local is None:
                raise
            return local
        local = _local_answer(out, version)
        if local is not None:
            return local
        request = for_version(out.api_key, version, out.request)
        return await client.request(request, version=version)

    # ------------------------------------------------------------------ inbound
    async def handle(self, api_key: int, version: int, request: Any) -> Any:
        """Answer a Raft request (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot,
        DescribeQuorum, UpdateRaftVoter) received at ``version``; returns the response, ready
        to encode at it."""
        fut = asyncio.get_running_loop().create_future()

        def reply(response: Any) -> None:
            if not fut.done():
                fut.set_result(response)

        self._pending_replies.add(fut)
        try:
            self.core.handle_request(monotonic_ms(), api_key, version, request, reply)
            self._step_inline()
            response = await fut
        finally:
            self._pending_replies.discard(fut)
        return for_version(api_key, version, response)

    def append(self, records: list[bytes]) -> int:
        """Append framed metadata records as one batch (leader only); returns the offset of the
        last one. Raises the core's NotLeaderError when this node does not lead."""
        offset = self.core.append(monotonic_ms(), records)
        self._input_done()
        return offset

    def resign(self, epoch: int) -> bool:
        """The leader of ``epoch`` steps down (:meth:`~kafka_rpc.raft.core.RaftCore.resign`,
        Kafka's ``RaftClient.resign``); the loop sends its EndQuorumEpoch at once. Returns
        whether it resigned."""
        done = self.core.resign(monotonic_ms(), epoch)
        self._input_done()
        return done

    async def wait_committed(self, offset: int, timeout: float) -> int:
        """Wait until the high watermark passes ``offset`` (the record is committed); returns the
        high watermark. Raises :class:`NotLeaderError` if this node is not the leader or loses
        leadership first, ``TimeoutError`` after ``timeout`` seconds."""
        core = self.core
        if core.high_watermark > offset:
            return core.high_watermark
        if not core.is_leader:
            raise NotLeaderError(f"node {self.node_id} is not the leader")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        deadline = loop.time() + timeout
        self._commit_waiters.append((offset, core.epoch, fut, deadline))
        # not asyncio.wait_for nor a timer per waiter (several us per append): one timer for
        # the earliest deadline; the waiter list drops done futures in _settle_waiters
        expiry = self._expiry
        if expiry is None or deadline < expiry.when():
            if expiry is not None:
                expiry.cancel()
            self._expiry = loop.call_at(deadline, self._expire_waiters)
        return await fut

    def _expire_waiters(self) -> None:
        """Fail the commit waiters whose deadline passed with TimeoutError; re-arm the timer
        for the earliest deadline left."""
        self._expiry = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        keep = []
        for entry in self._commit_waiters:
            offset, _, fut, deadline = entry
            if fut.done():
                continue
            if deadline <= now:
                fut.set_exception(TimeoutError(f"offset {offset} not committed in time"))
            else:
                keep.append(entry)
        self._commit_waiters[:] = keep
        if keep:
            self._expiry = loop.call_at(min(e[3] for e in keep), self._expire_waiters)

    def _settle_waiters(self) -> None:
        if not self._commit_waiters:
            return
        core = self.core
        hw, leading, epoch = core.high_watermark, core.is_leader, core.epoch
        keep = []
        for entry in self._commit_waiters:
            offset, want_epoch, fut, _ = entry
            if fut.done():
                continue
            if hw > offset:
                fut.set_result(hw)
            elif not leading or epoch != want_epoch:
                fut.set_exception(NotLeaderError(f"leadership of epoch {want_epoch} was lost"))
            else:
                keep.append(entry)
        self._commit_waiters[:] = keep
