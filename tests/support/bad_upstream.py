"""A model server that misbehaves on request, in its own process (for the gateway's tests).

    python -m tests.support.bad_upstream --port P [--slow-s S] [--huge-bytes N]

POST /v1/chat/completions answers like an OpenAI server unless the last message holds
one of these markers:
    [[not-json]]     200, application/json, but the body is HTML
    [[no-choices]]   200, a JSON object without `choices`
    [[cut-body]]     200, Content-Length promises more than is sent, then the socket closes
    [[gzip]]         the answer gzip-compressed (Content-Encoding: gzip), when the
                     request's Accept-Encoding allows gzip; plain otherwise
    [[gzip-always]]  the answer gzip-compressed whatever the request accepts
    [[slow]]         the answer after --slow-s seconds
    [[huge]]         a valid answer whose content is --huge-bytes long
    [[stream-cut]]   (stream) the first event, then the socket closes mid-body
GET /v1/models lists `tiny`; GET /stats returns {"completions": N, "accept_encodings": [...]}.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.processes import REPO, free_port, stop_process

MODEL = "tiny"


def answer(prompt: str, content: str) -> dict[str, Any]:
    """A whole chat answer."""
    return {
        "id": "chatcmpl-bad",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class BadUpstream:
    """Starts and stops `python -m tests.support.bad_upstream` on a free port."""

    def __init__(self, *, slow_s: float = 5.0, huge_bytes: int = 1 << 20) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "tests.support.bad_upstream", "--port", str(self.port)]
        args += ["--slow-s", str(slow_s), "--huge-bytes", str(huge_bytes)]
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                self.stats()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("bad upstream did not start") from None
                time.sleep(0.05)

    def stats(self) -> dict[str, Any]:
        """{"completions": N, "accept_encodings": [...]} since it started."""
        with urllib.request.urlopen(self.url + "/stats", timeout=5) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
            return doc

    def stop(self) -> None:
        """Terminate it."""
        stop_process(self.proc)
        self.proc = None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slow-s", type=float, default=5.0)
    parser.add_argument("--huge-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    lock = threading.Lock()
    stats: dict[str, Any] = {"completions": 0, "accept_encodings": []}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *a: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for k, v in ({"Content-Type": "application/json"} | (headers or {})).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/stats":
                with lock:
                    self._send(200, json.dumps(stats).encode())
            else:
                listed = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
                self._send(200, json.dumps(listed).encode())

        def do_POST(self) -> None:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            prompt = str(req["messages"][-1]["content"])
            accept = self.headers.get("Accept-Encoding", "")
            with lock:
                stats["completions"] += 1
                stats["accept_encodings"].append(accept)
            body = json.dumps(answer(prompt, f"echo: {prompt}")).encode()
            if "[[slow]]" in prompt:
                time.sleep(args.slow_s)
            if "[[not-json]]" in prompt:
                self._send(200, b"<html><body>502 Bad Gateway</body></html>")
            elif "[[no-choices]]" in prompt:
                self._send(200, json.dumps({"id": "x", "object": "chat.completion"}).encode())
            elif "[[cut-body]]" in prompt:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
            elif ("[[gzip]]" in prompt and "gzip" in accept) or "[[gzip-always]]" in prompt:
                self._send(200, gzip.compress(body), {"Content-Encoding": "gzip"})
            elif "[[huge]]" in prompt:
                self._send(200, json.dumps(answer(prompt, "x" * args.huge_bytes)).encode())
            elif "[[stream-cut]]" in prompt and req.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0}
                chunk |= {"model": MODEL, "choices": [{"index": 0, "delta": {"content": "hi"}}]}
                event = b"data: " + json.dumps(chunk).encode() + b"\n\n"
                # One chunk of the chunked body, then the socket closes: no last chunk.
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
                self.close_connection = True
            else:
                self._send(200, body)

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
