"""cli/interrupts.py: a stop signal ends the wait at once and never deadlocks the
handler against the waiting thread (a `threading.Event` set from the handler hung 52
of 100 such children: the signal landed while the main thread held the Event's lock).
Real child processes and real signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.support.processes import REPO

CHILD = """
import sys
from sidecar.cli.interrupts import StopSignals
with StopSignals() as stop:
    print("ready", flush=True)
    while not stop.wait(float(sys.argv[1])):
        pass
print("stopped", flush=True)
"""


def run_child(wait_s: str, sig: signal.Signals, ignore_sigint: bool = False) -> tuple[str, float]:
    """Start the child, signal it once it waits; its output and how long it took to end."""
    preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, wait_s],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.01)
        sent = time.monotonic()
        proc.send_signal(sig)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return "hung", time.monotonic() - sent
        return out, time.monotonic() - sent


def test_a_busy_waiter_always_stops() -> None:
    """wait(0) in a loop: the handler runs at every possible point of the wait; 40 of 40
    children stop."""
    outcomes = [run_child("0", signal.SIGTERM)[0] for _ in range(40)]
    assert outcomes == ["stopped\n"] * 40


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_long_wait_ends_when_the_signal_comes(sig: signal.Signals) -> None:
    """wait(60) ends on the signal, not after the minute (SIGINT also when the parent
    started the child with SIGINT ignored, as a shell starts a background job)."""
    out, took = run_child("60", sig, ignore_sigint=True)
    assert out == "stopped\n"
    assert took < 30, took
