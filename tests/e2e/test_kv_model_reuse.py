"""A real (tiny) causal transformer reusing prefix K/V through the sidecar's KV hot tier.

The sidecar runs as its own OS process with a real redis-server as the warm tier; the
model side is this test process and, for the first request, another process. K/V bytes
move only through the mapped pool (a shared-memory file, or CUDA IPC on a GPU).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import redis
import torch
from infercache_client.kv import Allocation, HotTier, KvCacheClient, chain_hashes

from sidecar.kv.layout import version_tag
from tests.support.devices import KV_DEVICES
from tests.support.kv_model.model import (
    TinyCausalLM,
    TinyConfig,
    fine_tuned,
    load_checkpoint,
    random_state,
    write_checkpoint,
)
from tests.support.kv_model.serving import (
    TENANT,
    TOKENS_PER_BLOCK,
    attach,
    full_logits,
    model_fingerprint,
    prompt,
    run_request,
)
from tests.support.processes import REPO, RedisServer
from tests.support.sidecars import SidecarProcess, cli_env

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

TOLERANCE = 1e-5
PREFIX = prompt(seed=1, length=64)  # 4 blocks of 16 tokens
FIRST = PREFIX + prompt(seed=2, length=10)  # request 1: the prefix and a partial block
SECOND = PREFIX + prompt(seed=3, length=20)  # request 2: same prefix, another question
PREFIX_BLOCKS = len(PREFIX) // TOKENS_PER_BLOCK
BLOCK_BYTES = TinyConfig().num_layers * 2 * TOKENS_PER_BLOCK * 2 * 16 * 4

DEVICES = KV_DEVICES


@dataclass(frozen=True)
class Checkpoints:
    """Three versions of one model on disk: v2 and v3 are weight updates of v1."""

    v1: Path
    v2: Path
    v3: Path


_seeds = itertools.count(1)


@pytest.fixture
def checkpoints(tmp_path: Path) -> Checkpoints:
    """Versions no other test has attached (tests share one sidecar per device)."""
    seed = 10 * next(_seeds)
    cfg = TinyConfig()
    v1 = random_state(cfg, seed=seed)
    return Checkpoints(
        write_checkpoint(tmp_path / "v1", cfg, v1),
        write_checkpoint(tmp_path / "v2", cfg, fine_tuned(v1, seed=seed + 1)),
        write_checkpoint(tmp_path / "v3", cfg, fine_tuned(v1, seed=seed + 2)),
    )


class KvSidecar:
    """A sidecar process serving KvCacheService, and the model-side handles of one test."""

    def __init__(self, proc: SidecarProcess, redis_url: str, device: str) -> None:
        self.proc = proc
        self.redis_url = redis_url
        self.device = device
        self._stack = ExitStack()
        self._models: dict[Path, TinyCausalLM] = {}

    def client(self) -> KvCacheClient:
        """A new data-plane KV client (closed at the end of the test)."""
        return self._stack.enter_context(KvCacheClient(self.proc.target))

    def attach(self, ckpt: Path, *, renew_leases: bool = True) -> HotTier:
        """Attach `ckpt` as a model process on this test's device."""
        tier = attach(self.client(), ckpt, self.device, renew_leases=renew_leases)
        self._stack.callback(tier.close)
        return tier

    def model(self, ckpt: Path) -> TinyCausalLM:
        """The checkpoint loaded on this test's device."""
        if ckpt not in self._models:
            self._models[ckpt] = load_checkpoint(ckpt, self.device)
        return self._models[ckpt]

    def request_in_other_process(self, ckpt: Path, tokens: list[int]) -> dict[str, object]:
        """Serve one request from a separate model process (tests.support.kv_model.serving)."""
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.support.kv_model.serving",
                self.proc.target,
                str(ckpt),
                self.device,
                json.dumps(tokens),
            ],
            cwd=REPO,
            env=cli_env(None),
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
        return result

    def warm_blocks(self, *ckpts: Path) -> list[int]:
        """Blocks each checkpoint's version holds in Redis (the warm tier), in order."""
        counts: Counter[str] = Counter()
        with redis.Redis.from_url(self.redis_url) as r:
            for name in r.scan_iter(match="*kv:*:*", count=1000):
                counts[name.decode().rsplit(":", 2)[-2]] += 1
        return [counts[version_tag(model_fingerprint(c))] for c in ckpts]

    def wait_warm(self, expect: Callable[[list[int]], bool], *ckpts: Path) -> list[int]:
        """Poll warm_blocks until `expect` holds (background demotion/drop), bounded."""
        deadline = time.monotonic() + 20
        while True:
            counts = self.warm_blocks(*ckpts)
            if expect(counts):
                return counts
            assert time.monotonic() < deadline, f"warm tier stuck at {counts}: {self.proc.log()}"
            time.sleep(0.05)

    def close(self) -> None:
        """Close this test's clients (the sidecar keeps running for the next test)."""
        self._stack.close()


