"""Keeps the policy in force in step with its file: reload on SIGHUP and on change.

A reload reads and validates the whole file on a worker thread, then swaps the
policy in one assignment. A file that fails validation changes nothing: the
old policy stays in force and the error (file, line, field) is logged. Changes
are noticed by polling the file's (mtime, size, inode), which also catches the
symlink swap Kubernetes uses to update a mounted ConfigMap.
"""

from __future__ import annotations

import asyncio
import os

import structlog

from sidecar.policy.cacheability import PolicyHolder
from sidecar.policy.file import PolicyBounds, PolicyError, read_policy_file

log = structlog.get_logger("infercache.policy")

_Stamp = tuple[int, int, int] | None


def _stamp(path: str) -> _Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class PolicyWatcher:
    """Reloads `holder`'s policy from `path` when asked (SIGHUP) or when the file changes."""

    def __init__(
        self, holder: PolicyHolder, path: str | None, bounds: PolicyBounds, poll_ms: int
    ) -> None:
        self.holder = holder
        self.path = path
        self.bounds = bounds
        self.poll_s = poll_ms / 1000
        self.reloads = 0
        """Successful reloads (a counter for tests and logs)."""
        self.failures = 0
        """Reloads refused because the file was invalid."""
        self._wake = asyncio.Event()
        self._seen: _Stamp = None

    async def load_initial(self) -> None:
        """Load the file at start. Raises PolicyError: an invalid file must stop the start."""
        if not self.path:
            return
        stamp = await asyncio.to_thread(_stamp, self.path)
        self.holder.current = await asyncio.to_thread(read_policy_file, self.path, self.bounds)
        self._seen = stamp
        log.info("policy_loaded", path=self.path, tenants=len(self.holder.current.tenants))

    def request_reload(self) -> None:
        """Ask for a reload now (the SIGHUP handler); safe to call from a signal handler."""
        if not self.path:
            log.info("policy_reload_skipped", detail="no policy file configured")
            return
        self._wake.set()

    async def reload(self) -> bool:
        """Read the file and swap it in; on any error keep the old policy and log it."""
        assert self.path is not None
        stamp = await asyncio.to_thread(_stamp, self.path)
        try:
            policy = await asyncio.to_thread(read_policy_file, self.path, self.bounds)
        except PolicyError as exc:
            # Remember the bad version too: it is logged once, not on every poll.
            self._seen = stamp
            self.failures += 1
            log.error(
                "policy_reload_failed",
                error=str(exc),
                line=exc.line,
                field=exc.field,
                detail="the previous policy stays in force",
            )
            return False
        # Stamped before the read: a write landing during the read shows as a change.
        self._seen = stamp
        self.holder.current = policy
        self.reloads += 1
        log.info("policy_reloaded", path=self.path, tenants=len(policy.tenants))
        return True

    async def run_forever(self) -> None:
        """Wait for SIGHUP or poll for changes; reload on either. Runs until cancelled."""
        if not self.path:
            return
        timeout = self.poll_s if self.poll_s > 0 else None
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
                self._wake.clear()
            except TimeoutError:
                if await asyncio.to_thread(_stamp, self.path) == self._seen:
                    continue
            await self.reload()
