"""The gateway's memo of keyed requests (sidecar/gateway/request_keys.py) never outlives the
pod identity the keys were built with, and keeps only small bodies."""

from __future__ import annotations

from sidecar.gateway.request_keys import MEMO_MAX_BODY_BYTES, RequestKeys
from sidecar.identity.cell import IdentityCell
from sidecar.identity.pod import PodIdentity
from sidecar.identity.resolver import KeyResolver
from sidecar.keys import CacheKey, KeyLimits
from sidecar.wire.openai.keys import KeyedRequest, keyed_request

OLD = PodIdentity("fp1-old", {})
NEW = PodIdentity("fp1-new", {})
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


def _keyed(resolver: KeyResolver) -> tuple[KeyedRequest, CacheKey]:
    doc = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    kr = keyed_request("chat.completions", doc, "acme", "v1")
    assert kr.key is not None
    return kr, resolver.resolve(kr.key)


def test_a_new_identity_forgets_every_key() -> None:
    """Keys carry the model's fingerprint: after a swap none may be served from the memo."""
    cell = IdentityCell(OLD)
    resolver = KeyResolver(cell, KeyLimits())
    memo = RequestKeys(resolver)
    kr, key = _keyed(resolver)
    request_id = ("chat.completions", "acme", None, BODY)
    memo.keep(request_id, kr, key)
    assert memo.known(request_id) == (kr, key)
    cell.swap(NEW)
    assert memo.known(request_id) is None
    _, new_key = _keyed(resolver)
    assert new_key.model_version == "fp1-new"


def test_only_small_bodies_are_kept() -> None:
    resolver = KeyResolver(IdentityCell(OLD), KeyLimits())
    memo = RequestKeys(resolver)
    kr, key = _keyed(resolver)
    big = ("chat.completions", "acme", None, b" " * (MEMO_MAX_BODY_BYTES + 1))
    memo.keep(big, kr, key)
    assert memo.known(big) is None
