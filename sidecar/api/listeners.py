"""Binding the gRPC servers' addresses, with errors that name the setting (before gRPC's
C core prints its own line)."""

from __future__ import annotations

import errno
import os
import socket

import grpc


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


def listen(server: grpc.aio.Server, addresses: tuple[str, ...], variable: str) -> list[int]:
    """Bind each address; OSError naming `variable` (the setting) when one cannot be."""
    ports = []
    for addr in addresses:
        try:
            check_bindable(addr)
            ports.append(server.add_insecure_port(addr))
        except RuntimeError as exc:
            raise OSError(f"{variable}: cannot listen on {addr}: {exc}") from exc
        except OSError as exc:
            raise OSError(f"{variable}: {exc}") from exc
    return ports
