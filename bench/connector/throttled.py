"""The throttled run: the warm tier behind a slow link, where loading loses.

A second sidecar's Redis (its warm tier) sits behind a throttling TCP proxy that the
bench runs itself (tests/support/throttle.py). The run's prompts reach Redis as they do
in a fleet: an engine of v1 computes and saves them, an engine declaring another model
fingerprint attaches and the sidecar demotes v1's blocks to Redis (the link open), then
the link is throttled to THROTTLE_BPS and a fresh v1 engine W answers them, beside a
connector-less engine answering prompts of the same length, round by round.

At THROTTLE_BPS a 1,500-token prefix (23 MiB) takes ~12 s to come over the link, where
recomputing it takes ~1 s on a quiet CPU: the connector must recompute. W's first
request meets the unmeasured link (bounded by the sidecar's 50 ms promotion bound) and
measures it; the next ones recompute without waiting on it. That first request is each
engine's first long prompt, and an engine's first long prompt is slower anyway (both
engines answer one before the measured rounds; their times are printed, not counted).

The measured rounds run over PAIRS fresh engine pairs (pairs.py: why, and how).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.connector.pairs import interleaved_pairs
from bench.harness.procs import SidecarSpec, redis_server
from tests.support.throttle import ThrottledProxy

if TYPE_CHECKING:
    from bench.connector.__main__ import Run
    from bench.connector.engines import Answer

THROTTLE_BPS = 2_000_000
"""The slow link, bytes per second each way."""
MAX_TOKENS = 8
PAIRS = 5
"""Engine pairs (one in a smoke run)."""


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _dbsize(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"DBSIZE\r\n")
        return int(s.recv(64).strip(b":\r\n"))


def throttled(
    run: Run, rounds: int, length: int, root: Path, stack: contextlib.ExitStack[bool | None]
) -> tuple[list[Answer], list[Answer]]:
    """(the connector-less engines' answers, the W engines'), interleaved round by round."""
    (root / "redis").mkdir()
    (root / "shm-warm").mkdir()
    redis = redis_server(str(root / "redis"), "redis")
    stack.callback(redis.stop)
    redis.start()
    proxy = ThrottledProxy(redis.port)
    stack.callback(proxy.close)
    flags = ["--kv-pool-bytes", "1GiB", "--kv-shm-dir", str(root / "shm-warm")]
    flags += ["--redis-url", f"redis://127.0.0.1:{proxy.port}/0"]
    spec = SidecarSpec("sidecar-warm", flags=flags)
    sidecar = spec.proc()
    stack.callback(sidecar.stop)
    sidecar.start(timeout_s=120)
    target = f"127.0.0.1:{spec.ports.data}"
    pairs = 1 if run.smoke else PAIRS
    prompts = [run.prompt(length) for _ in range((rounds + 1) * pairs)]
    saver = run.ready(run.spawn("infercache", {"sidecar": target}))
    for p in prompts:
        saver.ttft(p, MAX_TOKENS)
    saver.close()
    switch = run.spawn(
        "infercache", {"sidecar": target, "model_fingerprint": "bench-other-version"}
    )
    switch.wait_ready()  # its attach makes the sidecar demote v1's blocks
    blocks = len(prompts) * ((length - 1) // 32)
    deadline = time.monotonic() + 300
    while _dbsize(redis.port) < blocks and time.monotonic() < deadline:
        time.sleep(0.2)
    switch.close()
    print(f"  warm tier: {_dbsize(redis.port)} keys, link throttled to {THROTTLE_BPS} B/s")
    proxy.rate = THROTTLE_BPS
    # Where the CPU goes while the pairs run, engine starts included (the sidecar attaches,
    # promotes and samples over the link, this process pumps the link): on two cores it
    # is taken from the engines.
    pids = {"sidecar": sidecar.pid, "redis": redis.pid, "proxy (this process)": os.getpid()}
    before = {name: _cpu_s(pid) for name, pid in pids.items()}
    per_pair = [prompts[k * (rounds + 1) : (k + 1) * (rounds + 1)] for k in range(pairs)]
    recompute, loaded = interleaved_pairs(
        run, lambda: run.spawn("infercache", {"sidecar": target}), per_pair, length
    )
    used = {name: _cpu_s(pid) - before[name] for name, pid in pids.items()}
    print("  CPU s during the pairs: " + ", ".join(f"{k} {v:.2f}" for k, v in used.items()))
    sidecar.check_alive()
    return recompute, loaded
