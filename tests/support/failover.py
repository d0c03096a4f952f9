"""The Redis Cluster failover drill, shared by tests/e2e/test_cluster_failover.py and
bench/cluster: two sidecar processes under lookup load, Invalidates before and during
the failover, the master owning the control slot and another master killed.

Every lookup answer is checked as it comes: a HIT must carry its own key's payload
(else `wrong_hits`), and a key whose tenant an Invalidate confirmed (OK) before the
lookup started must not HIT (else `stale_hits`). Afterwards a fresh sidecar checks
that every confirmed rule is still in force (`lost_invalidations`), on entries that are
still in the cluster.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

import grpc
import redis
from grpc_health.v1 import health_pb2
from infercache.v1 import admin_pb2 as admin_pb
from infercache.v1 import admin_pb2_grpc
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient, make_key

from tests.support.cluster import RedisClusterProcesses
from tests.support.sidecars import SidecarProcess, bearer, health_status

CONTROL_KEY = "ic:v2:{meta}:epoch"
ENTRY_PREFIX = b"ic:v2:r:"
KEEP = "keep"
KEYS_PER_TENANT = 24
DOOMED_BEFORE = 2
"""Tenants invalidated (and confirmed) before the kill."""


def drill_key(tenant: str, i: int) -> pb.CacheKey:
    """A key of `tenant` whose stored payload names it."""
    return make_key(
        tenant=tenant, model_version="fp-drill", prompt_version="p1", text=f"q{i}", temperature=0.0
    )


def payload_of(tenant: str, i: int) -> bytes:
    return f"{tenant}/q{i}".encode()


@dataclass
class SidecarLoad:
    """What one sidecar answered during the drill."""

    lookups: int = 0
    hits: int = 0
    degraded: int = 0
    errors: int = 0
    """RPCs that failed (a status surfacing to the caller)."""
    error_codes: list[str] = field(default_factory=list)
    wrong_hits: int = 0
    stale_hits: int = 0
    hit_times: list[float] = field(default_factory=list)
    """monotonic time of each batch that had a HIT."""


@dataclass
class DrillReport:
    """The drill's figures (counts, and seconds where named so)."""

    loads: list[SidecarLoad]
    invalidations_ok: int
    invalidations_failed: int
    lost_invalidations: int
    checked_entries: int
    """Entries of confirmed-invalidated tenants looked up by the fresh sidecar."""
    not_serving: int
    miss_window_s: float
    """Longest stretch, over both sidecars, with no HIT from the first kill on."""
    promoted_s: float
    """From a kill until its replica was promoted (the longer of the two)."""

    @property
    def wrong_hits(self) -> int:
        return sum(x.wrong_hits + x.stale_hits for x in self.loads)

    @property
    def errors(self) -> int:
        return sum(x.errors for x in self.loads)


