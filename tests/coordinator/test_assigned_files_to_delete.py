"""``AssignedBatchCoordinator.get_files_to_delete`` over several coordinator partitions (the
shared-object rule of ``kafka_rpc.coordinator.assigned``): a key is listed only when every
partition with a ``files`` row of it has it marked before the cutoff. The partitions' listings
are merged page by page, so paging with a small ``limit`` through a large backlog reads about
what each page returns (not the whole backlog after ``after_object_key`` on every call), and the
pages concatenated are the ``limit=0`` answer.

Real single-voter replicas (``started`` of the routing tests): A-0 and A-3 belong to coordinator
partition 0, A-1 to 1 and A-2 to 2. Partition 2 loses every batch first, then partition 0
every batch of A-0, then partition 1 the batches of its first committed objects, each at a
later time; A-3 and partition 1's later objects stay live."""

from __future__ import annotations

import asyncio
import random

from kafka_rpc.coordinator.api import CreateTopicAndPartitionsRequest as CTP
from kafka_rpc.coordinator.api import DeleteRecordsRequest, FileToDelete
from kafka_rpc.coordinator.api import TopicIdPartition as TP
from tests.coordinator.test_assigned_routing import ALL3, A, batch, started

#: assigned._FILES_PAGE, the entries per read of one partition's listing
PAGE = 100

# kind -> (partition 0: None / "marked" / "live", partition 1: ..., partition 2: None / "marked")
KINDS = {
    "only-2": (None, None, "marked"),
    "only-0": ("marked", None, None),
    "live-0": ("live", None, None),
    "1-and-2": (None, "marked", "marked"),
    "all-3": ("marked", "marked", "marked"),
    "live-on-0": ("live", "marked", "marked"),
    "live-on-1": (None, "live", "marked"),
    "0-live-on-1": ("marked", "live", None),
    "only-1": (None, "marked", None),
}
#: returned when no cutoff is given: marked wherever they have a row
RETURNED = {"only-2", "only-0", "1-and-2", "all-3", "only-1"}


async def backlog(c, n: int, seed: int = 7) -> tuple[dict[str, str], dict[int, int]]:
    """Commit ``n`` objects ``obj-0000``.. of the kinds of ``KINDS`` (in round robin), in a
    shuffled order, then mark them as their kind says, one coordinator partition after the
    other (2, 0, 1). Returns ``{key: kind}`` and ``{partition: its marking time}``."""
    assert await c.create_topic_and_partitions([CTP(A, "a", 4)]) == [0]
    kinds = {f"obj-{i:04d}": list(KINDS)[i % len(KINDS)] for i in range(n)}
    rng = random.Random(seed)
    # partition 1 marks its objects committed first: the ones live there are committed last
    early = [k for k, kind in kinds.items() if KINDS[kind][1] != "live"]
    late = [k for k, kind in kinds.items() if KINDS[kind][1] == "live"]
    rng.shuffle(early)
    rng.shuffle(late)
    on_1 = 0
    for key in early + late:
        on0, on1, on2 = KINDS[kinds[key]]
        reqs = []
        if on0 is not None:
            reqs.append(batch(A, 0 if on0 == "marked" else 3, 0, 1))
        if on1 is not None:
            reqs.append(batch(A, 1, 100, 1))
            on_1 += key in early
        if on2 is not None:
            reqs.append(batch(A, 2, 200, 1))
        assert all(r.error == 0 for r in await c.commit_file(key, 1, 300, reqs)), key
    marks: dict[int, int] = {}
    for p, offset in ((2, -1), (0, -1), (1, on_1)):
        await asyncio.sleep(0.01)
        (d,) = await c.delete_records([DeleteRecordsRequest(TP(A, p), offset)])
        assert d.error == 0
        (at,) = {f.marked_for_deletion_at_ms for f in await c.replica(p).get_files_to_delete()}
        marks[p] = at
    assert marks[2] < marks[0] < marks[1]
    return kinds, marks


def marked_at(kind: str, marks: dict[int, int]) -> int:
    """The latest marking of an object of ``kind``."""
    return max(marks[p] for p, how in enumerate(KINDS[kind]) if how == "marked")


async def pages(c, limit: int, **kw) -> list[list[FileToDelete]]:
    out: list[list[FileToDelete]] = []
    after = kw.pop("after_object_key", None)
    while True:
        got = await c.get_files_to_delete(limit=limit, after_object_key=after, **kw)
        assert len(got) <= limit
        if not got:
            return out
        out.append(got)
        after = got[-1].object_key


def count_rows(monkeypatch, c) -> dict[int, int]:
    """Rows each replica's ``get_files_to_delete`` and ``file_states`` return, per partition
    (reset by the caller)."""
    rows = dict.fromkeys((0, 1, 2), 0)

    def wrap(p: int, name: str) -> None:
        inner = c.replica(p)
        real = getattr(inner, name)

        async def counted(*args, **kwargs):
            got = await real(*args, **kwargs)
            rows[p] += len(got)
            return got

        monkeypatch.setattr(inner, name, counted)

    for p in rows:
        wrap(p, "get_files_to_delete")
        wrap(p, "file_states")
    return rows


