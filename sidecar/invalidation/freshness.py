"""Fleet freshness: a sidecar serves hits only while it knows it is current.

Mechanism (see docs/architecture.md): every sidecar is a *member* of the store
with a liveness deadline (on the store's clock) and an acknowledged epoch. It
refreshes both every bound/3 and at once when pub/sub announces a new epoch.
It may serve hits only until `bound` after the start of its last successful
refresh, which is never later than the moment the store stops counting it as
live. Invalidate returns only when every live member has acknowledged the new
epoch, so after it returns no member can serve an entry the new rule kills:
each has either applied the rule or has stopped serving hits.

Store faults (see docs/architecture.md, "When Redis loses its data"): every refresh
first reads the store's identity. After a restart (new run id, or an epoch below the
one applied here) the sidecar re-publishes the rules it holds that the store may
have lost; a sidecar that was not continuously confirmed across it serves no hits
until the store has settled (every member live at the restart re-published) and it
has re-read every rule. After a data-set loss (new data set id) its entries and open
leases were stamped in a numbering it can no longer compare: a local `all` rule
above every stamp it issued kills them (its hot tier is dropped) before it serves.

Trust (docs/security.md): on a shared store the rules are a signed chain
(invalidation/chain.py), verified whenever its head or anchor changed and every
VERIFY_EVERY_S anyway. A chain, identity or counter that fails verification fails
closed: no hits at all (hot tier included) until a refresh verifies again, Invalidate
UNAVAILABLE naming the problem, `trust.distrusted` counted and a log line (the first,
then one a minute while it lasts).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from sidecar.config import DEFAULTS
from sidecar.errors import StoreDistrusted, TierUnavailable
from sidecar.invalidation.rules import Rule, RuleSet, Selector
from sidecar.invalidation.store import ControlStore, StoreState
from sidecar.macs import LOCAL, FleetKeys
from sidecar.observability.throttle import LogThrottle

log = structlog.get_logger("infercache.freshness")

VERIFY_EVERY_S = 30.0
"""A running sidecar re-reads and verifies the whole rule chain at least this often,
so tampering with rules it already holds is still detected (and alerted)."""


@dataclass(slots=True)
class TrustEvents:
    """Counters of the store's trust (`infercache.rules.events{event}`)."""

    distrusted: int = 0
    """Refreshes or syncs that found the rule chain, the store identity or the epoch
    counter failing verification (the alert: any increase)."""
    below_min_epoch: int = 0
    """Refreshes that left the rule set below INFERCACHE_MIN_EPOCH (no hits served)."""


