"""Engine processes forked from one process that has imported vLLM already.

    python -m tests.support.vllm_forkserver SOCKET    # in the vllm venv; ForkServer starts it

Importing vLLM (and torch with it) is most of an engine's start on CPU: ~7 of its ~10
CPU seconds, so a run that starts a dozen engines spends minutes importing. The fork
server imports it once, then forks one child per engine: each child is a fresh process
that has built no LLM yet (nothing of a vLLM engine, a prefix cache or a connector's
state exists before the fork: the connector modules are imported in the child), runs
`python -m <module> <args>` as its own program, and has its stdin, stdout and stderr
from the caller (passed over a Unix socket).

One server serves every environment: a child takes the environment its request names
(vLLM reads its settings when an engine is built, in the child, not at import), so tests
with different variables share one server instead of one ~590 MB server each. Only
PYTHONPATH is fixed per server: it shaped sys.path before the import.

Protocol, one SOCK_SEQPACKET connection per child: the caller sends a JSON
{"module", "argv", "env"} with three file descriptors; the server answers "pid N" once the
child runs and "exit N" when it has ended (then closes). The server exits when its
stdin closes (its caller is gone) and is SIGKILLed with it on Linux; a child dies with
the server. ForkServer and ForkedChild (the caller's end) need only the standard library.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from tests.support.processes import REPO


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ForkedChild:
    """The caller's end of one forked child: the subset of Popen the engines use."""

    def __init__(self, conn: socket.socket, stdin: IO[str], stdout: IO[str]) -> None:
        self._conn = conn
        self.stdin, self.stdout = stdin, stdout
        self.returncode: int | None = None
        first = self._read(timeout_s=60)
        if not first.startswith("pid "):
            raise RuntimeError(f"the vLLM fork server did not fork the engine: {first}")
        self.pid = int(first.removeprefix("pid "))

    def _read(self, timeout_s: float | None) -> str:
        self._conn.settimeout(timeout_s)
        data = self._conn.recv(256)
        # No answer at all: the server died, and its children with it (PDEATHSIG).
        return data.decode() if data else f"exit {-signal.SIGKILL}"

    def poll(self) -> int | None:
        """The exit status once the child has ended (None while it runs)."""
        if self.returncode is None:
            with contextlib.suppress(TimeoutError, BlockingIOError):
                self._ended(self._read(timeout_s=0))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Until the child has ended (subprocess.TimeoutExpired after `timeout`)."""
        if self.returncode is None:
            try:
                self._ended(self._read(timeout_s=timeout))
            except TimeoutError:
                raise subprocess.TimeoutExpired(f"engine {self.pid}", timeout or 0) from None
        assert self.returncode is not None
        return self.returncode

    def _ended(self, message: str) -> None:
        self.returncode = int(message.removeprefix("exit "))
        self._conn.close()

    def _signal(self, sig: signal.Signals) -> None:
        # Only while the server has not reported the end: until then the pid is the child's.
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self._signal(signal.SIGKILL)


class ForkServer:
    """A fork server process in the vllm venv (`python`), with `env`, in the checkout."""

    def __init__(self, python: str, env: Mapping[str, str]) -> None:
        """Start it; fork() waits until it has imported vLLM and listens."""
        self._dir = tempfile.TemporaryDirectory(prefix="ic-vllm-fork-")
        self.path = Path(self._dir.name) / "sock"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [python, "-m", "tests.support.vllm_forkserver", str(self.path)],
            cwd=REPO,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def _connect(self, timeout_s: float) -> socket.socket:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                self._log.seek(0)
                text = self._log.read().decode(errors="replace")[-4000:]
                raise RuntimeError(f"the vLLM fork server exited ({self.proc.returncode}):\n{text}")
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                conn.connect(str(self.path))
                return conn
            except (FileNotFoundError, ConnectionRefusedError):
                conn.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the vLLM fork server did not listen in {timeout_s} s")
            time.sleep(0.1)

    def fork(
        self, module: str, argv: Sequence[str], stderr: IO[bytes], env: Mapping[str, str]
    ) -> ForkedChild:
        """`python -m module argv...` as a forked child in `env`, stdin and stdout piped to us."""
        conn = self._connect(timeout_s=240)
        child_in, our_in = os.pipe()
        our_out, child_out = os.pipe()
        try:
            request = json.dumps({"module": module, "argv": list(argv), "env": dict(env)})
            request_bytes = request.encode()
            socket.send_fds(conn, [request_bytes], [child_in, child_out, stderr.fileno()])
        finally:
            os.close(child_in)
            os.close(child_out)
        stdin = open(our_in, "w", encoding="utf-8")  # noqa: SIM115 (closed with the engine)
        stdout = open(our_out, encoding="utf-8")  # noqa: SIM115
        return ForkedChild(conn, stdin, stdout)

    def run(
        self, module: str, argv: Sequence[str], env: Mapping[str, str], timeout_s: float
    ) -> tuple[int, str]:
        """`python -m module argv...` in `env` to its end: (exit status, its stdout then stderr)."""
        with tempfile.TemporaryFile() as err:
            child = self.fork(module, argv, err, env)
            child.stdin.close()
            out = child.stdout.read()
            child.stdout.close()
            try:
                code = child.wait(timeout_s)
            except subprocess.TimeoutExpired:
                child.kill()
                code = child.wait()
            err.seek(0)
            return code, out + err.read().decode(errors="replace")

    def close(self) -> None:
        """Stop the server (its children die with it)."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        self._dir.cleanup()


_servers: dict[tuple[str, str], ForkServer] = {}


def fork_server(python: str, env: Mapping[str, str]) -> ForkServer:
    """This process's fork server for that interpreter and PYTHONPATH (started on first use,
    in `env`, stopped at exit); each fork names its own environment."""
    key = (python, env.get("PYTHONPATH", ""))
    if key not in _servers:
        _servers[key] = ForkServer(python, env)
        if len(_servers) == 1:
            atexit.register(_close_servers)
    return _servers[key]


def _close_servers() -> None:
    for server in _servers.values():
        server.close()
    _servers.clear()


def _child(fds: list[int], request: dict[str, Any]) -> None:
    """In the forked child: take the caller's stdio, run the module, never return."""
    code = 1
    try:
        os.setsid()
        _die_with_parent()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        module, argv = str(request["module"]), [str(a) for a in request["argv"]]
        sys.argv = [module, *argv]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(path: str) -> None:
    """Import vLLM, then fork a child per request until stdin closes."""
    import vllm  # noqa: F401 (the import is what the children share)
    from vllm import LLM  # noqa: F401

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select(timeout=0.1):
            if key.fileobj is sys.stdin:
                return  # our caller is gone; our children die with us
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 65536, 3)
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                selector.close()
                listener.close()
                conn.close()
                for other in children.values():
                    other.close()
                _child(fds, json.loads(message))
            for fd in fds:
                os.close(fd)
            conn.sendall(f"pid {pid}".encode())
            children[pid] = conn
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid)
            with contextlib.suppress(OSError):
                conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}".encode())
            conn.close()


def main(argv: Sequence[str] | None = None) -> None:
    """python -m tests.support.vllm_forkserver SOCKET"""
    parser = argparse.ArgumentParser(prog="python -m tests.support.vllm_forkserver")
    parser.add_argument("socket")
    serve(parser.parse_args(argv).socket)


if __name__ == "__main__":
    main()
