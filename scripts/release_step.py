"""The release checklist as one deploy-pipeline step, on top of the `infercache` CLI.

    release_step.py --pod HOST:PORT [--pod ...]
        [--invalidate-tenant T] [--invalidate-prompt-version P] [--invalidate-adapter A]
        [--invalidate-all] [--reason TEXT] [--receipt-file FILE]
        [--expect-version FP] [--wait-timeout SECONDS]
        [--prewarm-file FILE] [--from-version OLD_FP --top-k K [--allow-fewer]]
        [--max-failures N]

Steps, in order; each one that fails ends the step with its own exit status, so a
pipeline can gate on it and say what went wrong:

1. invalidate what changed that the fingerprint does not capture (a template, a tool
   schema: the --invalidate-* selector), once: an Invalidate is fleet-wide and returns
   only when every sidecar sharing the store confirmed it          -> 3 on failure;
   its receipt (the rule's epoch) is printed as `receipt: INFERCACHE_MIN_EPOCH=N` and
   written to --receipt-file: start later pods with INFERCACHE_MIN_EPOCH=N, and a store
   rolled back to before the invalidation gives them no hits (docs/security.md)
2. wait until every new pod reports the new model fingerprint (GetServerInfo's answer,
   as GetStats carries it on the admin plane: `infercache stats --json`'s "server"):
   --expect-version, or else any fingerprint other than --from-version -> 4 on timeout
3. prewarm each new pod (a file of representative requests and/or the old version's
   --top-k most-hit requests), gated on `infercache prewarm`'s exit status
   (at most --max-failures failed requests per run; fewer than K of the top K
   replayable fails too unless --allow-fewer)                        -> 5 on failure
4. print the per-version hit distribution summed over the pods
   (`infercache stats --json` on each)                               -> 6 if unreadable

Exit status 0 when every step passed; 2 on bad usage. Every step talks to the pods'
admin plane only (`--pod HOST:PORT`, or `--pod HOST` for port 50052), so the data plane
can stay on the pod's loopback. The admin token is read by the CLI from the variable
named by --token-env (default INFERCACHE_ADMIN_TOKEN); it never appears on a command line.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_USAGE = 0, 2
EXIT_INVALIDATE, EXIT_FINGERPRINT, EXIT_PREWARM, EXIT_STATS = 3, 4, 5, 6
ADMIN_PORT = 50052
POLL_S = 1.0
HIT_KEYS = ("hit.hot", "hit.warm", "miss", "bypass")  # GetStats lookup counters, in columns


@dataclass(frozen=True, slots=True)
class Pod:
    """One new pod's sidecar: its admin-plane address."""

    admin: str


class UsageError(ValueError):
    """A bad command line; the message says what."""


def parse_pod(text: str) -> Pod:
    """`HOST:PORT` of the admin listener, or a bare host for port 50052."""
    host, colon, port = text.rpartition(":")
    if not colon:
        return Pod(f"{text}:{ADMIN_PORT}")
    if not host or not port.isdigit():
        raise UsageError(f"--pod {text!r}: expected the admin listener's HOST:PORT, or HOST")
    return Pod(text)


def say(msg: str) -> None:
    """A step's progress line (stdout, flushed: pipeline logs interleave)."""
    print(f"release: {msg}", flush=True)


def infercache_cli() -> str:
    """The `infercache` next to this interpreter (the project venv), else on PATH."""
    beside = Path(sys.executable).with_name("infercache")
    found = str(beside) if beside.exists() else shutil.which("infercache")
    if found is None:
        raise UsageError("no `infercache` command: install the project (make install-serve)")
    return found


