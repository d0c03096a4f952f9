"""A blocking client of the sidecar's admin plane (AdminService, the admin listener).

    with AdminClient("127.0.0.1:50052", token) as admin:
        record = admin.invalidate(model_version="fp1-...", reason="rollback")

Over TLS (`tls_ca_file=...`, plus `tls_cert_file`/`tls_key_file` for a listener that
asks for client certificates) the token and the answers are encrypted and the
listener's certificate is verified. Every call carries the bearer token;
UNAVAILABLE is retried with exponential backoff by gRPC's own retry policy (5
attempts, 0.2 s to 5 s). Errors are
grpc.RpcError with the sidecar's status (UNAUTHENTICATED for a bad token).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Protocol

import grpc
from infercache.v1 import admin_pb2 as PB2
from infercache.v1 import admin_pb2_grpc, cache_pb2

_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": "infercache.v1.AdminService"}],
                "retryPolicy": {
                    "maxAttempts": 5,
                    "initialBackoff": "0.2s",
                    "maxBackoff": "5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)


class PrewarmCall(Protocol):
    """A running Prewarm RPC: iterate its progress messages; cancel() stops the run."""

    def __iter__(self) -> Iterator[PB2.PrewarmResponse]: ...

    def cancel(self) -> bool:
        """Cancel the RPC (the sidecar cancels the run: no further model-server calls)."""
        ...


def selector(
    *,
    tenant: str | None = None,
    model_version: str | None = None,
    adapter_version: str | None = None,
    prompt_version: str | None = None,
    all: bool = False,
) -> PB2.Selector:
    """What an invalidation matches: every named dimension (unset: any), or `all`."""
    return PB2.Selector(
        tenant=tenant or "",
        model_version=model_version or "",
        adapter_version=adapter_version or "",
        prompt_version=prompt_version or "",
        all=all,
    )


def prewarm_request(
    *,
    keys: Sequence[cache_pb2.CacheKey] | None = None,
    replays: Sequence[cache_pb2.ReplayRequest] = (),
    from_version: str | None = None,
    top_k: int = 0,
    ttl_seconds: int = 0,
    concurrency: int = 0,
    max_failures: int = 0,
) -> PB2.PrewarmRequest:
    """A Prewarm of the given request keys, or of `from_version`'s `top_k` most-hit ones.

    `replays[i]` is the model-server request that computes `keys[i]`; the sidecar never
    rebuilds one from a key, so a key without one is skipped (not_replayable)."""
    if (keys is None) == (from_version is None):
        raise ValueError("give keys or from_version (one of them, not both)")
    if from_version is not None:
        return PB2.PrewarmRequest(
            from_version=PB2.PrewarmFromVersion(model_version=from_version, top_k=top_k),
            ttl_seconds=ttl_seconds,
            concurrency=concurrency,
            max_failures=max_failures,
        )
    # Set even when empty: an empty file is a run of no requests, not a missing source.
    return PB2.PrewarmRequest(
        requests=PB2.PrewarmRequestList(keys=keys, replays=replays),
        ttl_seconds=ttl_seconds,
        concurrency=concurrency,
        max_failures=max_failures,
    )


def _read(path: str | None) -> bytes | None:
    """A PEM file's bytes (None for no file)."""
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


class AdminClient:
    """Blocking AdminService client. `target` is "host:port" or "unix:/path/to.sock";
    `token` is the bearer token alone (not the server's NAME=TOKEN pair)."""

    def __init__(
        self,
        target: str,
        token: str,
        *,
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        tls_server_name: str | None = None,
    ) -> None:
        """Plaintext, or TLS when any `tls_*` is given: `tls_ca_file` the CA(s) that
        signed the listener's certificate (None: the system's), `tls_cert_file` and
        `tls_key_file` a client certificate for a listener that asks for one (mTLS),
        `tls_server_name` the name to check the certificate against when `target` is an
        address it does not name (a pod IP)."""
        options = [("grpc.enable_retries", 1), ("grpc.service_config", _SERVICE_CONFIG)]
        if bool(tls_cert_file) != bool(tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file go together")
        if tls_ca_file or tls_cert_file or tls_server_name:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca_file),
                private_key=_read(tls_key_file),
                certificate_chain=_read(tls_cert_file),
            )
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = admin_pb2_grpc.AdminServiceStub(self._channel)
        self._metadata = [("authorization", f"Bearer {token}")]

    def invalidate(
        self, match: PB2.Selector, reason: str, *, timeout: float | None = 30.0
    ) -> PB2.InvalidationRecord:
        """Invalidate what `match` (see selector()) names, fleet-wide; the audit record."""
        resp: PB2.InvalidateResponse = self._stub.Invalidate(
            PB2.InvalidateRequest(selector=match, reason=reason),
            metadata=self._metadata,
            timeout=timeout,
        )
        return resp.record

    def acknowledge_verification(
        self,
        model_version: str,
        tenant: str,
        prompt_version: str,
        reason: str,
        *,
        timeout: float | None = 30.0,
    ) -> PB2.VerificationEvent:
        """Serve a quarantined verification scope's hits again; the audited event."""
        scope = PB2.VerificationScope(
            model_version=model_version, tenant=tenant, prompt_version=prompt_version
        )
        resp: PB2.AcknowledgeVerificationResponse = self._stub.AcknowledgeVerification(
            PB2.AcknowledgeVerificationRequest(scope=scope, reason=reason),
            metadata=self._metadata,
            timeout=timeout,
        )
        return resp.event

    def invalidations(
        self, limit: int, *, timeout: float | None = 30.0
    ) -> list[PB2.InvalidationRecord]:
        """Up to `limit` audit records, newest first (paged through ListInvalidations)."""
        records: list[PB2.InvalidationRecord] = []
        token = ""
        while len(records) < limit:
            page: PB2.ListInvalidationsResponse = self._stub.ListInvalidations(
                PB2.ListInvalidationsRequest(
                    page_size=min(1000, limit - len(records)), page_token=token
                ),
                metadata=self._metadata,
                timeout=timeout,
            )
            records.extend(page.records)
            token = page.next_page_token
            if not token:
                break
        return records

    def stats(self, *, timeout: float | None = 30.0) -> PB2.GetStatsResponse:
        """The sidecar's counters since start, per model version, and its tiers' usage."""
        resp: PB2.GetStatsResponse = self._stub.GetStats(
            PB2.GetStatsRequest(), metadata=self._metadata, timeout=timeout
        )
        return resp

    def prewarm(self, request: PB2.PrewarmRequest, *, timeout: float | None = None) -> PrewarmCall:
        """Start a prewarm run (see prewarm_request()); iterate the call for its progress."""
        call: PrewarmCall = self._stub.Prewarm(request, metadata=self._metadata, timeout=timeout)
        return call

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