class Freshness:
    """Keeps a RuleSet current with the store and says whether hits may be served."""

    def __init__(
        self,
        control: ControlStore,
        rules: RuleSet,
        *,
        bound_s: float = DEFAULTS.invalidation.freshness_bound_ms / 1000,
        member_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        retention_ms: int = 0,
        keys: FleetKeys = LOCAL,
        min_epoch: int = 0,
    ) -> None:
        """`retention_ms`: how long rules must outlive their commit for the entries this
        sidecar writes (published with every heartbeat; see ControlStore.prune_rules).
        `keys`: the fleet's MAC keys, which authenticate entries, rules and the head.
        `min_epoch`: no hits until the authenticated rule set reaches this epoch."""
        self.control = control
        self.rules = rules
        self.bound_s = bound_s
        self.retention_ms = retention_ms
        self.member_id = member_id or uuid.uuid4().hex
        self._clock = clock
        self._confirmed_until = 0.0 if control.shared else float("inf")
        self._wake = asyncio.Event()
        self._sync_lock = asyncio.Lock()
        self.refresh_failures = 0
        self._state: StoreState | None = None
        """The store as last trusted (None before the first refresh)."""
        self.settling = False
        """True while waiting for a restarted store to settle: no hits are served."""
        self.store_changes = 0
        self.on_data_set_lost: list[Callable[[], Awaitable[None]]] = []
        """Run (in order) when the store lost its data set, after the local rule."""
        self.keys = keys
        self.min_epoch = min_epoch
        self.distrust: str | None = None
        """Why the store's rule set is not believed (None while it verifies): then no
        hits are served and Invalidate is UNAVAILABLE until a refresh verifies again."""
        self.trust = TrustEvents()
        self._distrust_log = LogThrottle(60.0, clock)
        self._chain_seen = b""
        """The signed head and anchor of the last chain read after a state (see StoreState)."""
        self._verify_due = 0.0

    @property
    def distrust_events(self) -> int:
        """How many refreshes found the store's rules or epoch failing verification."""
        return self.trust.distrusted

    def _distrusted(self, exc: StoreDistrusted) -> None:
        """Fail closed: no hits until a refresh verifies again; count, log (throttled)."""
        self.distrust = str(exc)
        self.trust.distrusted += 1
        times = self._distrust_log.hit("store_distrusted")
        if times is not None:
            log.error("store_distrusted", error=str(exc), times=times)

    def check_servable(self) -> None:
        """TierUnavailable while the store's rule set failed verification, or has not
        reached INFERCACHE_MIN_EPOCH: hits would be judged by rules that may be missing."""
        if self.distrust is not None:
            raise TierUnavailable(f"rule set refused ({self.distrust}); serving no hits")
        if self.rules.epoch < self.min_epoch:
            raise TierUnavailable(
                f"rule set at epoch {self.rules.epoch} is below INFERCACHE_MIN_EPOCH "
                f"{self.min_epoch}; serving no hits"
            )

    def confirmed(self) -> bool:
        """True while this sidecar is known to hold every committed rule (and they verify)."""
        return (
            self._clock() < self._confirmed_until
            and self.distrust is None
            and self.rules.epoch >= self.min_epoch
        )

    async def sync_to(self, epoch: int) -> None:
        """Fetch and apply every rule up to at least `epoch` (the chain verified first:
        StoreDistrusted, and no hits, if it fails)."""
        try:
            await self._pull(epoch, verify=False)
        except StoreDistrusted as exc:
            self._distrusted(exc)
            raise

    async def _pull(self, epoch: int, *, verify: bool) -> None:
        """sync_to; `verify`: read and verify the chain even if already at `epoch`."""
        async with self._sync_lock:
            if self.rules.epoch >= epoch and not verify:
                return
            for rule in await self.control.rules_after(self.rules.epoch):
                self.rules.add(rule)
            self.rules.advance(epoch)

    async def refresh(self) -> None:
        """Check the store is the one trusted, catch up, acknowledge, extend the confirmation.

        A store whose control state no sidecar could have written (StoreDistrusted) is
        distrusted until a refresh reads it valid again: no hits meanwhile."""
        try:
            if not await self._refresh():
                await self._refresh()  # once more, now that the store counts on us
        except StoreDistrusted as exc:
            self._distrusted(exc)
            raise
        if self.distrust is not None:
            log.warning("store_trusted_again", was=self.distrust)
        self.distrust = None
        if self.rules.epoch < self.min_epoch:
            self.trust.below_min_epoch += 1

    async def _refresh(self) -> bool:
        """One round; False when its heartbeat found this member lapsed (not confirmed)."""
        started = self._clock()
        # Confirmed without a gap up to now: then this sidecar holds every rule the
        # fleet confirmed, and it can vouch for its entries across a store fault.
        continuous = started < self._confirmed_until
        # A fresh proposal each time: re-proposing the id this sidecar once created
        # would hide that the store lost it.
        state = await self.control.state(uuid.uuid4().hex)
        changed = self._state is not None and (
            state.dataset != self._state.dataset
            or state.run != self._state.run
            or state.epoch < self.rules.epoch
        )
        if changed:
            await self._recover(state)
        if state.settling_ms > 0 and not continuous:
            self.settling = True
            try:
                await asyncio.sleep(state.settling_ms / 1000)
                state = await self.control.state(uuid.uuid4().hex)
            finally:
                self.settling = False
            changed = True
        self._state = state
        if changed:
            await self._resync()
        else:
            # The chain's signed head changes with every rule added, its anchor with
            # every prune: while both are as last read, there is nothing new to verify.
            due = self._clock() >= self._verify_due
            await self._pull(state.epoch, verify=due or state.chain != self._chain_seen)
        self._chain_seen = state.chain
        if changed or self._clock() >= self._verify_due:
            self._verify_due = self._clock() + VERIFY_EVERY_S
        continuous = await self.control.heartbeat(
            self.member_id, self.rules.epoch, int(self.bound_s * 1000), self.retention_ms
        )
        if not continuous:
            # We had lapsed (a stop longer than the bound; or we just joined): commits
            # made meanwhile did not wait for us, and the rules read above may predate
            # one. Not confirmed by this round; the next, after this heartbeat made the
            # store count on us again, reads what they committed.
            return False
        if self.control.shared:
            # Measured from before the round trips: the store's deadline for us
            # starts later, so we stop serving before it stops counting on us.
            self._confirmed_until = max(self._confirmed_until, started + self.bound_s)
        return True

    async def _recover(self, state: StoreState) -> None:
        """The store restarted or lost data: make sure no entry is judged by less."""
        assert self._state is not None
        self.store_changes += 1
        if state.dataset != self._state.dataset:
            # New numbering: a new rule may carry a lower epoch than the stamps held
            # here. Kill every entry and open lease stamped before now, for us.
            epoch = max(self.rules.epoch, state.epoch) + 1
            self.rules.add(Rule(epoch, Selector(all=True), state.now_ms, local=True))
            self.rules.advance(epoch)
            log.warning("store_data_set_lost", dropped_before_epoch=epoch)
            for hook in self.on_data_set_lost:
                await hook()
        held = [r for r in self.rules.rules() if not r.local]
        # Also raises the store's epoch above every stamp held here before the re-read
        # that follows: a rule committed after it is numbered above them and found by
        # the next sync, one committed before it is found by the re-read.
        missing = await self.control.republish(held, self.rules.epoch)
        log.warning(
            "store_changed_rules_republished",
            republished=missing,
            held=len(held),
            epoch=state.epoch,
            applied_epoch=self.rules.epoch,
        )

    async def _resync(self) -> None:
        """Re-read every rule (after a store change epochs may repeat or regress)."""
        async with self._sync_lock:
            for rule in await self.control.rules_after(0):
                self.rules.add(rule)

    def poke(self) -> None:
        """Ask the refresh loop to run now (a new epoch was announced)."""
        self._wake.set()

    async def run_refresh_loop(self) -> None:
        """Refresh every bound/3 or when poked, forever."""
        while True:
            try:
                await self.refresh()
            except TierUnavailable as exc:
                self.refresh_failures += 1
                log.warning("freshness_refresh_failed", error=str(exc))
            try:
                async with asyncio.timeout(self.bound_s / 3):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()

    async def run_listener(self) -> None:
        """Poke the refresh loop on every announced epoch; resubscribe after errors."""
        while True:
            try:
                async for epoch in self.control.notifications():
                    if epoch > self.rules.epoch:
                        self.poke()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any pub/sub failure: the periodic refresh covers for it
                log.warning("invalidation_listener_failed", error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.2)
