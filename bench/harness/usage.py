"""CPU seconds and syscalls of a process (from /proc), and the machine's load average."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None if unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc; NaN if unreadable."""
    fields = _stat_fields(pid)
    if fields is None:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Usage:
    """A process's (all threads') user and system CPU seconds and syscalls, from /proc."""

    user_s: float
    system_s: float
    syscalls: int

    @classmethod
    def of(cls, pid: int) -> Usage:
        """The process's totals so far (NaN CPU and 0 syscalls if /proc is unreadable)."""
        fields = _stat_fields(pid)
        try:
            io = Path(f"/proc/{pid}/io").read_text()
        except OSError:
            fields = None
        if fields is None:
            return cls(float("nan"), float("nan"), 0)
        tick = os.sysconf("SC_CLK_TCK")
        counts = dict(line.split(": ") for line in io.splitlines() if ": " in line)
        return cls(
            int(fields[11]) / tick,
            int(fields[12]) / tick,
            int(counts.get("syscr", 0)) + int(counts.get("syscw", 0)),
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.user_s - other.user_s,
            self.system_s - other.system_s,
            self.syscalls - other.syscalls,
        )


def load_average() -> str:
    """The 1, 5 and 15 minute load averages as "a b c", or "?"."""
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"
