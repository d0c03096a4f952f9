"""scripts/release_step.py against live sidecar processes: every step, every exit status.

A v1 pod serves traffic first (its hot requests are recorded); then two v2 pods
(new weights, same Redis, the model server restarted on v2) are released.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient, make_key

from tests.support.checkpoints import llama_tensors, write_model
from tests.support.model_server import answer_for
from tests.support.processes import ModelServerProcess, RedisServer, free_port
from tests.support.sidecars import TOKENS, SidecarProcess, cli_env, run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

REPO = Path(__file__).resolve().parents[2]
STEP = REPO / "scripts" / "release_step.py"
MODEL = "tiny"
HOT = ("hot one", "hot two")
SAMPLING = {"temperature": 0}  # as text_key: deterministic, so the policy caches it


def request_line(text: str) -> str:
    """A prewarm file line: the key and the model-server request that computes it."""
    key = {"tenant": "acme", "promptVersion": "p1", "sampling": SAMPLING, "text": text}
    body = {"model": MODEL, "prompt": text, "temperature": 0}
    return json.dumps({"key": key, "replay": {"path": "/v1/completions", "body": body}})


def text_key(text: str) -> pb.CacheKey:
    """The pod's model (empty model_version), tenant acme, prompt p1."""
    return make_key(tenant="acme", prompt_version="p1", text=text, temperature=0.0)


@dataclass
class Fleet:
    """The released v2 pods and what the test needs to know about the release."""

    pods: list[SidecarProcess]
    v1: str
    v2: str
    upstream: ModelServerProcess
    tmp: Path
    redis_url: str

    def pod_args(self) -> list[str]:
        """--pod arguments (admin addresses) for every v2 pod."""
        args: list[str] = []
        for p in self.pods:
            args += ["--pod", p.admin_target]
        return args


