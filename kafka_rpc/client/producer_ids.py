"""A broker's producer-id source (KIP-730): Kafka's ``RPCProducerIdManager``
(``core/src/main/scala/kafka/coordinator/transaction/ProducerIdManager.scala``, later
``transaction-coordinator/.../RPCProducerIdManager.java``).

The controller hands out blocks of 1000 ids with AllocateProducerIds (``{BrokerId,
BrokerEpoch}`` -> ``{ProducerIdStart, ProducerIdLen}``). The manager holds the current block and
at most one prefetched next block::

    manager = RPCProducerIdManager.over_client(controller_client, broker_id=1,
                                               broker_epoch=lambda: lifecycle.broker_epoch)
    pid = manager.generate_producer_id()   # KafkaError(COORDINATOR_LOAD_IN_PROGRESS) until ready

As in Kafka:

- :meth:`~RPCProducerIdManager.generate_producer_id` is synchronous and never waits: it claims
  the next id of the current block; when it hands out the id at exactly 90 % of the block
  (``first + int(size * 0.9)``) it starts a request for the next block (prefetch); when the
  current block is used up it swaps in the prefetched one (at most 3 tries); with no block
  ready it starts a request and raises ``KafkaError(COORDINATOR_LOAD_IN_PROGRESS)`` (retriable;
  Kafka chose it because old clients treat REQUEST_TIMED_OUT as fatal). The first call after
  start-up therefore fails and triggers the first request.
- At most one request is in flight (Kafka's ``requestInFlight`` compare-and-set), and no request
  is sent while a block is already prefetched.
- A response is accepted only if it is a valid range (``start >= 0``, ``len > 0``, no overflow)
  entirely above every id this manager has held, so no id is handed out twice across block
  switches (Kafka logs "not monotonic" and drops such a block).

Where it differs from Kafka (whose ``NodeToControllerChannelManager`` retries for it): on an
error, a rejected block, a timeout, a lost connection or a failing ``broker_epoch`` the manager
backs off exponentially (``retry_backoff_ms`` 50 doubling up to ``retry_backoff_max_ms`` 1000,
reset by a success) and retries until it gets a block or is closed. On STALE_BROKER_EPOCH it
asks its owner for the broker epoch again (the ``broker_epoch`` callable, which may be async,
e.g. to re-register) and retries at once if the epoch changed.

Throttling (KIP-219, as Kafka's ``NetworkClient`` does for a node whose response carried
``ThrottleTimeMs``): after any response with ``throttle_time_ms`` > 0 no AllocateProducerIds is
sent until that many ms have passed since the response arrived. THROTTLING_QUOTA_EXCEEDED (the
controller's ``producer.ids.allocation.max.per.second``, the connection then muted by the
server for as long) is therefore retried after ``ThrottleTimeMs`` (``retry_backoff_ms`` if it
carries none) and is not a failure: the exponential backoff neither grows nor resets.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode, KafkaError

__all__ = ["PRODUCER_ID_BLOCK_SIZE", "ProducerIdsBlock", "RPCProducerIdManager"]

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000
PREFETCH_RATIO = 0.90  # Kafka PRODUCER_ID_BLOCK_PREFETCH_RATIO
_MAX_LONG = (1 << 63) - 1
_GENERATE_TRIES = 3  # Kafka's iteration limit in generateProducerId


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """Kafka ``ProducerIdsBlock``: ``size`` ids from ``first`` assigned to ``broker_id``."""

    broker_id: int
    first: int
    size: int

    @property
    def last(self) -> int:
        """``lastProducerId``: the block's last id (inclusive)."""
        return self.first + self.size - 1

    @property
    def prefetch_id(self) -> int:
        """The id whose hand-out triggers the prefetch of the next block (90 %)."""
        return self.first + int(self.size * PREFETCH_RATIO)


SendFn = Callable[[Any], Awaitable[Any]]
EpochFn = Callable[[], int | Awaitable[int]]


async def _maybe_await(v: Any) -> Any:
    return await v if inspect.isawaitable(v) else v


