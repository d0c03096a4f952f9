"""The pod's identity holder and its file watcher, on a fake stat source and a fake
measurement: stale at once on a change, refused stores and doubted lookups while the
fingerprint is re-measured, then one swap that every reader sees."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from sidecar.errors import FailedPrecondition
from sidecar.identity.cell import IdentityCell
from sidecar.identity.pod import PodIdentity
from sidecar.identity.resolver import KeyResolver
from sidecar.identity.watch import IdentityWatcher, Snapshot, WatchedPath, stat_tree
from sidecar.keys import InputKind, KeyLimits, KeyRequest
from sidecar.kv.attachments import Attachments
from sidecar.kv.layout import KvLayout, make_layout
from sidecar.kv.movement import KvStats

OLD = PodIdentity("fp1-old", {"sql": "fp1-sql-old"})
NEW = PodIdentity("fp1-new", {"sql": "fp1-sql-old"})
PATHS = {"model files": WatchedPath("/m"), "adapter sql files": WatchedPath("/a", adapter="sql")}


class FakeDisk:
    """Stat snapshots by path, changed by the test."""

    def __init__(self) -> None:
        self.version = {"/m": 1, "/a": 1}

    def stat(self, path: str) -> Snapshot:
        return ((".", 1, 1, 10, self.version[path], self.version[path]),)


class GatedMeasure:
    """A measurement that returns `result` (or raises it) once the test opens the gate."""

    def __init__(self, result: PodIdentity | Exception) -> None:
        self.result = result
        self.started = asyncio.Event()
        self.gate = asyncio.Event()
        self.calls = 0

    async def __call__(self) -> PodIdentity:
        self.calls += 1
        self.started.set()
        await self.gate.wait()
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def watcher(cell: IdentityCell, disk: FakeDisk, measure: GatedMeasure) -> IdentityWatcher:
    return IdentityWatcher(cell, PATHS, measure, 1, stat=disk.stat)


async def test_a_change_makes_the_identity_stale_until_the_new_one_is_swapped_in() -> None:
    """While the changed model is re-measured, stores under the old fingerprint (or the
    implicit one) are FailedPrecondition naming the reason and lookups of it are in
    doubt; the adapter's unchanged fingerprint is not; after the swap the new one is in
    force, the old one is foreign, and the change is counted once."""
    cell, disk = IdentityCell(OLD), FakeDisk()
    measure = GatedMeasure(NEW)
    w = watcher(cell, disk, measure)
    seen = await w.snapshot()
    assert await w.check(seen) == seen
    assert measure.calls == 0
    disk.version["/m"] = 2
    check = asyncio.create_task(w.check(seen))
    await measure.started.wait()
    assert cell.stale == {"fp1-old"}
    assert cell.in_doubt("fp1-old")
    assert not cell.in_doubt("fp1-other", "fp1-sql-old")
    with pytest.raises(FailedPrecondition, match="model files changed on disk"):
        cell.check_store("fp1-old")
    assert cell.pod is OLD
    measure.gate.set()
    await check
    assert cell.pod is NEW
    assert not cell.stale
    cell.check_store("fp1-new", "fp1-sql-old")
    with pytest.raises(FailedPrecondition, match="not this pod's model"):
        cell.check_store("fp1-old")
    assert (cell.stats.changes, cell.stats.stale_marks, cell.stats.stale_store_refusals) == (
        1,
        1,
        1,
    )


async def test_a_changed_adapter_puts_only_its_fingerprint_in_doubt() -> None:
    """An adapter's files changing doubts that adapter's fingerprint, not the model's."""
    cell, disk = IdentityCell(OLD), FakeDisk()
    measure = GatedMeasure(OLD)
    w = watcher(cell, disk, measure)
    seen = await w.snapshot()
    disk.version["/a"] = 2
    check = asyncio.create_task(w.check(seen))
    await measure.started.wait()
    assert cell.stale == {"fp1-sql-old"}
    with pytest.raises(FailedPrecondition, match="adapter sql files changed"):
        cell.check_store("fp1-old", "fp1-sql-old")
    cell.check_store("fp1-old", "")
    measure.gate.set()
    await check
    assert not cell.stale
    assert cell.stats.changes == 0


async def test_a_failed_measurement_stays_stale_and_is_retried_at_the_next_poll() -> None:
    """A half-copied shard fails the measurement: the cell stays stale (stores refused)
    and the next poll measures again, without a further change, and swaps."""
    cell, disk = IdentityCell(OLD), FakeDisk()
    measure = GatedMeasure(ValueError("truncated header"))
    measure.gate.set()
    w = watcher(cell, disk, measure)
    seen = await w.snapshot()
    disk.version["/m"] = 2
    seen = await w.check(seen)
    assert cell.stale
    assert cell.pod is OLD
    assert cell.stats.remeasure_failures == 1
    with pytest.raises(FailedPrecondition, match="truncated header"):
        cell.check_store("fp1-old")
    measure.result = NEW
    await w.check(seen)
    assert cell.pod is NEW
    assert not cell.stale
    assert measure.calls == 2


