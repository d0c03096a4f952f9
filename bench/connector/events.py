"""The bench's check of infercache's KV events: decoded by vLLM, hashed by a router.

An engine started with --kv-events-port publishes vLLM's KV events there; a StreamTap
in the same process (the vllm venv: pyzmq, msgspec, vLLM) subscribes to that stream
and decodes it with vLLM's own `KVEventBatch` decoder, as a router does. The driver
(project venv) then computes, with infercache_client.vllm.router_hash, the hash of
every prompt block the engine saved and counts how many were published:
`router_hash_parity` (1.0: every one).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from infercache_client.vllm.router_hash import router_block_hashes

TOPIC = "kv"


def events_config(port: int) -> Any:
    """vLLM's KVEventsConfig: a ZMQ PUB bound on `port`."""
    from vllm.config import KVEventsConfig

    return KVEventsConfig(
        enable_kv_cache_events=True, publisher="zmq", endpoint=f"tcp://*:{port}", topic=TOPIC
    )


class StreamTap:
    """Subscribes (on a thread) to the engine's own event stream; vLLM decodes it."""

    def __init__(self, port: int) -> None:
        """Connect before vLLM starts publishing (a PUB drops what nobody receives)."""
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch

        self._decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        self._ctx = zmq.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt_string(zmq.SUBSCRIBE, TOPIC)
        self._sub.connect(f"tcp://127.0.0.1:{port}")
        self._lock = threading.Lock()
        self._stored: list[dict[str, Any]] = []
        self._batches = 0
        threading.Thread(target=self._run, daemon=True, name="bench-kv-events").start()

    def _run(self) -> None:
        while True:
            _topic, _seq, payload = self._sub.recv_multipart()
            batch = self._decoder.decode(payload)
            with self._lock:
                self._batches += 1
                for event in batch.events:
                    if type(event).__name__ == "BlockStored" and event.ownership:
                        self._stored.append(_stored(event))

    def report(self) -> dict[str, Any]:
        """What was decoded so far (JSON)."""
        with self._lock:
            return {"batches": self._batches, "stored": list(self._stored)}


def _stored(event: Any) -> dict[str, Any]:
    extra = dict(tuple(pair) for pair in event.extra_keys[0]) if event.extra_keys else {}
    return {
        "hashes": [bytes(h).hex() for h in event.block_hashes],
        "medium": event.medium,
        "extra": extra,
    }


def parity(
    report: dict[str, Any], prompts: Sequence[tuple[list[int], str]], block_size: int
) -> tuple[bool, float]:
    """(whether vLLM's decoder gave infercache events, the fraction of the saved blocks
    of `prompts` ((tokens, cache_salt), each saved whole) whose router hash was published)."""
    stored = report["stored"]
    published = {h for e in stored for h in e["hashes"] if e["medium"] == "CPU"}
    scopes = {e["extra"].get("scope") for e in stored}
    if len(scopes) != 1 or None in scopes:
        return bool(stored), 0.0
    (scope_id,) = scopes
    total = found = 0
    for tokens, salt in prompts:
        saved = router_block_hashes(
            tokens, block_size, scope_id=scope_id, tenant="vllm", cache_salt=salt
        )
        total += len(saved)
        found += sum(h.hex() in published for h in saved)
    return bool(stored), found / total if total else 0.0
