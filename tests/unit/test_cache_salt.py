"""Each tenant's cache_salt (sidecar/wire/openai/cache_salt.py): derived under a secret key,
combined with a client's own, put into the body with nothing else changed."""

from __future__ import annotations

import json

import pytest

from sidecar.wire.openai.cache_salt import TenantSalts
from sidecar.wire.openai.keys import CHAT, COMPLETIONS, EMBEDDINGS

KEY = bytes(range(32))
SALTS = TenantSalts(KEY)


def _sent(raw: bytes, endpoint: str = CHAT, tenant: str = "acme") -> bytes:
    return SALTS.body_for(endpoint, tenant, json.loads(raw), raw)


def test_every_tenant_has_its_own_salt_and_it_does_not_name_the_tenant() -> None:
    """Stable per tenant and key; different between tenants, between keys (fleets), and
    for look-alike names; the tenant's name never appears in it."""
    tenants = ["acme", "globex", "Acme", "acme ", "\u0430cme", "acme\x00", ""]
    salts = [SALTS.salt(t) for t in tenants]
    assert len(set(salts)) == len(tenants)
    assert SALTS.salt("acme") == TenantSalts(KEY).salt("acme")
    assert TenantSalts(bytes(32)).salt("acme") != SALTS.salt("acme")
    assert all(s.startswith("ic1-") and len(s) == 36 for s in salts)
    assert "acme" not in SALTS.salt("acme")


def test_a_client_salt_is_combined_never_trusted_alone() -> None:
    """Two tenants sending the same salt get different ones; a client salt changes the
    tenant's salt; the absent salt and the empty text are not confused."""
    assert SALTS.salt("acme", "x") != SALTS.salt("globex", "x")
    assert SALTS.salt("acme", "x") != SALTS.salt("acme")
    assert SALTS.salt("acme", "x") != SALTS.salt("acme", "y")
    assert SALTS.salt("acme", "") != SALTS.salt("acme")
    # Framed, not concatenated: ("ab", "c") is not ("a", "bc").
    assert SALTS.salt("ab", "c") != SALTS.salt("a", "bc")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"m","messages":[{"role":"user","content":"hi"}]}',
        b'  {\n "model" : "m",\t"messages":[]}\n',
        b"{}",
        b"{ }",
    ],
)
def test_the_salt_is_inserted_first_and_the_rest_is_sent_byte_for_byte(raw: bytes) -> None:
    sent = _sent(raw)
    salt = SALTS.salt("acme")
    member = b'"cache_salt":"' + salt.encode() + b'"'
    start = raw.index(b"{") + 1
    assert sent.startswith(raw[:start] + member)
    doc = json.loads(sent)
    assert doc.pop("cache_salt") == salt
    assert doc == json.loads(raw)
    rest = sent[start + len(member) :]
    assert rest.lstrip(b",") == raw[start:]


def test_a_sent_salt_is_replaced_by_the_combined_one() -> None:
    raw = b'{"model":"m","cache_salt":"mine","prompt":"x"}'
    doc = json.loads(_sent(raw, COMPLETIONS))
    assert doc == {"model": "m", "cache_salt": SALTS.salt("acme", "mine"), "prompt": "x"}


def test_null_is_no_salt_and_an_invalid_one_is_left_for_the_model_server() -> None:
    """vLLM reads null as no salt (so the tenant's own is sent) and refuses anything but
    a non-empty string (left as sent, so it refuses it as without the gateway)."""
    doc = json.loads(_sent(b'{"model":"m","cache_salt":null}'))
    assert doc["cache_salt"] == SALTS.salt("acme")
    for bad in (b'""', b"5", b"[]", b"{}", b"true"):
        raw = b'{"model":"m","cache_salt":' + bad + b"}"
        assert _sent(raw) == raw


def test_embeddings_are_sent_as_they_are() -> None:
    raw = b'{"model":"m","input":"x"}'
    assert _sent(raw, EMBEDDINGS) == raw


@pytest.mark.parametrize("key", [b"", bytes(31), bytes(33)])
def test_the_key_is_32_bytes(key: bytes) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        TenantSalts(key)
