"""How the sidecar reaches Redis: the URL plus the credentials and TLS material beside
it, as one frozen value, and the one function that turns it into redis-py client
keyword arguments (shared by the single-node client and, for a cluster, RedisCluster).

- ACL users: `redis://USER:PASSWORD@host:port/db`, or the password from a file
  (INFERCACHE_REDIS_PASSWORD_FILE, read when the client is made, so a rotated file
  needs only a restart). The password is never logged, never in an error message and
  never in GetServerInfo: `redacted()` is what may be shown of a URL.
- TLS: `rediss://` with INFERCACHE_REDIS_TLS_CA_FILE (else the system's CAs),
  INFERCACHE_REDIS_TLS_CERT_FILE and _KEY_FILE (a client certificate, when Redis asks
  for one: `tls-auth-clients yes`, its default); the certificate is always verified
  and so is the host name, unless INFERCACHE_REDIS_TLS_VERIFY_HOSTNAME=false.

At start, `probe()` sends one PING: a refusal that no retry can heal (wrong password,
an ACL user without PING, a certificate the CA does not vouch for, a server that wants
a client certificate) fails the start naming the setting to fix; Redis being down or
slow does not (the sidecar serves degraded MISSes until it answers, as always).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import AuthenticationError, NoPermissionError, RedisError, ResponseError

from sidecar.config import ConfigError, RedisConfig
from sidecar.config.redis_urls import redacted as redacted  # what may be shown of a URL

MAX_PASSWORD_FILE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """Where Redis is and how to authenticate to it (repr shows no secret)."""

    url: str = field(repr=False)
    """redis://, rediss:// or unix:// (may carry USER:PASSWORD@: never shown)."""
    password_file: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_verify_hostname: bool = True

    @classmethod
    def from_config(cls, redis: RedisConfig) -> RedisOptions:
        """The options of the configured Redis (its URL must be set)."""
        if not redis.url:
            raise ValueError("no Redis URL configured")
        return cls(
            redis.url,
            redis.password_file,
            redis.tls_ca_file,
            redis.tls_cert_file,
            redis.tls_key_file,
            redis.tls_verify_hostname,
        )

    @property
    def tls(self) -> bool:
        """Is the connection TLS (rediss://, or rediss+cluster:// for a Redis Cluster)?"""
        return urlsplit(self.url).scheme in ("rediss", "rediss+cluster")


def as_options(url: str | RedisOptions) -> RedisOptions:
    """`url` as options (a bare URL has no file settings)."""
    return url if isinstance(url, RedisOptions) else RedisOptions(url)


