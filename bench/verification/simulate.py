"""Drift and noise runs of the real ledger and shadow runner against an in-process model
server (asyncio, real time): a hit stream at a fixed rate, a fraction of answers that
differ run to run, and a behaviour change at a chosen moment.

Each hit does what the gateway does after answering it (sidecar/gateway/verify.py):
stop when its scope is quarantined (the lookup screen would bypass it), else ask the
ledger whether it is due and the runner whether it may start, and start the check.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from sidecar.shadow.runner import ShadowRunner
from sidecar.verification.ledger import Ledger, Scope
from sidecar.verification.settings import VerifySettings
from sidecar.wire.openai.answers import Received, UpstreamCall

SCOPE = Scope("fp1-bench", "acme", "default")


def answer(text: str) -> bytes:
    """A chat completion body whose content is `text`."""
    return (
        b'{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"'
        + text.encode()
        + b'"},"finish_reason":"stop"}]}'
    )


class FakeModelServer:
    """Answers prompt i with answer(i), a different one with probability `noise`, and
    with a prefix once `drifted`; each call takes `latency_s`."""

    def __init__(self, noise: float, latency_s: float, seed: int) -> None:
        self.noise = noise
        self.latency_s = latency_s
        self.drifted = False
        self.calls = 0
        self._rng = random.Random(seed)

    def text(self, prompt: int) -> str:
        said = f"answer {prompt}"
        if self.drifted:
            said = "terse " + said
        if self._rng.random() < self.noise:
            said += f" ~{self._rng.randrange(10**9)}"
        return said

    async def served_models(self) -> list[str]:
        return ["tiny"]

    async def complete(self, call: UpstreamCall) -> Received:
        self.calls += 1
        said = self.text(int(call.body))
        await asyncio.sleep(self.latency_s)
        return Received("application/json", ((0, answer(said)),))

    async def close(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Run:
    """What one run saw."""

    hits: int
    wrong_hits: int
    """Hits served after the drift began (all wrong) until the quarantine."""
    detect_s: float
    quarantines: int
    shadow_calls: int
    hit_checks: int
    baseline_checks: int


async def run(
    *,
    settings: VerifySettings,
    noise: float,
    latency_s: float,
    hit_rate: float,
    misses: int,
    hits: int,
    drift_at: int | None,
    prompts: int,
    seed: int,
) -> Run:
    """`misses` baseline-building misses, then `hits` hits at `hit_rate` per second over
    `prompts` cached prompts; the model server drifts after hit `drift_at`."""
    server = FakeModelServer(noise, latency_s, seed)
    ledger = Ledger(settings, lambda: int(time.time() * 1000), rng=random.Random(seed))
    runner = ShadowRunner(ledger, server)
    cached = [answer(server.text(p)) for p in range(prompts)]
    for m in range(misses):  # each miss answered once; a sample computed again
        if ledger.miss_due(SCOPE.model_version) and runner.admit(SCOPE.model_version, "baseline"):
            first = answer(server.text(prompts + m))
            call = UpstreamCall("/v1/chat/completions", "application/json", b"%d" % (prompts + m))
            runner.check_miss(SCOPE.model_version, runner.call(call), first)
        if m % 100 == 99:
            await asyncio.sleep(0.005)
    await runner.settle()
    batch = max(1, round(hit_rate / 1000))  # hits per millisecond
    loop = asyncio.get_running_loop()
    start = loop.time()
    served = wrong = 0
    drift_t = 0.0
    for i in range(hits):
        if ledger.is_quarantined(SCOPE) is not None:
            break
        if drift_at is not None and i == drift_at:
            server.drifted = True
            drift_t = loop.time()
        served += 1
        if server.drifted:
            wrong += 1
        prompt = i % prompts
        if ledger.hit_due(SCOPE, settings.rate) and runner.admit(SCOPE.model_version, "hit"):
            call = UpstreamCall("/v1/chat/completions", "application/json", b"%d" % prompt)
            runner.check_hit(SCOPE, runner.call(call), cached[prompt], settings.budget)
        if i % batch == batch - 1:
            delay = start + (i + 1) / hit_rate - loop.time()
            await asyncio.sleep(max(0.0, delay))
    detect = loop.time() - drift_t if drift_at is not None and ledger.quarantined else -1.0
    await runner.close()
    counts = ledger.counts
    return Run(
        hits=served,
        wrong_hits=wrong,
        detect_s=detect,
        quarantines=sum(1 for e in ledger.events if e.action == "quarantined"),
        shadow_calls=server.calls,
        hit_checks=sum(
            n for (_, k, r), n in counts.items() if k == "hit" and r in ("same", "diverged")
        ),
        baseline_checks=sum(
            n for (_, k, r), n in counts.items() if k == "baseline" and r in ("same", "diverged")
        ),
    )
