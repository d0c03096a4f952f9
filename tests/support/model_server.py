"""A stand-in for the pod's model server: OpenAI-compatible HTTP in its own process.

    python -m tests.support.model_server --port P --model NAME --weights v1 [--delay-ms N]
        [--slow-s S]

Answers are a deterministic function of (weights version, prompt): `answer_for`.
tests.support.processes.ModelServerProcess starts it; restart it with other `--weights`
to play a pod whose model was upgraded.
A prompt containing one of these markers changes the answer:
    [[error]]        HTTP 500
    [[slow]]         answer after --slow-s seconds (to trip a client deadline)
    [[wrong-model]]  the response names another model
GET /stats returns {"completions": N, "prompts": [...], "models": [...], "bodies": [...]}
(bodies as received, byte for byte), recorded when a request arrives.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def answer_for(weights: str, prompt: str) -> str:
    """What the model with `weights` answers to `prompt`."""
    digest = hashlib.sha256(f"{weights}\0{prompt}".encode()).hexdigest()[:16]
    return f"[{weights}] answer {digest}"


def chat_prompt(messages: list[dict[str, str]]) -> str:
    """The prompt text a chat request stands for (what answer_for is given)."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def token_prompt(ids: list[int]) -> str:
    """The prompt text a token-id prompt stands for."""
    return "tokens:" + ",".join(str(i) for i in ids)


class _State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.prompts: list[str] = []
        self.bodies: list[str] = []
        self.models: list[str] = []


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    args = state.args

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *a: Any) -> None:
            pass

        def _send(self, status: int, doc: Any) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                listed = [{"id": m, "object": "model", "owned_by": "test"} for m in args.model]
                self._send(200, {"object": "list", "data": listed})
            elif self.path == "/stats":
                with state.lock:
                    prompts, models = list(state.prompts), list(state.models)
                    bodies = list(state.bodies)
                doc = {"completions": len(prompts), "prompts": prompts, "models": models}
                self._send(200, doc | {"bodies": bodies})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            req = json.loads(raw)
            if self.path == "/v1/chat/completions":
                prompt = chat_prompt(req["messages"])
            elif self.path == "/v1/completions":
                p = req["prompt"]
                prompt = p if isinstance(p, str) else token_prompt(p)
            else:
                self._send(404, {"error": "not found"})
                return
            with state.lock:
                state.prompts.append(prompt)
                state.bodies.append(raw.decode("utf-8"))
                state.models.append(str(req["model"]))
            if args.delay_ms:
                time.sleep(args.delay_ms / 1000)
            if "[[error]]" in prompt:
                self._send(500, {"error": {"message": "boom"}})
                return
            if "[[slow]]" in prompt:
                time.sleep(args.slow_s)
            model = "someone-else" if "[[wrong-model]]" in prompt else req["model"]
            if req["model"] not in args.model:
                self._send(404, {"error": {"message": f"model {req['model']} not served"}})
                return
            text = answer_for(args.weights, prompt)
            choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
            if self.path == "/v1/chat/completions":
                choice["message"] = {"role": "assistant", "content": text}
                kind = "chat.completion"
            else:
                choice["text"] = text
                kind = "text_completion"
            usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 3}
            usage["total_tokens"] = usage["prompt_tokens"] + 3
            self._send(
                200,
                {
                    "id": "cmpl-test",
                    "object": kind,
                    "created": 0,
                    "model": model,
                    "choices": [choice],
                    "usage": usage,
                },
            )

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--delay-ms", type=int, default=0)
    parser.add_argument("--slow-s", type=float, default=5.0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _handler(_State(args)))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
