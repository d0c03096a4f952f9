"""The version of the gateway's request -> key table is part of every gateway key, so a
pod with other rules (a rolling upgrade sharing one Redis) never serves this one's
requests from entries those rules keyed."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.wire.openai import keys as request_keys
from sidecar.wire.openai.keys import CHAT, EMBEDDINGS, RULES_EXTRA, keyed_request
from tests.support.gateway import key_digest


def body(**kw: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]} | kw


def digest(doc: dict[str, Any]) -> bytes:
    return key_digest(CHAT, doc)


def test_every_gateway_key_carries_the_rules_version() -> None:
    for endpoint, doc in ((CHAT, body()), (EMBEDDINGS, {"model": "tiny", "input": "x"})):
        kr = keyed_request(endpoint, doc, "acme", "p1")
        assert kr.key is not None
        assert kr.key.extra[RULES_EXTRA] == request_keys.RULES_VERSION


def test_other_rules_are_other_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    now = digest(body())
    monkeypatch.setattr(request_keys, "RULES_VERSION", "1999-01-01")
    assert digest(body()) != now


def test_a_body_field_named_like_the_rules_entry_is_not_cached() -> None:
    """It would otherwise replace (or be replaced by) the version in `extra`."""
    kr = keyed_request(CHAT, body(**{RULES_EXTRA: request_keys.RULES_VERSION}), "acme", "p1")
    assert kr.key is None
    assert RULES_EXTRA in kr.uncacheable
