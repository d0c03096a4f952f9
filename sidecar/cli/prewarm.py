"""`infercache prewarm`: fill the cache for the pod's model from a file or from hot requests.

    infercache prewarm --admin HOST:PORT --file requests.jsonl [--max-failures N]
    infercache prewarm --admin HOST:PORT --from-version FP --top-k K [--max-failures N]

The file is read here and its requests sent inline (the sidecar never reads a
path named by a network caller): one JSON object per line, the key in the protobuf
JSON shape of a Lookup key and the exact model-server request that computes it
(its path and JSON body; the sidecar sends it as it is and never rebuilds one from
the key), e.g.

    {"key": {"tenant": "acme", "promptVersion": "support-v3", "text": "How do I ..."},
     "replay": {"path": "/v1/completions",
                "body": {"model": "m", "prompt": "How do I ...", "temperature": 0}}}

A line holding only a key is sent without a request and skipped (not_replayable).

Progress is drawn on stderr; the summary goes to stdout (--json: the final
progress message as JSON). With --from-version the summary says how many of the
top K were available (ranked), replayable and not_replayable. Exit status: 0 only
when the run completed with at most --max-failures failed requests (the sidecar
also stops the run as soon as more failed) and, with --from-version, all K
requested were available and replayable; 3 when the run completed but fewer of
the top K were replayable than asked for (--allow-fewer: 0 then); 1 otherwise; 2 on
bad usage; 130 when interrupted (the run is cancelled on the sidecar: no further
model-server calls).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import grpc
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from infercache.v1 import admin_pb2 as PB2
from infercache.v1 import cache_pb2
from infercache_client.admin import AdminClient, prewarm_request
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from sidecar.cli.admin import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_common, connect_admin, fail

EXIT_INTERRUPTED = 130
EXIT_FEWER = 3
"""--from-version: fewer of the top K were available and replayable than asked for."""
# A sanity bound on what is read into memory; the sidecar enforces its own message limit
# (INFERCACHE_PREWARM_MAX_MESSAGE_BYTES, default 16 MiB) and answers RESOURCE_EXHAUSTED.
MAX_FILE_BYTES = 256 * 1024 * 1024
_SHOWN_ITEMS = 20


class FileError(ValueError):
    """The requests file cannot be used; the message names the line."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `prewarm`."""
    p = subparsers.add_parser(
        "prewarm",
        help="fill the cache for the pod's current model (admin plane)",
        description="Send requests to the pod's model server and cache the answers under "
        "the pod's model fingerprint.",
    )
    add_common(p)
    p.set_defaults(timeout=6 * 3600.0)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", type=Path, help="JSONL file of requests (Lookup key shape)")
    source.add_argument(
        "--from-version", metavar="MODEL_VERSION", help="replay this version's most-hit requests"
    )
    p.add_argument("--top-k", type=int, default=0, help="with --from-version: how many")
    p.add_argument(
        "--allow-fewer",
        action="store_true",
        help="with --from-version: exit 0 even when fewer than K were replayable (else 3)",
    )
    p.add_argument(
        "--max-failures",
        type=int,
        default=0,
        help="failed requests tolerated; more stops the run and exits 1 (default 0)",
    )
    p.add_argument("--ttl", type=int, default=0, help="TTL of stored results in seconds")
    p.add_argument("--concurrency", type=int, default=0, help="model-server calls in flight")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run_prewarm)