async def test_pages_concatenated_are_the_whole_answer(tmp_path):
    c, _ = await started(tmp_path, ALL3())
    try:
        kinds, marks = await backlog(c, 180)
        full = await c.get_files_to_delete()
        assert [f.object_key for f in full] == sorted(
            k for k, kind in kinds.items() if kind in RETURNED
        )
        for f in full:  # the latest marking; every part records the object's size
            assert f.size == 300
            assert f.marked_for_deletion_at_ms == marked_at(kinds[f.object_key], marks)
        for limit in (1, 2, 7):
            got = await pages(c, limit)
            assert all(len(p) == limit for p in got[:-1]), limit
            assert [f for p in got for f in p] == full, limit
        # the same with a cutoff: only objects of partitions 2 or 0 alone were marked before
        # partition 1 marked its objects
        before = await c.get_files_to_delete(marked_before_ms=marks[1])
        assert [f.object_key for f in before] == sorted(
            k for k, kind in kinds.items() if kind in ("only-2", "only-0")
        )
        for limit in (1, 2, 7):
            got = await pages(c, limit, marked_before_ms=marks[1])
            assert [f for p in got for f in p] == before, limit
    finally:
        await c.close()


async def test_a_page_reads_about_what_it_returns(tmp_path, monkeypatch):
    """A page of ``limit`` entries reads O(limit + PAGE) rows of each partition, wherever it
    starts in the backlog (the whole backlog after the page's start was read before)."""
    n = 720
    c, _ = await started(tmp_path, ALL3())
    try:
        kinds, _ = await backlog(c, n)
        full = await c.get_files_to_delete()
        rows = count_rows(monkeypatch, c)
        for limit in (1, 7, 30):
            after: str | None = None
            for _ in range(3):  # from the start, then further on in the backlog
                for p in rows:
                    rows[p] = 0
                got = await c.get_files_to_delete(limit=limit, after_object_key=after)
                i = 0 if after is None else [f.object_key for f in full].index(after) + 1
                assert got == full[i : i + limit]
                assert all(r <= 3 * (limit + PAGE) for r in rows.values()), (limit, after, rows)
                after = full[min(i + 40, len(full) - 1)].object_key
        # reading the whole backlog takes more than a page may read
        for p in rows:
            rows[p] = 0
        assert await c.get_files_to_delete() == full
        assert all(r > 3 * (30 + PAGE) for r in rows.values()), rows
    finally:
        await c.close()


async def test_after_object_key_is_strictly_after_and_the_cutoff_is_kept(tmp_path):
    c, _ = await started(tmp_path, ALL3())
    try:
        kinds, marks = await backlog(c, 90)
        t1, t2, t3 = marks[2], marks[0], marks[1]
        full = await c.get_files_to_delete()
        keys = [f.object_key for f in full]
        for i in (0, 1, len(full) // 2, len(full) - 1):
            assert await c.get_files_to_delete(after_object_key=keys[i]) == full[i + 1 :]
            for limit in (1, 3):
                got = await c.get_files_to_delete(limit=limit, after_object_key=keys[i])
                assert got == full[i + 1 : i + 1 + limit]
        # a key never listed (live somewhere), and keys between the objects' keys
        rejected = next(k for k, kind in sorted(kinds.items()) if kind == "live-on-0")
        want = [f for f in full if f.object_key > rejected]
        assert await c.get_files_to_delete(after_object_key=rejected) == want
        assert await c.get_files_to_delete(limit=2, after_object_key=rejected) == want[:2]
        assert await c.get_files_to_delete(after_object_key=keys[3] + "\x00") == full[4:]
        assert await c.get_files_to_delete(after_object_key="obj-") == full
        assert await c.get_files_to_delete(after_object_key="obj-9") == []
        assert await c.get_files_to_delete(limit=1, after_object_key=keys[-1]) == []
        # the cutoff: marked strictly before it, on every partition that has a row
        assert await c.get_files_to_delete(marked_before_ms=t1) == []
        assert await c.get_files_to_delete(marked_before_ms=t1, limit=1) == []
        only_2 = [f for f in full if kinds[f.object_key] == "only-2"]
        for cutoff in (t1 + 1, t2):
            assert await c.get_files_to_delete(marked_before_ms=cutoff) == only_2
            assert await c.get_files_to_delete(marked_before_ms=cutoff, limit=3) == only_2[:3]
            got = await c.get_files_to_delete(
                marked_before_ms=cutoff, limit=2, after_object_key=only_2[0].object_key
            )
            assert got == only_2[1:3]
        only_2_or_0 = [f for f in full if kinds[f.object_key] in ("only-2", "only-0")]
        for cutoff in (t2 + 1, t3):
            assert await c.get_files_to_delete(marked_before_ms=cutoff) == only_2_or_0
            got = await pages(c, 2, marked_before_ms=cutoff, after_object_key=only_2[0].object_key)
            assert [f for p in got for f in p] == [
                f for f in only_2_or_0 if f.object_key > only_2[0].object_key
            ]
        assert await c.get_files_to_delete(marked_before_ms=t3 + 1) == full
        assert await c.get_files_to_delete(marked_before_ms=t3 + 1, limit=5) == full[:5]
    finally:
        await c.close()
