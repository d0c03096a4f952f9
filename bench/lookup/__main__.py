"""python -m bench.lookup: start the servers and client workers, run every cell, report."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.harness.procs import REPO, ServerProc, SidecarSpec, interrupt_on, redis_server
from bench.harness.profiling import PySpy
from bench.harness.report import print_summary
from bench.harness.stats import median
from bench.harness.usage import Usage, load_average
from bench.harness.workers import Worker, split_concurrency
from bench.harness.workload import N_KEYS, PAYLOAD
from bench.lookup.report import Result, Results, print_table, summary
from bench.lookup.scenarios import (
    BASE,
    BASE_RATIOS,
    BATCH,
    RATIO_CONCURRENCY,
    RATIOS,
    SCENARIOS,
    Cell,
    with_baseline,
)
from bench.lookup.servers import echo_server
from tests.support.processes import free_port

OPS = "bench.lookup.driver"


class Clients:
    """The pool of client workers; each cell's concurrency is split across them."""

    def __init__(self, nprocs: int, uvloop: bool) -> None:
        self.workers = [Worker(OPS, uvloop) for _ in range(nprocs)]

    def setup(self, port: int, expect_tier: int, redis_port: int = 0) -> list[bytes]:
        """Store the bench keys in a sidecar (see driver.setup_sidecar)."""
        keys: list[bytes] = self.workers[0].call("setup", port, expect_tier, redis_port)
        return keys

    def run(self, cell: Cell, server_pid: int, pyspy_out: Path | None = None) -> Result:
        """One cell on every worker at once; the server's usage over the measured window."""
        shares = split_concurrency(cell.concurrency, len(self.workers))
        pairs = [(w, s) for w, s in zip(self.workers, shares, strict=True) if s > 0]
        for w, share in pairs:
            w.start("cell", dataclasses.replace(cell, concurrency=share))
        active = [w for w, _ in pairs]
        for w in active:
            w.expect_mark("cell", "start")
        srv0 = Usage.of(server_pid)
        spy = None
        if pyspy_out is not None:
            spy = PySpy(
                server_pid, pyspy_out, rate=250, duration_s=cell.duration_s * 0.9, nonblocking=True
            )
        for w in active:
            w.expect_mark("cell", "end")
        srv = Usage.of(server_pid) - srv0
        if spy is not None:
            spy.wait()
        return Result.merge([w.wait("cell", timeout_s=120) for w in active], srv)

    def close(self) -> None:
        """Stop every worker."""
        for w in self.workers:
            w.close()


def lookup_sidecar(
    name: str, uvloop: bool, profile_dir: Path | None, *flags: str, code: Path = REPO
) -> ServerProc:
    """A sidecar on a free data port; admin and /metrics switched off (by flag), so the
    hot path is the one under test and several sidecars run side by side. `code`: the
    checkout whose sidecar runs (another one for --baseline)."""
    env = {}
    if code != REPO:
        env["PYTHONPATH"] = f"{code}{os.pathsep}{code / 'clients' / 'python'}"
    proc = SidecarSpec(name, flags=flags, uvloop=uvloop, profile_dir=profile_dir, env=env).proc()
    if code != REPO:
        # -P: `python -m` would put the working directory (this checkout) first on the path.
        proc.argv.insert(1, "-P")
    return proc


