"""A stand-in for the pod's model server: OpenAI-compatible HTTP in its own process.

    python -m tests.support.model_server --port P --model NAME --weights v1 [--delay-ms N]
        [--slow-s S] [--stream-fault cut|no-done|mid-event|reset]

Answers are a deterministic function of (weights version, prompt): `answer_for`.
tests.support.processes.ModelServerProcess starts it; restart it with other `--weights`
to play a pod whose model was upgraded.
A prompt containing one of these markers changes the answer:
    [[error]]        HTTP 500
    [[slow]]         answer after --slow-s seconds (to trip a client deadline)
    [[wrong-model]]  the response names another model
    [[cut]]          (stream) ends after the first content chunk: no finish_reason, no [DONE]
    [[no-done]]      (stream) every chunk and the finish_reason, but no [DONE]
    [[trickle]]      (stream) a content chunk every 0.2 s for --slow-s seconds
    [[error-event]]  (stream) an error event after the first chunk, then [DONE]
    [[linger]]       (stream) the connection stays open 1 s after [DONE] before it ends
    [[keepalive]]    (stream) a comment event (`: ping`) before each chunk, as some
                     servers and proxies send to keep a connection open
    [[rate-limited]] HTTP 429 with Retry-After: 7, X-Request-Id: req-429 and
                     x-ratelimit-remaining-requests: 0
    [[finish=R]]     every choice finishes with finish_reason R (e.g. abort, error,
                     content_filter) instead of stop; body and stream otherwise as usual
    [[framed]]       (stream, every API) the whole stream in one write framed by its
                     Content-Length: the body's end arrives with its last event
POST /v1/responses answers as vLLM does (tests/support/model_server_responses.py).
`stream: true` answers with SSE chunks of the same text, one per word (a usage chunk
when stream_options.include_usage); `n` asks for n choices (choice i > 0 says " #i"
after the text); POST /v1/embeddings answers a vector derived from (weights, input);
POST /v1/messages answers as vLLM's Messages API does (tests/support/anthropic_server.py).
--stream-fault breaks every stream (a server whose bodies were recorded elsewhere):
    cut        like [[cut]]
    no-done    like [[no-done]]
    mid-event  the first event, then half of the next one, and the connection closes
    reset      the first event, then the connection is reset (TCP RST)
--noise F plays an engine that is not bitwise reproducible: each answer differs, with
probability F, from the one answer_for gives (a random suffix; --noise-seed seeds it).
POST /control {"system_prompt": S} plays a behaviour change under the same weights: from
then on every prompt is answered as if S were prepended (a new default system prompt).
GET /stats returns {"completions": N, "prompts": [...], "models": [...], "bodies": [...],
"aborted": N} (bodies as received, byte for byte, recorded when a request arrives;
aborted: streams whose client went away before the end).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

if __package__:
    from tests.support.anthropic_server import message_body, message_events, messages_prompt
else:  # run as a script (bench/gateway/servers.py): this directory is first on sys.path
    from anthropic_server import (  # type: ignore[import-not-found,no-redef]
        message_body,
        message_events,
        messages_prompt,
    )
try:
    from tests.support import model_server_responses as responses
except ImportError:  # run as a script (bench.gateway): this directory is on sys.path
    import model_server_responses as responses  # type: ignore[import-not-found,no-redef]

_FINISH = re.compile(r"\[\[finish=([a-z_]+)\]\]")


def finish_reason_for(prompt: str) -> str:
    """The finish_reason of every choice: the [[finish=R]] marker's R, else stop."""
    found = _FINISH.search(prompt)
    return found.group(1) if found else "stop"


def answer_for(weights: str, prompt: str) -> str:
    """What the model with `weights` answers to `prompt`."""
    digest = hashlib.sha256(f"{weights}\0{prompt}".encode()).hexdigest()[:16]
    return f"[{weights}] answer {digest}"


def chat_prompt(messages: list[dict[str, Any]]) -> str:
    """The prompt text a chat request stands for (what answer_for is given)."""
    return "\n".join(f"{m['role']}: {_text(m.get('content'))}" for m in messages)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content)


