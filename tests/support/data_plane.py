"""A gRPC data-plane pod for shadow verification tests: the stand-in model server and an
`infercache serve` process (no gateway), whose caller computes each miss at the model
server itself and stores the answer with the request attached (`replay`)."""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from tests.support.checkpoints import llama_tensors, write_model
from tests.support.prewarm import replay_for, text_key
from tests.support.processes import ModelServerProcess
from tests.support.sidecars import SidecarProcess, run_cli


def wait_for(what: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll `what` until it is true (shadow calls run after the answers)."""
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


class DataPlanePod:
    """Model server + sidecar process; `client` talks to its data plane."""

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        delay_ms: int = 0,
        noise: float = 0.0,
        form: str = "openai_json",
        **settings: Any,
    ) -> None:
        """`form`: what the caller stores, the model server's whole body (openai_json)
        or the first choice's text (text), as prewarm stores either."""
        self._dir = tempfile.TemporaryDirectory(prefix="ic-dp-")
        root = Path(self._dir.name)
        policy = root / "policy.yaml"
        policy.write_text("tenants:\n  acme: {retain_inputs: true}\n")
        self.form = form
        self.upstream = ModelServerProcess().start("v1", delay_ms=delay_ms, noise=noise)
        self.settings: dict[str, Any] = {
            "model_path": str(write_model(root / "model", llama_tensors(layers=1, seed=1))),
            "model_server_url": self.upstream.url,
            "policy_file": str(policy),
            "lookup_timeout_ms": 2000,
        } | settings
        self.redis_url = redis_url
        self.sidecar = self._start()
        self.client = CacheClient(self.sidecar.target)

    def _start(self) -> SidecarProcess:
        sidecar = SidecarProcess(self.redis_url, **self.settings)
        sidecar.wait_ready(timeout_s=90)
        return sidecar

    def restart(self) -> None:
        """Stop the sidecar and start a new process with the same settings."""
        self.client.close()
        self.sidecar.stop()
        self.sidecar = self._start()
        self.client = CacheClient(self.sidecar.target)

    def compute(self, replay: pb.ReplayRequest) -> bytes:
        """What the caller stores for `replay`: the model server's answer in `form`."""
        req = urllib.request.Request(
            self.upstream.url + replay.path,
            data=replay.body,
            headers={"content-type": replay.content_type},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            body: bytes = resp.read()
        if self.form == "text":
            return str(json.loads(body)["choices"][0]["text"]).encode()
        return body

    def fill(self, prompt: str) -> pb.CacheKey:
        """A MISS computed by the caller and stored with its request attached."""
        k = text_key(prompt)
        miss = self.client.lookup(k)
        assert miss.outcome == pb.LOOKUP_OUTCOME_MISS, miss
        replay = replay_for(k)
        stored = self.client.store(k, self.compute(replay), lease=miss.lease, replay=replay)
        assert stored.outcome == pb.STORE_OUTCOME_STORED, stored
        return k

    def verification(self) -> dict[str, Any]:
        """The verification part of `infercache stats --json`."""
        out = run_cli("stats", "--admin", self.sidecar.admin_target, "--json")
        assert out.returncode == 0, out.stderr
        found: dict[str, Any] = json.loads(out.stdout)["verification"]
        return found

    def counts(self) -> dict[str, int]:
        """Check outcomes by KIND/RESULT (one model version here)."""
        out: dict[str, int] = {}
        for name, n in self.verification()["counts"].items():
            kind_result = name.split("/", 1)[1]
            out[kind_result] = out.get(kind_result, 0) + int(n)
        return out

    def upstream_calls(self) -> int:
        """Completions the model server received so far (the caller's included)."""
        return int(self.upstream.stats()["completions"])

    def stop(self) -> None:
        """Stop both processes and remove the files."""
        self.client.close()
        self.sidecar.stop()
        self.upstream.stop()
        self._dir.cleanup()
