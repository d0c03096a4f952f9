"""The policy file with a real `infercache serve`: refused at start, reloaded on SIGHUP and on
change, and a bad reload keeps the policy in force."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient, make_key

from tests.support.sidecars import INFERCACHE, SidecarProcess, isolated_env

pytestmark = pytest.mark.e2e

CLOSED = "tenants:\n  billing:\n    cacheable: false\n"
OPEN = "tenants:\n  billing:\n    cacheable: true\n"
# Line 3 holds the mistake: a reload must name it.
BROKEN = "tenants:\n  billing:\n    cacheable: sometimes\n"
KEY = make_key(tenant="billing", model_version="m", prompt_version="p", text="q", temperature=0.0)


def test_invalid_policy_file_stops_the_start(tmp_path: Path) -> None:
    """`serve` with an invalid policy file exits 2 and names the file, line and field."""
    path = tmp_path / "policy.yaml"
    path.write_text("defaults:\n  max_ttl_s: 60\ntenants:\n  acme:\n    max_tll_s: 10\n")
    result = subprocess.run(
        [str(INFERCACHE), "serve"],
        env=isolated_env(INFERCACHE_POLICY_FILE=str(path)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert f"{path}:5: tenants.acme.max_tll_s: unknown key" in result.stderr


def test_missing_policy_file_stops_the_start(tmp_path: Path) -> None:
    """A configured policy file that does not exist is an error too, not 'no policy'."""
    missing = tmp_path / "nope.yaml"
    result = subprocess.run(
        [str(INFERCACHE), "serve", "--policy-file", str(missing)],
        env=isolated_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert str(missing) in result.stderr


@pytest.fixture
def serve_with_policy(
    tmp_path: Path,
) -> Iterator[Callable[[int], tuple[SidecarProcess, str, Path]]]:
    """Start `serve` with billing not cacheable; poll interval as given (0 = SIGHUP only)."""
    started: list[SidecarProcess] = []

    def start(poll_ms: int) -> tuple[SidecarProcess, str, Path]:
        path = tmp_path / "policy.yaml"
        path.write_text(CLOSED)
        proc = SidecarProcess(
            operator=True,
            log_path=tmp_path / "serve.stderr",
            policy_file=str(path),
            policy_poll_ms=poll_ms,
        )
        started.append(proc)
        proc.wait_ready()
        return proc, proc.target, path

    yield start
    for proc in started:
        proc.stop()


def outcome(target: str) -> int:
    with CacheClient(target) as client:
        return int(client.lookup(KEY).outcome)


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def events(proc: SidecarProcess, name: str) -> list[dict[str, object]]:
    """The JSON log records with this event name."""
    out = []
    for line in proc.stderr().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == name:
                out.append(record)
    return out


def rewrite(path: Path, text: str) -> None:
    """Replace the file with `text` in one visible change: written beside it, then renamed
    over it (as a ConfigMap update swaps its files), so the watcher sees a new inode with
    the whole content. An in-place write could be seen twice (truncated, then written, or
    written, then its mtime bumped for a coarse clock), and a bad file logged twice."""
    staged = path.with_name(path.name + ".new")
    staged.write_text(text)
    os.replace(staged, path)


@pytest.mark.parametrize("trigger", ["sighup", "file_change"])
def test_bad_reload_keeps_the_policy_and_a_good_one_applies(
    serve_with_policy: Callable[[int], tuple[SidecarProcess, str, Path]], trigger: str
) -> None:
    """An invalid file at reload is logged with line and field and the old policy stays in force;
    a valid one then takes effect. Reload by SIGHUP (polling off) or by the file changing."""
    proc, target, path = serve_with_policy(0 if trigger == "sighup" else 100)

    def reload(text: str) -> None:
        rewrite(path, text)
        if trigger == "sighup":
            proc.proc.send_signal(signal.SIGHUP)

    assert outcome(target) == pb.LOOKUP_OUTCOME_BYPASS

    reload(BROKEN)
    wait_for(lambda: bool(events(proc, "policy_reload_failed")), "the reload error in the log")
    (failure,) = events(proc, "policy_reload_failed")
    assert failure["level"] == "error"
    assert (failure["line"], failure["field"]) == (3, "tenants.billing.cacheable")
    assert f"{path}:3: tenants.billing.cacheable" in str(failure["error"])
    assert outcome(target) == pb.LOOKUP_OUTCOME_BYPASS, "the old policy must stay in force"
    assert proc.proc.poll() is None

    reload(OPEN)
    wait_for(lambda: outcome(target) == pb.LOOKUP_OUTCOME_MISS, "the valid policy to apply")
    assert len(events(proc, "policy_reloaded")) == 1
    assert len(events(proc, "policy_reload_failed")) == 1, "a bad file is logged once"