def read_password(path: str) -> str:
    """The password in `path`: one line (a trailing newline is dropped), not empty.

    ConfigError naming INFERCACHE_REDIS_PASSWORD_FILE, never quoting the content."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_PASSWORD_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            f"INFERCACHE_REDIS_PASSWORD_FILE: cannot read {path}: {exc.strerror}"
        ) from None
    text = raw.decode("utf-8", errors="strict") if _utf8(raw) else None
    if len(raw) > MAX_PASSWORD_FILE_BYTES or text is None:
        raise ConfigError(f"INFERCACHE_REDIS_PASSWORD_FILE: {path} is not a short UTF-8 text file")
    password = text.removesuffix("\n").removesuffix("\r")
    if not password or "\n" in password:
        raise ConfigError(f"INFERCACHE_REDIS_PASSWORD_FILE: {path} must hold one non-empty line")
    return password


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def client_kwargs(
    options: RedisOptions, *, connect_timeout_s: float, socket_timeout_s: float
) -> dict[str, Any]:
    """Keyword arguments for `redis.asyncio.Redis.from_url(options.url, **kwargs)` (and,
    all but `max_connections`' meaning, RedisCluster's): timeouts, one quick retry,
    the password from its file, the TLS material."""
    kwargs: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout_s,
        "socket_timeout": socket_timeout_s,
        # One quick retry covers a connection that Redis closed while idle; callers'
        # deadlines bound the whole attempt anyway.
        "retry": Retry(ExponentialBackoff(cap=0.02, base=0.002), 1),
        "max_connections": 128,
        "health_check_interval": 0,
        # No CLIENT SETINFO on connect: Redis < 7.2 lacks it, and the minimal ACL user
        # (docs/deploy.md) need not be granted it.
        "driver_info": None,
    }
    if options.password_file:
        kwargs["password"] = read_password(options.password_file)
    if options.tls:
        kwargs |= {
            "ssl_cert_reqs": "required",
            "ssl_check_hostname": options.tls_verify_hostname,
            "ssl_ca_certs": options.tls_ca_file,
            "ssl_certfile": options.tls_cert_file,
            "ssl_keyfile": options.tls_key_file,
        }
    return kwargs


def connect(
    url: str | RedisOptions, *, connect_timeout_s: float, socket_timeout_s: float
) -> aioredis.Redis:
    """A redis.asyncio client (hiredis parser when installed) with short timeouts."""
    options = as_options(url)
    kwargs = client_kwargs(
        options, connect_timeout_s=connect_timeout_s, socket_timeout_s=socket_timeout_s
    )
    return aioredis.Redis.from_url(options.url, **kwargs)


async def probe(
    client: aioredis.Redis | RedisCluster, options: RedisOptions, timeout_s: float
) -> str | None:
    """PING Redis once. ConfigError for a refusal no retry can heal (naming the setting
    to fix, never the password); the error text for an outage (the caller degrades);
    None when Redis answered."""
    try:
        async with asyncio.timeout(timeout_s):
            await client.ping()
    except TimeoutError:
        return f"no answer within {timeout_s * 1000:.0f} ms"
    except (RedisError, OSError) as exc:
        misconfigured = _misconfiguration(exc, options)
        if misconfigured is None and options.tls:
            misconfigured = await _tls_refusal(options, timeout_s)
        if misconfigured is not None:
            raise ConfigError(misconfigured) from None
        return f"{type(exc).__name__}: {exc}"
    return None


TLS_REFUSAL_TRIES = 8


async def _tls_refusal(options: RedisOptions, timeout_s: float) -> str | None:
    """A TLS refusal the client's own retry hid, found by asking again without retries.

    A server that wants a client certificate says so with an alert after the handshake;
    when the client's first command is already on its way, that attempt may see only a
    closed or reset connection, and the client's one retry then fails the same way with
    the alert lost. A few one-shot connections read the alert itself (each one races the
    alert; on a loaded machine three in a row lost it, so eight: a Redis that is down
    refuses each in a millisecond)."""
    if urlsplit(options.url).scheme != "rediss":
        return None  # a cluster's seeds: the probe's own error stands
    kwargs = client_kwargs(options, connect_timeout_s=timeout_s, socket_timeout_s=timeout_s)
    kwargs["retry"] = Retry(NoBackoff(), 0)
    for _ in range(TLS_REFUSAL_TRIES):
        client = aioredis.Redis.from_url(options.url, **kwargs)
        try:
            async with asyncio.timeout(timeout_s):
                await client.ping()
            return None
        except TimeoutError:
            return None
        except (RedisError, OSError) as exc:
            found = _misconfiguration(exc, options)
            if found is not None:
                return found
        finally:
            await client.aclose()
    return None


def _misconfiguration(exc: BaseException, options: RedisOptions) -> str | None:
    where = redacted(options.url)
    if isinstance(exc, AuthenticationError) or (
        isinstance(exc, ResponseError) and str(exc).startswith(("WRONGPASS", "NOAUTH"))
    ):
        return (
            f"INFERCACHE_REDIS_URL / INFERCACHE_REDIS_PASSWORD_FILE: Redis at {where} refused "
            "the user name or password (or the ACL user is disabled)"
        )
    if isinstance(exc, NoPermissionError):
        return (
            f"INFERCACHE_REDIS_URL: the ACL user may not run PING at {where}; grant the "
            "commands listed in docs/deploy.md"
        )
    cause = _ssl_cause(exc)
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (
            f"INFERCACHE_REDIS_TLS_CA_FILE: the certificate of {where} did not verify "
            f"({cause.verify_message}); set the CA that signed it"
        )
    if cause is not None:
        return (
            f"INFERCACHE_REDIS_TLS_CERT_FILE / INFERCACHE_REDIS_TLS_KEY_FILE: the TLS "
            f"handshake with {where} failed ({cause.reason or cause}); Redis may require "
            "a client certificate (tls-auth-clients)"
        )
    return None


def _ssl_cause(exc: BaseException | None) -> ssl.SSLError | None:
    """The ssl.SSLError behind a redis-py ConnectionError, if any (redis-py wraps it)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ssl.SSLError):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
