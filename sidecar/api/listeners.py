"""Binding the gRPC servers' addresses, with errors that name the setting (before gRPC's
C core prints its own line), plaintext or TLS (the admin plane's certificate, and
optionally the CA its clients' certificates must chain to)."""

from __future__ import annotations

import errno
import os
import socket

import grpc

from sidecar.config import AdminConfig

MAX_PEM_BYTES = 1024 * 1024


def check_bindable(addr: str) -> None:
    """OSError naming `addr` when a TCP HOST:PORT cannot be bound (port in use, no such
    address), before gRPC tries: gRPC would also print its own C-core error line."""
    if addr.startswith("unix:"):
        _check_socket_dir(addr)
        return
    host, _, port = addr.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return  # kernel-picked ports: nothing to check
    try:
        infos = socket.getaddrinfo(
            host.strip("[]") or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise OSError(f"cannot listen on {addr}: {exc.strerror}") from exc
    failures: list[OSError] = []
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            # As gRPC binds: SO_REUSEADDR, so a port in TIME_WAIT is not reported as taken.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                failures.append(exc)
    # gRPC listens if any resolved address binds (e.g. localhost without IPv6), but a
    # port someone else holds is an error on any of them.
    in_use = [e for e in failures if e.errno == errno.EADDRINUSE]
    if in_use or (failures and len(failures) == len(infos)):
        first = (in_use or failures)[0]
        raise OSError(f"cannot listen on {addr}: {first.strerror}") from first


def _check_socket_dir(addr: str) -> None:
    """OSError naming `addr` when a unix:PATH socket's directory is missing or not
    writable (gRPC's bind would fail there, printing its own C-core error line first)."""
    path = addr.removeprefix("unix:")
    path = "/" + path.removeprefix("//").lstrip("/") if path.startswith("//") else path
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OSError(f"cannot listen on {addr}: no such directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OSError(f"cannot listen on {addr}: cannot create a socket in {parent}")


def listen(
    server: grpc.aio.Server,
    addresses: tuple[str, ...],
    variable: str,
    credentials: grpc.ServerCredentials | None = None,
) -> list[int]:
    """Bind each address, with TLS when `credentials` are given; OSError naming
    `variable` (the setting) when one cannot be."""
    ports = []
    for addr in addresses:
        try:
            check_bindable(addr)
            if credentials is None:
                ports.append(server.add_insecure_port(addr))
            else:
                ports.append(server.add_secure_port(addr, credentials))
        except RuntimeError as exc:
            raise OSError(f"{variable}: cannot listen on {addr}: {exc}") from exc
        except OSError as exc:
            raise OSError(f"{variable}: {exc}") from exc
    return ports


def admin_credentials(admin: AdminConfig) -> grpc.ServerCredentials | None:
    """TLS credentials of the admin listener (None: plaintext): its certificate and key,
    and, with INFERCACHE_ADMIN_TLS_CLIENT_CA_FILE, a client certificate that CA signed
    required on every connection. OSError naming the setting of an unreadable file."""
    if not admin.tls_cert_file or not admin.tls_key_file:
        return None
    chain = _pem(admin.tls_cert_file, "INFERCACHE_ADMIN_TLS_CERT_FILE")
    key = _pem(admin.tls_key_file, "INFERCACHE_ADMIN_TLS_KEY_FILE")
    client_ca = admin.tls_client_ca_file
    roots = _pem(client_ca, "INFERCACHE_ADMIN_TLS_CLIENT_CA_FILE") if client_ca else None
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=roots, require_client_auth=roots is not None
    )


def _pem(path: str, variable: str) -> bytes:
    """A PEM file's bytes; OSError naming `variable` (never quoting the content)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise OSError(f"{variable}: cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_PEM_BYTES or b"-----BEGIN " not in data:
        raise OSError(f"{variable}: {path} is not a PEM file")
    return data
