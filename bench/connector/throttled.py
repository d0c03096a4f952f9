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
measures it; the next ones recompute without waiting on it.

The run takes ROUNDS_FACTOR times the bench's rounds (a throttled round is two ~0.5 s
requests: cheap beside the engines' starts, and a ratio near 1 needs the samples), and
alternates which engine answers first in a round, so that neither always runs right
after the other's background work (W's commit, the sidecar's seal).
"""

from __future__ import annotations

import contextlib
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
ROUNDS_FACTOR = 2


def _dbsize(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"DBSIZE\r\n")
        return int(s.recv(64).strip(b":\r\n"))


def throttled(
    run: Run, rounds: int, length: int, root: Path, stack: contextlib.ExitStack[bool | None]
) -> tuple[list[Answer], list[Answer]]:
    """(the connector-less engine's answers, W's), interleaved round by round."""
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
    rounds *= ROUNDS_FACTOR
    prompts = [run.prompt(length) for _ in range(rounds)]
    saver = run.ready(run.spawn("infercache", {"sidecar": target}))
    for p in prompts:
        saver.ttft(p, MAX_TOKENS)
    saver.close()
    switch = run.spawn(
        "infercache", {"sidecar": target, "model_fingerprint": "bench-other-version"}
    )
    switch.wait_ready()  # its attach makes the sidecar demote v1's blocks
    blocks = rounds * ((length - 1) // 32)
    deadline = time.monotonic() + 300
    while _dbsize(redis.port) < blocks and time.monotonic() < deadline:
        time.sleep(0.2)
    switch.close()
    print(f"  warm tier: {_dbsize(redis.port)} keys, link throttled to {THROTTLE_BPS} B/s")
    proxy.rate = THROTTLE_BPS
    base = run.ready(run.spawn("none"))
    w = run.ready(run.spawn("infercache", {"sidecar": target}))
    recompute: list[Answer] = []
    loaded: list[Answer] = []
    for i, p in enumerate(prompts):
        own = run.prompt(length)
        if i % 2:
            loaded.append(w.ttft(p, MAX_TOKENS))
            recompute.append(base.ttft(own, MAX_TOKENS))
        else:
            recompute.append(base.ttft(own, MAX_TOKENS))
            loaded.append(w.ttft(p, MAX_TOKENS))
    base.close()
    w.close()
    sidecar.check_alive()
    return recompute, loaded
