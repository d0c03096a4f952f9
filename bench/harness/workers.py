"""Client worker processes: the one protocol between a benchmark and its load generators.

The bench process never imports grpc; it spawns workers (multiprocessing "spawn": grpc
must start fresh in each) that run named async ops from an ops module's `OPS` table.
Bench to worker: `(op, args)`, or None to exit. Worker to bench: `("mark", what)` while
an op runs (e.g. "start"/"end" of its measured window, so the bench can read a server's
CPU or start a profiler exactly then), then `("ok", result)` or `("error", text)`.
Every op is `async def op(mark, *args)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import multiprocessing as mp
import signal
from collections.abc import Callable, Coroutine, Mapping
from multiprocessing.connection import Connection
from typing import Any

from bench.harness.procs import die_with_parent

Mark = Callable[[str], None]
Op = Callable[..., Coroutine[Any, Any, Any]]


def worker_runner(uvloop: bool) -> asyncio.Runner:
    """For a worker: ignore Ctrl-C (the bench handles it and stops us), die with the
    bench, and return an asyncio.Runner on uvloop or the default loop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    factory = None
    if uvloop:
        import uvloop as uv

        factory = uv.new_event_loop
    return asyncio.Runner(loop_factory=factory)


def _worker_main(conn: Connection, ops_module: str, uvloop: bool) -> None:
    """A worker: runs the ops the bench sends until it sends None (or goes away)."""

    def mark(what: str) -> None:
        conn.send(("mark", what))

    ops: Mapping[str, Op] = importlib.import_module(ops_module).OPS
    with worker_runner(uvloop) as runner:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            if msg is None:
                return
            op, args = msg
            try:
                conn.send(("ok", runner.run(ops[op](mark, *args))))
            except Exception as exc:
                conn.send(("error", f"{op}: {type(exc).__name__}: {exc}"))


class Worker:
    """One spawned worker process running the ops of `ops_module`."""

    def __init__(self, ops_module: str, uvloop: bool) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, ops_module, uvloop), daemon=True)
        self.proc.start()
        child.close()

    def start(self, op: str, *args: Any) -> None:
        """Send an op without waiting (several workers can then run at once)."""
        self.conn.send((op, args))

    def _next(self, op: str, timeout_s: float) -> tuple[str, Any]:
        if not self.conn.poll(timeout_s):
            raise RuntimeError(f"a client process did not answer {op} in {timeout_s} s")
        kind, value = self.conn.recv()
        if kind == "error":
            raise RuntimeError(f"client process: {value}")
        return kind, value

    def expect_mark(self, op: str, what: str, timeout_s: float = 120.0) -> None:
        """Wait for the running op's next mark, which must be `what`."""
        kind, value = self._next(op, timeout_s)
        if (kind, value) != ("mark", what):
            raise RuntimeError(f"client protocol error: {op} sent {kind} {value!r:.60}")

    def wait(self, op: str, *, on_mark: Mark | None = None, timeout_s: float = 600.0) -> Any:
        """The result of the op started last; on_mark sees its marks as they come."""
        while True:
            kind, value = self._next(op, timeout_s)
            if kind != "mark":
                return value
            if on_mark is not None:
                on_mark(value)

    def call(
        self, op: str, *args: Any, on_mark: Mark | None = None, timeout_s: float = 600.0
    ) -> Any:
        """start() then wait()."""
        self.start(op, *args)
        return self.wait(op, on_mark=on_mark, timeout_s=timeout_s)

    def close(self) -> None:
        """Ask the worker to exit; kill it if it has not within 3 s."""
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.proc.join(3)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def split_concurrency(total: int, workers: int) -> list[int]:
    """`total` in-flight calls spread over `workers` as evenly as possible."""
    return [total // workers + (1 if i < total % workers else 0) for i in range(workers)]
