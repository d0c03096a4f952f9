"""The keys of requests the gateway has already keyed, by the request's own bytes.

Keying a completion request is parsing its body, reading it into a KeyRequest
(`keyed_request`, `for_adapter`) and building the key (`KeyResolver.resolve`): about a
third of a hit's CPU here, every time the same request comes again. All of it is a pure
function of the endpoint, the authenticated tenant, the prompt-version header as sent,
the body's bytes and the pod's identity, so the result is kept under exactly those (the
identity by clearing on every swap, as the resolver's own memo does). Only requests
that keyed without error are kept, and only small ones; what is kept is the request's
reading and key, never the parsed body (mutable) nor anything read from a response.
"""

from __future__ import annotations

from sidecar.identity.resolver import KeyResolver
from sidecar.keys import CacheKey
from sidecar.wire.openai.keys import KeyedRequest

MEMO_MAX = 4096
MEMO_MAX_BODY_BYTES = 4096
"""At most 4096 bodies of 4 KiB: ~16 MiB of bodies, and their readings."""

RequestId = tuple[str, str, bytes | None, bytes]
"""(endpoint, tenant, the x-infercache-prompt-version header as sent, body bytes)."""
Keyed = tuple[KeyedRequest, CacheKey]


class RequestKeys:
    """A bounded memo: RequestId -> (the KeyedRequest, its resolved key)."""

    def __init__(self, keys: KeyResolver) -> None:
        self._memo: dict[RequestId, Keyed] = {}
        self.known = self._memo.get
        """`known(request_id)`: what that request keyed to, or None."""
        keys.cell.on_swap(lambda old, new: self._memo.clear())

    def keep(self, request_id: RequestId, kr: KeyedRequest, key: CacheKey) -> None:
        """Remember a request that keyed without error."""
        if len(request_id[3]) > MEMO_MAX_BODY_BYTES:
            return
        memo = self._memo
        if len(memo) >= MEMO_MAX:
            del memo[next(iter(memo))]
        memo[request_id] = (kr, key)
