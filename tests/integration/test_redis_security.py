"""The sidecar on a Redis that speaks only TLS and checks ACL users (issue 18 item 3):
every path works under exactly the ACL docs/deploy.md prints, and a wrong CA, a
missing client certificate, a wrong password or a host name the certificate does not
name fail the start with a line naming the setting to fix (never the password)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from infercache.v1 import cache_pb2 as pb

from sidecar.backends.redis.kv_warm import RedisKvWarmStore
from sidecar.invalidation.rules import Selector
from sidecar.keys import KeyDigest
from sidecar.kv.layout import BlockKey
from sidecar.kv.warm import encode_block
from sidecar.testing import InProcessSidecar, in_process_sidecar
from tests.support.keys import key
from tests.support.processes import REPO
from tests.support.secure_redis import Pki, SecureRedis, make_pki
from tests.support.sidecars import FLEET_SECRET_FILE, clean_env

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

PASSWORD = "s3cret-acl-password-7f1e"
DEPLOY = REPO / "docs" / "deploy.md"


def documented_acl() -> str:
    """The `user ...` line docs/deploy.md prints between its acl markers."""
    text = DEPLOY.read_text()
    block = re.search(r"<!-- acl:begin -->(.*?)<!-- acl:end -->", text, re.S)
    assert block, "docs/deploy.md lost its <!-- acl:begin --> ... <!-- acl:end --> block"
    lines = [ln.strip() for ln in block.group(1).splitlines() if ln.strip().startswith("user ")]
    assert len(lines) == 1, lines
    assert ">PASSWORD" in lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def redis_tls(pki: Pki) -> Iterator[SecureRedis]:
    """The TLS-only server with the documented ACL user (and its password)."""
    server = SecureRedis(pki, [documented_acl().replace(">PASSWORD", f">{PASSWORD}")])
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "redis-password"
    path.write_text(PASSWORD + "\n")
    return path


# Each new TLS connection pays a handshake (0.3-0.5 s on a loaded 2-core machine):
# the calls here get generous deadlines, since speed is not what is tested.
SLOW = 30.0


async def store(sc: InProcessSidecar, k: pb.CacheKey, payload: bytes) -> None:
    miss = await sc.client.lookup(k, timeout=SLOW)
    assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
    done = await sc.client.store(k, payload, lease=miss.lease, timeout=SLOW)
    assert done.outcome == pb.STORE_OUTCOME_STORED


def acl_user() -> str:
    return documented_acl().split()[1]


def tls_settings(pki: Pki, **more: str) -> dict[str, str]:
    return {
        "redis_tls_ca_file": str(pki.ca),
        "redis_tls_cert_file": str(pki.client_cert),
        "redis_tls_key_file": str(pki.client_key),
    } | more


async def test_every_path_works_over_tls_under_the_documented_acl(
    redis_tls: SecureRedis, pki: Pki, password_file: Path
) -> None:
    """Store, lookup (warm and batch), lookup wait (single-flight holders), invalidate
    (rule script, pub/sub, barrier), reclaim, hit records, KV warm blocks, the lease
    secret and heartbeats all run as the documented ACL user over TLS, with the
    password from a file: nothing degrades and Redis logs no denied command, key or
    channel."""
    redis_tls.admin("ACL", "LOG", "RESET")
    settings = tls_settings(
        pki,
        redis_url=redis_tls.url(acl_user()),
        redis_password_file=str(password_file),
        hot_max_entries="0",  # every hit is a warm read
        # A TLS handshake takes 0.3-0.5 s on a loaded 2-core machine: the deadlines
        # here are not what is tested.
        lookup_timeout_ms="3000",
        write_timeout_ms="3000",
        reclaim_keys_per_s="100000",
    )
    async with in_process_sidecar(settings) as sc:
        app = sc.running.app
        k, other = key("over tls"), key("also over tls")
        await store(sc, k, b"answer")
        await store(sc, other, b"other answer")
        hit = await sc.client.lookup(k, timeout=SLOW)
        assert (hit.outcome, hit.tier, hit.payload) == (
            pb.LOOKUP_OUTCOME_HIT,
            pb.TIER_WARM,
            b"answer",
        )
        batch = await sc.client.lookup_batch([k, other, key("never stored")], timeout=SLOW)
        assert [r.outcome for r in batch] == [
            pb.LOOKUP_OUTCOME_HIT,
            pb.LOOKUP_OUTCOME_HIT,
            pb.LOOKUP_OUTCOME_MISS,
        ]
        waited = await sc.client.lookup(key("never stored"), wait_ms=50, timeout=SLOW)
        assert waited.outcome == pb.LOOKUP_OUTCOME_MISS
        # Hit records as the recorder writes them (its sampling and retention policy
        # are not what is tested here): the ranking script, the record, the top list.
        await app.hits.merge(k.model_version, [(KeyDigest(hit.key_digest), 1)])
        await app.hits.attach(k.model_version, KeyDigest(hit.key_digest), b"request", 60_000)
        top = await app.hits.top(k.model_version, 10)
        assert [(t.hits, t.request) for t in top] == [(1, b"request")]
        record = await app.invalidator.invalidate(
            Selector(prompt_version=k.prompt_version), "acl test", "test"
        )
        assert record.epoch > 0
        assert (await sc.client.lookup(k, timeout=SLOW)).outcome == pb.LOOKUP_OUTCOME_MISS
        # The background reclaimer may have taken them first; either way both are gone.
        await app.reclaimer.run_pass()
        assert await app.stores.warm.get_many_with_epoch([KeyDigest(hit.key_digest)]) == (
            [None],
            record.epoch,
        )
        audit, _ = await app.stores.control.audit_page(None, 10)
        assert [r.reason for r in audit] == ["acl test"]
        assert app.stores.redis is not None
        kv = RedisKvWarmStore(app.stores.redis, key_prefix="ic:v2:", timeout_s=2)
        block = BlockKey(b"\x01" * 32)
        await kv.note_version("v1")
        await kv.put_many(
            "v1", [(block, encode_block(block, b"kv" * 16, kv.keys, "v1"))], ttl_ms=60_000
        )
        assert (await kv.get_many("v1", [block]))[0] is not None
        assert "v1" in await kv.versions()
        assert await kv.drop_version("v1") == 1
        stats = app.cache.stats
        assert (stats.warm_read_failures, stats.warm_write_failures) == (0, 0)
        # A command the ACL denies inside a scan reads as a foreign key: none may be.
        assert getattr(app.stores.warm, "foreign_keys", None) == 0
    assert redis_tls.admin("ACL", "LOG") == "", "Redis denied something to the documented ACL"


def serve(settings: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `python -m sidecar serve` with these settings until it exits (it must)."""
    argv = [sys.executable, "-m", "sidecar", "serve", "--listen", "127.0.0.1:0"]
    argv += ["--admin-listen", "", "--metrics-listen", ""]
    argv += ["--fleet-secret-file", FLEET_SECRET_FILE]
    for name, value in settings.items():
        argv += [f"--{name.replace('_', '-')}", value]
    return subprocess.run(
        argv, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=90, check=False
    )


