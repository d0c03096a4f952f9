"""The router's reference hash (infercache_client.vllm.router_hash) against the sidecar's
own block keys: what a router computes is SHA-256 over the very key the sidecar stores
the block under, and no two scopes share a published hash."""

from __future__ import annotations

import itertools

import pytest
from infercache_client.vllm.chain import ChainScope, request_chain
from infercache_client.vllm.router_hash import (
    event_hash,
    request_scope,
    router_block_hashes,
    tenant_salt_digest,
)

from sidecar.kv.layout import make_layout, version_scope
from sidecar.kv.layout import request_scope as sidecar_request_scope

TOKENS = list(range(100, 230))


def _version(fingerprint: str = "fp1-aa", block: int = 32) -> bytes:
    layout = make_layout(
        num_layers=2, num_kv_heads=2, head_dim=32, tokens_per_block=block, dtype="float32"
    )
    return version_scope(fingerprint, "", layout)


@pytest.mark.parametrize(
    ("salt", "lora", "adapter"), [("", "", ""), ("s3cret", "", ""), ("", "alpha", "fpa-1")]
)
def test_router_hash_is_the_hash_of_the_sidecars_block_key(
    salt: str, lora: str, adapter: str
) -> None:
    version = _version()
    chain = request_chain(TOKENS, 32, ChainScope(lora, adapter, salt), 64)
    keys = [sidecar_request_scope(version, "acme", salt) + h for h in chain]
    assert request_scope(version.hex(), "acme", salt) == sidecar_request_scope(
        version, "acme", salt
    )
    got = router_block_hashes(
        TOKENS,
        32,
        scope_id=version.hex(),
        tenant="acme",
        cache_salt=salt,
        lora_name=lora,
        lora_fingerprint=adapter,
    )
    assert got == [event_hash(k) for k in keys]
    assert len(got) == len(TOKENS) // 32


def test_no_two_scopes_share_a_published_hash() -> None:
    scopes = {
        "plain": dict(scope_id=_version().hex(), tenant="acme"),
        "salted": dict(scope_id=_version().hex(), tenant="acme", cache_salt="x"),
        "other salt": dict(scope_id=_version().hex(), tenant="acme", cache_salt="y"),
        "other tenant": dict(scope_id=_version().hex(), tenant="globex"),
        "lora": dict(
            scope_id=_version().hex(), tenant="acme", lora_name="a", lora_fingerprint="fa"
        ),
        "other adapter files": dict(
            scope_id=_version().hex(), tenant="acme", lora_name="a", lora_fingerprint="fb"
        ),
        "other weights": dict(scope_id=_version("fp1-bb").hex(), tenant="acme"),
    }
    hashes = {name: router_block_hashes(TOKENS, 32, **kw) for name, kw in scopes.items()}
    for (n1, h1), (n2, h2) in itertools.combinations(hashes.items(), 2):
        assert not set(h1) & set(h2), f"{n1} and {n2} share a hash"
    # A salt shifting between tenant and salt fields is another scope too.
    assert tenant_salt_digest("ab", "c") != tenant_salt_digest("a", "bc")


def test_equal_prefixes_share_hashes_and_a_lora_needs_its_fingerprint() -> None:
    kw = dict(scope_id=_version().hex(), tenant="acme")
    longer = router_block_hashes([*TOKENS, 7] * 2, 32, **kw)
    assert longer[: len(TOKENS) // 32] == router_block_hashes(TOKENS, 32, **kw)
    with pytest.raises(ValueError, match="fingerprint"):
        router_block_hashes(TOKENS, 32, lora_name="alpha", **kw)
    with pytest.raises(ValueError, match="32 bytes"):
        router_block_hashes(TOKENS, 32, scope_id="abcd", tenant="acme")
