"""`infercache acknowledge-verification`: serve a quarantined scope's hits again
(docs/verification.md)."""

from __future__ import annotations

import argparse
import json

import grpc
from google.protobuf.json_format import MessageToDict

from sidecar.cli.admin import EXIT_OK, EXIT_USAGE, add_common, connect_admin, fail


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `acknowledge-verification`."""
    ack = subparsers.add_parser(
        "acknowledge-verification",
        help="serve a quarantined verification scope's hits again (admin plane)",
        description="Accept a quarantined scope's answers as they are now: its hits are "
        "served again and its evidence starts afresh (one sidecar; audited).",
    )
    add_common(ack)
    ack.add_argument("--model-version", required=True, metavar="FINGERPRINT")
    ack.add_argument("--tenant", required=True)
    ack.add_argument("--prompt-version", required=True)
    ack.add_argument("--reason", required=True, help="kept with the event")
    ack.add_argument("--json", action="store_true", help="print the event as JSON")
    ack.set_defaults(func=run_acknowledge)


def run_acknowledge(args: argparse.Namespace) -> int:
    """AcknowledgeVerification; prints the event."""
    admin = connect_admin(args)
    if admin is None:
        return EXIT_USAGE
    try:
        with admin:
            event = admin.acknowledge_verification(
                args.model_version,
                args.tenant,
                args.prompt_version,
                args.reason,
                timeout=args.timeout,
            )
    except grpc.RpcError as exc:
        return fail("acknowledge-verification", exc, args)
    if args.json:
        print(json.dumps(MessageToDict(event, preserving_proto_field_name=True)))
    else:
        print(
            f"acknowledged: hits of tenant={args.tenant} prompt_version={args.prompt_version} "
            f"are served again (after {event.checks} checks, {event.diverged} diverged)"
        )
    return EXIT_OK
