"""Which gRPC hits the data-plane verifier re-sends, and how it judges them (fakes for
the model server and the hit store; the real processes are tests/e2e)."""

from __future__ import annotations

import json
import random

from sidecar.entries import Entry
from sidecar.keys import CacheKey
from sidecar.policy.cacheability import RequestTraits, TenantPolicy
from sidecar.prewarm import records
from sidecar.prewarm.embedded_hits import EmbeddedHitStore
from sidecar.results.types import LookupQuery, LookupResult, Outcome
from sidecar.shadow.data_plane import DataPlaneVerifier
from sidecar.shadow.runner import ShadowRunner
from sidecar.verification.ledger import Ledger
from sidecar.verification.settings import VerifySettings
from sidecar.wire.openai.answers import Received, UpstreamCall
from tests.support.keys import cache_key

ANSWER = "forty-two"
RETAINING = TenantPolicy(retain_inputs=True)
NOTHING = RequestTraits()


class FakeModelServer:
    """Answers every completion with ANSWER (or what `answer` says now); keeps the calls."""

    def __init__(self) -> None:
        self.calls: list[UpstreamCall] = []
        self.answer = ANSWER

    async def served_models(self) -> list[str]:
        return ["tiny"]

    async def complete(self, call: UpstreamCall) -> Received:
        self.calls.append(call)
        doc = {"choices": [{"index": 0, "text": self.answer, "finish_reason": "stop"}]}
        return Received("application/json", ((0, json.dumps(doc).encode()),))

    async def close(self) -> None:
        pass


def verifier(
    policy: TenantPolicy = RETAINING,
) -> tuple[DataPlaneVerifier, FakeModelServer, EmbeddedHitStore]:
    server = FakeModelServer()
    ledger = Ledger(VerifySettings(rate=1.0), lambda: 0, rng=random.Random(3))
    hits = EmbeddedHitStore(max_per_version=16, ttl_ms=60_000)
    return DataPlaneVerifier(ShadowRunner(ledger, server), hits, lambda t: policy), server, hits


REPLAY = records.ReplayRequest("/v1/completions", "application/json", b'{"prompt":"q"}')


async def attach(hits: EmbeddedHitStore, key: CacheKey) -> None:
    data = records.encode(records.HitRecord(b"k", REPLAY))
    await hits.attach(key.model_version, key.digest, data, 60_000)


def lookup(
    v: DataPlaneVerifier, key: CacheKey, payload: bytes, traits: RequestTraits = NOTHING
) -> None:
    """One gRPC lookup of `key` answered HIT with `payload`."""
    entry = Entry(material=key.material, payload=payload, created_at_ms=0, ttl_s=60, epoch=0)
    v.after_lookup(
        [LookupQuery(key, traits=traits)], [LookupResult(Outcome.HIT, key.digest, entry)]
    )


async def test_a_sampled_hit_resends_its_record_and_compares_the_text() -> None:
    """A reproducible hit with a record: the record's request is sent as it is; a stored
    text equal to the fresh answer's first choice is `same`, another is `diverged`."""
    v, server, hits = verifier()
    key = cache_key("a")
    await attach(hits, key)
    lookup(v, key, ANSWER.encode())
    await v.runner.settle()
    assert server.calls == [UpstreamCall(REPLAY.path, REPLAY.content_type, REPLAY.body)]
    server.answer = "something else"
    lookup(v, key, ANSWER.encode())
    await v.runner.settle()
    counts = v.runner.ledger.counts
    assert counts[key.model_version, "hit", "same"] == 1
    assert counts[key.model_version, "hit", "diverged"] == 1


async def test_ineligible_hits_send_nothing() -> None:
    """Sampled temperature, declared side effects, real-time or private data, a tenant
    that keeps no inputs or whose verify_rate is 0: no record read, no call."""
    v, server, hits = verifier()
    warm = cache_key("t", temperature=0.7)
    plain = cache_key("p")
    for k in (warm, plain):
        await attach(hits, k)
    lookup(v, warm, b"x")
    for traits in (
        RequestTraits(side_effects=True),
        RequestTraits(real_time=True),
        RequestTraits(private_data=True),
    ):
        lookup(v, plain, b"x", traits)
    for policy in (TenantPolicy(), TenantPolicy(retain_inputs=True, verify_rate=0.0)):
        other, _, _ = verifier(policy)
        lookup(other, plain, b"x")
        await other.runner.settle()
        assert not other.runner.ledger.counts
    await v.runner.settle()
    assert server.calls == []
    assert not v.runner.ledger.counts


async def test_a_hit_without_a_record_is_counted_and_sends_nothing() -> None:
    """No record (the Store attached none, or it did not verify): `no_record`, no call."""
    v, server, _ = verifier()
    key = cache_key("n")
    lookup(v, key, b"x")
    await v.runner.settle()
    assert server.calls == []
    assert v.runner.ledger.counts[key.model_version, "hit", "no_record"] == 1


async def test_a_store_with_a_replay_feeds_the_baseline() -> None:
    """An eligible Store with its request attached is computed once more (baseline rate
    1) and compared with the value stored."""
    v, server, _ = verifier()
    v.runner.ledger.settings = VerifySettings(rate=1.0, baseline_rate=1.0)
    key = cache_key("s")
    v.after_store(key, RequestTraits(), REPLAY, ANSWER.encode())
    await v.runner.settle()
    assert len(server.calls) == 1
    assert v.runner.ledger.baselines[key.model_version].checks == 1
    assert v.runner.ledger.baselines[key.model_version].diverged == 0
