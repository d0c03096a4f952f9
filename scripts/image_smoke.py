"""Smoke-test a built image: its own entrypoint serves, answers, and stops cleanly on SIGTERM.

Usage: image_smoke.py IMAGE

No daemon is needed (nor usable here: `podman run` cannot set up cgroups on these
machines): `buildah from` makes a working container of IMAGE and `buildah run
--isolation=chroot --network host --user 65534:65534` runs the image's ENTRYPOINT as
an unprivileged user that is not the image's own, on free loopback ports. Checked:
gRPC health SERVING (data plane and the health-only port), GetServerInfo, Lookup MISS ->
Store -> Lookup HIT, an admin call
with the token given through the environment, /metrics, the process's uid, and exit
status 0 within the grace period after SIGTERM sent to the entrypoint's process (as a
container runtime sends it to PID 1). Exit status 0 when every check passed.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc
from infercache.v1 import admin_pb2, admin_pb2_grpc
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient, make_key

USER = "65534:65534"
START_TIMEOUT_S = 90.0  # a cold Python start in a chroot on a loaded 2-core runner
GRACE_S = 2


def say(msg: str) -> None:
    """One progress line, prefixed so CI logs can be grepped."""
    print(f"[image-smoke] {msg}", flush=True)


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def entrypoint(image: str) -> list[str]:
    """The image's ENTRYPOINT, as the runtime would exec it."""
    out = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{json .Config.Entrypoint}}", image],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    argv: list[str] = json.loads(out)
    if not argv or "infercache" not in Path(argv[0]).name or argv[1:] != ["serve"]:
        raise SystemExit(f"entrypoint is {argv!r}, expected [.../infercache, serve]")
    return argv


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (chroot isolation shares the host's PID namespace)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = Path(f"/proc/{parent}/task").iterdir()
            for task in tasks:
                children = (task / "children").read_text().split()
                found += [int(c) for c in children]
                todo += [int(c) for c in children]
        except FileNotFoundError:
            continue
    return found


def server_pid(runner: subprocess.Popen[bytes]) -> int:
    """The entrypoint's process (python running .../infercache serve) under `buildah run`.

    Not buildah's own `buildah-chroot-exec` parent, whose argv names the same command:
    a signal to it kills it and orphans the server instead of reaching it.
    """
    for pid in descendants(runner.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        if argv[0].startswith(b"buildah"):
            continue
        if any(a.endswith(b"/infercache") for a in argv) and b"serve" in argv:
            return pid
    raise AssertionError("no `infercache serve` process under buildah run")


def uid_of(pid: int) -> int:
    """The real uid of a process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def wait_serving(target: str, runner: subprocess.Popen[bytes], log: Path) -> None:
    """Poll grpc.health.v1 (bounded) until SERVING; fail if the container exits first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if runner.poll() is not None:
                raise AssertionError(f"container exited {runner.returncode}:\n{log.read_text()}")
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise AssertionError(f"not SERVING within {START_TIMEOUT_S} s:\n{log.read_text()}")


def check_serving(data: str, admin: str, metrics: str, token: str) -> None:
    """The data plane, the admin plane and /metrics answer as documented."""
    with CacheClient(data) as cache:
        info = cache.server_info(timeout=5)
        say(f"GetServerInfo: version {info.server_version}, warm tier {info.warm_tier}")
        key = make_key(
            tenant="smoke",
            model_version="fp1-smoke",
            prompt_version="p1",
            text="ping",
            temperature=0.0,
        )
        miss = cache.lookup(key, timeout=5)
        assert miss.outcome == pb.LOOKUP_OUTCOME_MISS, miss
        assert miss.lease, "a MISS carries a lease"
        stored = cache.store(key, b"pong", lease=miss.lease, timeout=5)
        assert stored.outcome == pb.STORE_OUTCOME_STORED, stored
        hit = cache.lookup(key, timeout=5)
        assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"pong"), hit
        say("Store -> Lookup HIT over loopback")
    with grpc.insecure_channel(admin) as channel:
        stats = admin_pb2_grpc.AdminServiceStub(channel).GetStats(
            admin_pb2.GetStatsRequest(), metadata=[("authorization", f"Bearer {token}")], timeout=5
        )
        assert stats.versions, stats
        say(f"admin GetStats with the env token: {len(stats.versions)} model version(s)")
    body = httpx.get(f"http://{metrics}/metrics", timeout=5).text
    assert "infercache_lookups_total" in body, body[:500]
    say("/metrics serves infercache_lookups_total")


def smoke(image: str) -> None:
    """Run every check against one working container of `image`, then remove it."""
    argv = entrypoint(image)
    say(f"entrypoint {argv}")
    ctr = f"infercache-smoke-{secrets.token_hex(4)}"
    subprocess.run(["buildah", "from", "--pull-never", "--name", ctr, image], check=True)
    data, admin, metrics, health = (f"127.0.0.1:{free_port()}" for _ in range(4))
    token = secrets.token_hex(16)
    cmd = [
        "buildah",
        "run",
        "--isolation=chroot",
        "--network",
        "host",
        "--user",
        USER,
        # Settings as a pod gives them: environment variables (the token as a pair).
        "--env",
        f"INFERCACHE_ADMIN_TOKENS=smoke={token}",
        "--env",
        f"INFERCACHE_GRACE_PERIOD_S={GRACE_S}",
        ctr,
        "--",
        *argv,
        "--listen",
        data,
        "--admin-listen",
        admin,
        "--metrics-listen",
        metrics,
        "--health-listen",
        health,
    ]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "serve.log"
        with log.open("wb") as out:
            runner = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        pid = 0
        try:
            started = time.monotonic()
            wait_serving(data, runner, log)
            say(f"health SERVING on {data} after {time.monotonic() - started:.1f} s")
            wait_serving(health, runner, log)
            say(f"health SERVING on the health-only port {health}")
            pid = server_pid(runner)
            assert uid_of(pid) == 65534, f"server runs as uid {uid_of(pid)}"
            say(f"server pid {pid} runs as uid 65534")
            check_serving(data, admin, metrics, token)
            os.kill(pid, signal.SIGTERM)
            # Bounded by the grace period plus start-up slack; a hang is a failure.
            code = runner.wait(timeout=GRACE_S + 30)
            text = log.read_text(errors="replace")
            assert code == 0, f"exit status {code} after SIGTERM:\n{text}"
            assert '"stopped"' in text, f"no `stopped` log line:\n{text}"
            say("SIGTERM -> drained, exit status 0")
        finally:
            # Killing buildah alone would orphan the server: stop it first.
            if pid and Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
            if runner.poll() is None:
                runner.kill()
                runner.wait()
            subprocess.run(["buildah", "rm", ctr], check=False, capture_output=True)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    smoke(sys.argv[1])
    say("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
