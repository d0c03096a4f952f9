"""ZMQ PUB + replay ROUTER publisher of KV event batches, as vLLM's ZmqEventPublisher.

Wire: each batch is sent as (topic, 8-byte big-endian sequence number, msgpack
KVEventBatch) on the PUB socket; sequence numbers start at 0 with each process. The
last `buffer_batches` batches are kept: a client sends (b"", start_seq as 8 bytes)
to the replay ROUTER socket and gets every kept batch from start_seq as
(b"", topic, seq, payload), then (b"", b"", -1 as 8 signed bytes, b"").

The event loop only queues (`publish`, bounded: when full the batch is dropped and
counted); one thread owns both sockets, encodes (msgspec, vLLM's encoder) and sends.
The only module that imports zmq and msgspec (the `events` extra).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import Sequence

import msgspec
import structlog
import zmq

from sidecar.events.builder import Event, batch_wire
from sidecar.events.recorder import PublisherStats

log = structlog.get_logger("infercache.events")

END_SEQ = (-1).to_bytes(8, "big", signed=True)
BIND_TIMEOUT_S = 10.0


def is_bind_endpoint(endpoint: str) -> bool:
    """vLLM's rule: bind wildcard and ipc/inproc endpoints, connect to the rest."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


class ZmqEventPublisher:
    """Publishes event batches on `endpoint`, replays them on `replay_endpoint`."""

    def __init__(
        self,
        endpoint: str,
        replay_endpoint: str = "",
        *,
        topic: str = "",
        buffer_batches: int = 10_000,
        max_queue: int = 100_000,
        hwm: int = 100_000,
    ) -> None:
        """Nothing is opened until `start`."""
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self._topic = topic.encode()
        self._hwm = hwm
        self._queue: queue.Queue[tuple[float, Sequence[Event]] | None] = queue.Queue(max_queue)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_batches)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self.stats = PublisherStats()
        """published and send_failures: thread-written; dropped: event-loop-written."""

    def start(self) -> None:
        """Open and bind/connect the sockets on the publisher thread; raises what the
        binding raised (a taken port, a bad address)."""
        self._thread.start()
        if not self._ready.wait(BIND_TIMEOUT_S):
            raise RuntimeError(f"KV event publisher did not open {self.endpoint} in time")
        if self._error is not None:
            self._thread.join()
            raise self._error

    def publish(self, ts: float, events: Sequence[Event]) -> bool:
        """Queue a batch; never blocks. False (dropped, counted) when full or closed."""
        if self._closed:
            return False
        try:
            self._queue.put_nowait((ts, events))
        except queue.Full:
            self.stats.dropped += 1
            if self.stats.dropped == 1 or self.stats.dropped % 1000 == 0:
                log.warning("kv_events_dropped", batches=self.stats.dropped, why="queue full")
            return False
        return True

    def close(self, timeout_s: float = 1.0) -> None:
        """Send what is queued (for at most timeout_s), then close the sockets. Blocks:
        call it from a worker thread in a server."""
        if self._closed:
            return
        self._closed = True
        if not self._thread.is_alive():
            return
        with contextlib.suppress(queue.Full):  # the thread sees _closed at its next wait
            self._queue.put(None, timeout=timeout_s)
        self._thread.join(timeout_s)

    # -- the publisher thread ----------------------------------------------------

    def _open(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> tuple[zmq.Socket[bytes], ...]:
        pub = ctx.socket(zmq.PUB)
        pub.set_hwm(self._hwm)
        if is_bind_endpoint(self.endpoint):
            pub.bind(self.endpoint)
        else:
            pub.connect(self.endpoint)
        if not self.replay_endpoint:
            return (pub,)
        replay = ctx.socket(zmq.ROUTER)
        replay.bind(self.replay_endpoint)
        return pub, replay

    def _run(self) -> None:
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        try:
            sockets = self._open(ctx)
        except BaseException as exc:  # reported by start()
            self._error = exc
            ctx.destroy(linger=0)
            self._ready.set()
            return
        self._ready.set()
        try:
            self._serve(sockets[0], sockets[1] if len(sockets) > 1 else None)
        finally:
            for s in sockets:
                s.close(linger=0)
            ctx.term()

    def _serve(self, pub: zmq.Socket[bytes], replay: zmq.Socket[bytes] | None) -> None:
        encode = msgspec.msgpack.Encoder().encode
        seq = 0
        while True:
            if replay is not None:
                while replay.poll(0):
                    self._replay(replay)
            try:
                item = self._queue.get(timeout=0.05)
            except queue.Empty:
                if self._closed:
                    return
                continue
            if item is None:
                return
            ts, events = item
            try:
                payload = encode(batch_wire(ts, events))
                pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
            except Exception as exc:  # one bad batch must not stop the stream
                self.stats.send_failures += 1
                log.warning("kv_events_send_failed", seq=seq, error=str(exc))
                continue
            self._buffer.append((seq, payload))
            self.stats.published += 1
            seq += 1

    def _replay(self, replay: zmq.Socket[bytes]) -> None:
        frames = replay.recv_multipart()
        if len(frames) != 3 or len(frames[2]) != 8:
            log.warning("kv_events_bad_replay_request", frames=len(frames))
            return
        client, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in list(self._buffer):
            if seq >= first:
                replay.send_multipart((client, b"", self._topic, seq.to_bytes(8, "big"), payload))
        replay.send_multipart((client, b"", b"", END_SEQ, b""))
