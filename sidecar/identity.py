"""What a sidecar knows about its own pod (the model and adapters it serves), and the
one pod-aware key resolver every entry point builds its keys with."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from sidecar.errors import FailedPrecondition
from sidecar.keys import CacheKey, KeyLimits, KeyRequest, build_key


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """Fingerprints measured at start; empty when the sidecar was not given a model path."""

    model_version: str = ""
    adapter_versions: Mapping[str, str] = field(default_factory=dict)
    """Adapter name -> fingerprint; requests may name an adapter instead of its fingerprint."""
    allow_foreign_store: bool = False

    def resolve_adapter(self, adapter_version: str) -> str:
        """The fingerprint behind a configured adapter name, else the value unchanged."""
        return self.adapter_versions.get(adapter_version, adapter_version)

    def resolve_selector_adapter(self, adapter_version: str) -> str:
        """The fingerprint an invalidation selector's adapter means, resolved as keys are.

        A configured name becomes its fingerprint (keys store that), a configured
        fingerprint stays; anything else, on a pod with adapters, is refused: a rule
        for a value no key of this pod can carry would be committed and kill nothing.
        A pod without adapters keys on the value as sent, so the selector keeps it too.
        """
        if not self.adapter_versions:
            return adapter_version
        name = self.adapter_name(adapter_version)
        if name is not None:
            return self.resolve_adapter(name)
        served = ", ".join(sorted(self.adapter_versions))
        raise FailedPrecondition(
            f"selector.adapter_version {adapter_version!r} is not an adapter this pod "
            f"serves (by name or fingerprint: {served}); nothing was invalidated"
        )

    def adapter_name(self, adapter_version: str) -> str | None:
        """The configured adapter a request names (by name or by fingerprint), if any."""
        if adapter_version in self.adapter_versions:
            return adapter_version
        for name, fp in self.adapter_versions.items():
            if fp == adapter_version:
                return name
        return None

    def check_store(self, model_version: str) -> None:
        """Refuse results a caller claims for weights this pod does not run.

        A fleet-shared cache must not accept them: the pod cannot have computed them.
        """
        foreign = bool(self.model_version) and model_version != self.model_version
        if foreign and not self.allow_foreign_store:
            raise FailedPrecondition(
                f"key.model_version {model_version!r} is not this pod's model "
                f"({self.model_version}); leave it empty to mean this pod's model, or set "
                "INFERCACHE_ALLOW_FOREIGN_MODEL_STORE=true"
            )


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

    def __init__(self, pod: PodIdentity, limits: KeyLimits) -> None:
        self.pod = pod
        self.limits = limits
        self._memo: dict[bytes, ResolvedKey] = {}
        # The memo's bound dict.get, so a memo hit on the hot path costs what it did
        # when the memo lived in the servicer: no extra Python call.
        self.known = self._memo.get
        """`known(raw)`: the memoised key of a serialised request, or None."""

    def resolve(self, req: KeyRequest) -> CacheKey:
        """The validated key of `req` for this pod (InvalidArgument naming the field)."""
        pod = self.pod
        if pod.adapter_versions and req.adapter_version:
            req = dataclasses.replace(req, adapter_version=pod.resolve_adapter(req.adapter_version))
        return build_key(req, self.limits, pod.model_version)

    def remember(self, raw: bytes, req: KeyRequest) -> ResolvedKey:
        """Resolve `req` (whose serialised form is `raw`) and memoise the result."""
        # resolve is a pure function of the request (limits and pod are fixed), and a
        # byte string parses to exactly one request, so equal bytes give equal keys.
        built = (self.resolve(req), req)
        if len(raw) <= MEMO_MAX_KEY_BYTES:
            memo = self._memo
            if len(memo) >= MEMO_MAX_KEYS:
                memo.pop(next(iter(memo)))
            memo[raw] = built
        return built

    def check_store(self, key: CacheKey) -> None:
        """FailedPrecondition for a result claimed for weights this pod does not run."""
        self.pod.check_store(key.model_version)
