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

Two engines of the same build on this machine differ by up to 8% in TTFT for their
whole life (two connector-less engines, 10 interleaved rounds, three trials: 0.918,
0.998, 0.963), more than the overhead measured here. So the run uses PAIRS pairs of
fresh engines (a connector-less one and a W), each pair answering `rounds` prompts, and
the ratio is over all of them: one engine's luck weighs a fifth. In each round the
engine that answers first alternates, so that neither always runs right after the
other's background work (W's commit, the sidecar's seal).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

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
    recompute: list[Answer] = []
    loaded: list[Answer] = []
    # Where the CPU goes while W answers (the sidecar promotes and samples over the link,
    # this process pumps the link): on two cores it is taken from the engines.
    pids = {"sidecar": sidecar.pid, "redis": redis.pid, "proxy (this process)": os.getpid()}
    used = dict.fromkeys(pids, 0.0)
    for k in range(pairs):
        base = run.ready(run.spawn("none"))
        w = run.ready(run.spawn("infercache", {"sidecar": target}))
        ours = prompts[k * (rounds + 1) : (k + 1) * (rounds + 1)]
        # Not measured: each engine's first long prompt (W's meets the unmeasured link).
        first_base = base.ttft(run.prompt(length), MAX_TOKENS)
        first_w = w.ttft(ours[0], MAX_TOKENS)
        before = {name: _cpu_s(pid) for name, pid in pids.items()}
        pair_base: list[Answer] = []
        pair_w: list[Answer] = []
        for i, p in enumerate(ours[1:]):
            own = run.prompt(length)
            if i % 2:
                pair_w.append(w.ttft(p, MAX_TOKENS))
                pair_base.append(base.ttft(own, MAX_TOKENS))
            else:
                pair_base.append(base.ttft(own, MAX_TOKENS))
                pair_w.append(w.ttft(p, MAX_TOKENS))
        for name, pid in pids.items():
            used[name] += _cpu_s(pid) - before[name]
        base.close()
        w.close()
        print(
            f"  pair {k}: W {' '.join(f'{a.ttft_s:.3f}' for a in pair_w)} s "
            f"(first {first_w.ttft_s:.3f}); beside it "
            f"{' '.join(f'{a.ttft_s:.3f}' for a in pair_base)} s (first {first_base.ttft_s:.3f})"
        )
        recompute += pair_base
        loaded += pair_w
    print("  CPU s during W's rounds: " + ", ".join(f"{k} {v:.2f}" for k, v in used.items()))
    sidecar.check_alive()
    return recompute, loaded
