"""A pod with the gateway for tests and benches: the stand-in model server and an
`infercache serve --gateway-listen` process in front of it, with API keys for tenants."""

from __future__ import annotations

import json
import re
import tempfile
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.support.checkpoints import llama_tensors, write_model
from tests.support.processes import ModelServerProcess, free_port
from tests.support.sidecars import SidecarProcess

MODEL = "tiny"
API_KEYS = {
    "acme": "sk-acme-0123456789abcdef",
    "globex": "sk-globex-0123456789abcdef",
}


def chat_body(tag: str, **fields: Any) -> dict[str, Any]:
    """A chat body for MODEL whose prompt is `tag` and a fresh uuid (never seen before),
    `fields` added."""
    doc: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"{tag} {uuid.uuid4().hex}"}],
    }
    return doc | fields


def write_keys(path: Path, keys: dict[str, str] = API_KEYS) -> Path:
    """A gateway keys file (TENANT=KEY lines)."""
    path.write_text("".join(f"{tenant}={key}\n" for tenant, key in keys.items()))
    return path


class GatewayPod:
    """Model server + sidecar with the gateway; `base_url` is what OpenAI clients use."""

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        weights: str = "v1",
        delay_ms: int = 0,
        slow_s: float = 5.0,
        model_seed: int = 1,
        noise: float = 0.0,
        **settings: Any,
    ) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="ic-gw-")
        root = Path(self._dir.name)
        self.model_dir = write_model(root / "model", llama_tensors(layers=1, seed=model_seed))
        self.keys_file = write_keys(root / "keys")
        self.upstream = ModelServerProcess().start(
            weights, delay_ms=delay_ms, slow_s=slow_s, noise=noise
        )
        self.redis_url = redis_url
        self.settings: dict[str, Any] = {
            "model_path": str(self.model_dir),
            "model_server_url": self.upstream.url,
            "gateway_keys_file": str(self.keys_file),
        } | settings
        self.sidecar: SidecarProcess | None = None
        self.start()

    def swap_weights(self, seed: int = 99) -> Path:
        """A model directory with other weights (restart with model_path set to it)."""
        root = Path(self._dir.name) / f"model-{seed}"
        return write_model(root, llama_tensors(layers=1, seed=seed))

    def switch_to(self, weights: str, **upstream: Any) -> str:
        """Play a model upgrade: stop the sidecar (its hit counts merged), restart the
        model server on `weights` (`upstream`: its start options) and the sidecar on new
        model files; the new sidecar's admin target."""
        assert self.sidecar is not None
        self.sidecar.stop()
        self.upstream.start(weights, **upstream)
        self.settings["model_path"] = str(self.swap_weights())
        self.start()
        return self.sidecar.admin_target

    def start(self) -> None:
        """(Re)start the sidecar on a new gateway port."""
        self.port = free_port()
        settings = self.settings | {"gateway_listen": f"127.0.0.1:{self.port}"}
        self.sidecar = SidecarProcess(self.redis_url, **settings)
        self.sidecar.wait_ready(timeout_s=90)  # a loaded CI machine starts slowly

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of the gateway."""
        return f"http://127.0.0.1:{self.port}/v1"

    def upstream_calls(self) -> int:
        """Completions the model server received so far."""
        return int(self.upstream.stats()["completions"])

    def post(
        self, path: str, body: Any, headers: dict[str, str] | None = None, tenant: str = "acme"
    ) -> tuple[int, dict[str, str], bytes]:
        """A raw POST (status, lower-cased headers, body); body is JSON-encoded unless bytes."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs = {"content-type": "application/json"}
        if tenant:
            hdrs["authorization"] = f"Bearer {API_KEYS[tenant]}"
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, headers=hdrs | (headers or {})
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()

    def stop(self) -> None:
        """Stop both processes and remove the files."""
        if self.sidecar is not None:
            self.sidecar.stop()
        self.upstream.stop()
        self._dir.cleanup()


def gateway_pod_retaining(redis_url: str, workdir: Path, prewarm_payload: str) -> GatewayPod:
    """A gateway pod on `redis_url` whose policy (written in `workdir`) lets acme's inputs
    be recorded for prewarm, with prewarm's payload setting `prewarm_payload`."""
    policy = workdir / "policy.yaml"
    policy.write_text("tenants:\n  acme: {retain_inputs: true}\n")
    return GatewayPod(
        redis_url,
        policy_file=str(policy),
        model_server_model=MODEL,
        prewarm_payload=prewarm_payload,
        lookup_timeout_ms=2000,
    )


def key_digest(endpoint: str, body: dict[str, Any], tenant: str = "acme") -> bytes:
    """The digest the gateway keys `body` to `endpoint` under (prompt version "p1", a
    placeholder pod fingerprint); the body must be cacheable."""
    from sidecar.keys import build_key
    from sidecar.wire.openai.keys import keyed_request

    kr = keyed_request(endpoint, body, tenant, "p1")
    assert kr.key is not None, kr.uncacheable
    return build_key(kr.key, default_model_version="fp").digest


_SALT = re.compile(r'^\{"cache_salt":"ic1-[0-9a-f]{32}",?')


def unsalted(body: str) -> str:
    """A body the gateway sent the model server, without the tenant's cache_salt it put
    first (asserted there): the body the client sent."""
    found = _SALT.match(body)
    assert found is not None, body[:120]
    return "{" + body[found.end() :]
