"""A KV event subscriber as a router runs one: ZMQ SUB, decoded with vLLM's own decoder.

Runs in the vllm venv (pyzmq, msgspec and vLLM's `KVEventBatch`). Every message is
(topic, 8-byte sequence number, msgpack `KVEventBatch`), as vLLM's ZmqEventPublisher
and the sidecar's publisher send them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Seen:
    """Every event received, in order, with the sequence numbers of their batches."""

    events: list[Any] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)

    def stored(self, medium: str | None = None) -> list[Any]:
        """BlockStored events (of one medium)."""
        return [
            e
            for e in self.events
            if type(e).__name__ == "BlockStored" and (medium is None or e.medium == medium)
        ]

    def removed(self, medium: str | None = None) -> list[Any]:
        """BlockRemoved events (of one medium)."""
        return [
            e
            for e in self.events
            if type(e).__name__ == "BlockRemoved" and (medium is None or e.medium == medium)
        ]

    def stored_hashes(self, medium: str | None = None) -> set[bytes]:
        """Every hash a BlockStored of `medium` named."""
        return {h for e in self.stored(medium) for h in e.block_hashes}

    def removed_hashes(self, medium: str | None = None) -> set[bytes]:
        """Every hash a BlockRemoved of `medium` named."""
        return {h for e in self.removed(medium) for h in e.block_hashes}


class EventSubscriber:
    """SUB socket on one publisher; `collect` decodes what arrived."""

    def __init__(self, endpoint: str, topic: str = "") -> None:
        """Connect now (a PUB drops what is sent before a subscriber joined)."""
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch

        self._zmq = zmq
        self._ctx = zmq.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt_string(zmq.SUBSCRIBE, topic)
        self._sub.connect(endpoint)
        self._decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        self.seen = Seen()

    def collect(self, until: Callable[[Seen], bool], timeout_s: float = 60.0) -> Seen:
        """Receive until `until(seen)` holds or `timeout_s` passed (a generous bound on
        delivery, not a timing assertion: callers then assert on what was seen)."""
        deadline = time.monotonic() + timeout_s
        while not until(self.seen) and time.monotonic() < deadline:
            if not self._sub.poll(100):
                continue
            _topic, seq, payload = self._sub.recv_multipart()
            batch = self._decoder.decode(payload)
            self.seen.seqs.append(int.from_bytes(seq, "big"))
            self.seen.events.extend(batch.events)
        return self.seen

    def replay(self, endpoint: str, start_seq: int = 0, timeout_s: float = 10.0) -> list[Any]:
        """Ask a replay (ROUTER) socket for the batches from `start_seq`: their events."""
        zmq = self._zmq
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.connect(endpoint)
        events: list[Any] = []
        try:
            dealer.send_multipart((b"", start_seq.to_bytes(8, "big")))
            while dealer.poll(int(timeout_s * 1000)):
                _empty, _topic, seq, payload = dealer.recv_multipart()
                if int.from_bytes(seq, "big", signed=True) == -1:
                    break
                events.extend(self._decoder.decode(payload).events)
        finally:
            dealer.close(linger=0)
        return events

    def close(self) -> None:
        """Close the socket and its context."""
        self._sub.close(linger=0)
        self._ctx.term()