@pytest.mark.parametrize("case", ["wrong CA", "no client certificate", "wrong password", "host"])
def test_a_misconfigured_tls_or_acl_connection_fails_the_start_naming_the_setting(
    redis_tls: SecureRedis, pki: Pki, case: str
) -> None:
    """Each refusal that no retry can heal stops `infercache serve` at start with exit
    code 2 and one line naming the setting to fix; the password never appears."""
    user = acl_user()
    settings = tls_settings(pki, redis_url=redis_tls.url(user, PASSWORD))
    expected = {
        "wrong CA": "INFERCACHE_REDIS_TLS_CA_FILE",
        "no client certificate": "INFERCACHE_REDIS_TLS_CERT_FILE",
        "wrong password": "INFERCACHE_REDIS_PASSWORD_FILE",
        "host": "INFERCACHE_REDIS_TLS_CA_FILE",
    }[case]
    if case == "wrong CA":
        settings["redis_tls_ca_file"] = str(pki.other_ca)
    elif case == "no client certificate":
        del settings["redis_tls_cert_file"], settings["redis_tls_key_file"]
    elif case == "wrong password":
        settings["redis_url"] = redis_tls.url(user, "not-" + PASSWORD)
    else:  # the certificate names localhost only
        settings["redis_url"] = redis_tls.url(user, PASSWORD, host="127.0.0.1")
    done = serve(settings)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "configuration error" in done.stderr
    assert expected in done.stderr, done.stderr[-2000:]
    assert PASSWORD not in done.stderr + done.stdout


async def test_hostname_verification_can_be_turned_off_and_is_on_by_default(
    redis_tls: SecureRedis, pki: Pki
) -> None:
    """The certificate names localhost; reached as 127.0.0.1 the sidecar serves only
    with INFERCACHE_REDIS_TLS_VERIFY_HOSTNAME=false (the chain is still verified)."""
    settings = tls_settings(
        pki,
        redis_url=redis_tls.url(acl_user(), PASSWORD, host="127.0.0.1"),
        redis_tls_verify_hostname="false",
    )
    async with in_process_sidecar(settings) as sc:
        await store(sc, key("by address"), b"ok")
        assert (await sc.client.lookup(key("by address"), timeout=SLOW)).payload == b"ok"
