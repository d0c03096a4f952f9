"""infercache's blocks in vLLM's own KV event stream (--kv-events-config), decoded with
vLLM's own `KVEventBatch` decoder, as a KV-aware router subscribes to it.

The router's hash (infercache_client.vllm.router_hash) must equal the published one for
every block of a mixed set of requests (plain, salted, LoRA), and no two scopes may
share a published hash.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from infercache_client.vllm.router_hash import router_block_hashes, tenant_salt_digest

from tests.support.kv_events import EventSubscriber
from tests.support.processes import free_port
from tests.support.vllm_engine import BLOCK_SIZE, EngineProcess
from tests.support.vllm_model import PROMPTS, Models, write_lora
from tests.support.vllm_sidecar import SidecarServer

SAVED_BLOCKS = len(PROMPTS["a"]) // BLOCK_SIZE
TENANT = "vllm"  # the connector's default tenant


def _fingerprint(path: Path, kind: str) -> str:
    from infercache_client.fingerprint import fingerprint

    return fingerprint(path, kind=kind, mode="full").value  # type: ignore[arg-type]


def _extra(event: Any) -> dict[str, str]:
    """One block's extra_keys as a dict (every block of an event carries the same)."""
    keys = {tuple(tuple(pair) for pair in k) for k in event.extra_keys}
    assert len(keys) == 1, keys
    return {name: value for name, value in next(iter(keys))}


@pytest.fixture
def events_engine(models: Models, sidecar: SidecarServer) -> Iterator[tuple[EngineProcess, str]]:
    port = free_port()
    engine = EngineProcess(
        models.v1,
        connector="infercache",
        extra={"sidecar": sidecar.target},
        lora=True,
        kv_events=f"tcp://*:{port}",  # vLLM's PUB binds a wildcard endpoint, else connects
    )
    yield engine, f"tcp://127.0.0.1:{port}"
    engine.close()


def test_pool_blocks_in_vllms_stream_with_medium_identity_and_router_hash_parity(
    events_engine: tuple[EngineProcess, str], models: Models, tmp_path: Path
) -> None:
    engine, endpoint = events_engine
    write_lora(tmp_path / "alpha", seed=1)
    write_lora(tmp_path / "beta", seed=2)
    alpha_fp = _fingerprint(tmp_path / "alpha", "adapter")
    beta_fp = _fingerprint(tmp_path / "beta", "adapter")
    subscriber = EventSubscriber(endpoint, topic="kv")
    # (prompt, cache_salt, lora): the same prompt under four scopes, and other prompts.
    mixed: list[tuple[str, str | None, str | None]] = [
        ("a", None, None),
        ("b", None, None),
        ("a", "tenant-x", None),
        ("c", "tenant-y", None),
        ("a", None, "alpha"),
        ("d", None, "beta"),
        ("a", "tenant-x", "beta"),
    ]
    try:
        for name, salt, lora in mixed:
            engine.generate(
                [PROMPTS[name]], cache_salt=salt, lora=str(tmp_path / lora) if lora else None
            )
        expected_blocks = SAVED_BLOCKS * len(mixed)
        seen = subscriber.collect(lambda s: len(s.stored_hashes()) >= expected_blocks)
        stats = engine.stats()
    finally:
        subscriber.close()

    stored = seen.stored()
    assert stored, f"no BlockStored in vLLM's stream ({stats})"
    assert {e.medium for e in stored} == {"CPU"}
    assert {e.ownership for e in stored} == {"infercache-pool"}
    assert {e.locality for e in stored} == {"LOCAL"}
    extras = [_extra(e) for e in stored]
    assert {x["model"] for x in extras} == {_fingerprint(models.v1, "model")}
    assert {x["schema"] for x in extras} == {"infercache.kv.event.v1"}
    (scope_id,) = {x["scope"] for x in extras}  # one engine, one version scope
    assert all(x["layout"].endswith(f"/{BLOCK_SIZE}/float32") for x in extras)

    adapters = {"alpha": alpha_fp, "beta": beta_fp}
    by_hash = {h: (e, x) for e, x in zip(stored, extras, strict=True) for h in e.block_hashes}
    matched = total = 0
    scopes: list[set[bytes]] = []
    for name, salt, lora in mixed:
        prompt = PROMPTS[name]
        ref = router_block_hashes(
            prompt,
            BLOCK_SIZE,
            scope_id=scope_id,
            tenant=TENANT,
            cache_salt=salt or "",
            lora_name=lora or "",
            lora_fingerprint=adapters[lora] if lora else "",
        )
        assert len(ref) == SAVED_BLOCKS
        scopes.append(set(ref))
        for i, h in enumerate(ref):
            total += 1
            if h not in by_hash:
                continue
            matched += 1
            event, extra = by_hash[h]
            at = event.block_hashes.index(h)
            first = i - at
            assert event.token_ids[at * BLOCK_SIZE : (at + 1) * BLOCK_SIZE] == list(
                prompt[i * BLOCK_SIZE : (i + 1) * BLOCK_SIZE]
            )
            assert event.parent_block_hash == (ref[first - 1] if first > 0 else None)
            assert extra["tenant_salt"] == tenant_salt_digest(TENANT, salt or "")
            assert (extra["lora"], extra["adapter"]) == (
                (lora, adapters[lora]) if lora else ("", "")
            )
            assert event.lora_name == lora
            assert salt is None or salt not in repr(event), "a salt is never published"
    assert matched == total, f"router hash parity {matched}/{total}"
    # Four scopes of prompt "a" (plain, salted, LoRA, salted LoRA): no hash shared.
    a_scopes = [s for s, (n, _, _) in zip(scopes, mixed, strict=True) if n == "a"]
    assert sum(len(s) for s in a_scopes) == len(set().union(*a_scopes))


def test_a_requests_last_step_saves_are_published_without_another_request(
    events_engine: tuple[EngineProcess, str],
) -> None:
    """One token: the prefill is the request's only step, and its save commits on the
    worker's background thread after that step ended. The engine keeps stepping until the
    commit comes back, so a router sees the blocks now, not when the next request comes."""
    engine, endpoint = events_engine
    subscriber = EventSubscriber(endpoint, topic="kv")
    try:
        engine.generate([PROMPTS["b"]], max_tokens=1)
        seen = subscriber.collect(lambda s: len(s.stored_hashes()) >= SAVED_BLOCKS)
    finally:
        subscriber.close()
    assert len(seen.stored_hashes()) == SAVED_BLOCKS, seen.events