async def test_files_moving_during_the_measurement_are_measured_again() -> None:
    """A file that changes while it is being measured (a copy in progress) is not
    trusted: no swap, the next poll measures again."""
    cell, disk = IdentityCell(OLD), FakeDisk()
    measure = GatedMeasure(NEW)
    w = watcher(cell, disk, measure)
    seen = await w.snapshot()
    disk.version["/m"] = 2
    check = asyncio.create_task(w.check(seen))
    await measure.started.wait()
    disk.version["/m"] = 3
    measure.gate.set()
    seen = await check
    assert cell.pod is OLD
    assert cell.stale
    await w.check(seen)
    assert cell.pod is NEW
    assert not cell.stale
    assert measure.calls == 2


async def test_run_forever_measures_once_more_at_start_and_polls_on_its_clock() -> None:
    """The first snapshot is followed by one measurement (a change between the start's
    measurement and that snapshot cannot go unseen), then one poll per sleep."""
    cell, disk = IdentityCell(OLD), FakeDisk()
    measure = GatedMeasure(NEW)
    measure.gate.set()
    sleeps: list[float] = []
    polled = asyncio.Event()

    async def sleep(s: float) -> None:
        sleeps.append(s)
        if len(sleeps) == 3:
            polled.set()
            await asyncio.Event().wait()

    w = IdentityWatcher(cell, PATHS, measure, 7, stat=disk.stat, sleep=sleep)
    task = asyncio.create_task(w.run_forever())
    await polled.wait()
    task.cancel()
    assert cell.pod is NEW
    assert measure.calls == 1
    assert sleeps == [7, 7, 7]
    assert not IdentityWatcher(cell, PATHS, measure, 0).enabled
    assert not IdentityWatcher(cell, {}, measure, 5).enabled


def test_the_key_resolver_forgets_memoised_keys_when_the_identity_changes() -> None:
    """A memoised key carries the old fingerprint; after the swap the same request bytes
    resolve under the new one."""
    cell = IdentityCell(OLD)
    keys = KeyResolver(cell, KeyLimits())
    req = KeyRequest("t", "", "p", "q", InputKind.TEXT)
    before, _ = keys.remember(b"raw", req)
    assert keys.known(b"raw") is not None
    assert before.model_version == "fp1-old"
    cell.swap(NEW)
    assert keys.known(b"raw") is None
    after, _ = keys.remember(b"raw", req)
    assert after.model_version == "fp1-new"
    assert after.digest != before.digest
    assert keys.pod is NEW


def test_kv_attachments_follow_the_live_fingerprint() -> None:
    """KV attaches under a fingerprint being re-measured are refused; after the swap an
    attachment of the old weights may no longer look up or store (only release/detach),
    and the new fingerprint attaches."""
    cell = IdentityCell(OLD)
    table = Attachments(
        8, KvStats(), pod_fingerprint=lambda: cell.pod.model_version, doubt=cell.refuse_doubt
    )
    table.check_request("fp1-old", "", "", "")
    old = table.create("fp1-old", "", _layout(), "", set())
    table.add(old)
    cell.mark_stale(["fp1-old"], "model files changed on disk")
    with pytest.raises(FailedPrecondition, match="re-measured"):
        table.check_request("fp1-old", "", "", "")
    with pytest.raises(FailedPrecondition, match="re-measured"):
        table.get(old.attachment_id)
    cell.swap(NEW)
    with pytest.raises(FailedPrecondition, match="not this pod's model"):
        table.get(old.attachment_id)
    assert table.get(old.attachment_id, live=False) is old
    table.check_request("fp1-new", "", "", "")


def _layout() -> KvLayout:
    return make_layout(
        num_layers=1, num_kv_heads=1, head_dim=4, tokens_per_block=2, dtype="float32"
    )


def test_stat_tree_sees_a_patch_with_mtime_restored_and_a_new_file(tmp_path: Path) -> None:
    """Same size, same mtime, same inode: the patch still moves st_ctime_ns; a file added
    one directory down changes the snapshot too; an untouched tree stamps alike."""
    shard = tmp_path / "model.safetensors"
    shard.write_bytes(b"\x00" * 64)
    os.utime(shard, ns=(1_000_000_000, 1_000_000_000))
    first = stat_tree(str(tmp_path))
    assert stat_tree(str(tmp_path)) == first
    with shard.open("r+b") as f:
        f.seek(63)
        f.write(b"\x01")
    os.utime(shard, ns=(1_000_000_000, 1_000_000_000))
    patched = stat_tree(str(tmp_path))
    assert patched != first
    (tmp_path / "additional_chat_templates").mkdir()
    templates = stat_tree(str(tmp_path))
    (tmp_path / "additional_chat_templates" / "tool.jinja").write_text("{{ x }}")
    assert stat_tree(str(tmp_path)) not in (patched, templates)
    assert stat_tree(str(tmp_path / "missing"))[0][1:] == (-1, -1, -1, -1, -1)
