"""The sidecar under test: one child with data and admin planes, and its memory."""

from __future__ import annotations

import time
from pathlib import Path

from bench.harness.procs import ServerProc, SidecarPorts, SidecarSpec

TOKEN = "bench-robustness-token"
GRACE_S = 1  # the bench's --grace-period-s (SidecarSpec's)


def sidecar() -> ServerProc:
    """A sidecar (not started) on free data and admin ports, one admin token, embedded stores."""
    spec = SidecarSpec(
        "sidecar",
        SidecarPorts.free(admin=True),
        env={"INFERCACHE_ADMIN_TOKENS": f"bench={TOKEN}"},
    )
    return spec.proc()


def rss_mib(pid: int) -> float:
    """Resident set size of a process (VmRSS from /proc/PID/status), MiB; NaN if unreadable."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def settled_rss_mib(pid: int, timeout_s: float = 30.0) -> float:
    """RSS once it stopped moving (two readings 0.5 s apart within 1 MiB): the KV tier's
    torch is imported on a thread after the start, which a baseline must not include."""
    deadline = time.monotonic() + timeout_s
    last = rss_mib(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_mib(pid)
        if abs(now - last) < 1.0:
            return now
        last = now
    return last
