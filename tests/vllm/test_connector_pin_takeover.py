"""The scheduler's pin takes over the probe's lease (issue 30 item 5): a hit costs one
LookupPrefix, not two, and a hold nobody takes over is released, never leaked.

Against tests/support/kv_link_fake.py's sidecar, which grants leases of `lease_ttl_ms`;
the scheduler half needs vLLM (its metadata classes), so this runs in the vllm venv.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from infercache_client.vllm.chain import ChainScope, request_chain
from infercache_client.vllm.config import ConnectorConfig
from infercache_client.vllm.cost import LoadCostModel
from infercache_client.vllm.gauge import LoadGauge
from infercache_client.vllm.identity import AdapterFingerprints
from infercache_client.vllm.scheduler import SchedulerSide

from tests.support.kv_link_fake import (
    FakeClock,
    FakeSidecar,
    fake_blocks,
    fake_link,
    fake_request,
    fake_step,
)

BLOCK = 4
PROMPT = list(range(3, 20))  # 4 full blocks loadable (the last token is always computed)


@pytest.fixture
def sidecar() -> FakeSidecar:
    fake = FakeSidecar(lease_ttl_ms=30_000)
    fake.cached.update(request_chain(PROMPT, BLOCK, ChainScope(), 4096))
    return fake


@pytest.fixture
def side(sidecar: FakeSidecar) -> Iterator[SchedulerSide]:
    link = fake_link(sidecar, timeout_s=0.5, clock=FakeClock(), process_name="vllm-scheduler")
    assert link.attach_now() is not None
    scheduler = SchedulerSide(
        link,
        tenant="t",
        block_size=BLOCK,
        adapters=AdapterFingerprints(ConnectorConfig(fingerprint_mode="fast")),
        lookup_timeout_s=0.5,
        gauge=LoadGauge(LoadCostModel(), block_bytes=1 << 10, block_size=BLOCK),
    )
    yield scheduler
    scheduler.close()
    link.close()


def ask(side: SchedulerSide, request: Any) -> int:
    """get_num_new_matched_tokens until the probe answered."""
    deadline = time.monotonic() + 5
    while (n := side.get_num_new_matched_tokens(request, 0)) is None:
        assert time.monotonic() < deadline, "the probe never answered"
        time.sleep(0.005)
    return n


def released(sidecar: FakeSidecar, lease: str) -> bool:
    """Whether `lease` is released within a few seconds (releases run in the background)."""
    deadline = time.monotonic() + 5
    while lease not in sidecar.released:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_a_hit_pins_with_the_probes_lease_and_one_lookup(
    side: SchedulerSide, sidecar: FakeSidecar
) -> None:
    request = fake_request("hit", PROMPT)
    assert ask(side, request) == 16
    side.update_state_after_alloc(request, fake_blocks([7, 8, 9, 10, 11]), 16)
    meta = side.build_connector_meta(fake_step([(request, [7, 8, 9, 10, 11])]))
    (load,) = meta.loads
    assert (load.block_ids, load.slot_ids) == ((7, 8, 9, 10), (0, 1, 2, 3))
    assert load.slot_generations == (1, 1, 1, 1)
    assert (sidecar.lookups, side.pins_taken_over) == (1, 1)
    assert sidecar.released == []  # pinned until the request finishes
    side.request_finished(request)
    assert released(sidecar, "lease-1")


def test_a_hold_older_than_a_third_of_its_ttl_is_released_and_looked_up_again(
    side: SchedulerSide, sidecar: FakeSidecar
) -> None:
    sidecar.lease_ttl_ms = 30  # a third: 10 ms
    request = fake_request("late", PROMPT)
    assert ask(side, request) == 16
    time.sleep(0.02)
    side.update_state_after_alloc(request, fake_blocks([7, 8, 9, 10, 11]), 16)
    (load,) = side.build_connector_meta(fake_step([(request, [7, 8, 9, 10, 11])])).loads
    assert load.slot_ids == (0, 1, 2, 3)
    assert (sidecar.lookups, side.pins_taken_over) == (2, 0)
    assert released(sidecar, "lease-1")  # the probe's, not the pin's
    assert "lease-2" not in sidecar.released


def test_holds_nobody_takes_over_are_released(side: SchedulerSide, sidecar: FakeSidecar) -> None:
    """Guard against leaked pins (the code before released every probe's lease at once):
    asked again (vLLM could not schedule it), finished before it was allocated, or
    allocated no external tokens, each probe's lease is released."""
    again = fake_request("again", PROMPT)
    assert ask(side, again) == 16
    assert ask(side, again) == 16  # a second probe: the first one's hold is dropped
    assert released(sidecar, "lease-1")
    side.request_finished(again)
    assert released(sidecar, "lease-2")
    local = fake_request("local", PROMPT)
    assert ask(side, local) == 16
    side.update_state_after_alloc(local, fake_blocks([1, 2, 3, 4, 5]), 0)
    assert released(sidecar, "lease-3")
    assert side.pins_taken_over == 0
