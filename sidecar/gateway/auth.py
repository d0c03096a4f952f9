"""Who is asking: gateway API keys mapped to tenants, from a mounted file.

    # TENANT=KEY, one per line; a tenant may have several keys (rotation)
    acme=sk-acme-0123456789abcdef
    globex=sk-globex-0123456789abcdef

The tenant comes from authentication only, never from the body: `Authorization:
Bearer KEY` (or `api-key: KEY`, as Azure-style clients send it; on the Messages API
also `x-api-key: KEY`, as Anthropic's SDKs send it; two of them naming different keys
is 400). A trusted tenant header (INFERCACHE_GATEWAY_TENANT_HEADER) is read only when
the operator configured one:

- with a keys file too, the key still decides: no key or an unknown key is 401 whatever
  the header says, and a header naming another tenant than the key's is 403;
- without a keys file, the header alone names the tenant: the front proxy that sets it
  has authenticated the caller (and must strip the header from what clients send);
  a request without it is 401.

The file is re-read when its size or mtime changes; a file that no longer
parses keeps the keys in force and is logged. A file with no keys is a valid file
that revokes every key (logged as a warning, at start and on reload): replace the file
atomically (a Kubernetes Secret volume does), or a reader may see it truncated.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from sidecar.gateway.errors import HttpError, bad_header

log = structlog.get_logger("infercache.gateway")

MIN_KEY_CHARS = 16
KEY_HEADERS = (b"api-key",)
"""Headers that carry a bare key (no scheme), besides `Authorization: Bearer KEY`."""
ANTHROPIC_KEY_HEADERS = (b"api-key", b"x-api-key")
"""The same on the Messages API, whose SDKs send `x-api-key` (not read elsewhere)."""
MAX_KEYS_FILE_BYTES = 1024 * 1024


def parse_keys(text: str, source: str) -> dict[str, str]:
    """KEY -> TENANT from the file's text; ValueError naming the line."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        tenant, sep, key = (part.strip() for part in line.partition("="))
        if not sep or not tenant or not key:
            raise ValueError(f"{source}:{n}: expected TENANT=KEY")
        if len(key) < MIN_KEY_CHARS:
            raise ValueError(f"{source}:{n}: keys must be at least {MIN_KEY_CHARS} characters")
        if not tenant.isprintable() or len(tenant) > 256:
            raise ValueError(f"{source}:{n}: the tenant must be printable, 256 chars at most")
        if key in out:
            raise ValueError(f"{source}:{n}: this key is listed twice")
        out[key] = tenant
    return out


def read_keys(path: str) -> dict[str, str]:
    """Read and parse the keys file (blocking: call it off the event loop)."""
    # utf-8-sig: a byte-order mark that an editor put first is not part of a tenant.
    with open(path, encoding="utf-8-sig") as f:
        text = f.read(MAX_KEYS_FILE_BYTES + 1)
    if len(text) > MAX_KEYS_FILE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_KEYS_FILE_BYTES} bytes")
    return parse_keys(text, path)


@dataclass(frozen=True, slots=True)
class _Stamp:
    size: int
    mtime_ns: int
    inode: int


def _stamp(path: str) -> _Stamp:
    st = os.stat(path)
    return _Stamp(st.st_size, st.st_mtime_ns, st.st_ino)