def embedding_for(weights: str, text: str) -> list[float]:
    """The vector the model with `weights` gives `text` (8 dimensions)."""
    digest = hashlib.sha256(f"{weights}\0emb\0{text}".encode()).digest()
    return [round(b / 255, 6) for b in digest[:8]]


def stream_pieces(text: str) -> list[str]:
    """How a streamed answer is cut: one piece per word, spaces kept."""
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


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
        self.aborted = 0
        self.system_prompt = ""
        self.rng = random.Random(args.noise_seed)


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    args = state.args

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes; with Nagle on, the body waits for the
        # client's delayed ACK of the headers (~40 ms on Linux). Model servers (uvicorn:
        # vLLM, SGLang) set TCP_NODELAY, and so does this stand-in.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *a: Any) -> None:
            pass

        def _send(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _framed(self, events: list[bytes]) -> None:
            # As a server (or a proxy) that buffers a stream sends it: the framing's end
            # arrives with the last event, not after it.
            body = b"".join(events)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
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
                self._send(200, doc | {"bodies": bodies, "aborted": state.aborted})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            req = json.loads(raw)
            if self.path == "/control":
                with state.lock:
                    state.system_prompt = str(req.get("system_prompt", ""))
                self._send(200, {"system_prompt": state.system_prompt})
                return
            if self.path == "/v1/chat/completions":
                prompt = chat_prompt(req["messages"])
            elif self.path == "/v1/completions":
                p = req["prompt"]
                prompt = p if isinstance(p, str) else token_prompt(p)
            elif self.path == "/v1/embeddings":
                prompt = _text(req["input"])
            elif self.path == "/v1/messages":
                prompt = messages_prompt(req)
            elif self.path == "/v1/responses":
                prompt = responses.responses_prompt(req)
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
            if "[[rate-limited]]" in prompt:
                limited = {"Retry-After": "7", "X-Request-Id": "req-429"}
                limited |= {"x-ratelimit-remaining-requests": "0", "X-Other": "kept-back"}
                self._send(429, {"error": {"message": "slow down"}}, limited)
                return
            if "[[slow]]" in prompt:
                time.sleep(args.slow_s)
            model = "someone-else" if "[[wrong-model]]" in prompt else req["model"]
            if req["model"] not in args.model:
                self._send(404, {"error": {"message": f"model {req['model']} not served"}})
                return
            if self.path == "/v1/embeddings":
                vector = embedding_for(args.weights, prompt)
                item = {"object": "embedding", "index": 0, "embedding": vector}
                usage = {"prompt_tokens": len(prompt.split()), "total_tokens": len(prompt.split())}
                doc = {"object": "list", "data": [item], "model": model, "usage": usage}
                self._send(200, doc | {"id": "embd-test", "created": 0})
                return
            with state.lock:
                said_first = state.system_prompt
                noisy = args.noise and state.rng.random() < args.noise
                variant = state.rng.randrange(10**9)
            text = answer_for(args.weights, said_first + prompt)
            if noisy:
                text = f"{text} ~{variant}"
            if self.path == "/v1/messages":
                self._messages(req, model, prompt, text)
                return
            if self.path == "/v1/responses":
                self._responses(req, model, prompt, text)
                return
            if req.get("stream"):
                self._stream(req, model, prompt, text)
                return
            choices: list[dict[str, Any]] = []
            for i in range(int(req.get("n") or 1)):
                choice: dict[str, Any] = {"index": i, "finish_reason": finish_reason_for(prompt)}
                said = text if i == 0 else f"{text} #{i}"
                if self.path == "/v1/chat/completions":
                    choice["message"] = {"role": "assistant", "content": said}
                    kind = "chat.completion"
                else:
                    choice["text"] = said
                    kind = "text_completion"
                choices.append(choice)
            usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 3}
            usage["total_tokens"] = usage["prompt_tokens"] + 3
            self._send(
                200,
                {
                    "id": "cmpl-test",
                    "object": kind,
                    "created": 0,
                    "model": model,
                    "choices": choices,
                    "usage": usage,
                },
            )

        def _messages(self, req: dict[str, Any], model: str, prompt: str, text: str) -> None:
            if not req.get("stream"):
                self._send(200, message_body(model, prompt, text))
                return
            if "[[framed]]" in prompt:
                self._framed(message_events(model, prompt, stream_pieces(text)))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in message_events(model, prompt, stream_pieces(text)):
                self.wfile.write(event)
                self.wfile.flush()
            self.close_connection = True

        def _responses(self, req: dict[str, Any], model: str, prompt: str, text: str) -> None:
            if not req.get("stream"):
                self._send(200, responses.whole_answer(req, model, prompt, text))
                return
            if "[[framed]]" in prompt:
                self._framed(responses.stream_events(req, model, prompt, stream_pieces(text)))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for event in responses.stream_events(req, model, prompt, stream_pieces(text)):
                    self.wfile.write(event)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                with state.lock:
                    state.aborted += 1
            self.close_connection = True

        def _stream(self, req: dict[str, Any], model: str, prompt: str, text: str) -> None:
            chat = self.path == "/v1/chat/completions"
            head = {
                "id": "cmpl-stream-test",
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": 0,
                "model": model,
            }
            events: list[dict[str, Any]] = []
            n = int(req.get("n") or 1)
            pieces = stream_pieces(text)
            for idx in range(n):
                said = pieces if idx == 0 else stream_pieces(f"{text} #{idx}")
                for i, piece in enumerate(said):
                    if chat:
                        delta = {"content": piece} | ({"role": "assistant"} if i == 0 else {})
                        choice: dict[str, Any] = {"index": idx, "delta": delta}
                    else:
                        choice = {"index": idx, "text": piece}
                    events.append(head | {"choices": [choice | {"finish_reason": None}]})
            for idx in range(n):
                final: dict[str, Any] = {"index": idx, "finish_reason": finish_reason_for(prompt)}
                if chat:
                    final["delta"] = {}
                else:
                    final["text"] = ""
                events.append(head | {"choices": [final]})
            if (req.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(pieces)}
                events.append(head | {"choices": [], "usage": usage})
            fault = args.stream_fault
            if "[[cut]]" in prompt or fault in ("cut", "mid-event", "reset"):
                events = events[:1]
            if "[[error-event]]" in prompt:
                events = [*events[:1], {"error": {"message": "engine died", "code": 500}}]
            if "[[framed]]" in prompt:
                framed = [b"data: " + json.dumps(event).encode() + b"\n\n" for event in events]
                if "[[cut]]" not in prompt and "[[no-done]]" not in prompt:
                    framed.append(b"data: [DONE]\n\n")
                self._framed(framed)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for i, event in enumerate(events):
                    if "[[keepalive]]" in prompt:
                        self.wfile.write(b": ping\n\n")
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                    self.wfile.flush()
                    if "[[trickle]]" in prompt and i == 0:
                        deadline = time.monotonic() + args.slow_s
                        while time.monotonic() < deadline:
                            time.sleep(0.2)
                            # A comment line: keeps writing, so a gone client is noticed.
                            self.wfile.write(b": tick\n\n")
                            self.wfile.flush()
                if fault == "mid-event":
                    half = b"data: " + json.dumps(head | {"choices": []}).encode()
                    self.wfile.write(half[: len(half) // 2])
                    self.wfile.flush()
                elif fault == "reset":
                    # SO_LINGER 0: close() sends RST, an abort rather than an end.
                    linger = struct.pack("ii", 1, 0)
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    # Closed now: the server would end it with shutdown(SHUT_WR), a FIN.
                    self.connection.close()
                elif "[[cut]]" not in prompt and "[[no-done]]" not in prompt and not fault:
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    if "[[linger]]" in prompt:
                        time.sleep(1.0)  # a client may close on [DONE], before the end
            except (BrokenPipeError, ConnectionResetError):
                with state.lock:
                    state.aborted += 1
            self.close_connection = True

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--delay-ms", type=int, default=0)
    parser.add_argument("--slow-s", type=float, default=5.0)
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--noise-seed", type=int, default=0)
    parser.add_argument(
        "--stream-fault", choices=("cut", "no-done", "mid-event", "reset"), default=""
    )
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _handler(_State(args)))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
