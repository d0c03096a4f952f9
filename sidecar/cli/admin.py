"""`infercache invalidate`, `audit` and `stats`: the admin plane for pipelines and operators.

    infercache invalidate --admin HOST:PORT [--tenant T] [--model-version M]
        [--adapter A] [--prompt-version P] [--all] --reason "..."
    infercache audit --admin HOST:PORT [--limit N] [--json]
    infercache stats --admin HOST:PORT [--json] [--watch [SECONDS]]

The bearer token comes from an environment variable (INFERCACHE_ADMIN_TOKEN by
default, --token-env to pick another), never from the command line where `ps`
would show it. Exit status: 0 only on confirmed success; 1 when the sidecar
refused or failed; 2 on bad usage. UNAVAILABLE is retried with exponential
backoff by gRPC's own retry policy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict
from infercache.v1 import admin_pb2 as PB2
from infercache_client.admin import AdminClient, selector

from sidecar.cli.interrupts import StopSignals

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

DEFAULT_ADMIN = "127.0.0.1:50052"


def admin_target(text: str) -> str:
    """--admin's value as a gRPC target: HOST:PORT, [IPv6]:PORT or unix:PATH.

    An http:// prefix is dropped (the admin plane is plaintext gRPC); a missing port is
    an error, not gRPC's silent default of 443.
    """
    target = text.strip()
    if target.startswith("unix:"):
        return target
    scheme, sep, rest = target.partition("://")
    if sep:
        if scheme not in ("http", "grpc"):
            raise argparse.ArgumentTypeError(
                f"{text!r}: the admin plane is plaintext gRPC; give HOST:PORT "
                f"(default listener {DEFAULT_ADMIN})"
            )
        target = rest.rstrip("/")
    host, colon, port = target.rpartition(":")
    if not colon or not host or not port.isdigit() or host.endswith(":"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give HOST:PORT (the admin listener, INFERCACHE_ADMIN_LISTEN, "
            f"is {DEFAULT_ADMIN} by default)"
        )
    return target


def add_common(p: argparse.ArgumentParser) -> None:
    """--admin, --token-env, --timeout and the TLS files, shared by every admin subcommand."""
    p.add_argument(
        "--admin",
        required=True,
        type=admin_target,
        metavar="HOST:PORT",
        help=f"admin listener address (INFERCACHE_ADMIN_LISTEN, default {DEFAULT_ADMIN})",
    )
    p.add_argument(
        "--token-env",
        default="INFERCACHE_ADMIN_TOKEN",
        metavar="VAR",
        help="environment variable holding the bearer token: the TOKEN alone, not the "
        "server's NAME=TOKEN pair (default INFERCACHE_ADMIN_TOKEN)",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="overall deadline in seconds")
    tls = p.add_argument_group("TLS (an admin listener with INFERCACHE_ADMIN_TLS_CERT_FILE)")
    tls.add_argument(
        "--tls-ca-file",
        metavar="PEM",
        help="connect with TLS, verifying the listener's certificate against this CA",
    )
    tls.add_argument(
        "--tls-cert-file", metavar="PEM", help="client certificate (a listener with a client CA)"
    )
    tls.add_argument("--tls-key-file", metavar="PEM", help="the client certificate's key")
    tls.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="name the listener's certificate must carry when --admin is an address it "
        "does not name (a pod IP)",
    )


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `invalidate` and `audit`."""
    inv = subparsers.add_parser(
        "invalidate",
        help="invalidate cached entries fleet-wide (admin plane)",
        description="Invalidate every entry matching all given dimensions, or --all.",
    )
    add_common(inv)
    inv.add_argument("--tenant", help="entries of this tenant")
    inv.add_argument(
        "--model-version",
        metavar="FINGERPRINT",
        help="entries of this model version: the exact string stored in keys (the whole "
        "fingerprint, e.g. fp1-<64 hex>; `infercache stats` lists the versions seen)",
    )
    inv.add_argument(
        "--adapter",
        dest="adapter_version",
        metavar="ADAPTER",
        help="adapter name or fingerprint; the sidecar resolves a name as keys do and "
        "refuses one its pod does not serve",
    )
    inv.add_argument("--prompt-version", help="entries made with this prompt template version")
    inv.add_argument("--all", action="store_true", help="invalidate everything (no other selector)")
    inv.add_argument("--reason", required=True, help="recorded in the audit log")
    inv.add_argument("--json", action="store_true", help="print the audit record as JSON")
    inv.set_defaults(func=run_invalidate)

    audit = subparsers.add_parser(
        "audit", help="list invalidations, newest first", description="Print the audit log."
    )
    add_common(audit)
    audit.add_argument("--limit", type=int, default=50, help="most records to print")
    audit.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    audit.set_defaults(func=run_audit)

    stats = subparsers.add_parser(
        "stats",
        help="per-model-version hits, misses, refusals and savings of one sidecar",
        description="Print a sidecar's counters since start (GetStats), per model version.",
    )
    add_common(stats)
    stats.add_argument("--json", action="store_true", help="one JSON document (a line per refresh)")
    stats.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        default=None,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C",
    )
    stats.set_defaults(func=run_stats)