SLOTS = 4 * PREFIX_BLOCKS


@pytest.fixture(scope="module", params=DEVICES)
def kv_process(
    request: pytest.FixtureRequest,
    redis_session: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SidecarProcess, str]]:
    """One sidecar per device for this module (starting one imports torch: seconds).

    Redis is not flushed under it; every test uses its own model versions instead.
    """
    device = str(request.param)
    proc = SidecarProcess(
        redis_session.url,
        kv_device=device,
        kv_shm_dir=str(tmp_path_factory.mktemp("kv-shm")),
        kv_pool_bytes=str(SLOTS * BLOCK_BYTES),
        kv_promote_timeout_ms="5000",
    )
    try:
        proc.wait_ready()
        yield proc, device
    finally:
        proc.stop()


@pytest.fixture
def sc(kv_process: tuple[SidecarProcess, str], redis_session: RedisServer) -> Iterator[KvSidecar]:
    """This test's view of the module's sidecar."""
    if redis_session.proc is None:  # another test killed the session's Redis
        redis_session.start()
    view = KvSidecar(kv_process[0], redis_session.url, kv_process[1])
    yield view
    view.close()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max().item())


def test_second_request_reuses_prefix_blocks_exactly(
    sc: KvSidecar, checkpoints: Checkpoints
) -> None:
    """Request 1 (another process) commits the 64-token prefix; request 2 maps those blocks,
    computes only its suffix, and matches a full recomputation."""
    first = sc.request_in_other_process(checkpoints.v1, FIRST)
    assert first == first | {"matched_blocks": 0, "committed_blocks": PREFIX_BLOCKS}

    tier = sc.attach(checkpoints.v1)
    model = sc.model(checkpoints.v1)
    second = run_request(tier, model, SECOND, sc.device)
    assert second.matched_blocks == PREFIX_BLOCKS
    assert second.logits.shape[0] == len(SECOND) - len(PREFIX)  # only the suffix was computed
    assert (
        max_diff(second.logits, full_logits(model, SECOND, sc.device)[len(PREFIX) :]) <= TOLERANCE
    )
    assert second.committed_blocks == 1  # its own 5th block

    hashes = chain_hashes(PREFIX, TOKENS_PER_BLOCK)
    assert tier.lookup_prefix("globex", hashes).matched_blocks == 0  # blocks never cross tenants
    assert tier.lookup_prefix(TENANT, hashes, cache_salt="user-7").matched_blocks == 0

    # The pool holds exactly the K/V this model computes for the prefix.
    hit = tier.lookup_prefix(TENANT, hashes)
    assert hit.lease is not None
    _, expected = model(torch.tensor(PREFIX, device=sc.device))
    for (k, v), (ek, ev) in zip(tier.pool.read_prefix(hit.slot_ids), expected, strict=True):
        assert max_diff(k, ek.to(k.device)) <= TOLERANCE
        assert max_diff(v, ev.to(v.device)) <= TOLERANCE
    tier.release(hit.lease.lease_id)


