"""HTTP/1.1 over a plain socket, for probes an HTTP client would normalise away
(duplicate headers, chunked or lying bodies, raw bytes)."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RawResponse:
    """A parsed response: status, headers (lower-cased names, repeated ones kept), body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header `name`, None when absent."""
        return next((v for k, v in self.headers if k == name.lower()), None)

    def error(self) -> dict[str, Any]:
        """The OpenAI-style error object of the body (KeyError / ValueError otherwise)."""
        doc = json.loads(self.body)
        err = doc["error"]
        assert set(err) == {"message", "type", "param", "code"}, err
        return dict(err)


def request(
    port: int,
    method: str,
    path: str,
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
    *,
    chunks: list[bytes] | None = None,
    content_length: bool = True,
    timeout_s: float = 30.0,
) -> RawResponse:
    """One request on a fresh connection (`Connection: close`); `chunks`: send the body
    chunked; `content_length=False`: send no framing header for `body`."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers or []]
    if chunks is not None:
        lines.append("Transfer-Encoding: chunked")
        payload = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    else:
        if content_length and (body or method in ("POST", "PUT")):
            lines.append(f"Content-Length: {len(body)}")
        payload = body
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(head + payload)
        if not content_length and chunks is None:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while piece := sock.recv(65536):
            data += piece
    return parse(data, head_only=method == "HEAD")


def parse(data: bytes, *, head_only: bool = False) -> RawResponse:
    """Parse one HTTP/1.1 response (Content-Length, chunked, or until close)."""
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ", 2)[1])
    headers = []
    for line in header_lines:
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    found = dict(headers)
    if head_only:
        return RawResponse(status, headers, rest)
    if found.get("transfer-encoding") == "chunked":
        body = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            body, rest = body + rest[:size], rest[size + 2 :]
        return RawResponse(status, headers, body)
    if "content-length" in found:
        return RawResponse(status, headers, rest[: int(found["content-length"])])
    return RawResponse(status, headers, rest)


def refused(
    resp: RawResponse, status: int, param: str | None = None, code: str | None = None
) -> Any:
    """Assert an OpenAI-style JSON refusal with this status (and param, code when given);
    returns the error object."""
    assert resp.status == status, (resp.status, resp.body)
    assert resp.header("content-type") == "application/json"
    err = resp.error()
    assert err["message"]
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


@dataclass(frozen=True)
class Http10Response:
    """A response read the way a strict HTTP/1.0 client reads it (RFC 1945: a body is
    framed by Content-Length or ends when the server closes; no chunked coding)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    framing: str
    """"length" (Content-Length) or "close" (the body ended when the connection did)."""

    def header(self, name: str) -> str | None:
        """The first value of header `name`, None when absent."""
        return next((v for k, v in self.headers if k == name.lower()), None)


def request_http10(
    port: int, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b""
) -> Http10Response:
    """One `HTTP/1.0` request (its body framed by Content-Length), the response read
    until the server closes the connection. AssertionError when the response is not
    one an HTTP/1.0 client can read: Transfer-Encoding (RFC 9112 6.1 forbids it on an
    answer to 1.0), or a Content-Length the body does not match exactly."""
    lines = [f"{method} {path} HTTP/1.0", f"Host: 127.0.0.1:{port}"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + body)
        data = b""
        while piece := sock.recv(65536):
            data += piece
    raw_head, sep, rest = data.partition(b"\r\n\r\n")
    assert sep, data[:200]
    status_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
    version, code, _ = status_line.split(" ", 2)
    assert version in ("HTTP/1.0", "HTTP/1.1"), status_line
    found = []
    for line in header_lines:
        name, colon, value = line.partition(":")
        assert colon, line
        assert name == name.strip(), line  # no space before the colon (RFC 9112 5.1)
        found.append((name.lower(), value.strip()))
    names = [name for name, _ in found]
    assert "transfer-encoding" not in names, found
    if "content-length" not in names:
        return Http10Response(int(code), found, rest, "close")
    assert names.count("content-length") == 1, found
    length = int(dict(found)["content-length"])
    assert len(rest) == length, (length, rest[:200])
    return Http10Response(int(code), found, rest, "length")
