"""LeaseRenewer scheduling and failure handling, against a fake RenewLease."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from infercache_client.kv import LeaseRenewer


class FakeRpcError(grpc.RpcError):  # type: ignore[misc]
    """An RpcError carrying a status code, as grpc's call errors do."""

    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__(code.name)
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


class FakeSidecar:
    """Records renewals; `fail` decides per call whether (and how) RenewLease fails."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self.calls: list[tuple[str, float]] = []
        self.fail: Callable[[str], Exception | None] = lambda _lease: None
        self.lock = threading.Lock()

    def renew(self, lease_id: str) -> int:
        with self.lock:
            self.calls.append((lease_id, time.monotonic()))
        error = self.fail(lease_id)
        if error is not None:
            raise error
        return self.ttl_ms

    def count(self, lease_id: str) -> int:
        with self.lock:
            return sum(1 for lid, _ in self.calls if lid == lease_id)


def wait_until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll `check` until true or fail the test after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture
def sidecar() -> FakeSidecar:
    return FakeSidecar(ttl_ms=150)


@pytest.fixture
def renewer(sidecar: FakeSidecar) -> Iterator[LeaseRenewer]:
    r = LeaseRenewer(sidecar.renew)
    yield r
    r.close()


def test_renews_every_third_of_the_ttl(sidecar: FakeSidecar, renewer: LeaseRenewer) -> None:
    """A tracked lease is renewed repeatedly, never later than a third of its ttl apart."""
    sidecar.ttl_ms = 300
    start = time.monotonic()
    renewer.track("a", 300)
    wait_until(lambda: sidecar.count("a") >= 4)
    times = [start] + [t for _, t in sidecar.calls]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(0.09 <= g < 0.3 for g in gaps), gaps  # due at 0.1 s, expired at 0.3 s
    assert renewer.lost() == frozenset()


def test_forget_stops_renewal(sidecar: FakeSidecar, renewer: LeaseRenewer) -> None:
    """After forget (Release), the lease is not renewed again."""
    renewer.track("a", 150)
    renewer.track("b", 150)
    wait_until(lambda: sidecar.count("a") >= 1)
    renewer.forget("a")
    seen = sidecar.count("a")
    wait_until(lambda: sidecar.count("b") >= seen + 3)
    assert sidecar.count("a") <= seen + 1  # at most one call already in flight
    assert renewer.tracked() == frozenset({"b"})


def test_refused_lease_is_lost_at_once(sidecar: FakeSidecar, renewer: LeaseRenewer) -> None:
    """NOT_FOUND (expired or superseded) is final: no retry, the lease is reported lost."""
    sidecar.fail = lambda _lease: FakeRpcError(grpc.StatusCode.NOT_FOUND)
    renewer.track("a", 150)
    wait_until(lambda: "a" in renewer.lost())
    time.sleep(0.2)
    assert sidecar.count("a") == 1
    assert renewer.tracked() == frozenset()


def test_transient_errors_are_retried(sidecar: FakeSidecar, renewer: LeaseRenewer) -> None:
    """UNAVAILABLE is retried soon; once a call succeeds the lease stays tracked."""
    failures: Iterator[Exception] = iter(
        [FakeRpcError(grpc.StatusCode.UNAVAILABLE), ValueError("closed channel")]
    )
    sidecar.fail = lambda _lease: next(failures, None)
    sidecar.ttl_ms = 400  # room for two retries before the first ttl runs out
    renewer.track("a", 400)
    wait_until(lambda: sidecar.count("a") >= 4)
    assert renewer.lost() == frozenset()
    assert renewer.tracked() == frozenset({"a"})


def test_lease_lost_when_errors_outlast_its_ttl(
    sidecar: FakeSidecar, renewer: LeaseRenewer
) -> None:
    """Transient errors until the ttl runs out: the lease is lost, retries stop."""
    sidecar.fail = lambda _lease: FakeRpcError(grpc.StatusCode.UNAVAILABLE)
    renewer.track("a", 150)
    wait_until(lambda: "a" in renewer.lost())
    calls = sidecar.count("a")
    assert calls >= 2
    time.sleep(0.2)
    assert sidecar.count("a") == calls


def test_close_stops_the_thread(sidecar: FakeSidecar) -> None:
    """close() returns promptly and no renewal happens after it."""
    renewer = LeaseRenewer(sidecar.renew)
    renewer.track("a", 150)
    renewer.close()
    calls = sidecar.count("a")
    time.sleep(0.2)
    assert sidecar.count("a") == calls
