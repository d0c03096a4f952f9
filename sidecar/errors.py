"""The sidecar's one exception tree.

    InfercacheError
    ├── InvalidArgument      bad input; names the offending field
    ├── FailedPrecondition   valid input the current state refuses
    ├── ResourceExhausted    a bounded resource (KV slots, the stream buffer) has no room left
    ├── Unauthenticated      missing or wrong credentials
    ├── PermissionDenied     not granted (e.g. a KV tenant the attachment was not bound to)
    ├── NotFound             the named thing does not exist (e.g. an unknown key digest)
    ├── DeadlineExceeded     the caller went quiet for longer than a limit allows
    ├── Unavailable          a required backend could not be reached
    └── TierUnavailable      a cache tier failed; callers degrade to a miss
        └── TierTimeout      ... because it was too slow

Only sidecar/api/ turns these into gRPC status codes, in one table.
"""

from __future__ import annotations


class InfercacheError(Exception):
    """Base class of every error the sidecar raises on purpose."""


class InvalidArgument(InfercacheError):
    """The request is malformed; `field` is the dotted path of the culprit."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class OverLimit(InvalidArgument):
    """A key field larger than this sidecar's limits: well formed, but not keyable here.
    gRPC answers INVALID_ARGUMENT as for any malformed field; the gateway forwards such a
    request uncached instead (the model server may well answer it)."""


class FailedPrecondition(InfercacheError):
    """The request is well formed but the sidecar's state refuses it."""


class ResourceExhausted(InfercacheError):
    """A bounded resource (KV slots, leases, attachments, the StoreStream buffer) has no room."""


class Unauthenticated(InfercacheError):
    """Credentials are missing or wrong."""


class PermissionDenied(InfercacheError):
    """The caller is not granted what it asks for (a KV attachment naming a tenant, or a
    trust domain, it was not attached for)."""


class NotFound(InfercacheError):
    """The request names something the sidecar does not hold."""


class DeadlineExceeded(InfercacheError):
    """The caller stayed silent longer than a configured limit (e.g. between stream chunks)."""


class Unavailable(InfercacheError):
    """A backend that the operation cannot do without is unreachable."""


class TierUnavailable(InfercacheError):
    """A cache tier failed; lookups degrade to MISS, stores report failure."""


class StoreDistrusted(TierUnavailable):
    """A shared store holds control state no sidecar could have written (an epoch counter
    that is not an integer or is out of range): nothing it says is believed; no hits."""


class TierTimeout(TierUnavailable):
    """A cache tier did not answer within its deadline."""