def run_cli(
    cli: str, *args: str, capture: bool = False, quiet: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run `infercache ARGS`; stdout is echoed unless captured; stderr passes through
    unless quiet (polling a pod that is not up yet would repeat the same error)."""
    stderr = subprocess.PIPE if quiet else None
    done = subprocess.run(
        [cli, *args], stdout=subprocess.PIPE, stderr=stderr, text=True, check=False
    )
    if not capture and done.stdout:
        print(done.stdout, end="", flush=True)
    return done


def invalidate(cli: str, args: argparse.Namespace, pod: Pod) -> bool:
    """Step 1: one Invalidate through the first pod's admin plane (fleet-wide)."""
    selector: list[str] = []
    for flag, value in (
        ("--tenant", args.invalidate_tenant),
        ("--prompt-version", args.invalidate_prompt_version),
        ("--adapter", args.invalidate_adapter),
        ("--model-version", args.invalidate_model_version),
    ):
        if value:
            selector += [flag, value]
    if args.invalidate_all:
        selector.append("--all")
    if not selector:
        say("1/4 invalidate: nothing named (new weights need none: a new fingerprint)")
        return True
    say(f"1/4 invalidate {' '.join(selector)} via {pod.admin}")
    common = ["--admin", pod.admin, "--token-env", args.token_env, "--timeout", "60"]
    done = run_cli(cli, "invalidate", *common, *selector, "--reason", args.reason)
    if done.returncode != 0:
        return False
    found = re.search(r"\bepoch=(\d+)\b", done.stdout)
    if found is None:
        say("1/4 invalidate: confirmed, but the CLI printed no epoch (no receipt)")
        return False
    say(f"receipt: INFERCACHE_MIN_EPOCH={found[1]}")
    if args.receipt_file is not None:
        args.receipt_file.write_text(found[1] + "\n")
    return True


def pod_stats(
    cli: str, args: argparse.Namespace, pod: Pod, timeout_s: float, *, quiet: bool = False
) -> dict[str, Any] | None:
    """`infercache stats --json` of one pod (counters and GetServerInfo's answer), or None."""
    common = ["--admin", pod.admin, "--token-env", args.token_env, "--timeout", f"{timeout_s:g}"]
    done = run_cli(cli, "stats", *common, "--json", capture=True, quiet=quiet)
    if done.returncode != 0:
        return None
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def wait_fingerprint(cli: str, args: argparse.Namespace, pods: list[Pod]) -> str | None:
    """Step 2: poll every pod until all report the new fingerprint; it, or None on timeout."""
    wanted = args.expect_version
    what = wanted or f"a fingerprint other than {args.from_version or '(none)'}"
    say(f"2/4 wait for {len(pods)} pod(s) to serve {what} (up to {args.wait_timeout:g} s)")
    deadline = time.monotonic() + args.wait_timeout
    seen: dict[Pod, str | None] = {}
    while True:
        seen = {}
        for pod in pods:
            doc = pod_stats(cli, args, pod, timeout_s=5, quiet=True)
            seen[pod] = None if doc is None else str(doc["server"]["model_version"])
        good = {
            pod: fp
            for pod, fp in seen.items()
            if fp and (fp == wanted if wanted else fp != args.from_version)
        }
        if len(good) == len(pods) and len(set(good.values())) == 1:
            fingerprint = next(iter(good.values()))
            say(f"2/4 every pod serves {fingerprint}")
            return fingerprint
        if time.monotonic() >= deadline:
            for pod, fp in seen.items():
                state = "no answer" if fp is None else (fp or "no model fingerprint")
                say(f"2/4 {pod.admin}: {state}{'' if pod in good else '  <- not ready'}")
            return None
        time.sleep(POLL_S)


def prewarm(cli: str, args: argparse.Namespace, pods: list[Pod]) -> bool:
    """Step 3: prewarm each pod from each source; False at the first failed run."""
    sources: list[list[str]] = []
    if args.prewarm_file:
        sources.append(["--file", str(args.prewarm_file)])
    if args.from_version and args.top_k:
        top = ["--from-version", args.from_version, "--top-k", str(args.top_k)]
        sources.append([*top, "--allow-fewer"] if args.allow_fewer else top)
    if not sources:
        say("3/4 prewarm: no source given")
        return True
    for pod in pods:
        for source in sources:
            say(f"3/4 prewarm {pod.admin} {' '.join(source)}")
            done = run_cli(
                cli,
                "prewarm",
                "--admin",
                pod.admin,
                "--token-env",
                args.token_env,
                "--max-failures",
                str(args.max_failures),
                *source,
            )
            if done.returncode != 0:
                say(f"3/4 prewarm on {pod.admin} failed (exit {done.returncode})")
                return False
    return True


def hit_distribution(cli: str, args: argparse.Namespace, pods: list[Pod]) -> bool:
    """Step 4: lookups per model version summed over the pods, printed as a table."""
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in pods:
        doc = pod_stats(cli, args, pod, timeout_s=20)
        if doc is None:
            say(f"4/4 stats from {pod.admin} failed")
            return False
        for version, stats in doc["versions"].items():
            for outcome, n in stats["lookups"].items():
                totals[version][outcome] += int(n)
    say(f"4/4 hit distribution over {len(pods)} pod(s):")
    header = ("MODEL VERSION", "LOOKUPS", "HIT %", "HOT", "WARM", "MISS", "BYPASS")
    rows = []
    for version in sorted(totals):
        lk = totals[version]
        total = sum(lk.values())
        hits = lk.get("hit.hot", 0) + lk.get("hit.warm", 0)
        pct = f"{100 * hits / total:.1f}" if total else "-"
        rows.append((version, str(total), pct, *(str(lk.get(k, 0)) for k in HIT_KEYS)))
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return True


def build_parser() -> argparse.ArgumentParser:
    """The step's command line."""
    p = argparse.ArgumentParser(
        prog="release_step.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--pod",
        action="append",
        default=[],
        metavar="HOST:PORT|HOST",
        help="a new pod's admin address",
    )
    p.add_argument("--token-env", default="INFERCACHE_ADMIN_TOKEN", metavar="VAR")
    inv = p.add_argument_group("1. invalidate (what the fingerprint does not capture)")
    inv.add_argument("--invalidate-tenant", metavar="TENANT")
    inv.add_argument("--invalidate-prompt-version", metavar="PROMPT_VERSION")
    inv.add_argument("--invalidate-adapter", metavar="ADAPTER_VERSION")
    inv.add_argument("--invalidate-model-version", metavar="MODEL_VERSION")
    inv.add_argument("--invalidate-all", action="store_true", help="every entry")
    inv.add_argument("--reason", default="release", help="recorded in the audit log")
    inv.add_argument(
        "--receipt-file",
        type=Path,
        metavar="FILE",
        help="write the invalidation's epoch (INFERCACHE_MIN_EPOCH for later pods) here",
    )
    wait = p.add_argument_group("2. wait for the new fingerprint")
    wait.add_argument("--expect-version", metavar="FP", help="the new pods' fingerprint")
    wait.add_argument("--wait-timeout", type=float, default=600.0, metavar="SECONDS")
    warm = p.add_argument_group("3. prewarm")
    warm.add_argument("--prewarm-file", type=Path, metavar="JSONL")
    warm.add_argument("--from-version", metavar="OLD_FP", help="the version being replaced")
    warm.add_argument("--top-k", type=int, default=0, help="its most-hit requests to replay")
    warm.add_argument(
        "--allow-fewer",
        action="store_true",
        help="pass even when fewer than --top-k of them were recorded and replayable",
    )
    warm.add_argument("--max-failures", type=int, default=0, help="per prewarm run")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the four steps; the exit status names the first that failed."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if not args.pod:
            raise UsageError("name the new pods with --pod")
        pods = [parse_pod(p) for p in args.pod]
        if args.top_k and not args.from_version:
            raise UsageError("--top-k needs --from-version")
        if args.prewarm_file and not args.prewarm_file.is_file():
            raise UsageError(f"--prewarm-file {args.prewarm_file}: no such file")
        cli = infercache_cli()
    except UsageError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not invalidate(cli, args, pods[0]):
        say("FAILED at 1/4 invalidate: the invalidation was not confirmed")
        return EXIT_INVALIDATE
    if wait_fingerprint(cli, args, pods) is None:
        say("FAILED at 2/4: the new fingerprint was not served by every pod in time")
        return EXIT_FINGERPRINT
    if not prewarm(cli, args, pods):
        say("FAILED at 3/4 prewarm: do not shift traffic to these pods yet")
        return EXIT_PREWARM
    if not hit_distribution(cli, args, pods):
        say("FAILED at 4/4: the hit distribution could not be read")
        return EXIT_STATS
    say("OK: every step passed")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