class ApiKeys:
    """The tenant of a request's credentials; 401 (HttpError) when it has none."""

    def __init__(
        self, keys: Mapping[str, str], path: str | None = None, tenant_header: str = ""
    ) -> None:
        self._keys = dict(keys)
        self._path = path
        # Keys configured (a file, even one emptied to revoke them all): a key is required.
        self._keyed = path is not None or bool(keys)
        self._stamp = _stamp(path) if path else None
        self.tenant_header = tenant_header.encode("latin-1")
        self.reloads = 0
        self.reload_failures = 0

    @classmethod
    def load(cls, path: str | None, tenant_header: str = "") -> ApiKeys:
        """From the file at `path` (None: no keys; every request is 401 unless a trusted
        header is configured, which then names the tenant alone). Raises OSError /
        ValueError when the file is unusable."""
        keys = read_keys(path) if path else {}
        if not keys and (path or not tenant_header):
            log.warning("gateway_no_keys", path=path, effect="every request is 401")
        return cls(keys, path, tenant_header)

    def tenant(
        self, headers: Mapping[bytes, bytes], key_headers: tuple[bytes, ...] = KEY_HEADERS
    ) -> str:
        """The authenticated tenant of a request's (lower-cased) headers: 401 without
        valid credentials, 403 when a trusted header names another tenant than the key.
        `key_headers`: the headers besides Authorization that may carry a bare key."""
        named = self._named(headers)
        if named is not None and not self._keyed:
            return named  # header mode: the front proxy authenticated the caller
        key = _presented_key(headers, key_headers)
        if key is None:
            bearer = "Authorization: Bearer <key>"
            if b"x-api-key" in key_headers:
                bearer += " or x-api-key: <key>"
            wanted = bearer if self._keyed else self._header_name
            raise HttpError(
                401,
                f"missing API key: send {wanted}",
                kind="authentication_error",
                code="invalid_api_key",
            )
        found = self._lookup(key)
        if found is None:
            raise HttpError(
                401, "unknown API key", kind="authentication_error", code="invalid_api_key"
            )
        if named is not None and named != found:
            # The header may only confirm the key's tenant, never widen a key to another.
            raise HttpError(
                403,
                f"{self._header_name} names another tenant than the API key's",
                kind="permission_error",
                param=self._header_name,
                code="tenant_mismatch",
            )
        return found

    @property
    def _header_name(self) -> str:
        return self.tenant_header.decode("latin-1")

    def _named(self, headers: Mapping[bytes, bytes]) -> str | None:
        """The tenant the trusted header names (None: none configured, or not sent)."""
        if not self.tenant_header:
            return None
        raw = headers.get(self.tenant_header)
        return (_tenant_named(raw, self._header_name) or None) if raw else None

    def _lookup(self, key: str) -> str | None:
        tenant = self._keys.get(key)
        if tenant is not None:
            return tenant
        # Not found: a constant-time pass over the keys, so timing tells nothing of them.
        for known in self._keys:
            hmac.compare_digest(known.encode(), key.encode())
        return None

    async def run_reload(self, poll_s: float) -> None:
        """Re-read the file whenever it changes (until cancelled)."""
        if not self._path or poll_s <= 0:
            return
        while True:
            await asyncio.sleep(poll_s)
            await self.reload_if_changed()

    async def reload_if_changed(self) -> bool:
        """Re-read the file if its stamp changed; True when new keys are in force."""
        path = self._path
        if path is None:
            return False
        try:
            stamp = await asyncio.to_thread(_stamp, path)
            if stamp == self._stamp:
                return False
            keys = await asyncio.to_thread(read_keys, path)
        except (OSError, ValueError) as exc:
            self.reload_failures += 1
            log.warning("gateway_keys_reload_failed", path=path, error=str(exc))
            return False
        self._keys, self._stamp = keys, stamp
        self.reloads += 1
        if keys:
            log.info("gateway_keys_reloaded", path=path, keys=len(keys))
        else:
            log.warning("gateway_keys_reloaded", path=path, keys=0, effect="every key revoked")
        return True


def _tenant_named(raw: bytes, header: str) -> str:
    """The tenant a trusted header names: UTF-8 (as the keys file is read), printable,
    256 characters at most, like a keys file's tenants; 400 otherwise."""
    try:
        tenant = raw.decode("utf-8").strip(" \t")
    except UnicodeDecodeError:
        raise bad_header(header, "not UTF-8") from None
    if not tenant.isprintable() or len(tenant) > 256:
        raise bad_header(header, "the tenant must be printable, 256 characters at most")
    return tenant


def _presented_key(headers: Mapping[bytes, bytes], key_headers: tuple[bytes, ...]) -> str | None:
    auth = headers.get(b"authorization")
    bare = {
        raw.decode("latin-1").strip()
        for name in key_headers
        if (raw := headers.get(name)) is not None and raw.strip()
    }
    if auth:
        scheme, _, value = auth.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return None
        bare.add(value.strip())
    if len(bare) > 1:
        # Two different credentials: a proxy in front may have checked the other one.
        raise HttpError(
            400,
            "Authorization and "
            + " and ".join(n.decode() for n in key_headers)
            + " name different keys: send one",
            code="conflicting_credentials",
        )
    return bare.pop() if bare else None