def read_requests(path: Path) -> list[tuple[cache_pb2.CacheKey, cache_pb2.ReplayRequest]]:
    """Parse a JSONL file of keys with their model-server requests (an empty
    ReplayRequest where a line has none); FileError names the first bad line."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise FileError(f"{path}: {size} bytes; the limit is {MAX_FILE_BYTES}")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FileError(f"{path}: {exc}") from exc
    keys = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            keys.append(_line(json.loads(line)))
        except (ValueError, ParseError, TypeError) as exc:
            raise FileError(f"{path}:{number}: {exc}") from exc
    return keys


def _line(doc: object) -> tuple[cache_pb2.CacheKey, cache_pb2.ReplayRequest]:
    if not isinstance(doc, dict):
        raise ValueError("a line must be a JSON object")
    if "key" not in doc:  # a bare key: nothing to replay
        return ParseDict(doc, cache_pb2.CacheKey()), cache_pb2.ReplayRequest()
    replay = doc.get("replay") or {}
    body = replay.get("body", "")
    raw = body.encode("utf-8") if isinstance(body, str) else json.dumps(body).encode("utf-8")
    return ParseDict(doc["key"], cache_pb2.CacheKey()), cache_pb2.ReplayRequest(
        path=str(replay.get("path", "")),
        content_type=str(replay.get("contentType", "application/json")),
        body=raw if replay else b"",
    )


def _request(args: argparse.Namespace) -> PB2.PrewarmRequest | None:
    if args.max_failures < 0 or args.ttl < 0 or args.concurrency < 0:
        print("infercache: --max-failures, --ttl and --concurrency must be >= 0", file=sys.stderr)
        return None
    ttl, concurrency, max_failures = args.ttl, args.concurrency, args.max_failures
    if args.from_version is not None:
        if args.top_k < 1:
            print("infercache: --from-version needs --top-k K (K >= 1)", file=sys.stderr)
            return None
        return prewarm_request(
            from_version=args.from_version,
            top_k=args.top_k,
            ttl_seconds=ttl,
            concurrency=concurrency,
            max_failures=max_failures,
        )
    try:
        lines = read_requests(args.file)
    except FileError as exc:
        print(f"infercache: {exc}", file=sys.stderr)
        return None
    return prewarm_request(
        keys=[k for k, _ in lines],
        replays=[r for _, r in lines],
        ttl_seconds=ttl,
        concurrency=concurrency,
        max_failures=max_failures,
    )


def run_prewarm(args: argparse.Namespace) -> int:
    """Stream the run with a progress bar; exit 0 only within the failure budget."""
    request = _request(args)
    if request is None:
        return EXIT_USAGE
    admin = connect_admin(args)
    if admin is None:
        return EXIT_USAGE
    with admin:
        return _follow(admin, request, args)


def _follow(admin: AdminClient, request: PB2.PrewarmRequest, args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    last: PB2.PrewarmResponse | None = None
    items: list[PB2.PrewarmItemResult] = []
    call = admin.prewarm(request, timeout=args.timeout)
    try:
        with Progress(
            TextColumn("prewarm"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TextColumn("ETA {task.fields[eta]}"),
            console=console,
        ) as bar:
            task = bar.add_task("prewarm", total=None, counts="", eta="?")
            for last in call:
                items.extend(last.items)
                bar.update(
                    task,
                    total=last.total,
                    completed=last.done,
                    counts=f"stored {last.stored} skipped {last.skipped} failed {last.failed}",
                    eta=f"{last.eta_ms / 1000:.0f}s" if last.eta_ms else "-",
                )
    except KeyboardInterrupt:
        call.cancel()
        print("infercache: interrupted; the prewarm run was cancelled", file=sys.stderr)
        return EXIT_INTERRUPTED
    except grpc.RpcError as exc:
        return fail("prewarm", exc, args)
    if last is None or last.state == PB2.PREWARM_STATE_RUNNING:
        print("infercache: prewarm: the stream ended without a summary", file=sys.stderr)
        return EXIT_FAILED
    _print_summary(last, items, as_json=args.json)
    ok = last.state == PB2.PREWARM_STATE_COMPLETED and last.failed <= args.max_failures
    if not ok:
        return EXIT_FAILED
    top_k = request.WhichOneof("source") == "from_version"
    if top_k and last.replayable < last.requested and not args.allow_fewer:
        print(
            f"infercache: prewarm: only {last.replayable} of the top {last.requested} "
            "were replayable (--allow-fewer to accept that)",
            file=sys.stderr,
        )
        return EXIT_FEWER
    return EXIT_OK


def _print_summary(
    last: PB2.PrewarmResponse, items: list[PB2.PrewarmItemResult], *, as_json: bool
) -> None:
    if as_json:
        doc = MessageToDict(last, preserving_proto_field_name=True)
        doc["items"] = [MessageToDict(i, preserving_proto_field_name=True) for i in items]
        print(json.dumps(doc))
        return
    state = PB2.PrewarmState.Name(last.state).removeprefix("PREWARM_STATE_").lower()
    print(
        f"prewarm {state}: {last.stored} stored, {last.skipped} skipped, {last.failed} failed "
        f"of {last.total} in {last.elapsed_ms / 1000:.1f} s (model {last.model_version})"
    )
    if last.requested > last.total or last.replayable < last.total:
        print(
            f"  of {last.requested} requested: {last.total} available, "
            f"{last.replayable} replayable, {last.not_replayable} not_replayable"
        )
    if last.error:
        print(f"  error: {last.error}")
    for reason, n in sorted(last.skipped_by_reason.items()):
        print(f"  skipped {reason}: {n}")
    for reason, n in sorted(last.failed_by_reason.items()):
        print(f"  failed {reason}: {n}")
    failed = [i for i in items if i.outcome == PB2.PREWARM_ITEM_OUTCOME_FAILED]
    for i in failed[:_SHOWN_ITEMS]:
        print(f"  request #{i.index}: {i.reason}: {i.detail}")
    if len(failed) > _SHOWN_ITEMS:
        print(f"  ... {len(failed) - _SHOWN_ITEMS} more failed requests")
