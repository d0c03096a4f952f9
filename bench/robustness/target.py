"""The sidecar under test: one child with data and admin planes, and its memory."""

from __future__ import annotations

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
