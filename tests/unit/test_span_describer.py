"""Span attributes of data-plane RPCs (api/observe.py CacheDescriber): from the key the
handler resolved for the request (REQUEST_KEY) when there is one, resolved again only
when there is not, with the same attributes either way."""

from __future__ import annotations

from infercache.v1 import cache_pb2 as PB2

from sidecar.api.observe import CacheDescriber, TenantLabel
from sidecar.keys import CacheKey
from sidecar.observability.logs import REQUEST_KEY
from tests.support.keys import cache_key, key


def _describer(calls: list[PB2.CacheKey], resolved: CacheKey) -> CacheDescriber:
    def key_of(k: PB2.CacheKey) -> CacheKey:
        calls.append(k)
        return resolved

    return CacheDescriber(key_of, TenantLabel(in_clear=False))


def test_the_handlers_key_is_used_not_resolved_again() -> None:
    resolved = cache_key()
    calls: list[PB2.CacheKey] = []
    describer = _describer(calls, resolved)
    request = PB2.LookupRequest(key=key())
    fresh = describer.lookup(request, None)
    assert len(calls) == 1, "no key resolved by the handler: resolved here"
    token = REQUEST_KEY.set(resolved)
    try:
        again = describer.lookup(request, None)
        stored = describer.store(PB2.StoreRequest(key=key(), payload=b"xy"), None)
        batch = describer.lookup_batch(PB2.LookupBatchRequest(requests=[request]), None)
    finally:
        REQUEST_KEY.reset(token)
    assert len(calls) == 1, "the handler's key was taken"
    assert again == fresh
    assert stored["infercache.key_digest"] == resolved.digest[:8].hex()
    assert batch["infercache.key_digest"] == fresh["infercache.key_digest"]