def test_new_weights_never_receive_old_blocks(sc: KvSidecar, checkpoints: Checkpoints) -> None:
    """v1's blocks would give v2 wrong logits (asserted); the sidecar gives v2 none of them."""
    v1_tier = sc.attach(checkpoints.v1)
    run_request(v1_tier, sc.model(checkpoints.v1), FIRST, sc.device)
    hashes = chain_hashes(PREFIX, TOKENS_PER_BLOCK)
    hit = v1_tier.lookup_prefix(TENANT, hashes)
    assert hit.lease is not None
    v1_past = v1_tier.pool.read_prefix(hit.slot_ids, sc.device)
    v1_tier.release(hit.lease.lease_id)

    # The seed's failure: a prefix cache that ignores the weights hands v1's K/V to v2.
    v2 = sc.model(checkpoints.v2)
    v2_reference = full_logits(v2, SECOND, sc.device)[len(PREFIX) :]
    stale, _ = v2(torch.tensor(SECOND[len(PREFIX) :], device=sc.device), v1_past)
    assert max_diff(stale, v2_reference) > 1e-2

    v2_tier = sc.attach(checkpoints.v2)
    assert v2_tier.scope_id != v1_tier.scope_id
    with pytest.raises(grpc.RpcError) as err:
        v1_tier.lookup_prefix(TENANT, hashes)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # v1 was superseded
    sc.wait_warm(lambda c: c == [PREFIX_BLOCKS], checkpoints.v1)  # v1's blocks are in Redis
    for hot_only in (True, False):
        miss = v2_tier.lookup_prefix(TENANT, hashes, hot_only=hot_only)
        assert (miss.matched_blocks, miss.promoted_blocks, miss.lease) == (0, 0, None)
        assert not miss.retry_later

    served = run_request(v2_tier, v2, SECOND, sc.device)
    assert served.matched_blocks == 0
    assert max_diff(served.logits[len(PREFIX) :], v2_reference) <= TOLERANCE


def test_previous_version_is_demoted_and_promoted_back_on_rollback(
    sc: KvSidecar, checkpoints: Checkpoints
) -> None:
    """Attach v2: v1's blocks leave the hot pool for Redis; attach v1 again: they come back,
    are promoted into slots and give exact logits."""
    first = run_request(sc.attach(checkpoints.v1), sc.model(checkpoints.v1), FIRST, sc.device)
    assert first.committed_blocks == PREFIX_BLOCKS

    sc.attach(checkpoints.v2)
    assert sc.wait_warm(lambda c: c[0] == PREFIX_BLOCKS, checkpoints.v1) == [PREFIX_BLOCKS]

    rollback = sc.attach(checkpoints.v1)
    hashes = chain_hashes(PREFIX, TOKENS_PER_BLOCK)
    hot = rollback.lookup_prefix(TENANT, hashes, hot_only=True)
    assert hot.matched_blocks == 0, "v1's blocks stayed in the hot pool"

    model = sc.model(checkpoints.v1)
    second = run_request(rollback, model, SECOND, sc.device)
    assert (second.matched_blocks, second.promoted_blocks) == (PREFIX_BLOCKS, PREFIX_BLOCKS)
    assert not second.retry_later
    assert (
        max_diff(second.logits, full_logits(model, SECOND, sc.device)[len(PREFIX) :]) <= TOLERANCE
    )
    again = rollback.lookup_prefix(TENANT, hashes, hot_only=True)
    assert again.matched_blocks == PREFIX_BLOCKS  # hot again after promotion
    assert again.lease is not None
    rollback.release(again.lease.lease_id)


