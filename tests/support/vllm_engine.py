"""A vLLM engine in its own process, driven line by line from a test.

    python -m tests.support.vllm_engine --model DIR [--connector infercache|example|none] ...

Each engine is a fresh process (a fresh vLLM: nothing shared through its own prefix
cache or global connector state), in-process engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0),
forked from tests/support/vllm_forkserver.py's server, which has imported vLLM already
(~3 CPU seconds to start, not ~10: the import is most of it). Commands are JSON lines on
stdin, answers JSON lines on stdout marked with MARK (vLLM logs to stdout too). Runs in
the vllm venv; EngineProcess (the test's end) needs only the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from tests.support.processes import REPO, stop_process
from tests.support.vllm_forkserver import ForkedChild, fork_server
from tests.support.vllm_stall import stall_run

MARK = "@@infercache-engine "
BLOCK_SIZE = 32


def engine_env() -> dict[str, str]:
    """The environment an engine runs in: offline, in-process core, the checkout's client."""
    path = [str(REPO / "clients" / "python"), str(REPO)]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    return os.environ | {
        "HF_HUB_OFFLINE": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "PYTHONPATH": os.pathsep.join(path),
        "PYTHONUNBUFFERED": "1",
    }


class EngineProcess:
    """One engine process; generate() sends prompts (token ids) and returns the outputs."""

    def __init__(
        self,
        model: Path,
        *,
        connector: str = "none",
        extra: dict[str, Any] | None = None,
        prefix_caching: bool = False,
        lora: bool = False,
        kv_events: str | None = None,
        timeout_s: float = 240.0,
    ) -> None:
        """Start the engine and wait until it answers (`timeout_s` covers vLLM's init).
        `kv_events`: a ZMQ endpoint vLLM publishes its KV events on (--kv-events-config)."""
        argv = ["--model", str(model), "--connector", connector, "--extra", json.dumps(extra or {})]
        if kv_events:
            argv += ["--kv-events", kv_events]
        if prefix_caching:
            argv.append("--prefix-caching")
        if lora:
            argv.append("--lora")
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        env = engine_env()
        server = fork_server(sys.executable, env)
        self.proc: ForkedChild = server.fork("tests.support.vllm_engine", argv, self._log, env)
        self._timeout_s = timeout_s
        self.request({"op": "ping"})

    def request(self, command: dict[str, Any]) -> dict[str, Any]:
        """Send one command, wait for its answer (skipping vLLM's log lines)."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"engine exited ({self.proc.poll()}): {self.log()}")
            if line.startswith(MARK):
                answer: dict[str, Any] = json.loads(line[len(MARK) :])
                if "error" in answer:
                    raise RuntimeError(f"engine failed: {answer['error']}\n{self.log()}")
                return answer

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_tokens: int = 8,
        cache_salt: str | None = None,
        lora: str | None = None,
    ) -> list[dict[str, Any]]:
        """Greedy outputs: per prompt {"tokens": [...], "cached": num_cached_tokens}."""
        answer = self.request(
            {
                "op": "generate",
                "prompts": [list(p) for p in prompts],
                "max_tokens": max_tokens,
                "cache_salt": cache_salt,
                "lora": lora,
            }
        )
        outputs: list[dict[str, Any]] = answer["outputs"]
        return outputs

    def stats(self) -> dict[str, Any]:
        """The connector's counters (infercache connector only)."""
        return self.request({"op": "stats"})

    def log(self) -> str:
        """The last 4000 characters of the engine's stderr."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def close(self) -> None:
        """Ask the engine to exit, then make sure it did."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        stop_process(self.proc)  # type: ignore[arg-type]
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        self._log.close()


def _transfer_config(connector: str, extra: dict[str, Any]) -> Any:
    from vllm.config import KVTransferConfig

    if connector == "none":
        return None
    if connector == "example":
        return KVTransferConfig(
            kv_connector="ExampleConnector", kv_role="kv_both", kv_connector_extra_config=extra
        )
    return KVTransferConfig(
        kv_connector="InfercacheConnector",
        kv_connector_module_path="infercache_client.vllm",
        kv_role="kv_both",
        kv_connector_extra_config=extra,
    )


