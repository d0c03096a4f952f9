"""Gateway credentials (sidecar/gateway/auth.py): the keys file and the trusted tenant
header, read without a server."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from sidecar.gateway.auth import ApiKeys, read_keys
from sidecar.gateway.errors import HttpError
from sidecar.gateway.service import _QUIET, _UNFINISHED

KEY = "sk-acme-0123456789abcdef"


def test_a_byte_order_mark_is_not_part_of_the_first_tenant(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_bytes(b"\xef\xbb\xbfacme=" + KEY.encode() + b"\n")
    assert read_keys(str(path)) == {KEY: "acme"}


def test_an_emptied_keys_file_revokes_every_key(tmp_path: Path) -> None:
    """A file with no keys is valid (revoking all is a thing an operator may mean)."""
    path = tmp_path / "keys"
    path.write_text(f"acme={KEY}\n")
    keys = ApiKeys.load(str(path))
    assert keys.tenant({b"authorization": f"Bearer {KEY}".encode()}) == "acme"
    path.write_text("# nobody\n")
    assert asyncio.run(keys.reload_if_changed())
    with pytest.raises(HttpError) as info:
        keys.tenant({b"authorization": f"Bearer {KEY}".encode()})
    assert info.value.status == 401
    assert keys.reloads == 1


def tenant_of(value: bytes) -> str:
    keys = ApiKeys({}, tenant_header="x-tenant")
    return keys.tenant({b"x-tenant": value})


def test_the_trusted_tenant_header_is_utf8_like_the_keys_file() -> None:
    assert tenant_of("café".encode()) == "café"
    assert tenant_of(b" acme ") == "acme"


@pytest.mark.parametrize("value", [b"caf\xe9", b"a\tb", "a\u2028b".encode(), b"x" * 257])
def test_a_tenant_header_that_is_not_printable_utf8_is_400(value: bytes) -> None:
    with pytest.raises(HttpError) as info:
        tenant_of(value)
    assert (info.value.status, info.value.code, info.value.param) == (
        400,
        "invalid_header",
        "x-tenant",
    )


def test_uvicorns_unfinished_response_line_is_info_and_nothing_else_changes() -> None:
    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, msg, None, None)

    unfinished, other = record(_UNFINISHED), record("Exception in ASGI application")
    assert _QUIET.filter(unfinished)
    assert _QUIET.filter(other)
    assert (unfinished.levelno, unfinished.levelname) == (logging.INFO, "INFO")
    assert (other.levelno, other.levelname) == (logging.ERROR, "ERROR")
