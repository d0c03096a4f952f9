"""One vLLM engine of the connector bench, in its own process, driven by JSON lines.

    python -m bench.connector.engine --model DIR --connector none|infercache|example \
        --extra JSON --max-model-len N --kv-cache-bytes N

Runs in the vllm venv with the checkout's clients/python on PYTHONPATH. Every engine of
a run has the same settings (float32, eager, block size 32, vLLM's own prefix cache on,
the same KV memory); only the connector differs. A fresh process is a fresh vLLM: it
shares nothing with the engines before it but what a connector loads.

Command {"op": "ttft", "prompt": [ids], "max_tokens": n} answers {"ttft_s", "tokens",
"cached"}: the time from handing the request to the engine to its first generated token
(LLMEngine.step() until the request has one), its greedy tokens, and the prompt tokens
it did not compute (vLLM's prefix cache plus what a connector loaded). With
--time-parts, {"op": "parts"} answers the seconds each part of the infercache connector
took since the last such command (bench/connector/parts.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.connector import parts
from tests.support.vllm_engine import MARK
from tests.support.vllm_engine import _transfer_config as transfer_config

BLOCK_SIZE = 32


def ttft(
    llm: Any, prompt: list[int], max_tokens: int, seq: int, cache_salt: str | None = None
) -> dict[str, Any]:
    """One greedy request, stepped by hand so the first token's time is seen."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    started = time.perf_counter()
    salt = {"cache_salt": cache_salt} if cache_salt else {}
    engine.add_request(f"bench-{seq}", {"prompt_token_ids": prompt} | salt, params)
    first: float | None = None
    final: Any = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            if first is None and out.outputs and len(out.outputs[0].token_ids) >= 1:
                first = time.perf_counter()
            if out.finished:
                final = out
    if first is None or final is None:
        raise RuntimeError("the request finished without a token")
    return {
        "ttft_s": first - started,
        "tokens": list(final.outputs[0].token_ids),
        "cached": int(final.num_cached_tokens or 0),
    }


def serve(llm: Any, events: Any = None) -> None:
    """Answer commands until "exit" or the end of stdin (`events`: bench/connector/events.py's
    subscriber on this engine's own KV event stream)."""
    for seq, line in enumerate(sys.stdin):
        command = json.loads(line)
        try:
            if command["op"] == "exit":
                return
            if command["op"] == "ping":
                answer: dict[str, Any] = {"ok": True}
            elif command["op"] == "events" and events is not None:
                answer = events.report()
            elif command["op"] == "ttft":
                answer = ttft(
                    llm, command["prompt"], command["max_tokens"], seq, command.get("cache_salt")
                )
            elif command["op"] == "parts":
                answer = {"parts": parts.take()}
            else:
                answer = {"error": f"unknown op {command['op']!r}"}
        except Exception as exc:  # reported to the driver, which fails the run
            answer = {"error": repr(exc)}
        print(MARK + json.dumps(answer), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Build the engine, then serve."""
    parser = argparse.ArgumentParser(prog="python -m bench.connector.engine")
    parser.add_argument("--model", required=True)
    parser.add_argument("--connector", choices=["none", "infercache", "example"], default="none")
    parser.add_argument("--extra", default="{}")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--kv-cache-bytes", type=int, default=256 << 20)
    parser.add_argument("--kv-events-port", type=int, default=0)
    parser.add_argument("--time-parts", action="store_true", help="time the connector's parts")
    args = parser.parse_args(argv)
    if args.time_parts:
        parts.install()
    from vllm import LLM

    from bench.connector.events import StreamTap, events_config

    tap = StreamTap(args.kv_events_port) if args.kv_events_port else None

    llm = LLM(
        model=args.model,
        enforce_eager=True,
        dtype="float32",
        max_model_len=args.max_model_len,
        block_size=BLOCK_SIZE,
        kv_cache_memory_bytes=args.kv_cache_bytes,
        enable_prefix_caching=True,
        kv_transfer_config=transfer_config(args.connector, json.loads(args.extra)),
        kv_events_config=events_config(args.kv_events_port) if tap else None,
    )
    serve(llm, tap)


if __name__ == "__main__":
    main()
