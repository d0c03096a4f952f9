"""py-spy (installed in the venv: `pip install py-spy`) sampling one server into raw
collapsed stacks, for a fixed time or until stop()."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.harness.procs import die_with_parent


class PySpy:
    """`py-spy record` of one process into `out` (collapsed-stack text).

    nonblocking: py-spy never pauses the server (pausing makes warm reads miss their
    deadline); the price is Python frames only, so time inside grpc/uvloop/redis C code
    shows up under the Python frame that called it. native: C frames too (pauses it).
    """

    def __init__(
        self,
        pid: int,
        out: Path,
        *,
        rate: int,
        duration_s: float | None = None,
        native: bool = False,
        nonblocking: bool = False,
    ) -> None:
        argv = [str(Path(sys.executable).with_name("py-spy")), "record", "-p", str(pid)]
        if duration_s is not None:
            argv += ["-d", str(max(1, int(duration_s)))]
        argv += ["-r", str(rate), "--format", "raw", "-o", str(out)]
        argv += ["--native"] if native else []
        argv += ["--nonblocking"] if nonblocking else []
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent
        )
        if duration_s is None:
            time.sleep(0.5)  # let it attach before the measured work starts

    def wait(self) -> None:
        """Until a fixed-time recording has written its file."""
        self.proc.wait()

    def stop(self) -> None:
        """End the recording now (py-spy writes its file on SIGINT), then wait for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
