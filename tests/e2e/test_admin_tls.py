"""The admin plane over TLS: real certificates (openssl), a real sidecar process, real
sockets; the Python AdminClient and the `infercache admin` CLI as clients."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from infercache_client.admin import AdminClient

from sidecar.config import ConfigError, load_config
from tests.support.certs import Issued, have_openssl, issue, make_ca
from tests.support.sidecars import TOKENS, SidecarProcess, cli_env, run_cli

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not have_openssl(), reason="needs the openssl command"),
]

TOKEN = TOKENS["deployer"]


@dataclass(frozen=True, slots=True)
class Pki:
    """A CA with a server and a client certificate, and a client of another CA."""

    ca: Issued
    server: Issued
    client: Issued
    stranger: Issued


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca, other = make_ca(d, "fleet-ca"), make_ca(d, "other-ca")
    return Pki(
        ca,
        issue(d, ca, "admin-server", server=True),
        issue(d, ca, "pipeline", server=False),
        issue(d, other, "stranger", server=False),
    )


def _sidecar(pki: Pki, *, mtls: bool) -> SidecarProcess:
    proc = SidecarProcess(
        None,
        admin_tls_cert_file=pki.server.cert,
        admin_tls_key_file=pki.server.key,
        admin_tls_client_ca_file=pki.ca.cert if mtls else "",  # empty: no client CA
    )
    proc.wait_ready()
    return proc


@pytest.fixture(scope="module")
def tls_sidecar(pki: Pki) -> Iterator[SidecarProcess]:
    proc = _sidecar(pki, mtls=False)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def mtls_sidecar(pki: Pki) -> Iterator[SidecarProcess]:
    proc = _sidecar(pki, mtls=True)
    yield proc
    proc.stop()


def _stats(target: str, **tls: str) -> None:
    with AdminClient(target, TOKEN, **tls) as admin:
        admin.stats(timeout=5)


def _refused(target: str, **tls: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        _stats(target, **tls)
    return caught.value


def test_admin_plane_serves_tls_verified_against_the_ca(
    pki: Pki, tls_sidecar: SidecarProcess
) -> None:
    """With a certificate configured, AdminClient with the CA completes a call (also by
    IP with the certificate's other name checked), and a plaintext client is refused
    (before: the admin plane was plaintext only)."""
    target = tls_sidecar.admin_target
    _stats(target, tls_ca_file=pki.ca.cert)
    _stats(target, tls_ca_file=pki.ca.cert, tls_server_name="admin.infercache.test")
    assert _refused(target).code() == grpc.StatusCode.UNAVAILABLE
    # A CA that did not sign the listener's certificate: the client refuses the server.
    wrong = _refused(target, tls_ca_file=pki.stranger.cert, tls_server_name="localhost")
    assert wrong.code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_refuses_a_client_without_a_certificate_of_the_fleet_ca(
    pki: Pki, mtls_sidecar: SidecarProcess
) -> None:
    """With a client CA, a client without a certificate, or with one another CA signed,
    is refused in the handshake; one the CA signed gets through."""
    target = mtls_sidecar.admin_target
    assert _refused(target, tls_ca_file=pki.ca.cert).code() == grpc.StatusCode.UNAVAILABLE
    stranger = _refused(
        target,
        tls_ca_file=pki.ca.cert,
        tls_cert_file=pki.stranger.cert,
        tls_key_file=pki.stranger.key,
    )
    assert stranger.code() == grpc.StatusCode.UNAVAILABLE
    _stats(
        target,
        tls_ca_file=pki.ca.cert,
        tls_cert_file=pki.client.cert,
        tls_key_file=pki.client.key,
    )


def test_the_cli_connects_with_tls_and_a_client_certificate(
    pki: Pki, mtls_sidecar: SidecarProcess
) -> None:
    """`infercache audit` with --tls-ca-file and a client certificate works against
    the mTLS listener; without the certificate it fails."""
    base = ["audit", "--admin", mtls_sidecar.admin_target, "--timeout", "5"]
    tls = ["--tls-ca-file", pki.ca.cert]
    client = ["--tls-cert-file", pki.client.cert, "--tls-key-file", pki.client.key]
    ok = run_cli(*base, *tls, *client, env=cli_env())
    assert ok.returncode == 0, ok.stderr
    refused = run_cli(*base, *tls, env=cli_env())
    assert refused.returncode != 0


def test_admin_tls_settings_that_do_not_fit_are_refused(pki: Pki, tmp_path: Path) -> None:
    """A certificate without its key, a client CA without a certificate, and a missing
    file stop the start naming the setting."""
    cases = [
        ({"INFERCACHE_ADMIN_TLS_CERT_FILE": pki.server.cert}, "go together"),
        ({"INFERCACHE_ADMIN_TLS_CLIENT_CA_FILE": pki.ca.cert}, "needs INFERCACHE_ADMIN_TLS_CERT"),
        (
            {
                "INFERCACHE_ADMIN_TLS_CERT_FILE": str(tmp_path / "missing.crt"),
                "INFERCACHE_ADMIN_TLS_KEY_FILE": pki.server.key,
            },
            "INFERCACHE_ADMIN_TLS_CERT_FILE: ",
        ),
    ]
    for environ, message in cases:
        with pytest.raises(ConfigError, match=message):
            load_config(environ)