def connect_admin(args: argparse.Namespace) -> AdminClient | None:
    """An admin client with the token from --token-env's variable, or None (message
    printed) without one."""
    token = os.environ.get(args.token_env, "")
    if not token:
        print(f"infercache: set {args.token_env} to an admin token", file=sys.stderr)
        return None
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        print("infercache: --tls-cert-file and --tls-key-file go together", file=sys.stderr)
        return None
    try:
        return AdminClient(
            args.admin,
            token,
            tls_ca_file=args.tls_ca_file,
            tls_cert_file=args.tls_cert_file,
            tls_key_file=args.tls_key_file,
            tls_server_name=args.tls_server_name,
        )
    except OSError as exc:
        print(f"infercache: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return None


def fail(what: str, exc: grpc.RpcError, args: argparse.Namespace | None = None) -> int:
    """Print a failed RPC's status (and, with `args`, a hint at the likely cause) and
    return EXIT_FAILED."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    print(
        f"infercache: {what} failed: {code.name if code else 'UNKNOWN'}: {details}", file=sys.stderr
    )
    hint = _hint(code, args) if args is not None else None
    if hint:
        print(f"infercache: hint: {hint}", file=sys.stderr)
    return EXIT_FAILED


def _hint(code: grpc.StatusCode | None, args: argparse.Namespace) -> str | None:
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return (
            f"{args.admin} does not serve the admin plane; is it the data-plane port? "
            f"The admin listener is INFERCACHE_ADMIN_LISTEN (default {DEFAULT_ADMIN})"
        )
    if code == grpc.StatusCode.UNAUTHENTICATED:
        name, eq, token = os.environ.get(args.token_env, "").partition("=")
        # Server tokens are >= 16 characters; a base64 token ending in "=" is no pair.
        if eq and len(token) >= 16 and name.replace("-", "").replace("_", "").isalnum():
            return (
                f"{args.token_env} looks like the server's NAME=TOKEN pair; "
                f"the CLI takes the token alone: export {args.token_env}=<the part after '='>"
            )
    return None


def run_invalidate(args: argparse.Namespace) -> int:
    """Invalidate; prints the audit record. Exit 0 only if the sidecar confirmed it."""
    match = selector(
        tenant=args.tenant,
        model_version=args.model_version,
        adapter_version=args.adapter_version,
        prompt_version=args.prompt_version,
        all=args.all,
    )
    if not args.all and not any(
        (args.tenant, args.model_version, args.adapter_version, args.prompt_version)
    ):
        print("infercache: name at least one dimension, or --all", file=sys.stderr)
        return EXIT_USAGE
    admin = connect_admin(args)
    if admin is None:
        return EXIT_USAGE
    try:
        with admin:
            r = admin.invalidate(match, args.reason, timeout=args.timeout)
    except grpc.RpcError as exc:
        return fail("invalidate", exc, args)
    if args.json:
        print(json.dumps(_record_dict(r)))
    else:
        print(f"invalidated epoch={r.epoch} id={r.id} ~{r.estimated_entries} entries")
    if r.estimated_entries == 0:
        # Confirmed all the same (a rule also covers entries stored later by stale leases).
        print(
            "infercache: note: no stored entry matched; selector values must equal the "
            "keys' exactly (the whole fingerprint for --model-version)",
            file=sys.stderr,
        )
    return EXIT_OK


def _record_dict(r: PB2.InvalidationRecord) -> dict[str, Any]:
    d = MessageToDict(
        r, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    # 64-bit integers come out of MessageToDict as strings (JSON's number range); print
    # them as numbers, as `stats --json` does.
    for field in r.DESCRIPTOR.fields:
        if field.cpp_type in _INT64_TYPES:
            d[field.name] = int(getattr(r, field.name))
    d["time"] = datetime.fromtimestamp(r.time_ms / 1000, UTC).isoformat()
    return d


_INT64_TYPES = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)


def _selector_text(s: PB2.Selector) -> str:
    if s.all:
        return "all"
    pairs = [
        ("tenant", s.tenant),
        ("model_version", s.model_version),
        ("adapter_version", s.adapter_version),
        ("prompt_version", s.prompt_version),
    ]
    return " ".join(f"{k}={v}" for k, v in pairs if v)


def run_audit(args: argparse.Namespace) -> int:
    """Page through the audit log, newest first."""
    if args.limit < 1:
        print("infercache: --limit must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    admin = connect_admin(args)
    if admin is None:
        return EXIT_USAGE
    try:
        with admin:
            records = admin.invalidations(args.limit, timeout=args.timeout)
    except grpc.RpcError as exc:
        return fail("audit", exc, args)
    if args.json:
        for r in records:
            print(json.dumps(_record_dict(r)))
        return EXIT_OK
    rows = [
        (
            datetime.fromtimestamp(r.time_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S"),
            str(r.epoch),
            r.caller,
            _selector_text(r.selector),
            str(r.estimated_entries),
            r.reason,
        )
        for r in records
    ]
    header = ("TIME (UTC)", "EPOCH", "CALLER", "SELECTOR", "~ENTRIES", "REASON")
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=False)]
    for row in (header, *rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def run_stats(args: argparse.Namespace) -> int:
    """GetStats once (or every --watch seconds), as a table or JSON."""
    from rich.console import Console
    from rich.live import Live

    from sidecar.cli.stats_view import stats_dict, stats_table

    if args.watch is not None and args.watch <= 0:
        print("infercache: --watch needs a positive number of seconds", file=sys.stderr)
        return EXIT_USAGE
    admin = connect_admin(args)
    if admin is None:
        return EXIT_USAGE

    def fetch() -> PB2.GetStatsResponse:
        return admin.stats(timeout=args.timeout)

    console = Console()
    # --watch ends on Ctrl-C (or SIGTERM) through a flag, not KeyboardInterrupt: a SIGINT
    # that lands inside a blocking gRPC call can be swallowed there (cli/interrupts.py).
    stop = StopSignals() if args.watch else nullcontext(None)
    try:
        with stop as signals:
            resp = fetch()
            if args.json:
                print(json.dumps(stats_dict(resp)), flush=True)
                while signals is not None and not signals.wait(args.watch):
                    print(json.dumps(stats_dict(fetch())), flush=True)
                return EXIT_OK
            if signals is None:
                console.print(stats_table(resp, args.admin))
                return EXIT_OK
            with Live(stats_table(resp, args.admin), console=console, auto_refresh=False) as live:
                while not signals.wait(args.watch):
                    live.update(stats_table(fetch(), args.admin), refresh=True)
            return EXIT_OK
    except grpc.RpcError as exc:
        if isinstance(stop, StopSignals) and stop.stopped:
            return EXIT_OK  # the refresh in flight when Ctrl-C came
        return fail("stats", exc, args)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        admin.close()