def release(*args: str, token: str = "deployer") -> subprocess.CompletedProcess[str]:
    """Run the step to completion (bounded) with an admin token in the environment."""
    env = cli_env(None) | {"INFERCACHE_ADMIN_TOKEN": TOKENS.get(token, token)}
    return subprocess.run(
        [sys.executable, str(STEP), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def fleet(redis_session: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """v1's traffic recorded in Redis, then two v2 pods serving on the same Redis."""
    redis_session.flushall()
    tmp = tmp_path_factory.mktemp("release")
    v1_dir = write_model(tmp / "v1", llama_tensors(layers=1, seed=1))
    v2_dir = write_model(tmp / "v2", llama_tensors(layers=1, seed=2))
    policy = tmp / "policy.yaml"
    policy.write_text("tenants:\n  acme: {retain_inputs: true}\n")
    upstream = ModelServerProcess()
    upstream.start("v1")
    common: dict[str, Any] = {
        "model_server_url": upstream.url,
        "model_server_model": MODEL,
        "policy_file": str(policy),
        "lookup_timeout_ms": "2000",
    }
    pods: list[SidecarProcess] = []
    try:
        old = SidecarProcess(redis_session.url, model_path=str(v1_dir), **common)
        pods.append(old)
        old.wait_ready()
        requests = tmp / "hot.jsonl"
        requests.write_text("".join(request_line(t) + "\n" for t in HOT))
        filled = run_cli("prewarm", "--admin", old.admin_target, "--file", str(requests))
        assert filled.returncode == 0, filled.stderr
        assert f"{len(HOT)} stored" in filled.stdout, filled.stdout
        with CacheClient(old.target) as client:
            v1 = client.server_info().model_version
            for text in HOT:
                assert client.lookup(text_key(text)).outcome == pb.LOOKUP_OUTCOME_HIT
        old.stop()
        pods.remove(old)

        upstream.start("v2")  # the new pods' model server runs the new weights
        pods += [SidecarProcess(redis_session.url, model_path=str(v2_dir), **common) for _ in "ab"]
        for p in pods:
            p.wait_ready()
        with CacheClient(pods[0].target) as client:
            v2 = client.server_info().model_version
        assert v2 != v1
        yield Fleet(pods, v1, v2, upstream, tmp, redis_session.url)
    finally:
        for p in pods:
            p.stop()
        upstream.stop()


def test_release_invalidates_waits_prewarms_and_reports(fleet: Fleet) -> None:
    """Exit 0: the invalidation is in the audit log, both pods serve v2, v1's hot
    requests are cached with v2's answers on both pods, and the printed distribution is
    the sum of the pods' own counters."""
    done = release(
        *fleet.pod_args(),
        "--invalidate-prompt-version",
        "p0",
        "--reason",
        "release test",
        "--from-version",
        fleet.v1,
        "--top-k",
        "10",
        "--allow-fewer",  # v1 served 2 hot requests: 2 of the top 10 exist
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"every pod serves {fleet.v2}" in done.stdout
    assert "OK: every step passed" in done.stdout

    audit = run_cli("audit", "--admin", fleet.pods[0].admin_target, "--json")
    records = [json.loads(line) for line in audit.stdout.splitlines()]
    assert any(
        r["reason"] == "release test" and r["selector"]["prompt_version"] == "p0" for r in records
    )
    for p in fleet.pods:
        with CacheClient(p.target) as client:
            for text in HOT:
                hit = client.lookup(text_key(text))
                assert hit.outcome == pb.LOOKUP_OUTCOME_HIT, p.target
                assert hit.payload.decode() == answer_for("v2", text)

    # Only step 4 now (nothing to invalidate or prewarm): the table is the pods' sum.
    report = release(*fleet.pod_args(), "--expect-version", fleet.v2)
    assert report.returncode == 0, report.stdout + report.stderr
    want: dict[str, int] = {}
    for p in fleet.pods:
        stats = run_cli("stats", "--admin", p.admin_target, "--json")
        lookups = json.loads(stats.stdout)["versions"][fleet.v2]["lookups"]
        for k, n in lookups.items():
            want[k] = want.get(k, 0) + n
    [row] = [line.split() for line in report.stdout.splitlines() if line.startswith(fleet.v2)]
    hits = want.get("hit.hot", 0) + want.get("hit.warm", 0)
    assert int(row[1]) == sum(want.values())
    assert hits >= 2 * len(HOT)  # this test's own lookups, at least
    assert [int(x) for x in row[3:7]] == [
        want.get(k, 0) for k in ("hit.hot", "hit.warm", "miss", "bypass")
    ]


def test_usage_errors_exit_2(fleet: Fleet) -> None:
    """No pods, a malformed --pod, or --top-k without --from-version: exit 2."""
    assert release().returncode == 2
    assert release("--pod", "127.0.0.1:admin").returncode == 2
    assert release(*fleet.pod_args(), "--top-k", "5").returncode == 2


def test_refused_invalidation_exits_3(fleet: Fleet) -> None:
    """A token the sidecars do not know: the invalidation fails, nothing after it runs."""
    done = release(*fleet.pod_args(), "--invalidate-all", token="not-a-configured-token-0123456789")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "UNAUTHENTICATED" in done.stderr
    assert "2/4" not in done.stdout


def test_fingerprint_never_seen_exits_4(fleet: Fleet) -> None:
    """Waiting for a fingerprint no pod serves times out, naming each pod's fingerprint."""
    done = release(*fleet.pod_args(), "--expect-version", "fp1-" + "0" * 64, "--wait-timeout", "1")
    assert done.returncode == 4, done.stdout + done.stderr
    assert done.stdout.count(fleet.v2) == len(fleet.pods)
    assert "3/4" not in done.stdout


def test_pod_that_does_not_answer_exits_4(fleet: Fleet) -> None:
    """A pod whose admin plane does not answer never shows the fingerprint: exit 4."""
    dead = f"127.0.0.1:{free_port()}"
    done = release(*fleet.pod_args(), "--pod", dead, "--wait-timeout", "1")
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"{dead}: no answer  <- not ready" in done.stdout


def test_failed_prewarm_exits_5(fleet: Fleet) -> None:
    """A request the model server fails (HTTP 500) fails the prewarm gate."""
    bad = fleet.tmp / "bad.jsonl"
    bad.write_text(request_line("[[error]]") + "\n")
    done = release(*fleet.pod_args(), "--prewarm-file", str(bad), "--from-version", fleet.v1)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "do not shift traffic" in done.stdout
    assert "4/4" not in done.stdout


def test_unreadable_stats_exit_6(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 4 on a pod that stopped answering after the wait (it left between the steps):
    the distribution is not printed and main's status for it is 6."""
    step = load_step()
    monkeypatch.setenv("RELEASE_TEST_TOKEN", TOKENS["deployer"])
    args = step.build_parser().parse_args(["--pod", "x", "--token-env", "RELEASE_TEST_TOKEN"])
    dead = step.Pod(f"127.0.0.1:{free_port()}")
    live = step.Pod(fleet.pods[0].admin_target)
    assert step.hit_distribution(step.infercache_cli(), args, [live]) is True
    assert step.hit_distribution(step.infercache_cli(), args, [live, dead]) is False
    assert step.EXIT_STATS == 6


def load_step() -> Any:
    """scripts/release_step.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("release_step", STEP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["release_step"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def run_action(fleet: Fleet, **inputs: str) -> subprocess.CompletedProcess[str]:
    """The composite action's release step, as a runner runs it (bash -eo pipefail), with
    the project's venv standing in for the one its install step makes."""
    action = yaml.safe_load((REPO / ".github/actions/infercache-release/action.yml").read_text())
    [step] = [s for s in action["runs"]["steps"] if s.get("name") == "Release checklist"]
    runner_temp = fleet.tmp / "runner"
    runner_temp.mkdir(exist_ok=True)
    venv = runner_temp / "infercache-venv"
    if not venv.exists():
        venv.symlink_to(Path(sys.executable).parent.parent)
    defaults = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    given = defaults | {"reason": "action test"} | inputs
    env = cli_env(None) | {
        "GITHUB_ACTION_PATH": str(REPO / ".github/actions/infercache-release"),
        "RUNNER_TEMP": str(runner_temp),
        "INFERCACHE_ADMIN_TOKEN": TOKENS["deployer"],
    }
    for name, value in step["env"].items():
        if name.startswith("IN_"):
            # ${{ inputs.x }} -> the input's value, as the runner substitutes it.
            env[name] = given[value.removeprefix("${{ inputs.").removesuffix(" }}")]
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_composite_action_runs_the_step(fleet: Fleet) -> None:
    """The action passes its inputs through: a good release exits 0 and prints the
    distribution; an unreachable fingerprint fails it with the step's status 4."""
    pods = "\n".join(p.admin_target for p in fleet.pods)
    ok = run_action(fleet, pods=pods, **{"expect-version": fleet.v2})
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "4/4 hit distribution over 2 pod(s)" in ok.stdout
    late = run_action(
        fleet, pods=pods, **{"expect-version": "fp1-" + "1" * 64, "wait-timeout": "1"}
    )
    assert late.returncode == 4, late.stdout + late.stderr


def test_the_receipt_is_the_minimum_epoch_a_later_pod_must_see(fleet: Fleet) -> None:
    """The step prints and writes the invalidation's epoch (the receipt). A pod started
    with INFERCACHE_MIN_EPOCH at the receipt serves hits; one started with a minimum the
    store's rules have not reached (as after the store was rolled back to before the
    invalidation) serves none, however authentic the entries are."""
    receipt_file = fleet.tmp / "receipt"
    done = release(
        *fleet.pod_args(),
        "--invalidate-prompt-version",
        "p-receipt",
        "--receipt-file",
        str(receipt_file),
        "--expect-version",
        fleet.v2,
        "--prewarm-file",  # HOT is stored for v2 (or already is)
        str(fleet.tmp / "hot.jsonl"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    receipt = int(receipt_file.read_text())
    assert f"receipt: INFERCACHE_MIN_EPOCH={receipt}" in done.stdout
    audit = run_cli("audit", "--admin", fleet.pods[0].admin_target, "--json")
    records = [json.loads(line) for line in audit.stdout.splitlines()]
    assert any(
        int(r["epoch"]) == receipt and r["selector"]["prompt_version"] == "p-receipt"
        for r in records
    )
    expected = ((receipt, pb.LOOKUP_OUTCOME_HIT), (receipt + 1, pb.LOOKUP_OUTCOME_MISS))
    for min_epoch, outcome in expected:
        model = str(fleet.tmp / "v2")
        late = SidecarProcess(fleet.redis_url, model_path=model, min_epoch=str(min_epoch))
        try:
            late.wait_ready()
            with CacheClient(late.target) as client:
                assert client.lookup(text_key(HOT[0])).outcome == outcome, min_epoch
        finally:
            late.stop()
