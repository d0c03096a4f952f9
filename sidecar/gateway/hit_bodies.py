"""Whole-body hits from a template per stored answer: parse and rewrite once, not per hit.

A hit answered with a stored whole body is that body with a fresh `id` and `created` and
(chat, completions) the usage as served from the cache (`Renewal.apply`, render.py): a
JSON parse, two regular expressions built from the stored values and the usage's rewrite,
for every hit. Only `id` and `created` differ from one hit to the next, so the rewrite is
done once per (endpoint, stored body) with placeholder values, and the result cut where
they landed; each hit then joins the pieces around its own id and created. Rendering the
template with a renewal gives the bytes `Renewal.apply` gives for it
(tests/unit/test_gateway_hit_bodies.py); a body where a placeholder would not be found
exactly once (it spells one itself) gets no template and is rendered as before.
"""

from __future__ import annotations

from sidecar.wire.openai.render import Renewal
from sidecar.wire.openai.whole_body import body_doc

TEMPLATES_MAX = 512
"""Templates kept (the most recently made; past it the oldest is dropped)."""
BODY_MAX = 8 << 10
"""Larger bodies get no template (a body and its template are kept: at most ~8 MiB in all;
a long answer's hit is dominated by its bytes anyway)."""
_ID = b"infercache-id-placeholder-5f0c2a"
_CREATED = b"8806131449306528401"  # an int: a re-serialised body writes it as a number


class _Placeholders(Renewal):
    """The renewal of the template: placeholder id and created."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.new_id, self.created = _ID, _CREATED


Template = tuple[bytes, bool, bytes, bytes]
"""(head, id first?, middle, tail): the body is head + first + middle + second + tail,
first and second the id and the created in the order the body has them."""


class HitBodies:
    """Stored whole bodies' templates, per endpoint and body bytes."""

    __slots__ = ("_templates",)

    def __init__(self) -> None:
        self._templates: dict[tuple[str, bytes], Template | None] = {}

    def render(self, endpoint: str, payload: bytes, renewal: Renewal) -> bytes | None:
        """The hit's body from the stored whole answer `payload`; None when it is none
        (not a JSON object with choices or data: `body_doc`)."""
        if len(payload) > BODY_MAX:
            return _direct(payload, renewal)
        key = (endpoint, payload)
        template = self._templates.get(key, _UNKNOWN)
        if template is _UNKNOWN:
            template = _template(endpoint, payload)
            if len(self._templates) >= TEMPLATES_MAX:
                del self._templates[next(iter(self._templates))]
            self._templates[key] = template
        if template is None:
            return None
        if template is _NO_TEMPLATE:
            return _direct(payload, renewal)
        head, id_first, middle, tail = template
        first, second = (
            (renewal.new_id, renewal.created) if id_first else (renewal.created, renewal.new_id)
        )
        return b"".join((head, first, middle, second, tail))


_NO_TEMPLATE: Template = (b"", False, b"", b"")
"""A body no template can stand for: rendered per hit."""
_UNKNOWN: Template = (b"", True, b"", b"")


def _direct(payload: bytes, renewal: Renewal) -> bytes | None:
    doc = body_doc(payload)
    return None if doc is None else renewal.apply(payload, doc)


def _template(endpoint: str, payload: bytes) -> Template | None:
    doc = body_doc(payload)
    if doc is None:
        return None
    if not isinstance(doc.get("id"), str) or not _is_int(doc.get("created")):
        return _NO_TEMPLATE  # nothing, or one thing, to renew: no two slots to fill
    made = _Placeholders(endpoint).apply(payload, doc)
    if made.count(_ID) != 1 or made.count(_CREATED) != 1:
        return _NO_TEMPLATE
    at_id, at_created = made.index(_ID), made.index(_CREATED)
    if at_id < at_created:
        return (
            made[:at_id],
            True,
            made[at_id + len(_ID) : at_created],
            made[at_created + len(_CREATED) :],
        )
    return (
        made[:at_created],
        False,
        made[at_created + len(_CREATED) : at_id],
        made[at_id + len(_ID) :],
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
