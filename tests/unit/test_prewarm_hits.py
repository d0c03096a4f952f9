"""Recording hot requests for prewarm: codec, embedded ranking, sampling and retention."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from sidecar.keys import (
    ChatMessage,
    ChatTemplateOptions,
    FormatType,
    GuidedDecoding,
    InputKind,
    KeyDigest,
    KeyRequest,
    OutputOptions,
    ResponseFormat,
    Sampling,
    build_key,
)
from sidecar.policy.cacheability import RequestTraits
from sidecar.prewarm import records as replay
from sidecar.prewarm.hits import EmbeddedHitStore, HitRecorder, HotRequest
from sidecar.prewarm.progress import ItemOutcome, ItemReport, RunState, Tally
from sidecar.results.cache import LookupQuery, LookupResult, Outcome


def req(text: str = "q", tenant: str = "acme", **kw: object) -> KeyRequest:
    return KeyRequest(
        tenant=tenant,
        model_version="fp1-v1",
        prompt_version="p",
        input=text,
        input_kind=InputKind.TEXT,
        **kw,  # type: ignore[arg-type]
    )


def test_replay_codec_round_trips_everything_but_the_model_version() -> None:
    """A decoded record builds the same key as the original under the same model."""
    original = KeyRequest(
        tenant="acme",
        model_version="fp1-v1",
        adapter_version="sql",
        prompt_version="p",
        input=(ChatMessage("user", "hé", name="a"),),
        input_kind=InputKind.CHAT,
        sampling=Sampling(
            temperature=0.2,
            stop=("x", "y"),
            logit_bias={5: -1.0},
            response_format=ResponseFormat(FormatType.JSON_OBJECT, ""),
            seed=7,
        ),
        extra={"tools": "v3"},
    )
    decoded = replay.decode(replay.encode(original))
    assert decoded.model_version == ""
    assert b"fp1-v1" not in replay.encode(original)
    assert build_key(decoded, default_model_version="fp1-v1") == build_key(original)


def test_replay_refuses_damaged_records_and_hashed_inputs() -> None:
    """Garbage is BadRecord; a caller-hashed input is not replayable."""
    with pytest.raises(replay.BadRecord):
        replay.decode(b'{"v": 1}')
    with pytest.raises(replay.BadRecord):
        replay.decode(b"\xff")
    hashed = KeyRequest("t", "", "p", b"\0" * 32, InputKind.SHA256)
    assert not replay.replayable(hashed)


async def test_embedded_store_ranks_trims_and_expires() -> None:
    """Most hit first; over 1.25 x budget it keeps the top 4 (the newcomer, with 1 hit,
    is cut and counts again from 0); everything expires with the TTL."""
    now = [0]
    store = EmbeddedHitStore(max_per_version=4, ttl_ms=1000, clock_ms=lambda: now[0])
    for i in range(6):
        for _ in range(i + 1):
            await store.record("v1", KeyDigest(bytes([i]) * 32), b"r%d" % i)
    top = await store.top("v1", 10)
    assert [(t.digest[0], t.hits) for t in top] == [(4, 5), (5, 5), (3, 4), (2, 3), (1, 2)]
    assert top[1] == HotRequest(KeyDigest(bytes([5]) * 32), 5, b"r5")
    assert await store.top("v2", 10) == []
    now[0] = 1000
    assert await store.top("v1", 10) == []


class FakeStore:
    """Records what the recorder writes."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes]] = []

    async def record(self, model_version: str, digest: KeyDigest, request: bytes) -> None:
        self.records.append((model_version, request))

    async def top(self, model_version: str, k: int) -> list[HotRequest]:
        return []


def _hit(r: KeyRequest) -> tuple[LookupQuery, LookupResult]:
    key = build_key(r)
    return LookupQuery(key, source=r), LookupResult(Outcome.HIT, key.digest)


async def test_recorder_keeps_only_retaining_tenants_and_only_hits() -> None:
    """A tenant whose policy forbids retention gets nothing written; misses and lookups
    without a source (prewarm's own) are not traffic."""
    store = FakeStore()
    recorder = HitRecorder(store, lambda tenant: tenant == "acme", sample_rate=1.0)
    allowed, forbidden = _hit(req("a")), _hit(req("secret text", tenant="private"))
    unsourced = (LookupQuery(allowed[0].key), allowed[1])
    missed = (allowed[0], LookupResult(Outcome.MISS, allowed[0].key.digest))
    pairs = [allowed, forbidden, unsourced, missed]
    recorder.observe([q for q, _ in pairs], [r for _, r in pairs])
    await recorder.drain()
    assert [v for v, _ in store.records] == ["fp1-v1"]
    assert replay.decode(store.records[0][1]).input == "a"
    assert recorder.not_retained == 1
    assert all(b"secret" not in data for _, data in store.records)