class LoadDrill:
    """Fills the tenants' keys, then loads every sidecar with lookup batches (one thread
    each) and watches their health until finish(); confirm(n) invalidates tenant n."""

    def __init__(
        self, cluster: RedisClusterProcesses, sidecars: list[SidecarProcess], tenants: int = 5
    ) -> None:
        self.cluster = cluster
        self.sidecars = sidecars
        self.doomed = [f"doomed-{n}" for n in range(tenants)]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.confirmed: dict[str, float] = {}
        """tenant -> monotonic time its Invalidate returned OK."""
        self.loads = [SidecarLoad() for _ in sidecars]
        self.invalidations_ok = 0
        self.invalidations_failed = 0
        self.not_serving = 0
        self._threads: list[threading.Thread] = []
        self.snapshot: dict[bytes, bytes] = {}
        """Entry key -> its stored value, as filled (written back for the final check)."""

    def start(self) -> None:
        """Fill every key through the first sidecar, then start the load."""
        tenants = [KEEP, *self.doomed]
        with CacheClient(self.sidecars[0].target) as c:
            for tenant in tenants:
                for i in range(KEYS_PER_TENANT):
                    k = drill_key(tenant, i)
                    miss = c.lookup(k, timeout=10)
                    if miss.outcome == pb.LOOKUP_OUTCOME_MISS:
                        c.store(k, payload_of(tenant, i), lease=miss.lease, ttl_seconds=3600)
                    self.snapshot[ENTRY_PREFIX + miss.key_digest.hex().encode()] = b""
        with _raw(self.cluster) as raw:
            names = list(self.snapshot)
            values = raw.mget_nonatomic(names)
        self.snapshot = {n: v for n, v in zip(names, values, strict=True) if v}
        self._threads = [
            threading.Thread(target=self._load, args=(n, tenants), daemon=True)
            for n in range(len(self.sidecars))
        ]
        self._threads.append(threading.Thread(target=self._watch_health, daemon=True))
        for t in self._threads:
            t.start()

    def _load(self, n: int, tenants: list[str]) -> None:
        keys = [(t, i, drill_key(t, i)) for t in tenants for i in range(KEYS_PER_TENANT)]
        stats = self.loads[n]
        with CacheClient(self.sidecars[n].target) as c:
            while not self._stop.is_set():
                started = time.monotonic()
                with self._lock:
                    confirmed = {t for t, at in self.confirmed.items() if at < started}
                try:
                    answers = c.lookup_batch([k for _, _, k in keys], timeout=10.0)
                except grpc.RpcError as exc:
                    stats.errors += 1
                    stats.error_codes.append(f"{exc.code().name}: {exc.details()}")
                    continue
                hit = False
                for (tenant, i, _), r in zip(keys, answers, strict=True):
                    stats.lookups += 1
                    stats.degraded += r.degraded
                    if r.outcome != pb.LOOKUP_OUTCOME_HIT:
                        continue
                    hit = True
                    stats.hits += 1
                    if r.payload != payload_of(tenant, i):
                        stats.wrong_hits += 1
                    if tenant in confirmed:
                        stats.stale_hits += 1
                if hit:
                    stats.hit_times.append(time.monotonic())

    def invalidate(self, n: int) -> bool:
        """Invalidate tenant doomed-n through the first sidecar; True when it answered OK."""
        return self._invalidate(n) is None

    def _invalidate(self, n: int) -> grpc.StatusCode | None:
        """Invalidate tenant doomed-n once: None when OK, else the status code."""
        tenant = self.doomed[n]
        with grpc.insecure_channel(self.sidecars[0].admin_target) as channel:
            try:
                admin_pb2_grpc.AdminServiceStub(channel).Invalidate(
                    admin_pb.InvalidateRequest(
                        selector=admin_pb.Selector(tenant=tenant), reason="failover drill"
                    ),
                    metadata=bearer("deployer"),
                    timeout=15,
                )
            except grpc.RpcError as exc:
                self.invalidations_failed += 1
                return exc.code()
        with self._lock:
            self.confirmed[tenant] = time.monotonic()
        self.invalidations_ok += 1
        return None

    def confirm(self, n: int, attempts: int = 10) -> None:
        """invalidate(n), which must answer OK. UNAVAILABLE is retried (a few times, as
        `infercache invalidate` does): right after a heal the control slot's primary
        may still be settling, and a refusal is an allowed answer; any other code fails."""
        for _ in range(attempts):
            code = self._invalidate(n)
            if code is None:
                return
            if code != grpc.StatusCode.UNAVAILABLE:
                raise AssertionError(f"Invalidate of {self.doomed[n]} answered {code.name}")
            time.sleep(0.5)
        raise AssertionError(f"Invalidate of {self.doomed[n]} UNAVAILABLE {attempts} times")

    def _watch_health(self) -> None:
        while not self._stop.is_set():
            for sc in self.sidecars:
                if health_status(sc.target, 5.0) != health_pb2.HealthCheckResponse.SERVING:
                    self.not_serving += 1
            time.sleep(0.2)

    def hits(self) -> int:
        """HITs so far, all sidecars."""
        return sum(x.hits for x in self.loads)

    def hit_again_after(self, since: float) -> bool:
        """Whether every sidecar had a HIT batch after `since` (monotonic)."""
        return all(any(t > since for t in load.hit_times) for load in self.loads)

    def wait_for_hits(self, total: int, timeout_s: float) -> None:
        """Until hits() reaches `total`."""
        deadline = time.monotonic() + timeout_s
        while self.hits() < total:
            if time.monotonic() > deadline:
                raise AssertionError(f"hits stopped at {self.hits()}: {self.loads}")
            time.sleep(0.05)

    def finish(self) -> None:
        """Stop the load and the health watch."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=20)

    def report(self, since: float = 0.0, promoted_s: float = 0.0) -> DrillReport:
        """The figures, with the rules checked by a fresh sidecar; the miss window counts
        from `since` (monotonic)."""
        lost, checked = _check_rules(self.cluster, self.confirmed, self.snapshot)
        return DrillReport(
            self.loads,
            self.invalidations_ok,
            self.invalidations_failed,
            lost,
            checked,
            self.not_serving,
            max(_longest_gap(load.hit_times, since) for load in self.loads) if since else 0.0,
            promoted_s,
        )


def run_failover_drill(
    cluster: RedisClusterProcesses,
    sidecars: list[SidecarProcess],
    *,
    settle_s: float = 1.0,
    recover_timeout_s: float = 60.0,
) -> DrillReport:
    """Load both sidecars, confirm DOOMED_BEFORE invalidations, kill the control slot's
    master, invalidate one more tenant while it fails over (OK or UNAVAILABLE), then the
    same with another master once the first replica took over (a cluster of 3 masters
    fails over only while a majority of masters is up: two at once would never heal);
    wait until every sidecar hits again, restart the killed nodes (they rejoin as
    replicas), confirm one more invalidation, then check the rules with a fresh sidecar."""
    drill = LoadDrill(cluster, sidecars, tenants=DOOMED_BEFORE + 3)
    drill.start()
    killed: set[int] = set()
    promoted_s = 0.0
    try:
        time.sleep(settle_s)
        for n in range(DOOMED_BEFORE):
            drill.confirm(n)
        first_kill = time.monotonic()
        for n, victim in enumerate(("control", "other")):
            if victim == "control":
                port = cluster.master_of_key(CONTROL_KEY).port
            else:  # a master that still has its replica
                control = cluster.master_of_key(CONTROL_KEY).port
                port = next(m.port for m in cluster.masters() if m.port != control)
            killed_at = time.monotonic()
            cluster.kill(port)
            killed.add(port)
            drill.invalidate(DOOMED_BEFORE + n)
            promoted_s = max(promoted_s, _wait_promoted(cluster, killed, killed_at))
        recovered = time.monotonic()
        deadline = recovered + recover_timeout_s
        while not drill.hit_again_after(recovered):
            if time.monotonic() > deadline:
                raise AssertionError(f"the sidecars did not hit again: {drill.loads}")
            time.sleep(0.1)
        cluster.heal()
        drill.confirm(DOOMED_BEFORE + 2)
        time.sleep(settle_s)
    finally:
        drill.finish()
    return drill.report(first_kill, promoted_s)


def _wait_promoted(cluster: RedisClusterProcesses, dead: set[int], since: float) -> float:
    """Seconds from `since` until live masters own every slot again (replicas promoted)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            masters = cluster.masters()
            covered = sum(hi - lo + 1 for m in masters for lo, hi in m.slots)
            if covered == 16384 and not {m.port for m in masters} & dead:
                return time.monotonic() - since
        except (RuntimeError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError("no replica was promoted within 60 s")


def _longest_gap(times: list[float], since: float) -> float:
    """Longest interval without a HIT batch, from `since` to the first hit after it and on."""
    after = [t for t in times if t >= since]
    points = [since, *after]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def _raw(cluster: RedisClusterProcesses) -> redis.RedisCluster:
    return redis.RedisCluster(host="127.0.0.1", port=next(iter(cluster.procs)))


def _check_rules(
    cluster: RedisClusterProcesses, confirmed: dict[str, float], snapshot: dict[bytes, bytes]
) -> tuple[int, int]:
    """(hits, checked): every entry as filled is written back (lookups delete dead
    entries as they read them; a lagging replica could bring one back), then a fresh
    sidecar looks up every key: a confirmed tenant's HIT is a lost invalidation. The
    KEEP tenant's keys must hit (else the check could not see anything)."""
    with _raw(cluster) as raw:
        pipe = raw.pipeline()
        for name, value in snapshot.items():
            pipe.set(name, value, px=3_600_000)
        pipe.execute()
    fresh = SidecarProcess(cluster.url, reclaim_keys_per_s=1)
    try:
        fresh.wait_ready(timeout_s=90)
        lost = checked = kept = 0
        with CacheClient(fresh.target) as c:
            for tenant in [KEEP, *confirmed]:
                for i in range(KEYS_PER_TENANT):
                    r = c.lookup(drill_key(tenant, i), timeout=10)
                    if tenant == KEEP:
                        kept += r.outcome == pb.LOOKUP_OUTCOME_HIT
                        continue
                    checked += 1
                    lost += r.outcome == pb.LOOKUP_OUTCOME_HIT
        if kept != KEYS_PER_TENANT:
            raise AssertionError(f"only {kept} of the kept entries hit: the check sees nothing")
        return lost, checked
    finally:
        fresh.stop()
