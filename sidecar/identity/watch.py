"""Re-check the pod's fingerprints when the files behind them change.

The fingerprint is measured once at start; weights replaced under a running sidecar
(a new revision synced into the model directory, a shard patched in place) would
otherwise go on being stored under the old fingerprint. The watcher polls the stat
identity of every file a fingerprint may read: for each watched directory, every
entry of it and of its subdirectories one level down (the file set itself, then per
file st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns: a file patched in place with
its mtime restored still moves st_ctime_ns, another filesystem mounted at the same
path moves st_dev), and the serving-config file. All stat calls and the
re-measurement run on worker threads, never on the event loop.

On a change the cell is marked stale at once (stores under the changed fingerprints
are refused, lookups relying on them miss), the identity is measured again, and the
new one is swapped in only if the files did not move during the measurement;
a measurement that fails (a half-copied shard) leaves the cell stale and is retried
every interval.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import structlog

from sidecar.identity.cell import IdentityCell
from sidecar.identity.pod import PodIdentity

log = structlog.get_logger("infercache.identity")

Stamp = tuple[str, int, int, int, int, int]
"""(relative name, st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns); -1s when missing."""
Snapshot = tuple[Stamp, ...]
StatSource = Callable[[str], Snapshot]
"""The snapshot of one watched path (blocking; the watcher calls it on a thread)."""
Measure = Callable[[], Awaitable[PodIdentity]]
"""Fingerprint the pod's model and adapters again (off the event loop)."""

MISSING = (-1, -1, -1, -1, -1)


@dataclass(frozen=True, slots=True)
class WatchedPath:
    """One path whose files shape a fingerprint, and whose fingerprint that is."""

    path: str
    adapter: str = ""
    """The adapter name whose fingerprint the path shapes; "" = the model's."""

    def version(self, pod: PodIdentity) -> str:
        """The fingerprint this path shapes in `pod` ("" when unknown)."""
        if self.adapter:
            return pod.adapter_versions.get(self.adapter, "")
        return pod.model_version


def _stamp(name: str, path: str) -> Stamp:
    try:
        st = os.stat(path)  # follows symlinks: a hub snapshot's links name their blobs
    except OSError:
        return (name, *MISSING)
    return (name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def stat_tree(path: str) -> Snapshot:
    """The stamps of `path` and, for a directory, of every entry in it and in its
    subdirectories one level down (additional_chat_templates/, ...), sorted by name."""
    stamps = [_stamp(".", path)]
    try:
        top = sorted(os.scandir(path), key=lambda e: e.name)
    except (NotADirectoryError, FileNotFoundError, PermissionError):
        return tuple(stamps)
    for entry in top:
        stamps.append(_stamp(entry.name, entry.path))
        if entry.is_dir():
            try:
                below = sorted(os.scandir(entry.path), key=lambda e: e.name)
            except OSError:
                continue
            stamps.extend(_stamp(f"{entry.name}/{e.name}", e.path) for e in below)
    return tuple(stamps)


class IdentityWatcher:
    """Polls the watched paths every `interval_s` and keeps the cell's identity current."""

    def __init__(
        self,
        cell: IdentityCell,
        paths: Mapping[str, WatchedPath],
        measure: Measure,
        interval_s: float,
        *,
        stat: StatSource = stat_tree,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """`paths`: label (named in logs and refusals) -> watched path."""
        self.cell = cell
        self.paths = dict(paths)
        self.interval_s = interval_s
        self._measure = measure
        self._stat = stat
        self._sleep = sleep

    @property
    def enabled(self) -> bool:
        """Is there anything to watch, and a positive interval to watch it at?"""
        return bool(self.paths) and self.interval_s > 0

    def _snapshot(self) -> dict[str, Snapshot]:
        return {label: self._stat(w.path) for label, w in self.paths.items()}

    async def snapshot(self) -> dict[str, Snapshot]:
        """Every watched path's stamps, taken on a worker thread."""
        return await asyncio.to_thread(self._snapshot)

    async def run_forever(self) -> None:
        """Watch until cancelled (returns at once when not enabled)."""
        if not self.enabled:
            return
        seen = await self.snapshot()
        # The start's measurement came before this first snapshot: measure once more
        # so a change in between cannot go unseen.
        seen = await self.remeasure(seen)
        while True:
            await self._sleep(self.interval_s)
            seen = await self.check(seen)

    async def check(self, seen: dict[str, Snapshot]) -> dict[str, Snapshot]:
        """One poll against the snapshot `seen`; returns the snapshot to compare next."""
        now = await self.snapshot()
        changed = [label for label in self.paths if now.get(label) != seen.get(label)]
        if changed:
            pod = self.cell.pod
            self.cell.mark_stale(
                (self.paths[label].version(pod) for label in changed),
                f"{', '.join(changed)} changed on disk",
            )
        elif not self.cell.stale:
            return now
        return await self.remeasure(now)

    async def remeasure(self, seen: dict[str, Snapshot]) -> dict[str, Snapshot]:
        """Measure the identity again and swap it in if the files held still meanwhile."""
        try:
            pod = await self._measure()
        except Exception as exc:  # the loop must outlive any bad file; retried next poll
            self.cell.stats.remeasure_failures += 1
            everything = [w.version(self.cell.pod) for w in self.paths.values()]
            self.cell.mark_stale(everything, f"re-measuring failed: {exc}"[:300])
            log.warning("identity_remeasure_failed", error=str(exc)[:300])
            return seen
        after = await self.snapshot()
        if after != seen:
            # Measured a moving target (a copy still in progress): measure again next poll.
            log.info("identity_files_moving")
            return seen
        self.cell.swap(pod)
        return after
