"""The processes of bench.gateway: one redis-server per gateway, the deterministic model
server (fixed artificial latency), LiteLLM's proxy and infercache's gateway in front of it.

LiteLLM runs from its own venv (scripts/litellm_venv.sh: an exact pinned release, built
once into the CI cache dir), with its Redis cache on its own redis-server and a master
key only (its virtual keys, one per team, need a Postgres database: every caller here
uses the master key, and the tenant probe says so). infercache runs `infercache serve
--gateway-listen` with two API keys (two tenants), its warm tier on its own
redis-server, its model path a generated tiny checkpoint (the gateway keys by the pod's
weight fingerprint).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.harness.procs import REPO, ServerProc, fleet_secret_file, redis_server
from bench.harness.usage import cpu_seconds
from tests.support.processes import free_port

MODEL = "tiny"
KEYS = {"acme": "sk-acme-0123456789abcdef", "globex": "sk-globex-0123456789abcdef"}
INFERCACHE = REPO / ".venv" / "bin" / "infercache"
LITELLM_VENV_SCRIPT = REPO / "scripts" / "litellm_venv.sh"
LITELLM_MASTER_KEY = "sk-litellm-master-0123456789abcdef"


MODEL_SERVER = REPO / "tests" / "support" / "model_server.py"


def upstream(delay_ms: int, script: Path = MODEL_SERVER) -> ServerProc:
    """The tests' deterministic OpenAI-compatible server (`script`, standard library only),
    answering after `delay_ms`."""
    port = free_port()
    argv = [sys.executable, str(script), "--port", str(port)]
    argv += ["--model", MODEL, "--weights", "v1", "--delay-ms", str(delay_ms)]
    return ServerProc("upstream", argv, (port,))


def bare_proxy(upstream_port: int) -> ServerProc:
    """bench/gateway/bare_proxy.py on a free port: the stack's floor, no caching."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.gateway.bare_proxy", str(port)]
    return ServerProc("bare-proxy", [*argv, f"http://127.0.0.1:{upstream_port}"], (port,))


def upstream_calls(port: int) -> int:
    """Completions the model server has answered so far (its GET /stats)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as resp:
        return int(json.load(resp)["completions"])


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its live descendants (LiteLLM's CLI may
    run the server in a child)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu_seconds(p)
        todo += children.get(p, [])
    return total


def litellm_venv() -> tuple[Path | None, str]:
    """(the venv, "") or (None, why it could not be built)."""
    try:
        done = subprocess.run(
            ["bash", str(LITELLM_VENV_SCRIPT)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"scripts/litellm_venv.sh: {exc}"
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return None, f"scripts/litellm_venv.sh exited {done.returncode}: {tail}"
    return Path(done.stdout.strip().splitlines()[-1]), ""


def litellm(venv: Path, workdir: Path, upstream_port: int, redis_port: int) -> ServerProc:
    """LiteLLM's proxy on a free port: one model routed to the upstream, Redis cache on."""
    port = free_port()
    config = workdir / "litellm.yaml"
    config.write_text(
        f"""model_list:
  - model_name: {MODEL}
    litellm_params:
      model: openai/{MODEL}
      api_base: http://127.0.0.1:{upstream_port}/v1
      api_key: sk-upstream-unused
litellm_settings:
  cache: true
  cache_params:
    type: redis
    host: 127.0.0.1
    port: {redis_port}
  telemetry: false
general_settings:
  master_key: {LITELLM_MASTER_KEY}
"""
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INFERCACHE_", "OPENAI_"))}
    # No network here: the model cost map is the bundled one; no telemetry, no banner.
    env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "NO_DOCS": "True"}
    argv = [str(venv / "bin" / "litellm"), "--config", str(config)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    return ServerProc("litellm", argv, (port,), env=env)


def gateway_supported(infercache: Path) -> bool:
    """Whether that `infercache` serves the gateway (`--gateway-listen`)."""
    done = subprocess.run(
        [str(infercache), "serve", "--help"], capture_output=True, text=True, check=False
    )
    return "--gateway-listen" in done.stdout


def gateway(infercache: Path, workdir: Path, upstream_port: int, redis_port: int) -> ServerProc:
    """`infercache serve --gateway-listen` with its warm tier on Redis, two tenants' keys."""
    from tests.support.checkpoints import llama_tensors, write_model

    model = write_model(workdir / "model", llama_tensors(layers=1, seed=1))
    keys = workdir / "gateway-keys"
    keys.write_text("".join(f"{t}={k}\n" for t, k in KEYS.items()))
    port = free_port()
    flags = {
        "listen": f"127.0.0.1:{free_port()}",
        "admin-listen": "",
        "metrics-listen": "",
        "redis-url": f"redis://127.0.0.1:{redis_port}/0",
        "fleet-secret-file": fleet_secret_file(),
        "model-path": str(model),
        "model-server-url": f"http://127.0.0.1:{upstream_port}",
        "gateway-listen": f"127.0.0.1:{port}",
        "gateway-keys-file": str(keys),
        "log-level": "warning",
        # Shadow verification off: its 1% of hits re-sent upstream (and 1% of misses
        # computed twice) would break this bench's check that a hit never reaches the
        # upstream. What it costs a hit is bench.verification's `hit_p50_with_vs_without`.
        "verify-rate": "0",
        "verify-baseline-rate": "0",
    }
    argv = [str(infercache), "serve"]
    for name, value in flags.items():
        argv += [f"--{name}", value]
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERCACHE_")}
    return ServerProc("gateway", argv, (port,), env=env)


@dataclass(frozen=True, slots=True)
class Redises:
    """One redis-server per gateway (neither sees the other's keys or load)."""

    litellm: ServerProc
    gateway: ServerProc


def redises(data_dir: Path) -> Redises:
    """Two throwaway redis-servers."""
    (data_dir / "r1").mkdir()
    (data_dir / "r2").mkdir()
    return Redises(
        redis_server(str(data_dir / "r1"), "redis-litellm"),
        redis_server(str(data_dir / "r2"), "redis-gateway"),
    )


def canned(body_file: Path) -> ServerProc:
    """bench/gateway/canned.py on a free port: the hit's floor, answering `body_file`."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.gateway.canned", str(port), str(body_file)]
    return ServerProc("canned", argv, (port,))
