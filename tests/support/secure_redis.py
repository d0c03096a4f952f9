"""A redis-server that speaks only TLS and checks ACL users, with a throwaway PKI.

The PKI is made with the `openssl` command line (installed wherever redis-server is
built with TLS; no Python dependency): a CA, a server certificate for `localhost`
only (so connecting to 127.0.0.1 fails hostname verification), a client certificate,
and a second, unrelated CA for the wrong-CA case.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import free_port, redis_binary, stop_process

ADMIN = ("admin", "admin-secret-0b8f")
"""An unrestricted ACL user, for the test's own setup and checks."""


@dataclass(frozen=True)
class Pki:
    """Paths of the throwaway certificates and keys."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(*args: str | Path) -> None:
    binary = shutil.which("openssl")
    assert binary, "the openssl command line is needed to make the test PKI"
    subprocess.run([binary, *map(str, args)], check=True, capture_output=True, timeout=60)


def _ca(root: Path, name: str) -> tuple[Path, Path]:
    key, cert = root / f"{name}.key", root / f"{name}.crt"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name}",
    )  # fmt: skip
    return cert, key


def _leaf(root: Path, name: str, ca: tuple[Path, Path], ext: str) -> tuple[Path, Path]:
    key, csr, cert, extfile = (root / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
    extfile.write_text(ext + "\n")
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", key, "-out", csr, "-subj", f"/CN={name}",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
        "-out", cert, "-days", "2", "-extfile", extfile,
    )  # fmt: skip
    return cert, key


def make_pki(root: Path) -> Pki:
    """Write a CA, a server certificate for DNS:localhost, a client certificate and an
    unrelated CA under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    ca = _ca(root, "infercache-test-ca")
    server = _leaf(
        root, "localhost", ca, "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth"
    )
    client = _leaf(root, "sidecar-client", ca, "extendedKeyUsage=clientAuth")
    other, _ = _ca(root, "some-other-ca")
    return Pki(ca[0], server[0], server[1], client[0], client[1], other)


class SecureRedis:
    """redis-server on 127.0.0.1 with `--port 0` (no plaintext) and a TLS port that
    requires client certificates; the default user is off, ADMIN plus `acl_lines`
    (`user NAME ...` directives) are the users."""

    def __init__(self, pki: Pki, acl_lines: list[str]) -> None:
        self.pki = pki
        self.port = free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="ic-tls-redis-")
        conf = Path(self._dir.name) / "redis.conf"
        lines = [
            "port 0",
            f"tls-port {self.port}",
            "bind 127.0.0.1",
            f"tls-cert-file {pki.server_cert}",
            f"tls-key-file {pki.server_key}",
            f"tls-ca-cert-file {pki.ca}",
            "tls-auth-clients yes",
            'save ""',
            "appendonly no",
            f"dir {self._dir.name}",
            "user default off",
            f"user {ADMIN[0]} on >{ADMIN[1]} ~* &* +@all",
            *acl_lines,
        ]
        conf.write_text("\n".join(lines) + "\n")
        self.proc = subprocess.Popen(
            [redis_binary(), str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while self.admin("PING") != "PONG":
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the TLS redis-server did not start; check its config")
            time.sleep(0.05)

    def url(self, user: str = "", password: str = "", host: str = "localhost") -> str:
        """rediss:// URL of this server, with credentials when given."""
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        return f"rediss://{auth}{host}:{self.port}/0"

    def admin(self, *command: str) -> str:
        """Run a command as ADMIN over TLS with redis-cli; its output, stripped."""
        argv = [
            "redis-cli", "--tls", "--cacert", str(self.pki.ca), "--cert",
            str(self.pki.client_cert), "--key", str(self.pki.client_key), "-h", "localhost",
            "-p", str(self.port), "--user", ADMIN[0], "--pass", ADMIN[1], "--no-auth-warning",
            *command,
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        return done.stdout.strip()

    def stop(self) -> None:
        """Stop the server and remove its files."""
        stop_process(self.proc)
        self._dir.cleanup()
