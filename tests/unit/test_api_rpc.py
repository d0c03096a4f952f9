"""The api edge written once: `@rpc` methods map domain errors to statuses in
RpcObserver.run; the pod's KeyResolver builds, memoises and checks keys; ResultCache.store
refuses results of weights the pod does not run."""

from __future__ import annotations

import re
from typing import Any

import grpc
import pytest

from sidecar.api.observe import RpcObserver
from sidecar.api.rpc import rpc
from sidecar.errors import FailedPrecondition, InfercacheError, InvalidArgument
from sidecar.identity.cell import IdentityCell
from sidecar.identity.pod import PodIdentity
from sidecar.identity.resolver import KeyResolver
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.rules import RuleSet
from sidecar.keys import InputKind, KeyLimits, KeyRequest
from sidecar.observability.stats import RpcStats
from sidecar.observability.telemetry import Telemetry
from sidecar.policy.ttl import TtlPolicy
from sidecar.results.cache import ResultCache
from sidecar.results.parts import CacheAdmission, CacheSettings, CacheTiers
from sidecar.results.types import LookupQuery, Outcome
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.tiers.hot import HotTier


class Aborted(Exception):
    """What grpc.aio's context.abort raises (its AbortError) in this fake."""


class FakeContext:
    """The parts of grpc.aio.ServicerContext that RpcObserver.run and abort_for use."""

    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def code(self) -> grpc.StatusCode | None:
        return self.aborted[0] if self.aborted else None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted(details)


class Servicer:
    """A servicer whose handlers only raise; its public methods come from @rpc."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.observer = RpcObserver("test.Service", Telemetry(), RpcStats())
        self.stats = self.observer._stats
        self.error = error
        self.calls = 0

    @rpc()
    async def Echo(self, request: str, context: Any) -> str:
        """Echo the request, or raise the configured error."""
        self.calls += 1
        if self.error is not None:
            raise self.error
        return request


def _codes(servicer: Servicer) -> list[tuple[str, str]]:
    return sorted(servicer.stats.durations)


async def test_rpc_method_answers_and_records_ok() -> None:
    """An @rpc method returns the handler's response; its duration is recorded as OK."""
    s = Servicer()
    assert await s.Echo("hi", FakeContext()) == "hi"
    assert _codes(s) == [("Echo", "OK")]
    assert Servicer.Echo.__doc__ == "Echo the request, or raise the configured error."


async def test_rpc_method_is_bound_once_per_servicer() -> None:
    """The public method is built at first access and reused (grpc reads it once anyway)."""
    s = Servicer()
    assert s.Echo is s.Echo
    assert s.Echo.__name__ == "Echo"
    assert Servicer().Echo is not s.Echo


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidArgument("key.tenant", "is required"), grpc.StatusCode.INVALID_ARGUMENT),
        (FailedPrecondition("not this pod's model"), grpc.StatusCode.FAILED_PRECONDITION),
        (InfercacheError("a bug"), grpc.StatusCode.INTERNAL),
    ],
)
async def test_domain_error_aborts_with_its_status(
    error: InfercacheError, code: grpc.StatusCode
) -> None:
    """A domain error a handler raises ends the RPC with the mapped status and its message."""
    s = Servicer(error)
    ctx = FakeContext()
    with pytest.raises(Aborted):
        await s.Echo("hi", ctx)
    assert ctx.aborted == (code, str(error))
    assert _codes(s) == [("Echo", code.name)]


async def test_other_exceptions_end_internal_with_an_error_id() -> None:
    """A non-domain exception ends the RPC INTERNAL with a short error id, the same for
    the same bug (grpc would report it UNKNOWN, with a traceback per request)."""
    s = Servicer(RuntimeError("boom"))
    details = set()
    for _ in range(2):
        ctx = FakeContext()
        with pytest.raises(Aborted):
            await s.Echo("hi", ctx)
        assert ctx.aborted is not None
        assert ctx.aborted[0] is grpc.StatusCode.INTERNAL
        details.add(ctx.aborted[1])
    (only,) = details
    assert re.fullmatch(r"internal error \(id [0-9a-f]{8}\)", only), only
    assert _codes(s) == [("Echo", "INTERNAL")]