def test_third_version_drops_the_oldest(sc: KvSidecar, checkpoints: Checkpoints) -> None:
    """v1 -> v2 -> v3: v2 (previous) stays warm and is promoted on rollback; v1 is gone."""
    ckpt = checkpoints
    for version in (ckpt.v1, ckpt.v2):
        served = run_request(sc.attach(version), sc.model(version), FIRST, sc.device)
        assert served.committed_blocks == PREFIX_BLOCKS
    sc.wait_warm(lambda c: c == [PREFIX_BLOCKS, 0], ckpt.v1, ckpt.v2)

    sc.attach(ckpt.v3)
    counts = sc.wait_warm(lambda c: c == [0, PREFIX_BLOCKS], ckpt.v1, ckpt.v2)
    assert counts == [0, PREFIX_BLOCKS]

    back = run_request(sc.attach(ckpt.v2), sc.model(ckpt.v2), SECOND, sc.device)
    assert (back.matched_blocks, back.promoted_blocks) == (PREFIX_BLOCKS, PREFIX_BLOCKS)
    reference = full_logits(sc.model(ckpt.v2), SECOND, sc.device)[len(PREFIX) :]
    assert max_diff(back.logits, reference) <= TOLERANCE

    gone = run_request(sc.attach(ckpt.v1), sc.model(ckpt.v1), SECOND, sc.device)
    assert (gone.matched_blocks, gone.promoted_blocks, gone.retry_later) == (0, 0, False)


def allocate_rest(tier: HotTier, count: int) -> Allocation:
    """allocate(count), retried while the previous test's version is still being demoted
    (a demotion pins its slots until they are copied to Redis); bounded."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return tier.allocate(count)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def assert_exhausted(tier: HotTier) -> None:
    """Not one more slot can be allocated."""
    with pytest.raises(grpc.RpcError) as err:
        tier.allocate(1)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_pinned_blocks_survive_pressure_until_their_lease_ends(
    sc: KvSidecar, checkpoints: Checkpoints
) -> None:
    """Pinned prefix slots are never handed out or overwritten; a renewed lease keeps them,
    an expired one frees them."""
    model = sc.model(checkpoints.v1)
    tier = sc.attach(checkpoints.v1)
    run_request(tier, model, FIRST, sc.device)
    hashes = chain_hashes(PREFIX, TOKENS_PER_BLOCK)
    reference = full_logits(model, SECOND, sc.device)[len(PREFIX) :]
    suffix = torch.tensor(SECOND[len(PREFIX) :], device=sc.device)

    # Renewed in the background well past its 400 ms ttl: the pins hold.
    held = tier.lookup_prefix(TENANT, hashes, lease_ttl_ms=400)
    assert held.lease is not None
    rest = allocate_rest(tier, SLOTS - PREFIX_BLOCKS)
    assert not set(rest.slot_ids) & set(held.slot_ids)
    for slot in rest.slot_ids:  # another request fills every other slot
        tier.pool.slot(slot).fill_(9.0)
    time.sleep(1.0)
    assert_exhausted(tier)
    logits, _ = model(suffix, tier.pool.read_prefix(held.slot_ids, sc.device))
    assert max_diff(logits, reference) <= TOLERANCE
    assert tier.renewer is not None
    assert held.lease.lease_id not in tier.renewer.lost()
    tier.release(held.lease.lease_id)
    tier.release(rest.lease.lease_id)

    # Not renewed: the lease expires and exactly its slots are handed out next.
    plain = sc.attach(checkpoints.v1, renew_leases=False)
    short = plain.lookup_prefix(TENANT, hashes, lease_ttl_ms=1000)
    assert short.matched_blocks == PREFIX_BLOCKS
    assert short.lease is not None
    others = plain.allocate(SLOTS - PREFIX_BLOCKS)
    assert_exhausted(plain)
    time.sleep(max(0.0, short.lease.expires_at_unix_ms / 1000 - time.time()) + 0.2)
    reused = plain.allocate(PREFIX_BLOCKS, lease_id=others.lease.lease_id)
    assert set(reused.slot_ids) == set(short.slot_ids)
    assert plain.lookup_prefix(TENANT, hashes, hot_only=True).matched_blocks == 0
    with pytest.raises(grpc.RpcError) as err:
        plain.renew(short.lease.lease_id)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    plain.release(others.lease.lease_id)
