"""The connector's event building (infercache_client.vllm.events), pure: no engine, no
sidecar. Runs in the vllm venv (it builds vLLM's own event structs)."""

from __future__ import annotations

import pickle

import msgspec
from infercache_client.vllm.chain import ChainScope, request_chain
from infercache_client.vllm.events import CONFIRM_S, ConnectorEvents, InfercacheKVEvents
from infercache_client.vllm.router_hash import router_block_hashes
from vllm.distributed.kv_events import BlockStored, KVEventBatch

SCOPE = "ab" * 32
TOKENS = list(range(3, 3 + 4 * 8 + 5))


def _events(scope: str | None = SCOPE) -> ConnectorEvents:
    return ConnectorEvents(
        model_fingerprint="fp1",
        layout="2x2x32/8/float32",
        tenant="t",
        block_size=8,
        scope_id=lambda: scope,
    )


def test_a_saved_run_names_its_parent_and_survives_vllms_codec() -> None:
    events = _events()
    events.track("r", "s3cret", ("alpha", "fpa"))
    chain = request_chain(TOKENS, 8, ChainScope("alpha", "fpa", "s3cret"), 64)
    stored = events.stored("r", chain, 1, 4, TOKENS)
    assert stored is not None
    events.add([stored])
    raw = msgspec.msgpack.encode(KVEventBatch(ts=0.0, events=events.take()))
    (decoded,) = msgspec.msgpack.Decoder(type=KVEventBatch).decode(raw).events
    ref = router_block_hashes(
        TOKENS,
        8,
        scope_id=SCOPE,
        tenant="t",
        cache_salt="s3cret",
        lora_name="alpha",
        lora_fingerprint="fpa",
    )
    assert isinstance(decoded, BlockStored)
    assert decoded.block_hashes == ref[1:4]
    assert decoded.parent_block_hash == ref[0]
    assert decoded.token_ids == TOKENS[8:32]
    assert decoded.medium == "CPU"
    assert decoded.lora_name == "alpha"
    assert "s3cret" not in repr(decoded)
    assert events.take() == []


def test_a_lookup_reports_only_blocks_not_reported_yet() -> None:
    events = _events()
    events.track("r", "", ("", ""))
    chain = request_chain(TOKENS, 8, ChainScope(), 64)
    first = events.stored("r", chain, 0, 2, TOKENS)
    assert first is not None
    assert first.parent_block_hash is None
    events.add([first])
    events.take()
    events.found("r", chain, 4, TOKENS)
    (found,) = events.take()
    assert found.block_hashes == router_block_hashes(TOKENS, 8, scope_id=SCOPE, tenant="t")[2:4]
    events.found("r", chain, 4, TOKENS)
    assert events.take() == []


def test_nothing_is_published_while_detached_or_for_unknown_requests() -> None:
    detached = _events(None)
    detached.track("r", "", ("", ""))
    chain = request_chain(TOKENS, 8, ChainScope(), 64)
    assert detached.stored("r", chain, 0, 2, TOKENS) is None
    events = _events()
    assert events.stored("unknown", chain, 0, 2, TOKENS) is None
    events.found("unknown", chain, 2, TOKENS)
    assert events.take() == []


def test_announced_saves_keep_the_engine_stepping_until_they_come_back() -> None:
    """A planned save's event comes back only after its commit, often after the request's
    last step: until every announced save has settled (committed or not), the events report
    pending work; one never heard of is given up after CONFIRM_S."""
    now = [100.0]
    events = ConnectorEvents(
        model_fingerprint="fp1",
        layout="2x2x32/8/float32",
        tenant="t",
        block_size=8,
        scope_id=lambda: SCOPE,
        clock=lambda: now[0],
    )
    assert not events.awaiting()
    events.track("r", "", ("", ""))
    chain = request_chain(TOKENS, 8, ChainScope(), 64)
    assert events.stored("r", chain, 0, 2, TOKENS) is not None
    assert events.stored("r", chain, 2, 4, TOKENS) is not None
    assert events.awaiting()
    events.settle(1)
    assert events.awaiting()
    events.settle(1)
    assert not events.awaiting()
    events.settle(3)  # more than announced (a worker's count): nothing goes negative
    assert events.stored("r", chain, 0, 1, TOKENS) is not None
    assert events.awaiting()
    # Nothing announced while detached or for unknown requests: nothing to wait for.
    events.settle(1)
    assert events.stored("unknown", chain, 0, 2, TOKENS) is None
    assert not events.awaiting()
    assert events.stored("r", chain, 0, 2, TOKENS) is not None
    now[0] += CONFIRM_S
    assert events.awaiting()
    now[0] += 0.001
    assert not events.awaiting()


def test_the_workers_count_of_settled_saves_travels_with_its_events() -> None:
    """A step with settled saves but no committed event still reaches the scheduler (vLLM
    drops an empty connector output), and its count survives the worker's pickling."""
    settled_only = InfercacheKVEvents([], 2)
    assert settled_only
    assert not InfercacheKVEvents([], 0)
    back = pickle.loads(pickle.dumps(settled_only))
    assert back.settled == 2
    assert back.get_all_events() == []
