"""The rule chain on Redis: signed rules, head, anchor and audit records, written by
compare-and-set scripts (control_scripts.py) and verified on every read.

The sidecar signs (sidecar/invalidation/chain.py); a script writes only over the exact
state the values were signed for (counter, head, data set, anchor), else the call is
signed again over what it finds. Nothing here trusts a value it read without its MAC.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, cast

import structlog

from sidecar.backends.redis import control_scripts as scripts
from sidecar.backends.redis.backend import RedisBackend
from sidecar.backends.redis.client import RedisGuard, parse_epoch
from sidecar.errors import TierUnavailable
from sidecar.invalidation.chain import GENESIS, Chain, ChainSeal
from sidecar.invalidation.rules import Rule, Selector
from sidecar.invalidation.store import AuditRecord, StoreState

log = structlog.get_logger("infercache.control")

AUDIT_MAXLEN = 100_000
_TRIES = 20
"""Compare-and-set attempts before TierUnavailable (each loses only to another write)."""
_LEAD_MS = 20
"""A rule's signed time is this far after the store's clock when signed: it must not
be before its commit (the script refuses it then, and it is signed again, later)."""
_MAX_LEAD_MS = 5_000


def audit_parts(
    epoch: int, time_ms: int, caller: str, selector: str, reason: str, estimated: int
) -> tuple[bytes, ...]:
    """What an audit record's tag covers (its stream id, a cursor, is not covered)."""
    return (
        b"%d" % epoch,
        b"%d" % time_ms,
        caller.encode(),
        selector.encode(),
        reason.encode(),
        b"%d" % estimated,
    )