async def test_recorder_never_keeps_a_request_declared_private() -> None:
    """A retaining tenant's request that declares private data is not recorded."""
    store = FakeStore()
    recorder = HitRecorder(store, lambda tenant: True, sample_rate=1.0)
    public = _hit(req("public question"))
    q, r = _hit(req("my medical record"))
    private = (q._replace(traits=RequestTraits(private_data=True)), r)
    pairs = [public, private]
    recorder.observe([q for q, _ in pairs], [r for _, r in pairs])
    await recorder.drain()
    assert [replay.decode(data).input for _, data in store.records] == ["public question"]


async def test_recorder_samples_and_bounds_its_backlog() -> None:
    """Lookups are sampled at geometric gaps drawn from the rate; past max_pending queued
    samples are dropped, not written."""
    # Gaps are geometric: with rate 0.5 a draw of 0.8 means 1 + floor(log(0.2)/log(0.5)) = 3.
    draws = iter([0.0, 0.8, 0.0, 0.0])
    store = FakeStore()
    recorder = HitRecorder(store, lambda t: True, sample_rate=0.5, rng=lambda: next(draws))
    q, r = _hit(req("a"))
    recorder.observe([q] * 4, [r] * 4)  # samples lookups 0 and 3
    await recorder.drain()
    assert len(store.records) == 2
    recorder.observe([q], [r])  # lookup 4: the gap after 3 is 1
    await recorder.drain()
    assert len(store.records) == 3

    blocked = asyncio.Event()

    class SlowStore(FakeStore):
        async def record(self, model_version: str, digest: KeyDigest, request: bytes) -> None:
            await blocked.wait()
            await super().record(model_version, digest, request)

    slow_store = SlowStore()
    slow = HitRecorder(slow_store, lambda t: True, sample_rate=1.0, max_pending=2)
    slow.observe([q] * 5, [r] * 5)
    await asyncio.sleep(0)  # the writer takes the first record and blocks on it
    slow.observe([q] * 5, [r] * 5)
    # 2 queued, 3 dropped; the writer took 1, so 1 more fits and 4 are dropped.
    assert slow.dropped == 7
    blocked.set()
    await slow.drain()
    assert len(slow_store.records) == 3


def test_tally_eta_and_reports() -> None:
    """ETA extrapolates the elapsed time; reports are handed out once."""
    t = Tally(total=4)
    t.add(None)
    t.add(ItemReport(1, ItemOutcome.FAILED, "upstream_timeout"))
    p = t.snapshot(RunState.RUNNING, elapsed_ms=1000)
    assert (p.done, p.stored, p.failed, p.eta_ms) == (2, 1, 1, 1000)
    assert [i.reason for i in p.items] == ["upstream_timeout"]
    assert t.snapshot(RunState.RUNNING, elapsed_ms=1000).items == ()


@pytest.mark.parametrize(
    "changes",
    [
        {"tools": ('{"type":"function"}',)},
        {"tool_choice": "auto"},
        {"parallel_tool_calls": False},
        {"endpoint": "embeddings"},
        {"chat_template": ChatTemplateOptions(add_generation_prompt=False)},
        {"output": OutputOptions(suffix="x")},
        {"sampling": Sampling(bad_words=("x",))},
        {"sampling": Sampling(return_logprobs=True)},
        {"sampling": Sampling(guided=GuidedDecoding(regex="a+"))},
        {"sampling": Sampling(response_format=ResponseFormat(FormatType.JSON_OBJECT, strict=True))},
        {"input": (ChatMessage("assistant", None),), "input_kind": InputKind.CHAT},
        {"input": (ChatMessage("user", "x", reasoning_content="r"),), "input_kind": InputKind.CHAT},
    ],
    ids=lambda c: next(iter(c)) if "sampling" not in c else repr(c["sampling"])[:40],
)
def test_requests_with_fields_prewarm_does_not_send_are_not_replayable(
    changes: dict[str, object],
) -> None:
    """A record is replayable only if prewarm's upstream call sends every key field it
    sets: otherwise the model would answer without it, under a key that has it."""
    assert replay.replayable(req())
    assert not replay.replayable(dataclasses.replace(req(), **changes))  # type: ignore[arg-type]
