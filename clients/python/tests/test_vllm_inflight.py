"""Saves in flight (inflight.py) and the probe that waits for them (probes.py): a
request right behind another with the same prefix finds the blocks whose commit was
still on its way; a save that never lands costs at most the lookup deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from infercache_client.vllm.cost import LoadCostModel
from infercache_client.vllm.gauge import LoadGauge
from infercache_client.vllm.inflight import MAX_BLOCKS, SETTLE_S, InFlightSaves
from infercache_client.vllm.link import SidecarLink
from infercache_client.vllm.probes import PrefixProbes

from tests.support.kv_link_fake import FakeClock, FakeSidecar, fake_link

CHAIN = [b"h0", b"h1", b"h2", b"h3"]
LOOKUP_S = 0.5


def test_extent_is_one_past_the_last_block_in_flight_until_it_settles() -> None:
    clock = FakeClock()
    saves = InFlightSaves(clock)
    assert saves.extent(CHAIN, 4) == 0
    saves.planned(CHAIN[1:3])
    assert saves.extent(CHAIN, 4) == 3
    assert saves.extent(CHAIN, 2) == 2  # only the usable blocks count
    saves.found(CHAIN, 2)
    assert saves.extent(CHAIN, 4) == 3  # h2 has not been found yet
    clock.now += SETTLE_S + 0.01
    assert saves.extent(CHAIN, 4) == 0


def test_a_block_planned_again_stays_in_flight_from_its_last_plan() -> None:
    clock = FakeClock()
    saves = InFlightSaves(clock)
    saves.planned([b"x"])
    clock.now += SETTLE_S - 0.5
    saves.planned([b"x"])
    clock.now += 1.0  # past the first plan's settle time, not the second's
    assert saves.extent([b"x"], 1) == 1


def test_the_memory_is_bounded() -> None:
    saves = InFlightSaves(FakeClock())
    saves.planned([i.to_bytes(4, "big") for i in range(MAX_BLOCKS + 10)])
    assert saves.extent([(0).to_bytes(4, "big")], 1) == 0  # the oldest were forgotten
    assert saves.extent([(MAX_BLOCKS + 9).to_bytes(4, "big")], 1) == 1


@pytest.fixture
def sidecar() -> Iterator[FakeSidecar]:
    fake = FakeSidecar()
    yield fake
    fake.thaw()


def probes_on(sidecar: FakeSidecar, saves: InFlightSaves) -> tuple[PrefixProbes, SidecarLink]:
    link = fake_link(sidecar, timeout_s=LOOKUP_S, attach_timeout_s=1.0)
    link.attach_now()
    gauge = LoadGauge(LoadCostModel(margin=0.8), block_bytes=1024, block_size=16)
    probes = PrefixProbes(link, gauge, tenant="t", timeout_s=LOOKUP_S, in_flight=saves)
    return probes, link


def take(probes: PrefixProbes, req_id: str, within_s: float = 5.0) -> int:
    """Ask as the engine loop does, every few ms, until the probe answers."""
    deadline = time.monotonic() + within_s
    while (got := probes.take(req_id, 0.002)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    return got[0].matched


def test_a_lookup_behind_a_committing_save_finds_its_blocks(sidecar: FakeSidecar) -> None:
    """The save of h0-h3 was planned; its commit lands 50 ms after the lookup started:
    the request is answered 4 blocks, not 0."""
    saves = InFlightSaves()
    probes, link = probes_on(sidecar, saves)
    try:
        saves.planned(CHAIN)
        commit = threading.Timer(0.05, sidecar.cached.update, args=(CHAIN,))
        commit.start()
        probes.start("r1", CHAIN, "", 4, None)
        assert take(probes, "r1") == 4
        commit.join()
    finally:
        probes.close()
        link.close()


def test_a_save_that_never_lands_costs_the_lookup_deadline_then_a_miss(
    sidecar: FakeSidecar,
) -> None:
    saves = InFlightSaves()
    probes, link = probes_on(sidecar, saves)
    try:
        saves.planned(CHAIN)
        started = time.monotonic()
        probes.start("r1", CHAIN, "", 4, None)
        assert take(probes, "r1") == 0
        assert time.monotonic() - started >= LOOKUP_S - 0.01
    finally:
        probes.close()
        link.close()
