"""Which gateway hits and misses shadow verification re-computes (docs/verification.md).

Eligible: a chat or text completion that sidecar/verification/eligibility.py admits
(reproducible, no side effects, no real-time dependence, a tenant rate above 0). The
body re-sent is the one the model server got for the client (the tenant's cache_salt
included), made only for a request that is sampled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sidecar.entries import Entry
from sidecar.keys import CacheKey
from sidecar.policy.cacheability import TenantPolicy
from sidecar.shadow.runner import ShadowRunner
from sidecar.verification.eligibility import budget, hit_rate
from sidecar.verification.ledger import Scope
from sidecar.wire.openai.answers import UpstreamCall
from sidecar.wire.openai.keys import KeyedRequest
from sidecar.wire.openai.routes import CHAT_PATH, COMPLETIONS_PATH

PATHS = {"chat.completions": CHAT_PATH, "completions": COMPLETIONS_PATH}
"""The endpoints verified (their answers are compared by sidecar/wire/openai/compare.py)."""
JSON = "application/json"


class Sent(Protocol):
    """A request body as the model server gets it (request_body.Body)."""

    @property
    def sent(self) -> bytes: ...


class GatewayVerifier:
    """Samples the gateway's hits and misses into shadow checks."""

    def __init__(self, runner: ShadowRunner, policy: Callable[[str], TenantPolicy]) -> None:
        self.runner = runner
        self._policy = policy
        self._settings = runner.ledger.settings

    def _rate(self, endpoint: str, kr: KeyedRequest, key: CacheKey) -> float:
        """The tenant's verify rate for this request; 0 when it is not eligible."""
        if endpoint not in PATHS:
            return 0.0
        return hit_rate(key, kr.traits, self._policy(key.tenant), self._settings)

    def after_hit(
        self, endpoint: str, kr: KeyedRequest, key: CacheKey, entry: Entry, body: Sent
    ) -> None:
        """A hit was answered: maybe compare it with a fresh answer."""
        rate = self._rate(endpoint, kr, key)
        if rate <= 0.0:
            return
        scope = Scope(key.model_version, key.tenant, key.prompt_version)
        ledger = self.runner.ledger
        if not ledger.hit_due(scope, rate) or not self.runner.admit(key.model_version, "hit"):
            return
        allowed = budget(self._policy(key.tenant), self._settings)
        call = UpstreamCall(PATHS[endpoint], JSON, body.sent)
        self.runner.check_hit(scope, self.runner.call(call), entry.payload, allowed)

    def after_miss(
        self, endpoint: str, kr: KeyedRequest, key: CacheKey, answer: bytes, body: Sent
    ) -> None:
        """A miss was computed whole: maybe compute it again for the baseline."""
        if self._rate(endpoint, kr, key) <= 0.0:
            return
        version = key.model_version
        ledger = self.runner.ledger
        if not ledger.miss_due(version) or not self.runner.admit(version, "baseline"):
            return
        call = UpstreamCall(PATHS[endpoint], JSON, body.sent)
        self.runner.check_miss(version, self.runner.call(call), answer)


class NoVerifier:
    """What the flow calls when verification is off: nothing happens."""

    def after_hit(
        self, endpoint: str, kr: KeyedRequest, key: CacheKey, entry: Entry, body: Sent
    ) -> None:
        """Nothing to do."""

    def after_miss(
        self, endpoint: str, kr: KeyedRequest, key: CacheKey, answer: bytes, body: Sent
    ) -> None:
        """Nothing to do."""


NO_VERIFIER = NoVerifier()
