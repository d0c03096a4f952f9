"""Real X.509 certificates for TLS tests, made with the `openssl` command line."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


def have_openssl() -> bool:
    """Whether the `openssl` command is on PATH."""
    return shutil.which("openssl") is not None


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its key, as PEM files."""

    cert: str
    key: str


def make_ca(directory: Path, name: str) -> Issued:
    """A self-signed CA (EC P-256) named `name`."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return Issued(str(cert), str(key))


def issue(directory: Path, ca: Issued, name: str, *, server: bool) -> Issued:
    """A leaf certificate signed by `ca`: for a server (names localhost and 127.0.0.1)
    or for a client."""
    cert, key, csr = (directory / f"{name}{ext}" for ext in (".crt", ".key", ".csr"))
    ext = directory / f"{name}.ext"
    usage = "serverAuth" if server else "clientAuth"
    lines = ["basicConstraints=CA:FALSE", f"extendedKeyUsage={usage}"]
    if server:
        lines.append("subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:admin.infercache.test")
    ext.write_text("\n".join(lines) + "\n")
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(ext),
    )  # fmt: skip
    return Issued(str(cert), str(key))