class RPCProducerIdManager:
    """Kafka ``RPCProducerIdManager``: producer ids for one broker from blocks that the active
    controller allocates with AllocateProducerIds.

    ``send(request) -> response`` sends an AllocateProducerIdsRequest to the controller listener
    (see :meth:`over_client`); ``broker_epoch()`` returns the broker's current epoch (Kafka's
    ``brokerEpochSupplier``), synchronously or as an awaitable. ``sleep`` and ``clock`` (seconds,
    monotonic) are injectable for tests. Must be used from a running asyncio event loop."""

    def __init__(
        self,
        broker_id: int,
        send: SendFn,
        broker_epoch: EpochFn,
        *,
        retry_backoff_ms: float = 50.0,
        retry_backoff_max_ms: float = 1000.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_id = broker_id
        self._send = send
        self._broker_epoch = broker_epoch
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self._sleep = sleep
        self._clock = clock
        self._current: ProducerIdsBlock | None = None  # Kafka starts with EMPTY
        self._next_id = 0  # the next id of the current block to hand out
        self._next_block: ProducerIdsBlock | None = None
        self._task: asyncio.Task | None = None  # the request in flight (with its retries)
        self._highest_seen = -1  # the last id of any block accepted (no id twice)
        self._failures = 0  # consecutive failed attempts (exponential backoff)
        self.backoff_deadline: float | None = None  # clock() before which no retry is sent
        self._throttle_deadline: float | None = None  # clock() of the last ThrottleTimeMs' end
        self.last_error: BaseException | ErrorCode | None = None
        self._closed = False

    @classmethod
    def over_client(
        cls, client: Any, broker_id: int, broker_epoch: EpochFn, **kwargs: Any
    ) -> RPCProducerIdManager:
        """A manager that sends its requests with a
        :class:`~kafka_rpc.client.KafkaRpcClient` connected to the controller listener."""

        async def send(request: Any) -> Any:
            return await client.request(request)

        return cls(broker_id, send, broker_epoch, **kwargs)

    # ------------------------------------------------------------------ state
    @property
    def current_block(self) -> ProducerIdsBlock | None:
        return self._current

    @property
    def next_block(self) -> ProducerIdsBlock | None:
        return self._next_block

    @property
    def request_in_flight(self) -> bool:
        return self._task is not None and not self._task.done()

    # ------------------------------------------------------------------ Kafka's API
    def generate_producer_id(self) -> int:
        """The next producer id; raises ``KafkaError(COORDINATOR_LOAD_IN_PROGRESS)`` while no
        block is ready (a request for one is then in flight or backing off)."""
        if self._closed:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "producer id manager closed")
        for _ in range(_GENERATE_TRIES):
            blk = self._current
            if blk is not None and self._next_id <= blk.last:
                pid = self._next_id
                self._next_id += 1
                if pid == blk.prefetch_id:
                    self._maybe_request_next_block()
                return pid
            if self._next_block is not None:  # the current block is used up: swap
                self._current, self._next_block = self._next_block, None
                self._next_id = self._current.first
                continue
            break
        self._maybe_request_next_block()
        raise KafkaError(
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            "Producer ID block is not ready yet; a new block has been requested",
        )

    def _maybe_request_next_block(self) -> None:
        """Kafka ``maybeRequestNextBlock``: start a request unless one is in flight (its
        retries included) or a block is already prefetched."""
        if self._closed or self._next_block is not None or self.request_in_flight:
            return
        self._task = asyncio.get_running_loop().create_task(self._request_block())

    async def close(self) -> None:
        """Stop: cancel the request in flight; later calls fail."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    # ------------------------------------------------------------------ requests
    async def _request_block(self) -> None:
        req_cls = codec.message_class("AllocateProducerIdsRequest")
        retried_stale = False
        while not self._closed:
            await self._wait_throttle()
            try:
                epoch = await _maybe_await(self._broker_epoch())
                resp = await self._send(req_cls(broker_id=self.broker_id, broker_epoch=epoch))
                code = ErrorCode.for_code(resp.error_code)
                throttle_ms = getattr(resp, "throttle_time_ms", 0) or 0
            except Exception as e:  # noqa: BLE001 - timeouts, lost connections, KafkaError...
                log.warning("AllocateProducerIds for broker %d failed: %s", self.broker_id, e)
                self.last_error = e
                code = None
            else:
                self.last_error = code
                if code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and throttle_ms <= 0:
                    throttle_ms = self.retry_backoff_ms  # never a busy loop on a bare error
                if throttle_ms > 0:
                    self._throttle_deadline = self._clock() + throttle_ms / 1000
                if code == ErrorCode.NONE and self._accept(resp):
                    self._failures = 0
                    self.backoff_deadline = None
                    return
                if code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
                    log.debug("AllocateProducerIds for broker %d throttled for %s ms",
                              self.broker_id, throttle_ms)  # fmt: skip
                    retried_stale = False
                    continue  # not a failure: the next attempt waits for the throttle
                if code == ErrorCode.STALE_BROKER_EPOCH:
                    try:
                        new_epoch = await _maybe_await(self._broker_epoch())
                    except Exception as e:  # noqa: BLE001 - a failure like any other: back off
                        log.warning("AllocateProducerIds: broker %d epoch lookup failed: %s",
                                    self.broker_id, e)  # fmt: skip
                        self.last_error = e
                        new_epoch = epoch
                    log.warning("AllocateProducerIds: broker %d epoch %d is stale (now %d)",
                                self.broker_id, epoch, new_epoch)  # fmt: skip
                    if new_epoch != epoch and not retried_stale:
                        retried_stale = True
                        continue
                elif code != ErrorCode.NONE:
                    assert code is not None  # the try's else: the response's code
                    log.warning("AllocateProducerIds for broker %d: %s", self.broker_id,
                                code.name)  # fmt: skip
            retried_stale = False
            self._failures += 1
            delay_ms = min(self.retry_backoff_ms * 2 ** (self._failures - 1),
                           self.retry_backoff_max_ms)  # fmt: skip
            self.backoff_deadline = self._clock() + delay_ms / 1000
            await self._sleep(delay_ms / 1000)

    async def _wait_throttle(self) -> None:
        """Wait, once, until the last response's ``ThrottleTimeMs`` has passed (Kafka's
        ``NetworkClient`` sends nothing to a throttled node before then)."""
        deadline, self._throttle_deadline = self._throttle_deadline, None
        if deadline is None:
            return
        wait = deadline - self._clock()
        if wait > 0:
            self.backoff_deadline = deadline
            await self._sleep(wait)

    def _accept(self, resp: Any) -> bool:
        start, length = resp.producer_id_start, resp.producer_id_len
        if start < 0 or length <= 0 or start > _MAX_LONG - length:
            log.error("Producer ID block includes an invalid ID range: start %d, len %d",
                      start, length)  # fmt: skip
            self.last_error = ErrorCode.UNKNOWN_SERVER_ERROR
            return False
        if start <= self._highest_seen:
            log.error("Producer ID block is not monotonic: start %d, ids up to %d already held",
                      start, self._highest_seen)  # fmt: skip
            self.last_error = ErrorCode.UNKNOWN_SERVER_ERROR
            return False
        blk = ProducerIdsBlock(self.broker_id, start, length)
        self._highest_seen = blk.last
        self._next_block = blk
        return True