def redis_commands(port: int) -> dict[str, int]:
    """Commands a redis-server has run so far by name (INFO commandstats; a script's
    own calls count under their names), less the INFO calls."""
    out = subprocess.run(
        ["redis-cli", "-p", str(port), "INFO", "commandstats"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    calls = {}
    for line in out.splitlines():
        if line.startswith("cmdstat_") and not line.startswith("cmdstat_info:"):
            name, rest = line[len("cmdstat_") :].split(":", 1)
            calls[name] = int(rest.split("calls=", 1)[1].split(",", 1)[0])
    return calls


def run(args: argparse.Namespace) -> int:
    """Start the servers, run every cell for every round, print the table and summary."""
    concurrencies = [int(x) for x in args.concurrency.split(",")]
    wanted = set(args.scenarios.split(",")) if args.scenarios else {s.name for s in SCENARIOS}
    unknown = wanted - {s.name for s in SCENARIOS}
    if unknown:
        raise SystemExit(f"unknown scenarios: {sorted(unknown)}")
    scenarios = [s for s in SCENARIOS if s.name in wanted]
    baseline = Path(args.baseline).resolve() if args.baseline else None
    if baseline is not None:
        scenarios = list(with_baseline(tuple(scenarios)))
    needed = {s.server for s in scenarios}
    if "sidecar-warm" in needed:
        needed.add("redis")
    if "sidecar-warm" + BASE in needed:
        needed.add("redis" + BASE)
    profile_dir = Path(args.cprofile).resolve() if args.cprofile else None
    pyspy_dir = Path(args.py_spy).resolve() if args.py_spy else None
    for d in (profile_dir, pyspy_dir):
        if d is not None:
            d.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # Ctrl-C and SIGTERM unwind through the ExitStack below, which stops every child.
    interrupt_on(signal.SIGINT, signal.SIGTERM)

    with contextlib.ExitStack() as stack:
        redis_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ic-bench-redis-"))
        servers: dict[str, ServerProc] = {}
        clients = Clients(args.client_procs, args.uvloop)
        stack.callback(clients.close)

        def add(name: str, proc: ServerProc) -> None:
            stack.callback(proc.stop)
            proc.start()
            servers[name] = proc

        if "redis" in needed:
            add("redis", redis_server(redis_dir, "redis"))
        if "echo" in needed:
            add("echo", echo_server(free_port(), args.uvloop, profile_dir))
        if "sidecar-hot" in needed:
            add("sidecar-hot", lookup_sidecar("sidecar-hot", args.uvloop, profile_dir))
        if "redis" + BASE in needed:
            add("redis" + BASE, redis_server(redis_dir, "redis" + BASE))
        for suffix, code in (("", REPO), (BASE, baseline)):
            if code is None:
                continue
            if "sidecar-hot" + suffix in needed:
                name = "sidecar-hot" + suffix
                add(name, lookup_sidecar(name, args.uvloop, profile_dir, code=code))
            if "sidecar-warm" + suffix in needed:
                name = "sidecar-warm" + suffix
                url = f"redis://127.0.0.1:{servers['redis' + suffix].port}/0"
                warm_flags = ("--redis-url", url, "--hot-max-entries", "0")
                add(name, lookup_sidecar(name, args.uvloop, profile_dir, *warm_flags, code=code))

        redis_keys: list[bytes] = []
        for suffix in ("", BASE):
            if "sidecar-hot" + suffix in servers:
                clients.setup(servers["sidecar-hot" + suffix].port, 1)
            if "sidecar-warm" + suffix in servers:
                keys = clients.setup(
                    servers["sidecar-warm" + suffix].port, 2, servers["redis" + suffix].port
                )
                redis_keys = redis_keys or keys
        if "redis-get" in wanted and not redis_keys:
            raise SystemExit("redis-get reads the warm sidecar's entries: include scenario 'warm'")

        print(
            f"# python -m bench.lookup: payload {len(PAYLOAD)} B, {N_KEYS} keys, batch {BATCH},"
            f" warm-up {args.warmup}s + {args.duration}s per cell, {args.rounds} round(s),"
            f" {args.client_procs} client"
            f" process(es), uvloop={'on' if args.uvloop else 'off'}, {os.cpu_count()} CPUs,"
            f" load average {load_average()}",
            flush=True,
        )
        results = Results()
        # Redis commands per RPC of each warm cell, per round (INFO commandstats around it).
        redis_per_op: dict[tuple[str, int, str], list[float]] = {}
        # Scenarios run back to back within each concurrency and round, so drift and
        # neighbours' load hit a sidecar cell and its baseline alike.
        for rnd, c, i in itertools.product(
            range(args.rounds), concurrencies, range(len(scenarios))
        ):
            # Odd rounds run the scenarios in reverse, so no cell always follows the same one.
            sc = scenarios[-1 - i if rnd % 2 else i]
            srv = servers[sc.server]
            cell = Cell(
                sc.kind,
                srv.port,
                c,
                args.warmup,
                args.duration,
                sc.expect_tier,
                tuple(redis_keys) if sc.kind == "redis_get" else (),
            )
            spy = None
            if pyspy_dir is not None and sc.server != "redis":
                spy = pyspy_dir / f"{sc.name}-c{c}-r{rnd}.txt"
            redis_port = 0
            if sc.server.startswith("sidecar-warm"):
                redis_port = servers["redis" + (BASE if sc.server.endswith(BASE) else "")].port
                before = redis_commands(redis_port)
            r = clients.run(cell, srv.pid, spy)
            if redis_port and r.ops:
                after = redis_commands(redis_port)
                for cmd, n in after.items():
                    if n > before.get(cmd, 0):
                        per_op = (n - before.get(cmd, 0)) / r.ops
                        redis_per_op.setdefault((sc.name, c, cmd), []).append(per_op)
            results.add(sc.name, c, r)
            if args.verbose:
                print(
                    f"  r{rnd} {sc.name} c={c}: {r.ops_per_s:,.0f}/s", file=sys.stderr, flush=True
                )
        for srv in servers.values():
            srv.check_alive()

    print()
    print_table(results, concurrencies, scenarios)
    for (name, c, cmd), rounds in sorted(redis_per_op.items()):
        # Round trips are what the sidecar sends (EVALSHA, MGET); a script's own calls
        # (GET, SET) count under their names. Background calls (heartbeat, rule
        # refresh) come to a few a second.
        if len(rounds) == args.rounds and median(rounds) >= 0.01:
            print(f"# {name} c={c}: Redis {cmd} {median(rounds):.2f} per RPC (median of rounds)")
    failed = False
    for (name, c), rs in results.rounds.items():
        errors, ops = sum(r.errors for r in rs), sum(r.ops for r in rs)
        degraded = sum(r.degraded for r in rs)
        total = errors + ops + degraded
        if degraded:
            print(
                f"# {name} c={c}: {degraded} of {total} calls answered MISS degraded=true"
                " (warm read past INFERCACHE_LOOKUP_TIMEOUT_MS); not counted in RPC/s"
            )
        if errors:
            first = next(r.first_error for r in rs if r.first_error)
            print(f"# {name} c={c}: {errors} of {total} calls failed; first: {first}")
        failed |= errors > 0.01 * total or not ops
    ratio_c = RATIO_CONCURRENCY if RATIO_CONCURRENCY in concurrencies else concurrencies[0]
    if args.rounds > 1:
        for key, a, b in (*RATIOS, *(BASE_RATIOS if baseline is not None else ())):
            each = " ".join(f"{x:.2f}" for x in results.per_round(a, b, ratio_c))
            if each:
                print(f"# {key} per round at concurrency {ratio_c}: {each}")
    print(
        f"# ratios: sidecar RPC/s / baseline RPC/s at concurrency {ratio_c}, best of"
        f" {args.rounds} round(s) each; *_cpu_vs_*: baseline server µs/RPC /"
        f" sidecar server µs/RPC; total {time.monotonic() - started:.0f} s; load average"
        f" now {load_average()}"
    )
    print_summary(summary(results, ratio_c))
    return 1 if failed else 0


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; --quick and --smoke fill in what was not given."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.lookup",
        description="Lookup benchmark: the sidecar's hit paths against a bare gRPC echo server",
    )
    parser.add_argument("--quick", action="store_true", help="short cells (whole run < 60 s)")
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: concurrency 16, 0.3 s cells"
    )
    parser.add_argument("--duration", type=float, help="measured seconds per cell (default 3)")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds per cell (default 0.7)")
    parser.add_argument("--rounds", type=int, help="passes over all cells (default 3)")
    parser.add_argument("--concurrency", help="comma-separated (default 1,16,64)")
    parser.add_argument("--client-procs", type=int, default=1, help="client processes (default 1)")
    parser.add_argument(
        "--uvloop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run servers and clients on uvloop (default on, as the sidecar)",
    )
    parser.add_argument(
        "--scenarios", help="comma-separated subset of: " + ", ".join(s.name for s in SCENARIOS)
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run every sidecar scenario on a sidecar of the checkout in DIR"
        " (scenario <name>-base), interleaved with this checkout's: before and after in one run",
    )
    parser.add_argument("--cprofile", metavar="DIR", help="run the servers under cProfile")
    parser.add_argument(
        "--py-spy",
        metavar="DIR",
        help="sample each server with py-spy (in the venv) during each cell: DIR/<cell>.txt",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    # (smoke, quick, full) defaults of what was not given
    for name, values in {
        "duration": (0.3, 1.2, 3.0),
        "warmup": (0.1, 0.4, 0.7),
        "rounds": (1, 1, 3),
        "concurrency": (str(RATIO_CONCURRENCY), "1,16,64", "1,16,64"),
    }.items():
        if getattr(args, name) is None:
            setattr(args, name, values[0 if args.smoke else 1 if args.quick else 2])
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 1 when more than 1% of a cell's calls failed, 130 on Ctrl-C."""
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted; child processes stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
