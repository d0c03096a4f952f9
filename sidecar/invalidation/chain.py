"""The rule chain: invalidation rules a shared store holds, signed and linked in order.

A store writer without the fleet secret must not be able to add, alter, remove or
reorder a rule unnoticed. Every value below is signed with the fleet's keys
(sidecar.macs; purposes "rule" and "head"), all in format RULES_FORMAT:

    dataset  "2|<id>|<mac>"               the store's identity (a new one: data lost)
    anchor   "2|<tag>|<mac>"              the chain of this data set continues after
                                          the rule with this tag (GENESIS at birth,
                                          moved forward by pruning)
    head     "2|<epoch>|<tag>|<mac>"      the newest rule's tag, and the epoch counter's
                                          value (the counter must equal it)
    rule     "2|<epoch>|<time_ms>|<prev>|<tag>|<selector-json>"
             tag = MAC(epoch, time_ms, selector, prev): prev is the tag of the rule
             before it in the chain (the anchor's tag for the first one)

Rules are chained by their own order (the store's sorted set, scored by position),
not by consecutive epochs: a store that lost its data gets its rules back re-signed
in whatever order the fleet re-publishes them, and its counter above the newest one.
`verify` reads the whole chain from the anchor: every tag, every link, the head's
tag equal to the newest rule's, the counter equal to the head's epoch. Anything
else raises StoreDistrusted naming what failed; the sidecar then serves no hits.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.errors import StoreDistrusted
from sidecar.invalidation.rules import Rule, Selector
from sidecar.macs import TAG_LEN, FleetKeys

RULES_FORMAT = "2"
"""Format of every value above (1: the unsigned `epoch|time_ms|selector` members)."""
GENESIS = bytes(TAG_LEN)
"""The anchor's tag of a new data set: the first rule's `prev`."""
_HEX = 2 * TAG_LEN


@dataclass(frozen=True, slots=True)
class Link:
    """One rule as the chain holds it."""

    rule: Rule
    prev: bytes
    tag: bytes
    member: bytes
    """The stored member, exactly."""


@dataclass(frozen=True, slots=True)
class Head:
    """The signed head: the newest rule's tag and the epoch the counter must hold."""

    epoch: int
    tag: bytes
    raw: bytes


@dataclass(frozen=True, slots=True)
class Chain:
    """A verified chain: the data set it belongs to, its anchor, links and head."""

    dataset: str
    dataset_raw: bytes
    anchor_tag: bytes
    anchor_raw: bytes
    links: list[Link]
    head: Head
    counter_raw: bytes

    @property
    def rules(self) -> list[Rule]:
        """The rules, in chain order."""
        return [link.rule for link in self.links]

    def holds(self, rule: Rule) -> bool:
        """True if a link carries this rule (epoch, time, selector)."""
        return any(
            link.rule.epoch == rule.epoch
            and link.rule.time_ms == rule.time_ms
            and link.rule.selector == rule.selector
            for link in self.links
        )


def _distrust(what: str) -> StoreDistrusted:
    return StoreDistrusted(f"rule chain: {what}; serving no hits (docs/security.md)")


def _unhex(text: str) -> bytes:
    if len(text) != _HEX:
        raise ValueError("tag length")
    return bytes.fromhex(text)


def _text(raw: bytes | None, what: str) -> list[str]:
    if raw is None:
        raise _distrust(f"the {what} is missing (deleted, or never written by this fleet)")
    try:
        fields = raw.decode().split("|")
    except UnicodeDecodeError:
        fields = []
    if not fields or fields[0] != RULES_FORMAT:
        raise _distrust(
            f"the {what} is not in format {RULES_FORMAT} (a store written before rules were "
            "signed, or forged): delete the store's {meta} keys to start a new data set"
        )
    return fields


