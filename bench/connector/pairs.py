"""Interleaved rounds over several fresh pairs of engines.

Two engines of the same build on this machine differ by up to 8% in TTFT for their
whole life (two connector-less engines, 10 interleaved rounds, three trials: 0.918,
0.998, 0.963), more than the overheads this bench measures. So a figure near 1 comes
from several pairs of fresh engines (a connector-less one, and one with the connector
under test), and its ratio is over all their answers: one engine's luck weighs 1/pairs.
Each engine answers one long prompt before its measured rounds (an engine's first long
prompt is slower anyway; with the connector it may also meet an unmeasured link): shown,
not counted. In each round the engine that answers first alternates, so that neither
always runs right after the other's background work (a commit, the sidecar's seal).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.connector.__main__ import Run
    from bench.connector.engines import Answer, Engine

MAX_TOKENS = 8


def interleaved_pairs(
    run: Run, spawn: Callable[[], Engine], prompts: Sequence[Sequence[list[int]]], length: int
) -> tuple[list[Answer], list[Answer]]:
    """(the connector-less engines' answers, the others'): one fresh pair per entry of
    `prompts`, whose first prompt is the connector engine's unmeasured first, the rest
    its measured rounds (the connector-less engine answers prompts nobody reuses)."""
    base_all: list[Answer] = []
    other_all: list[Answer] = []
    for k, ours in enumerate(prompts):
        base = run.ready(run.spawn("none"))
        other = run.ready(spawn())
        first_base = base.ttft(run.prompt(length), MAX_TOKENS)
        first_other = other.ttft(ours[0], MAX_TOKENS)
        pair_base: list[Answer] = []
        pair_other: list[Answer] = []
        for i, p in enumerate(ours[1:]):
            own = run.prompt(length)
            if i % 2:
                pair_other.append(other.ttft(p, MAX_TOKENS))
                pair_base.append(base.ttft(own, MAX_TOKENS))
            else:
                pair_base.append(base.ttft(own, MAX_TOKENS))
                pair_other.append(other.ttft(p, MAX_TOKENS))
        base.close()
        other.close()
        print(
            f"  pair {k}: {' '.join(f'{a.ttft_s:.3f}' for a in pair_other)} s "
            f"(first {first_other.ttft_s:.3f}); beside it "
            f"{' '.join(f'{a.ttft_s:.3f}' for a in pair_base)} s (first {first_base.ttft_s:.3f})",
            flush=True,
        )
        base_all += pair_base
        other_all += pair_other
    return base_all, other_all
