"""RPCProducerIdManager (Kafka's broker-side producer-id blocks, KIP-730) against a fake
controller, and against a real single-node server."""

from __future__ import annotations

import asyncio

import pytest

from kafka_rpc.client import KafkaConnectionError
from kafka_rpc.client.producer_ids import ProducerIdsBlock, RPCProducerIdManager
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode, KafkaError

Resp = codec.message_class("AllocateProducerIdsResponse")


class FakeController:
    """Answers each AllocateProducerIds with the next scripted outcome (a response, an
    exception), or with consecutive blocks of ``size`` once the script is used up. ``hold``
    keeps requests pending until ``release``."""

    def __init__(self, script=(), size=1000, hold=False):
        self.script = list(script)
        self.size = size
        self.next_start = 0
        self.requests = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.hold = hold
        self.gate = asyncio.Event()

    def release(self):
        self.gate.set()

    async def send(self, req):
        self.requests.append(req)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.hold:
                await self.gate.wait()
                self.gate.clear()
            else:
                await asyncio.sleep(0)
            if self.script:
                out = self.script.pop(0)
                if isinstance(out, BaseException):
                    raise out
                return out
            start, self.next_start = self.next_start, self.next_start + self.size
            return Resp(error_code=0, producer_id_start=start, producer_id_len=self.size)
        finally:
            self.in_flight -= 1


class Sleeps:
    def __init__(self):
        self.delays = []

    async def __call__(self, seconds):
        self.delays.append(seconds)
        await asyncio.sleep(0)


async def settle(n=20):
    for _ in range(n):
        await asyncio.sleep(0)


def manager(ctl, epoch=lambda: 7, **kw):
    kw.setdefault("sleep", Sleeps())
    return RPCProducerIdManager(1, ctl.send, epoch, **kw)


async def next_id(m, tries=200):
    """Retry COORDINATOR_LOAD_IN_PROGRESS like a client would."""
    for _ in range(tries):
        try:
            return m.generate_producer_id()
        except KafkaError as e:
            assert e.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            await asyncio.sleep(0)
    raise AssertionError("no producer id")


async def test_load_in_progress_until_the_first_block_arrives():
    ctl = FakeController(hold=True)
    m = manager(ctl)
    for _ in range(5):
        with pytest.raises(KafkaError) as ei:
            m.generate_producer_id()
        assert ei.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert ei.value.retriable
        await settle()
    assert len(ctl.requests) == 1  # one request however often it is asked
    assert (ctl.requests[0].broker_id, ctl.requests[0].broker_epoch) == (1, 7)
    ctl.release()
    await settle()
    assert m.next_block == ProducerIdsBlock(1, 0, 1000)
    assert [m.generate_producer_id() for _ in range(3)] == [0, 1, 2]
    assert m.current_block == ProducerIdsBlock(1, 0, 1000)
    await m.close()


async def test_prefetch_at_exactly_90_percent():
    ctl = FakeController()
    m = manager(ctl)
    first = await next_id(m)
    assert first == 0 and len(ctl.requests) == 1
    for expect in range(1, 900):
        assert m.generate_producer_id() == expect
    await settle()
    assert len(ctl.requests) == 1 and m.next_block is None  # 899 handed out: no prefetch yet
    assert m.generate_producer_id() == 900  # the 901st id starts the prefetch
    await settle()
    assert len(ctl.requests) == 2
    assert m.next_block == ProducerIdsBlock(1, 1000, 1000)
    for expect in range(901, 1000):
        assert m.generate_producer_id() == expect
    assert m.generate_producer_id() == 1000  # swapped in without a wait
    assert len(ctl.requests) == 2
    await m.close()


async def test_no_id_twice_across_block_switches():
    # small blocks, a duplicate block and an overlapping one from a confused controller
    ctl = FakeController(size=10)
    ctl.script = [
        Resp(error_code=0, producer_id_start=0, producer_id_len=10),
        Resp(error_code=0, producer_id_start=0, producer_id_len=10),  # duplicate: rejected
        Resp(error_code=0, producer_id_start=5, producer_id_len=10),  # overlap: rejected
        Resp(error_code=0, producer_id_start=-1, producer_id_len=10),  # invalid: rejected
    ]
    ctl.next_start = 10
    m = manager(ctl)
    ids = [await next_id(m) for _ in range(500)]
    assert ids == sorted(set(ids))  # strictly increasing, so never twice
    assert ids[:10] == list(range(10)) and ids[10] == 10
    assert m.last_error == ErrorCode.NONE
    await m.close()


