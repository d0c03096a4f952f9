"""The prewarm ranking on a canary-like workload: Zipf(1) hits over 5,000 requests, 60,000
hits, top-1000 asked for. Counting every hit in the sketch and merging periodically gives
the true top-1000; sampling 1% of hits (the old recorder) could not."""

from __future__ import annotations

import random
from collections import Counter

from sidecar.keys import InputKind, KeyDigest, KeyRequest, build_key
from sidecar.prewarm.embedded_hits import EmbeddedHitStore
from sidecar.prewarm.hits import HitRecorder
from sidecar.results.types import LookupQuery, LookupResult, Outcome

DISTINCT, HITS, TOP, BATCH = 5_000, 60_000, 1_000, 32


def _queries() -> list[tuple[LookupQuery, LookupResult]]:
    out = []
    for i in range(DISTINCT):
        key = build_key(
            KeyRequest(
                tenant="acme",
                model_version="fp1-v1",
                prompt_version="p",
                input=f"question {i}",
                input_kind=InputKind.TEXT,
            )
        )
        out.append((LookupQuery(key), LookupResult(Outcome.HIT, key.digest)))
    return out


def _stream(seed: int) -> list[int]:
    """HITS draws of request ranks, P(rank r) proportional to 1 / r."""
    rng = random.Random(seed)
    return rng.choices(range(DISTINCT), weights=[1 / (r + 1) for r in range(DISTINCT)], k=HITS)


def _true_top(truth: Counter[KeyDigest]) -> list[KeyDigest]:
    # The store's order: most hit first, ties in digest order.
    return [d for d, _ in sorted(truth.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]]


async def _ranked(
    sketch_size: int, merge_every: int, stream: list[int]
) -> list[tuple[KeyDigest, int]]:
    store = EmbeddedHitStore(max_per_version=10_000, ttl_ms=3_600_000)
    recorder = HitRecorder(store, lambda tenant: True, sketch_size=sketch_size)
    pairs = _queries()
    for start in range(0, len(stream), BATCH):
        batch = [pairs[r] for r in stream[start : start + BATCH]]
        recorder.observe([q for q, _ in batch], [r for _, r in batch])
        if (start + BATCH) % merge_every < BATCH:
            assert await recorder.merge()
    assert await recorder.merge()
    return [(h.digest, h.hits) for h in await store.top("fp1-v1", TOP)]


def _sampled_top(stream: list[int], digests: list[KeyDigest], seed: int) -> list[KeyDigest]:
    """What the old recorder ranked: each hit kept with probability 0.01 (its own random
    stream: the same seed as the hits' would draw the same numbers)."""
    rng = random.Random(f"sample-{seed}")
    counts = Counter(digests[r] for r in stream if rng.random() < 0.01)
    return _true_top(counts)


async def test_counted_top_1000_is_the_true_top_1000_and_sampling_was_not() -> None:
    """With at most sketch_size distinct requests hit between merges every count is exact,
    so the ranking's top-1000 is the true top-1000 (overlap 1000 of 1000, counts equal);
    the 1% sample of the same hits holds ~600 hits and so names at most ~600 requests."""
    stream = _stream(seed=16)
    digests = [q.key.digest for q, _ in _queries()]
    truth = Counter(digests[r] for r in stream)
    true_top = _true_top(truth)

    ranked = await _ranked(sketch_size=10_000, merge_every=5_000, stream=stream)
    assert [d for d, _ in ranked] == true_top
    assert all(hits == truth[d] for d, hits in ranked)

    sampled = _sampled_top(stream, digests, seed=16)
    overlap = len(set(sampled) & set(true_top))
    print(f"top-{TOP} overlap: counted {TOP}/{TOP}, sampled at 1% {overlap}/{TOP}")
    # A 1% sample of 60,000 hits is ~600 hits (binomial sd ~24): it cannot name 1,000.
    assert len(sampled) < 700
    assert overlap < 700


async def test_a_small_sketch_is_exact_when_merged_often_enough() -> None:
    """A sketch of 2,000 (under the 5,000 distinct requests) merged every 1,000 hits never
    holds more distinct requests than it counts: the ranking is still the true top-1000."""
    stream = _stream(seed=17)
    digests = [q.key.digest for q, _ in _queries()]
    truth = Counter(digests[r] for r in stream)
    ranked = await _ranked(sketch_size=2_000, merge_every=1_000, stream=stream)
    assert [d for d, _ in ranked] == _true_top(truth)
    assert all(hits == truth[d] for d, hits in ranked)


async def test_a_sketch_too_small_for_its_interval_never_overstates_a_count() -> None:
    """A sketch of 500 merged every 10,000 hits must evict: merged counts are the
    guaranteed ones, so every ranked count is at most the true count, and every request
    hit more than 10,000 / 500 times in each interval is still ranked."""
    stream = _stream(seed=18)
    digests = [q.key.digest for q, _ in _queries()]
    truth = Counter(digests[r] for r in stream)
    ranked = await _ranked(sketch_size=500, merge_every=10_000, stream=stream)
    assert all(hits <= truth[d] for d, hits in ranked)
    heavy = set()
    for start in range(0, HITS, 10_000):
        per_interval = Counter(digests[r] for r in stream[start : start + 10_000])
        heavy |= {d for d, n in per_interval.items() if n * 500 > 10_000}
    assert heavy <= {d for d, _ in ranked}
    assert len(heavy) > 50  # the guarantee is about a real set of requests
