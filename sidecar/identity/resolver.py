"""The one pod-aware key resolver every entry point builds its keys with."""

from __future__ import annotations

import dataclasses

from sidecar.identity.cell import IdentityCell, as_cell
from sidecar.identity.pod import PodIdentity
from sidecar.keys import CacheKey, KeyLimits, KeyRequest, build_key

ResolvedKey = tuple[CacheKey, KeyRequest]
"""A validated key and the request it was built from, as the caller sent it."""

# A hot hit spends most of its Python time canonicalising the key; repeated
# requests skip that. 8192 x 4 KiB bounds the memo at ~32 MiB of key bytes.
MEMO_MAX_KEYS = 8192
MEMO_MAX_KEY_BYTES = 4096


class KeyResolver:
    """Builds this pod's cache keys: adapter names resolved, the model version filled in.

    Holds a bounded memo from a request's serialised form (whatever the edge
    received: the protobuf bytes of a CacheKey) to its resolved key; only keys
    that passed validation are kept, and only small ones.
    """

    def __init__(self, pod: PodIdentity | IdentityCell, limits: KeyLimits) -> None:
        """`pod`: the pod's identity cell (a fixed PodIdentity gets a cell of its own)."""
        self.cell = as_cell(pod)
        self.limits = limits
        self._memo: dict[bytes, ResolvedKey] = {}
        # The memo's bound dict.get, so a memo hit on the hot path costs what it did
        # when the memo lived in the servicer: no extra Python call.
        self.known = self._memo.get
        """`known(raw)`: the memoised key of a serialised request, or None."""
        # Memoised keys carry the fingerprints they were resolved with: a new identity
        # must resolve every request afresh. clear() keeps `known` bound to the same dict.
        self.cell.on_swap(lambda old, new: self._memo.clear())

    @property
    def pod(self) -> PodIdentity:
        """The pod's identity in force now."""
        return self.cell.pod

    def resolve(self, req: KeyRequest) -> CacheKey:
        """The validated key of `req` for this pod (InvalidArgument naming the field)."""
        pod = self.pod
        if pod.adapter_versions and req.adapter_version:
            req = dataclasses.replace(req, adapter_version=pod.resolve_adapter(req.adapter_version))
        return build_key(req, self.limits, pod.model_version)

    def remember(self, raw: bytes, req: KeyRequest) -> ResolvedKey:
        """Resolve `req` (whose serialised form is `raw`) and memoise the result."""
        # resolve is a pure function of the request (limits are fixed, the memo is
        # cleared when the pod's identity changes), and a byte string parses to exactly
        # one request, so equal bytes give equal keys.
        built = (self.resolve(req), req)
        if len(raw) <= MEMO_MAX_KEY_BYTES:
            memo = self._memo
            if len(memo) >= MEMO_MAX_KEYS:
                memo.pop(next(iter(memo)))
            memo[raw] = built
        return built

    def check_store(self, key: CacheKey) -> None:
        """FailedPrecondition for a result claimed for weights this pod does not run, or
        for weights being re-measured."""
        self.cell.check_store(key.model_version, key.adapter_version)