async def test_backoff_on_errors_is_exponential_and_capped():
    errs = [Resp(error_code=ErrorCode.NOT_CONTROLLER)] * 3 + [
        Resp(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
    ] * 4 + [KafkaConnectionError("connection lost"), TimeoutError()]  # fmt: skip
    ctl = FakeController(script=errs)
    sleeps = Sleeps()
    m = manager(ctl, sleep=sleeps, retry_backoff_ms=50, retry_backoff_max_ms=1000)
    assert await next_id(m, tries=1000) == 0
    assert sleeps.delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    assert len(ctl.requests) == 10 and ctl.max_in_flight == 1
    # a success resets the backoff
    ctl.script = [Resp(error_code=ErrorCode.NOT_CONTROLLER)]
    for _ in range(899):
        m.generate_producer_id()
    m.generate_producer_id()  # id 900: prefetch
    await settle()
    assert sleeps.delays[-1] == 0.05 and m.next_block is not None
    await m.close()


async def test_a_failing_epoch_supplier_or_sender_is_retried():
    calls = []

    def epoch():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("not registered yet")
        return 7

    ctl = FakeController(script=[ValueError("garbled response")])
    sleeps = Sleeps()
    m = manager(ctl, epoch=epoch, sleep=sleeps)
    assert await next_id(m) == 0
    assert sleeps.delays == [0.05, 0.1]
    assert len(ctl.requests) == 2
    await m.close()


async def test_backoff_really_waits():
    ctl = FakeController(script=[Resp(error_code=ErrorCode.NOT_CONTROLLER)])
    m = RPCProducerIdManager(1, ctl.send, lambda: 7, retry_backoff_ms=30)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await next_id(m, tries=10_000)
    assert loop.time() - t0 >= 0.025
    assert m.backoff_deadline is None
    await m.close()


async def test_stale_broker_epoch_asks_the_owner_and_retries():
    epochs = iter([5, 6, 6])  # asked for the request, then again on STALE_BROKER_EPOCH
    asked: list[int] = []

    async def epoch():
        e = next(epochs)
        asked.append(e)
        return e

    ctl = FakeController(script=[Resp(error_code=ErrorCode.STALE_BROKER_EPOCH)])
    sleeps = Sleeps()
    m = manager(ctl, epoch=epoch, sleep=sleeps)
    assert await next_id(m) == 0
    assert [r.broker_epoch for r in ctl.requests] == [5, 6]
    assert sleeps.delays == []  # a new epoch is retried at once
    assert asked == [5, 6, 6]
    await m.close()


async def test_stale_epoch_then_a_failing_epoch_lookup_backs_off():
    """The re-read of the epoch after STALE_BROKER_EPOCH failing (e.g. the broker is
    re-registering) is a failure like any other: back off and retry, never a dead task."""
    calls = []

    def epoch():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("re-registering")
        return 4

    ctl = FakeController(script=[Resp(error_code=ErrorCode.STALE_BROKER_EPOCH)])
    sleeps = Sleeps()
    m = manager(ctl, epoch=epoch, sleep=sleeps)
    assert await next_id(m) == 0
    assert sleeps.delays == [0.05]
    assert [r.broker_epoch for r in ctl.requests] == [4, 4]
    await m.close()


async def test_stale_epoch_unchanged_backs_off():
    ctl = FakeController(script=[Resp(error_code=ErrorCode.STALE_BROKER_EPOCH)] * 2)
    sleeps = Sleeps()
    m = manager(ctl, epoch=lambda: 3, sleep=sleeps)
    assert await next_id(m) == 0
    assert sleeps.delays == [0.05, 0.1]
    assert [r.broker_epoch for r in ctl.requests] == [3, 3, 3]
    await m.close()


async def test_no_concurrent_duplicate_requests():
    ctl = FakeController(size=10, hold=True)
    m = manager(ctl)

    async def worker(out):
        for _ in range(30):
            out.append(await next_id(m, tries=100_000))

    async def releaser():
        while len(got) < 120:
            await asyncio.sleep(0)
            if ctl.in_flight:
                ctl.release()

    got = []
    await asyncio.gather(*(worker(got) for _ in range(4)), releaser())
    assert sorted(got) == list(range(120))
    assert ctl.max_in_flight == 1
    assert len(ctl.requests) <= 13  # one per block (12 blocks) plus at most a prefetch
    await m.close()


async def test_close_cancels_the_request_in_flight():
    ctl = FakeController(hold=True)
    m = manager(ctl)
    with pytest.raises(KafkaError):
        m.generate_producer_id()
    await settle()
    assert m.request_in_flight
    await m.close()
    assert not m.request_in_flight
    with pytest.raises(KafkaError):
        m.generate_producer_id()


class Clock:
    """A fake monotonic clock (seconds) and a sleep that records its delays and advances it."""

    def __init__(self):
        self.now = 1000.0
        self.delays = []

    def __call__(self):
        return self.now

    async def sleep(self, seconds):
        self.delays.append(round(seconds, 6))
        self.now += seconds
        await asyncio.sleep(0)


THROTTLED = ErrorCode.THROTTLING_QUOTA_EXCEEDED


async def test_throttling_waits_throttle_time_and_is_not_a_failure():
    script = [
        Resp(error_code=ErrorCode.NOT_CONTROLLER),
        Resp(error_code=THROTTLED, throttle_time_ms=200),
        Resp(error_code=THROTTLED, throttle_time_ms=700),
        Resp(error_code=ErrorCode.NOT_CONTROLLER),
    ]
    ctl = FakeController(script=script)
    clock = Clock()
    m = manager(ctl, sleep=clock.sleep, clock=clock)
    assert await next_id(m) == 0
    # the throttles are waited as given; the backoff goes on from 50 to 100 ms, neither grown
    # nor reset by them
    assert clock.delays == [0.05, 0.2, 0.7, 0.1]
    assert len(ctl.requests) == 5 and ctl.max_in_flight == 1
    assert m.last_error == ErrorCode.NONE
    await m.close()


async def test_throttling_without_a_time_waits_the_base_backoff():
    ctl = FakeController(script=[Resp(error_code=THROTTLED)] * 3)
    clock = Clock()
    m = manager(ctl, sleep=clock.sleep, clock=clock)
    assert await next_id(m) == 0
    assert clock.delays == [0.05, 0.05, 0.05]  # never a busy loop, never escalated
    await m.close()


async def test_any_throttle_time_delays_the_next_request():
    """As Kafka's NetworkClient: ThrottleTimeMs on an error (the longer of it and the backoff is
    waited, not their sum) or on a success (the prefetch waits for it)."""
    ctl = FakeController(script=[
        Resp(error_code=ErrorCode.NOT_CONTROLLER, throttle_time_ms=500),
        Resp(error_code=0, producer_id_start=0, producer_id_len=10, throttle_time_ms=250),
    ], size=10)  # fmt: skip
    ctl.next_start = 10
    clock = Clock()
    m = manager(ctl, sleep=clock.sleep, clock=clock)
    assert await next_id(m) == 0
    assert clock.delays == [0.05, 0.45]
    for expect in range(1, 10):  # id 9 (90 %) starts the prefetch
        assert m.generate_producer_id() == expect
    await settle()
    assert clock.delays == [0.05, 0.45, 0.25] and len(ctl.requests) == 3
    assert m.next_block == ProducerIdsBlock(1, 10, 10)
    await m.close()


@pytest.mark.integration
async def test_blocks_from_a_rate_limited_controller_wait_for_its_throttles(tmp_path):
    """A real single-node server whose controller allows 2 blocks per broker per second: five
    blocks in a row get THROTTLING_QUOTA_EXCEEDED on the way, and the manager waits each
    ThrottleTimeMs (the server mutes the connection for as long) and gets every block, with no
    failure backoff and no id twice."""
    from kafka_rpc.client import KafkaRpcClient
    from tests.integration.test_controller import BROKER, until_active
    from tests.raft.test_driver_single import start_single

    loop = asyncio.get_running_loop()
    running, port = await start_single(tmp_path, **{"producer.ids.allocation.max.per.second": "2"})
    client = None
    m = None
    try:
        client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", connect_timeout=5)
        reg = await asyncio.wait_for(until_active(client), 10)
        assert reg.error_code == 0, reg
        log = []  # (sent, received, response)

        async def send(req):
            sent = loop.time()
            resp = await client.request(req, timeout=10)
            log.append((sent, loop.time(), resp))
            return resp

        slept = []

        async def sleep(seconds):
            slept.append(seconds)
            await asyncio.sleep(seconds)

        m = RPCProducerIdManager(BROKER, send, lambda: reg.broker_epoch, sleep=sleep)
        deadline = loop.time() + 20
        ids = []
        while len(ids) < 4100:  # five blocks: 0, 1000, ..., 4000
            try:
                ids.append(m.generate_producer_id())
            except KafkaError as e:
                assert e.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                assert loop.time() < deadline, m.last_error
                await asyncio.sleep(0.005)
        assert ids == list(range(4100))
        codes = [r.error_code for _, _, r in log]
        assert set(codes) <= {0, THROTTLED} and codes.count(0) == 5, codes
        assert THROTTLED in codes
        for (_, received, resp), (sent_next, _, _) in zip(log, log[1:], strict=False):
            if resp.error_code == THROTTLED:
                assert resp.throttle_time_ms > 0
                assert sent_next - received >= resp.throttle_time_ms / 1000 - 0.005
        # every wait was for a throttle (at most one each; none of the failure backoff), and no
        # longer than it
        throttles = [r.throttle_time_ms / 1000 for _, _, r in log if r.error_code == THROTTLED]
        assert len(slept) <= len(throttles) and all(s <= max(throttles) for s in slept)
    finally:
        if m is not None:
            await m.close()
        if client is not None:
            await client.close()
        await running.stop()


@pytest.mark.integration
async def test_against_a_single_node_server(tmp_path):
    import uuid

    from kafka_rpc.client import KafkaRpcClient
    from tests.controller.harness import broker_features
    from tests.integration.test_cli import ServeProcess

    srv = ServeProcess(tmp_path)
    try:
        client = await KafkaRpcClient.connect(f"127.0.0.1:{srv.ports['CONTROLLER']}")
        cluster_id = next(ln.split()[2].rstrip(",") for ln in srv.lines
                          if ln.startswith("cluster id"))  # fmt: skip
        Reg = codec.message_class("BrokerRegistrationRequest")
        mod = codec.module("BrokerRegistrationRequest")
        Listener = mod.Listener
        reg = await client.request(Reg(
            broker_id=100, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
            log_dirs=(uuid.UUID(int=(100 + 1) << 64),),
            listeners=(Listener(name="PLAINTEXT", host="127.0.0.1", port=1,
                                security_protocol=0),),
            features=broker_features(),
        ), timeout=10)  # fmt: skip
        assert reg.error_code == 0, reg
        epochs = iter([reg.broker_epoch + 1000])  # stale first: the owner then gives the real one
        codes = []

        async def send(req):
            resp = await client.request(req)
            codes.append(resp.error_code)
            return resp

        m = RPCProducerIdManager(100, send, lambda: next(epochs, reg.broker_epoch))
        deadline = asyncio.get_running_loop().time() + 10
        ids = []
        while len(ids) < 1100:
            try:
                ids.append(m.generate_producer_id())
            except KafkaError as e:
                assert e.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                assert asyncio.get_running_loop().time() < deadline, m.last_error
                await asyncio.sleep(0.01)
        assert ids == sorted(set(ids)) and len(ids) == 1100
        assert m.current_block.first >= 1000  # a second block was fetched
        assert codes == [ErrorCode.STALE_BROKER_EPOCH, 0, 0]  # the new epoch was used at once
        await m.close()
        await client.close()
    finally:
        srv.stop()