class RedisRuleChain:
    """Chain reads and writes of RedisControlStore (one Redis or the {meta} slot)."""

    def __init__(
        self,
        client: RedisBackend,
        key: Callable[[str], str],
        guard: RedisGuard,
        timeout_s: float,
        seal: ChainSeal,
        channel: str,
    ) -> None:
        """`key`: a {meta} key's name; `channel`: where commits announce their epoch."""
        self.client = client
        self._channel = channel
        self._k = key
        self._guard = guard
        self._timeout = timeout_s
        self.seal = seal
        self._commit = client.register_script(scripts.COMMIT)
        self._chain = client.register_script(scripts.CHAIN)
        self._republish = client.register_script(scripts.REPUBLISH)
        self._prune = client.register_script(scripts.PRUNE)
        self._state = client.register_script(scripts.STATE)
        self._resealer = client.register_script(scripts.RESEAL)

    async def read(self) -> tuple[Chain, int, int]:
        """The verified chain, the store's clock (ms) and the fleet's rule retention
        (ms); StoreDistrusted when the chain fails verification."""
        names = ("dataset", "anchor", "head", "epoch", "rules", "store")
        async with self._guard(self._timeout):
            reply = cast(
                list[Any],
                await self._chain(keys=[self._k(n) for n in names], args=self._genesis()),
            )
        dataset, anchor, head, counter, now, retention = reply[:6]
        parse_epoch(counter)  # a counter no sidecar wrote is refused first, by name
        chain = self.seal.verify(dataset, anchor, head, counter, list(reply[6:]))
        if self.seal.keys.rotating:
            await self._reseal(chain)
        return chain, int(now), int(retention)

    async def _reseal(self, chain: Chain) -> None:
        """While two secrets verify: sign the chain again with the new one, so that it
        still verifies once the old one is dropped (a lost race: another sidecar did)."""
        fresh = self.seal.resealed(chain)
        if fresh is None:
            return
        dataset, anchor, head, members = fresh
        expected = [chain.dataset_raw, chain.anchor_raw, chain.head.raw, chain.counter_raw]
        names = ("dataset", "anchor", "head", "epoch", "rules")
        async with self._guard(self._timeout):
            done = await self._resealer(
                keys=[self._k(n) for n in names],
                args=[*expected, dataset, anchor, head, *members],
            )
        if int(done) >= 0:
            log.warning("rule_chain_resealed", rules=len(members))

    def _genesis(self, ident: str | None = None) -> list[bytes]:
        """A new data set's signed identity, head and anchor (an empty chain at epoch 0)."""
        ident = ident or uuid.uuid4().hex
        return [
            self.seal.dataset(ident),
            self.seal.head(ident, 0, GENESIS),
            self.seal.anchor(ident, GENESIS),
        ]

    async def state(self, proposed_dataset: str) -> StoreState:
        """The store's identity, verified, and its head; a new data set (with an empty
        chain) if it has none."""
        names = ("dataset", "store", "epoch", "head", "anchor", "rules")
        async with self._guard(self._timeout):
            dataset, run, epoch, settling, now, head, anchor = await self._state(
                keys=[self._k(n) for n in names],
                args=[*self._genesis(proposed_dataset), b""],
            )
        counter = parse_epoch(epoch)
        ident = self.seal.open_dataset(dataset)
        signed = self.seal.open_head(ident, head)
        self.seal.open_anchor(ident, anchor)
        self.seal.check_counter(signed, epoch)
        return StoreState(
            ident, run.decode(), counter, int(settling), int(now), chain=head + b"\n" + anchor
        )

    async def commit(
        self, selector: Selector, reason: str, caller: str, estimated: int
    ) -> AuditRecord:
        """Sign the next rule over the head found, and write it if the head is still it."""
        selector_json = selector.to_json()
        lead = _LEAD_MS
        for _ in range(_TRIES):
            chain, now, _ = await self.read()
            epoch = chain.head.epoch + 1
            time_ms = now + lead
            link = self.seal.link(Rule(epoch, selector, time_ms), chain.head.tag)
            head = self.seal.head(chain.dataset, epoch, link.tag)
            tag = self.seal.keys.sign(
                "audit", *audit_parts(epoch, time_ms, caller, selector_json, reason, estimated)
            )
            names = ("epoch", "rules", "audit", "head", "dataset")
            args: list[str | int | bytes] = [
                chain.counter_raw,
                chain.head.raw,
                chain.dataset_raw,
                epoch,
                time_ms,
                link.member,
                head,
                selector_json,
                reason,
                caller,
                estimated,
                self._channel,
                AUDIT_MAXLEN,
                self.client.publish_command,
                tag.hex(),
                _MAX_LEAD_MS,
            ]
            async with self._guard(self._timeout):
                reply = await self._commit(keys=[self._k(n) for n in names], args=args)
            if int(reply[0]) == 1:
                return AuditRecord(
                    id=reply[1].decode(),
                    time_ms=time_ms,
                    caller=caller,
                    selector=selector,
                    reason=reason,
                    epoch=epoch,
                    estimated_entries=estimated,
                )
            if reply[1] == b"clock":
                lead = min(lead * 2, _MAX_LEAD_MS)
        raise TierUnavailable(
            f"redis control store: the rule chain changed under {_TRIES} commits in a row"
        )

    async def republish(self, rules: Sequence[Rule], epoch: int) -> int:
        """Append (re-signed) the rules the chain lacks; raise the counter and head to
        at least `epoch` and their newest."""
        for _ in range(_TRIES):
            chain, _, _ = await self.read()
            missing = [r for r in rules if not chain.holds(r)]
            newest = max([chain.head.epoch, epoch, *(r.epoch for r in missing)])
            if not missing and newest == chain.head.epoch:
                return 0
            prev = chain.head.tag
            members: list[bytes] = []
            for rule in missing:
                link = self.seal.link(rule, prev)
                members.append(link.member)
                prev = link.tag
            head = self.seal.head(chain.dataset, newest, prev)
            args: list[bytes | int] = [
                chain.head.raw,
                chain.dataset_raw,
                chain.counter_raw,
                newest,
                head,
                *members,
            ]
            async with self._guard(self._timeout):
                added = await self._republish(
                    keys=[self._k(n) for n in ("epoch", "rules", "head", "dataset")], args=args
                )
            if int(added) >= 0:
                return int(added)
        raise TierUnavailable(
            f"redis control store: the rule chain changed under {_TRIES} re-publications"
        )

    async def prune(self, retention_ms: int) -> tuple[int, int]:
        """Drop the oldest rules committed before the cutoff (store clock, the fleet's
        retention) and move the signed anchor past them: the longest such prefix of the
        chain, so what stays still links to the anchor."""
        for _ in range(_TRIES):
            chain, now, fleet = await self.read()
            cutoff = now - max(retention_ms, fleet)
            old = 0
            while old < len(chain.links) and chain.links[old].rule.time_ms < cutoff:
                old += 1
            if old == 0:
                return cutoff, 0
            anchor = self.seal.anchor(chain.dataset, chain.links[old - 1].tag)
            members = [link.member for link in chain.links[:old]]
            async with self._guard(self._timeout):
                removed = await self._prune(
                    keys=[self._k(n) for n in ("rules", "anchor", "dataset")],
                    args=[chain.anchor_raw, chain.dataset_raw, anchor, *members],
                )
            if int(removed) >= 0:
                return cutoff, int(removed)
        raise TierUnavailable(f"redis control store: pruning lost {_TRIES} races in a row")

    def audit_record(self, entry_id: bytes, fields: dict[bytes, bytes]) -> AuditRecord | None:
        """A stream entry as an audit record; None unless its tag verifies."""
        try:
            f = {k.decode(): v.decode() for k, v in fields.items()}
            record = AuditRecord(
                id=entry_id.decode(),
                time_ms=int(f["time_ms"]),
                caller=f["caller"],
                selector=Selector.from_json(f["selector"]),
                reason=f["reason"],
                epoch=int(f["epoch"]),
                estimated_entries=int(f["estimated_entries"]),
            )
            parts = audit_parts(
                record.epoch,
                record.time_ms,
                record.caller,
                f["selector"],
                record.reason,
                record.estimated_entries,
            )
            tag = bytes.fromhex(f["tag"])
        except (KeyError, ValueError, TypeError, AttributeError):
            return None
        return record if self.seal.keys.verify("audit", tag, *parts) else None
