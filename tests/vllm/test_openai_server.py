"""vLLM's OpenAI server with --kv-transfer-config: a repeated chat reports cached tokens."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionUserMessageParam

from tests.support.kv_events import EventSubscriber
from tests.support.processes import REPO, free_port, stop_process
from tests.support.vllm_engine import BLOCK_SIZE, engine_env
from tests.support.vllm_model import CORPUS, Models
from tests.support.vllm_sidecar import SidecarServer


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the OpenAI server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise RuntimeError("the OpenAI server did not start in time")


def _published_blocks(subscriber: EventSubscriber, expected: int) -> int:
    """Blocks of infercache's pool (medium CPU) in vLLM's stream once `expected` came, or
    what came within the subscriber's delivery bound."""
    seen = subscriber.collect(lambda s: len(s.stored_hashes("CPU")) >= expected)
    return len(seen.stored_hashes("CPU"))


def test_repeated_chat_reports_cached_tokens_from_infercache(
    models: Models, sidecar: SidecarServer
) -> None:
    """Two one-token chats: the second loads the prompt's blocks the first saved. Between
    them, with no request in flight, the served engine publishes those blocks in vLLM's
    event stream (their commit lands after the first request's only step: the engine
    loop keeps stepping for it, has_pending_push_work)."""
    port, events_port = free_port(), free_port()
    transfer = {
        "kv_connector": "InfercacheConnector",
        "kv_connector_module_path": "infercache_client.vllm",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"sidecar": sidecar.target},
    }
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    argv += ["--model", str(models.v1), "--served-model-name", "tiny", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--enforce-eager", "--dtype", "float32"]
    argv += ["--max-model-len", "512", "--block-size", str(BLOCK_SIZE)]
    argv += ["--kv-cache-memory-bytes", str(16 << 20), "--no-enable-prefix-caching"]
    argv += ["--enable-prompt-tokens-details", "--kv-transfer-config", json.dumps(transfer)]
    events = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{events_port}",
        "topic": "kv",
    }
    argv += ["--kv-events-config", json.dumps(events)]
    log = tempfile.TemporaryFile()  # noqa: SIM115
    proc = subprocess.Popen(argv, cwd=REPO, env=engine_env(), stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url)
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        messages: list[ChatCompletionMessageParam] = [
            ChatCompletionUserMessageParam(role="user", content=CORPUS * 2)
        ]
        usages, texts = [], []
        subscriber = EventSubscriber(f"tcp://127.0.0.1:{events_port}", topic="kv")
        try:
            for _ in range(2):
                resp = client.chat.completions.create(
                    model="tiny",
                    messages=messages,
                    max_tokens=1,
                    temperature=0.0,
                )
                assert resp.usage is not None
                usages.append(resp.usage)
                texts.append(resp.choices[0].message.content)
                if len(usages) == 1:
                    saved = resp.usage.prompt_tokens // BLOCK_SIZE
                    published = _published_blocks(subscriber, saved)
        finally:
            subscriber.close()
    except BaseException:
        log.seek(0)
        print(log.read().decode(errors="replace")[-6000:])
        raise
    finally:
        stop_process(proc, timeout_s=20)
        log.close()
    prompt_tokens = usages[0].prompt_tokens
    assert prompt_tokens > 2 * BLOCK_SIZE
    assert published == prompt_tokens // BLOCK_SIZE, "the first chat's blocks were not published"
    details = [u.prompt_tokens_details for u in usages]
    assert details[0] is not None
    assert details[1] is not None
    assert (details[0].cached_tokens or 0) == 0
    # vLLM's own prefix cache is off: every cached token was loaded through the connector.
    assert details[1].cached_tokens == (prompt_tokens - 1) // BLOCK_SIZE * BLOCK_SIZE
    assert texts[1] == texts[0]
