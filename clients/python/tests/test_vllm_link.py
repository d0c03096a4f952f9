"""SidecarLink against a fake sidecar: attaching never blocks its caller, and a sidecar
that forgot the attachment is attached again at once, not after the back-off."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from infercache_client.kv import HotTier
from infercache_client.vllm.link import SidecarLink

from tests.support.kv_link_fake import FakeClock, FakeSidecar, FakeTier, fake_link

LOOKUP_S = 0.2
ATTACH_S = 5.0
RETRY_S = 1.0
# What a call that never touches the network may take on a busy 2-core machine.
INSTANT_S = 0.05


@pytest.fixture
def sidecar() -> Iterator[FakeSidecar]:
    fake = FakeSidecar()
    yield fake
    fake.thaw()  # let background attaches end


def make_link(sidecar: FakeSidecar, clock: FakeClock) -> SidecarLink:
    return fake_link(
        sidecar, timeout_s=LOOKUP_S, attach_timeout_s=ATTACH_S, retry_s=RETRY_S, clock=clock
    )


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    out = fn()
    return out, time.monotonic() - started


def eventually(fn: Callable[[], Any], within_s: float = 2.0) -> Any:
    deadline = time.monotonic() + within_s
    while (out := fn()) is None or out is False:
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.01)
    return out


def lookup(tier: HotTier) -> int:
    return tier.lookup_prefix("t", [b"h"]).matched_blocks


def test_tier_answers_at_once_while_a_reattach_waits_on_a_frozen_sidecar(
    sidecar: FakeSidecar,
) -> None:
    """After a deadline the link backs off for retry_s; the attach that follows runs in
    the background (up to attach_timeout_s against a frozen sidecar) and tier() answers
    None at once meanwhile, then the attachment once the sidecar answers again."""
    clock = FakeClock()
    link = make_link(sidecar, clock)
    try:
        first = link.attach_now()
        assert first is not None
        sidecar.freeze()
        assert link.call("lookup", lookup) is None  # DEADLINE_EXCEEDED after LOOKUP_S
        assert (link.failures, sidecar.attaches) == (1, 1)
        assert link.tier() is None, "backing off"
        clock.now += RETRY_S
        for _ in range(3):  # the first starts the attach, none waits for it
            tier, took = timed(link.tier)
            assert tier is None
            assert took < INSTANT_S, f"tier() waited {took:.3f} s on the attach"
        sidecar.thaw()
        again = eventually(link.tier)
        assert again is not first
        assert sidecar.attaches == 2
    finally:
        link.close()


def test_an_unknown_attachment_is_attached_again_without_the_back_off(
    sidecar: FakeSidecar,
) -> None:
    """A restarted sidecar answers FAILED_PRECONDITION "unknown KV attachment": the link
    attaches again at once, not after retry_s (the clock stands still from the failure)."""
    clock = FakeClock()
    link = make_link(sidecar, clock)
    try:
        first = cast(FakeTier, link.attach_now())
        clock.now += RETRY_S  # the attachment served a while before the restart
        sidecar.restart()
        assert link.call("save", lookup) is None
        again = cast(FakeTier, eventually(link.tier))
        assert again is not first
        assert again.pool_id == "pool-2"
        assert link.call("save", lookup) == 0, "the new attachment works"
        assert (link.failures, link.back_offs, link.attaches) == (1, 0, 2)
    finally:
        link.close()


def test_an_attachment_the_renewer_lost_is_replaced_at_once(sidecar: FakeSidecar) -> None:
    """Once the renewal of the attachment was refused (tier.alive is False: reclaimed
    after a long freeze), tier() drops it and attaches again in the background."""
    clock = FakeClock()
    link = make_link(sidecar, clock)
    try:
        first = cast(FakeTier, link.attach_now())
        clock.now += RETRY_S
        first.alive = False
        assert link.tier() is None
        again = eventually(link.tier)
        assert again is not first
        assert sidecar.attaches == 2
        assert link.back_offs == 0
    finally:
        link.close()


def test_an_attachment_forgotten_young_is_replaced_once_it_is_retry_s_old(
    sidecar: FakeSidecar,
) -> None:
    """A sidecar that forgets attachments as soon as they are made is not asked to attach
    more than once per retry_s (as with a back-off)."""
    clock = FakeClock()
    link = make_link(sidecar, clock)
    try:
        link.attach_now()
        clock.now += RETRY_S / 2
        sidecar.restart()
        assert link.call("save", lookup) is None
        time.sleep(INSTANT_S)
        assert link.tier() is None
        assert (sidecar.attaches, link.back_offs) == (1, 1)
        clock.now += RETRY_S / 2
        eventually(link.tier)
        assert sidecar.attaches == 2
    finally:
        link.close()


def test_release_never_waits_for_a_frozen_sidecar(sidecar: FakeSidecar) -> None:
    """A lease is released in the background: request_finished costs nothing even when
    the sidecar is frozen, and the release reaches it once it answers."""
    clock = FakeClock()
    link = make_link(sidecar, clock)
    try:
        tier = link.attach_now()
        assert tier is not None
        sidecar.freeze()
        _, took = timed(lambda: link.release(tier, "lease-1"))
        assert took < INSTANT_S, f"release waited {took:.3f} s"
        sidecar.thaw()
        eventually(lambda: sidecar.released == ["lease-1"])
    finally:
        link.close()
