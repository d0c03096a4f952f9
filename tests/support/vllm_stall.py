"""The engine side of the frozen-sidecar test: step a vLLM engine by hand and time tokens.

Runs inside an engine process (tests/support/vllm_engine.py, op "stall"). One long
request decodes all along (another starts when it ends, so one is always decoding);
short-output requests arrive at set times; the sidecar is SIGSTOPped and SIGCONTed at
set times by this process itself, between engine steps, so the freeze lands exactly
where the timeline says, with the engine loop running. Returns every token's time per
request; per arrival, its time to first token, cached tokens and how long the connector
kept it waiting for its answer; and every connector call the engine loop made, timed.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any


def stall_run(llm: Any, command: dict[str, Any]) -> dict[str, Any]:
    """Run the timeline in `command` (times in seconds from the start)."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    long_params = SamplingParams(
        temperature=0.0, max_tokens=command["long_tokens"], ignore_eos=True
    )
    short_params = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
    arrivals: list[dict[str, Any]] = sorted(command["arrivals"], key=lambda a: a["at"])
    pid: int = command["sidecar_pid"]
    events = {"freeze": command["freeze_at"], "thaw": command["thaw_at"]}
    end: float = command["end_at"]

    started = time.monotonic()
    clocked = _Clocked(llm, started)
    tokens: dict[str, list[float]] = {}
    added: dict[str, float] = {}
    ttft: dict[str, float] = {}
    cached: dict[str, int] = {}
    long_ids: list[str] = []
    running_long: str | None = None
    done: set[str] = set()
    happened: dict[str, float] = {}
    next_arrival = 0
    slow: list[tuple[float, float]] = []
    while True:
        now = time.monotonic() - started
        for name, at in events.items():
            if name not in happened and now >= at:
                os.kill(pid, signal.SIGSTOP if name == "freeze" else signal.SIGCONT)
                happened[name] = time.monotonic() - started
        if now < end and (running_long is None or running_long in done):
            running_long = f"long-{len(long_ids)}"
            long_ids.append(running_long)
            engine.add_request(running_long, {"prompt_token_ids": command["long"]}, long_params)
            added[running_long] = now
        while next_arrival < len(arrivals) and now >= arrivals[next_arrival]["at"]:
            arrival = arrivals[next_arrival]
            req_id = f"new-{next_arrival}"
            engine.add_request(req_id, {"prompt_token_ids": arrival["prompt"]}, short_params)
            added[req_id] = time.monotonic() - started
            next_arrival += 1
        if now >= end and next_arrival == len(arrivals) and not engine.has_unfinished_requests():
            break
        if now >= end and running_long is not None and running_long not in done:
            engine.abort_request([running_long])
            done.add(running_long)
        step_at = time.monotonic()
        outputs = engine.step()
        if time.monotonic() - step_at > SLOW_STEP_S:
            slow.append((step_at - started, time.monotonic() - step_at))
        for out in outputs:
            at = time.monotonic() - started
            times = tokens.setdefault(out.request_id, [])
            times.extend([at] * (len(out.outputs[0].token_ids) - len(times)))
            if times and out.request_id not in ttft:
                ttft[out.request_id] = at - added[out.request_id]
                cached[out.request_id] = out.num_cached_tokens or 0
            if out.finished:
                done.add(out.request_id)
    return {
        "events": happened,
        "calls": clocked.calls,
        "slow_steps": slow,
        "waits": clocked.waits,
        "long": {req_id: tokens.get(req_id, []) for req_id in long_ids},
        "new": [
            {
                "phase": arrival["phase"],
                "added": added[f"new-{i}"],
                "ttft": ttft[f"new-{i}"],
                "cached": cached[f"new-{i}"],
                "wait": clocked.wait(f"new-{i}"),
            }
            for i, arrival in enumerate(arrivals)
        ],
    }


SCHEDULER_CALLS = (
    "get_num_new_matched_tokens",
    "update_state_after_alloc",
    "build_connector_meta",
    "request_finished",
)
WORKER_CALLS = ("start_load_kv", "wait_for_save")
SLOW_STEP_S = 0.05
"""Engine steps longer than this are listed (start, seconds)."""
CLOCKED_FROM_S = 0.002
"""Calls shorter than this are not listed."""


class _Clocked:
    """Times every call of the engine's connectors (both halves run on the engine loop
    here: in-process engine core, one worker)."""

    def __init__(self, llm: Any, started: float) -> None:
        from vllm.distributed.kv_transfer import get_kv_transfer_group

        self.started = started
        self.calls: list[tuple[str, float, float]] = []
        """(call, start, seconds), times from the run's start."""
        self.waits: dict[str, float] = {}
        """Per request: first ask of get_num_new_matched_tokens until it answered."""
        self._asked: dict[str, float] = {}
        scheduler = llm.llm_engine.engine_core.engine_core.scheduler.connector
        for name in SCHEDULER_CALLS:
            self._wrap(scheduler, name)
        for name in WORKER_CALLS:
            self._wrap(get_kv_transfer_group(), name)

    def wait(self, req_id: str) -> float:
        """How long `req_id` waited for its answer (vLLM may suffix the id internally)."""
        waits = [w for k, w in self.waits.items() if k == req_id or k.startswith(req_id + "-")]
        assert len(waits) == 1, (req_id, sorted(self.waits))
        return waits[0]

    def _wrap(self, connector: Any, name: str) -> None:
        call = getattr(connector, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            begin = time.monotonic()
            try:
                out = call(*args, **kwargs)
            finally:
                end = time.monotonic()
                if end - begin > CLOCKED_FROM_S:  # the rest cannot matter to a bound
                    self.calls.append((name, begin - self.started, end - begin))
            if name == "get_num_new_matched_tokens":
                req_id = args[0].request_id
                asked = self._asked.setdefault(req_id, begin)
                if out[0] is not None and req_id not in self.waits:
                    self.waits[req_id] = end - asked
            return out

        setattr(connector, name, timed)