def _stats(llm: Any) -> dict[str, Any]:
    from infercache_client.vllm.cost import Tier
    from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

    scheduler = llm.llm_engine.engine_core.engine_core.scheduler.connector
    out: dict[str, Any] = {}
    if scheduler is not None and getattr(scheduler, "scheduler", None) is not None:
        side = scheduler.scheduler
        out |= {"lookups": side.lookups, "matched_tokens": side.matched_tokens}
        out |= {"scheduler_attaches": scheduler.link.attaches}
        out |= {"scheduler_failures": scheduler.link.failures}
        out |= {"scheduler_back_offs": scheduler.link.back_offs}
        if side.events is not None:
            out |= {"published_blocks": side.events.published_blocks}
        gauge = getattr(side, "gauge", None)  # absent before the cost model
        if gauge is not None:
            out |= gauge.totals
            model = gauge.model
            out |= {"warm_measured": model.seconds_per_byte(Tier.WARM) is not None}
            # What the cost model rests on (a test's message says why it decided so).
            out |= {"warm_s_per_byte": model.seconds_per_byte(Tier.WARM)}
            out |= {"pool_s_per_byte": model.seconds_per_byte(Tier.POOL)}
            out |= {"prefill_s_per_token": model.prefill_seconds_per_token()}
    if has_kv_transfer_group():
        worker = get_kv_transfer_group()
        if getattr(worker, "worker", None) is not None:
            out |= {"loaded_blocks": worker.worker.loaded_blocks}
            out |= {"torn_blocks": worker.worker.torn_blocks}
            out |= {"saved_blocks": worker.worker.saved_blocks}
            out |= {"worker_attaches": worker.link.attaches}
            out |= {"worker_failures": worker.link.failures}
            out |= {"worker_back_offs": worker.link.back_offs}
    return out


_lora_ids: dict[str, int] = {}


def _serve(llm: Any) -> None:
    from vllm import SamplingParams
    from vllm.lora.request import LoRARequest

    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        try:
            if op == "exit":
                return
            if op == "ping":
                answer: dict[str, Any] = {"ok": True}
            elif op == "stats":
                answer = _stats(llm)
            elif op == "stall":
                answer = stall_run(llm, command)
            elif op == "generate":
                params = SamplingParams(temperature=0.0, max_tokens=command["max_tokens"])
                prompt: dict[str, Any] = {}
                if command.get("cache_salt") is not None:
                    prompt["cache_salt"] = command["cache_salt"]
                lora = None
                if command.get("lora"):
                    path = command["lora"]
                    ids = _lora_ids.setdefault(path, len(_lora_ids) + 1)
                    lora = LoRARequest(Path(path).name, ids, path)
                results = llm.generate(
                    [prompt | {"prompt_token_ids": p} for p in command["prompts"]],
                    params,
                    lora_request=lora,
                    use_tqdm=False,
                )
                _step_while_pending(llm)
                answer = {
                    "outputs": [
                        {"tokens": list(r.outputs[0].token_ids), "cached": r.num_cached_tokens}
                        for r in results
                    ]
                }
            else:
                answer = {"error": f"unknown op {op!r}"}
        except Exception as exc:
            answer = {"error": repr(exc)}
        print(MARK + json.dumps(answer), flush=True)


def _step_while_pending(llm: Any, limit_s: float = 30.0) -> None:
    """Step the engine while its scheduler still has work (a connector's pending push
    work included), as a served engine's busy loop does (EngineCoreProc.has_work): the
    offline LLM stops stepping when its last request finishes."""
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    deadline = time.monotonic() + limit_s
    while scheduler.has_requests() and time.monotonic() < deadline:
        llm.llm_engine.step()
        time.sleep(0.001)  # as vLLM's loop does: let the connector's threads run


def main(argv: Sequence[str] | None = None) -> None:
    """Build the engine, then answer commands until "exit" or end of input."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--connector", choices=["none", "infercache", "example"], default="none")
    parser.add_argument("--extra", default="{}")
    parser.add_argument("--prefix-caching", action="store_true")
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--kv-events", default="")
    args = parser.parse_args(argv)
    from vllm import LLM
    from vllm.config import KVEventsConfig

    events = None
    if args.kv_events:
        events = KVEventsConfig(
            enable_kv_cache_events=True, publisher="zmq", endpoint=args.kv_events, topic="kv"
        )

    lora: dict[str, Any] = {"enable_lora": True, "max_lora_rank": 8, "max_loras": 2}
    llm = LLM(
        **(lora if args.lora else {}),
        model=args.model,
        enforce_eager=True,
        dtype="float32",
        max_model_len=512,
        block_size=BLOCK_SIZE,
        kv_cache_memory_bytes=16 << 20,
        enable_prefix_caching=args.prefix_caching,
        kv_transfer_config=_transfer_config(args.connector, json.loads(args.extra)),
        kv_events_config=events,
    )
    _serve(llm)


if __name__ == "__main__":
    main()