class ChainSeal:
    """Makes and checks the chain's values with one fleet's keys."""

    def __init__(self, keys: FleetKeys) -> None:
        self.keys = keys

    # --- store identity ------------------------------------------------------------

    def dataset(self, ident: str) -> bytes:
        """The stored identity of a new data set named `ident`."""
        mac = self.keys.sign("head", b"dataset", ident.encode())
        return f"{RULES_FORMAT}|{ident}|{mac.hex()}".encode()

    def open_dataset(self, raw: bytes | None) -> str:
        """The data set's id, or StoreDistrusted for one this fleet did not sign."""
        fields = _text(raw, "store identity")
        try:
            ident, mac = fields[1], _unhex(fields[2])
        except (IndexError, ValueError):
            raise _distrust("the store identity is malformed") from None
        if len(fields) != 3 or not self.keys.verify("head", mac, b"dataset", ident.encode()):
            raise _distrust("the store identity fails its MAC (forged)")
        return ident

    # --- anchor and head -----------------------------------------------------------

    def anchor(self, dataset: str, tag: bytes) -> bytes:
        """The stored anchor: the chain of `dataset` continues after the rule tagged `tag`."""
        mac = self.keys.sign("head", b"anchor", dataset.encode(), tag)
        return f"{RULES_FORMAT}|{tag.hex()}|{mac.hex()}".encode()

    def open_anchor(self, dataset: str, raw: bytes | None) -> bytes:
        """The anchor's tag, or StoreDistrusted."""
        fields = _text(raw, "anchor")
        try:
            tag, mac = _unhex(fields[1]), _unhex(fields[2])
        except (IndexError, ValueError):
            raise _distrust("the anchor is malformed") from None
        if len(fields) != 3 or not self.keys.verify("head", mac, b"anchor", dataset.encode(), tag):
            raise _distrust("the anchor fails its MAC (forged, or from another data set)")
        return tag

    def head(self, dataset: str, epoch: int, tag: bytes) -> bytes:
        """The stored head: newest rule `tag`, epoch counter `epoch`."""
        mac = self.keys.sign("head", b"head", dataset.encode(), b"%d" % epoch, tag)
        return f"{RULES_FORMAT}|{epoch}|{tag.hex()}|{mac.hex()}".encode()

    def open_head(self, dataset: str, raw: bytes | None) -> Head:
        """The head, or StoreDistrusted."""
        fields = _text(raw, "head")
        try:
            epoch, tag, mac = int(fields[1]), _unhex(fields[2]), _unhex(fields[3])
        except (IndexError, ValueError):
            raise _distrust("the head is malformed") from None
        ok = len(fields) == 4 and self.keys.verify(
            "head", mac, b"head", dataset.encode(), b"%d" % epoch, tag
        )
        if not ok:
            raise _distrust("the head fails its MAC (forged, or from another data set)")
        assert raw is not None
        return Head(epoch, tag, raw)

    # --- rules ---------------------------------------------------------------------

    def link(self, rule: Rule, prev: bytes) -> Link:
        """`rule` signed as the next link after the rule tagged `prev`."""
        selector = rule.selector.to_json()
        tag = self._rule_tag(rule.epoch, rule.time_ms, selector, prev)
        member = f"{RULES_FORMAT}|{rule.epoch}|{rule.time_ms}|{prev.hex()}|{tag.hex()}|{selector}"
        return Link(Rule(rule.epoch, rule.selector, rule.time_ms), prev, tag, member.encode())

    def _rule_tag(self, epoch: int, time_ms: int, selector: str, prev: bytes) -> bytes:
        return self.keys.sign(
            "rule", RULES_FORMAT.encode(), b"%d" % epoch, b"%d" % time_ms, selector.encode(), prev
        )

    def open_link(self, member: bytes) -> Link:
        """A stored rule, its tag verified (its place in the chain is checked by verify)."""
        fields = _text(member, "rule")
        try:
            _, epoch, time_ms, prev, tag, selector = member.decode().split("|", 5)
            link = Link(
                Rule(int(epoch), Selector.from_json(selector), int(time_ms)),
                _unhex(prev),
                _unhex(tag),
                member,
            )
        except (ValueError, TypeError, AttributeError):  # JSON, UTF-8 and int errors
            raise _distrust(f"a rule is malformed ({fields[1:2]})") from None
        signed = (b"%d" % link.rule.epoch, b"%d" % link.rule.time_ms, selector.encode())
        if not self.keys.verify("rule", link.tag, RULES_FORMAT.encode(), *signed, link.prev):
            raise _distrust(
                f"the rule at epoch {link.rule.epoch} fails its MAC (added or altered "
                "by someone without the fleet secret)"
            )
        return link

    def verify(
        self,
        dataset_raw: bytes | None,
        anchor_raw: bytes | None,
        head_raw: bytes | None,
        counter_raw: bytes | None,
        members: list[bytes],
    ) -> Chain:
        """Check a whole chain as read in one atomic step (members in stored order)."""
        dataset = self.open_dataset(dataset_raw)
        anchor_tag = self.open_anchor(dataset, anchor_raw)
        head = self.open_head(dataset, head_raw)
        self.check_counter(head, counter_raw)
        prev = anchor_tag
        links: list[Link] = []
        for member in members:
            link = self.open_link(member)
            if link.prev != prev:
                raise _distrust(
                    f"the rule at epoch {link.rule.epoch} does not follow the rule before it "
                    "(rules removed or reordered)"
                )
            links.append(link)
            prev = link.tag
        if prev != head.tag:
            raise _distrust(
                "the newest rule is not the one the head names (rules removed from the end, "
                "or the head replaced)"
            )
        assert dataset_raw is not None
        assert anchor_raw is not None
        return Chain(dataset, dataset_raw, anchor_tag, anchor_raw, links, head, counter_raw or b"0")

    def resealed(self, chain: Chain) -> tuple[bytes, bytes, bytes, list[bytes]] | None:
        """While rotating: the chain signed again with the signing secret (identity,
        anchor, every rule re-linked in order, head), or None if it already is. A chain
        that verified is as trustworthy as it was; signed again, it outlives the secret
        it was first signed with."""
        prev = chain.anchor_tag
        members = []
        for link in chain.links:
            fresh = self.link(link.rule, prev)
            members.append(fresh.member)
            prev = fresh.tag
        values = (
            self.dataset(chain.dataset),
            self.anchor(chain.dataset, chain.anchor_tag),
            self.head(chain.dataset, chain.head.epoch, prev),
            members,
        )
        current = (chain.dataset_raw, chain.anchor_raw, chain.head.raw)
        if values[:3] == current and members == [link.member for link in chain.links]:
            return None
        return values

    @staticmethod
    def check_counter(head: Head, counter_raw: bytes | None) -> None:
        """StoreDistrusted unless the epoch counter holds the head's epoch (every sidecar
        write moves both at once)."""
        if (counter_raw or b"0") != b"%d" % head.epoch:
            shown = (counter_raw or b"(none)")[:24].decode("ascii", "replace")
            raise _distrust(
                f"the epoch counter ({shown}) is not the signed head's epoch ({head.epoch})"
            )
