"""Lookup queries memoised by the LookupRequest's bytes: a repeated request (the same key,
bounds and traits) costs one serialisation and one dict lookup instead of its decoding,
its unknown-field checks and the key's memo lookup.

Safe because a LookupQuery is immutable and a pure function of the request's bytes and
the pod's identity: only requests that passed validation are kept (unknown fields are
part of the bytes, so a request carrying one never matches a kept one), and the memo is
emptied whenever the identity changes (as the key resolver's is).
"""

from __future__ import annotations

from infercache.v1 import cache_pb2 as PB2

from sidecar.api.cache_codec import query_from_pb
from sidecar.identity.resolver import MEMO_MAX_KEY_BYTES, MEMO_MAX_KEYS, KeyResolver
from sidecar.results.types import LookupQuery


class QueryMemo:
    """`query(request)`: query_from_pb, memoised (see the module docstring)."""

    __slots__ = ("_known", "_memo", "keys")

    def __init__(self, keys: KeyResolver) -> None:
        self.keys = keys
        self._memo: dict[bytes, LookupQuery] = {}
        self._known = self._memo.get
        keys.cell.on_swap(lambda old, new: self._memo.clear())

    def query(self, request: PB2.LookupRequest) -> LookupQuery:
        """The domain query of `request` (InvalidArgument as query_from_pb raises it)."""
        # The plain serialisation: equal messages may only order map entries
        # differently, which costs a memo miss, never a wrong query.
        raw = request.SerializeToString()
        query = self._known(raw)
        if query is None:
            query = query_from_pb(request, self.keys)
            if len(raw) <= MEMO_MAX_KEY_BYTES:
                memo = self._memo
                if len(memo) >= MEMO_MAX_KEYS:
                    memo.pop(next(iter(memo)))
                memo[raw] = query
        return query