def _request(**fields: Any) -> KeyRequest:
    base: dict[str, Any] = {
        "tenant": "acme",
        "model_version": "",
        "prompt_version": "p1",
        "input": "hello",
        "input_kind": InputKind.TEXT,
    }
    return KeyRequest(**(base | fields))


POD = PodIdentity("fp-model", {"support": "fp-adapter"})


def test_resolver_fills_model_and_resolves_adapter_names() -> None:
    """An empty model version means the pod's; an adapter name keys as its fingerprint."""
    keys = KeyResolver(POD, KeyLimits())
    by_name = keys.resolve(_request(adapter_version="support"))
    by_fp = keys.resolve(_request(adapter_version="fp-adapter"))
    assert by_name.model_version == "fp-model"
    assert by_name.adapter_version == "fp-adapter"
    assert by_name.digest == by_fp.digest
    assert keys.resolve(_request(adapter_version="other")).adapter_version == "other"


def test_resolver_memoises_only_valid_small_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """remember() keeps a valid key under its bytes, bounded in count and size; an invalid
    request raises and is not kept."""
    monkeypatch.setattr("sidecar.identity.resolver.MEMO_MAX_KEYS", 2)
    monkeypatch.setattr("sidecar.identity.resolver.MEMO_MAX_KEY_BYTES", 8)
    keys = KeyResolver(POD, KeyLimits())
    req = _request()
    key, source = keys.remember(b"a", req)
    assert keys.known(b"a") == (key, source)
    assert source is req
    keys.remember(b"b", req)
    keys.remember(b"c", req)
    assert keys.known(b"a") is None  # the oldest went first
    assert keys.known(b"c") is not None
    keys.remember(b"too-long-to-keep", req)
    assert keys.known(b"too-long-to-keep") is None
    with pytest.raises(InvalidArgument):
        keys.remember(b"d", _request(tenant=""))
    assert keys.known(b"d") is None


def test_pod_adapter_name_by_name_or_fingerprint() -> None:
    """A request may name a configured adapter by name or by fingerprint; others are None."""
    assert POD.adapter_name("support") == "support"
    assert POD.adapter_name("fp-adapter") == "support"
    assert POD.adapter_name("other") is None


def test_resolver_store_check() -> None:
    """Keys of other weights are refused unless the pod allows foreign stores."""
    keys = KeyResolver(POD, KeyLimits())
    keys.check_store(keys.resolve(_request()))
    foreign = keys.resolve(_request(model_version="fp-other"))
    with pytest.raises(FailedPrecondition, match="not this pod's model"):
        keys.check_store(foreign)
    lenient = KeyResolver(PodIdentity("fp-model", allow_foreign_store=True), KeyLimits())
    lenient.check_store(foreign)
    KeyResolver(PodIdentity(), KeyLimits()).check_store(foreign)  # no fingerprint: no check


async def test_result_cache_store_refuses_foreign_weights() -> None:
    """ResultCache.store itself refuses a result of weights the pod does not run, before
    anything is written, so no entry point (Store, StoreStream, prewarm) can forget it."""
    cache = ResultCache(
        CacheTiers(HotTier(1 << 20, 100), EmbeddedWarmTier(1 << 20, 100)),
        CacheSettings(TtlPolicy(3600, 86400), max_payload_bytes=1024, max_chunks=64),
        freshness=Freshness(EmbeddedControlStore(), RuleSet()),
        admission=CacheAdmission(identity=IdentityCell(POD)),
    )
    keys = KeyResolver(POD, KeyLimits())
    foreign = keys.resolve(_request(model_version="fp-other"))
    with pytest.raises(FailedPrecondition, match="not this pod's model"):
        await cache.store(foreign, b"answer")
    assert (await cache.lookup(LookupQuery(foreign))).outcome is Outcome.MISS
