from infercache.v1 import cache_pb2 as _cache_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrewarmState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PREWARM_STATE_UNSPECIFIED: _ClassVar[PrewarmState]
    PREWARM_STATE_RUNNING: _ClassVar[PrewarmState]
    PREWARM_STATE_COMPLETED: _ClassVar[PrewarmState]
    PREWARM_STATE_FAILURE_BUDGET_EXCEEDED: _ClassVar[PrewarmState]
    PREWARM_STATE_FAILED: _ClassVar[PrewarmState]

class PrewarmItemOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PREWARM_ITEM_OUTCOME_UNSPECIFIED: _ClassVar[PrewarmItemOutcome]
    PREWARM_ITEM_OUTCOME_STORED: _ClassVar[PrewarmItemOutcome]
    PREWARM_ITEM_OUTCOME_SKIPPED: _ClassVar[PrewarmItemOutcome]
    PREWARM_ITEM_OUTCOME_FAILED: _ClassVar[PrewarmItemOutcome]
PREWARM_STATE_UNSPECIFIED: PrewarmState
PREWARM_STATE_RUNNING: PrewarmState
PREWARM_STATE_COMPLETED: PrewarmState
PREWARM_STATE_FAILURE_BUDGET_EXCEEDED: PrewarmState
PREWARM_STATE_FAILED: PrewarmState
PREWARM_ITEM_OUTCOME_UNSPECIFIED: PrewarmItemOutcome
PREWARM_ITEM_OUTCOME_STORED: PrewarmItemOutcome
PREWARM_ITEM_OUTCOME_SKIPPED: PrewarmItemOutcome
PREWARM_ITEM_OUTCOME_FAILED: PrewarmItemOutcome

class Selector(_message.Message):
    __slots__ = ("tenant", "model_version", "adapter_version", "prompt_version", "all")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROMPT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    model_version: str
    adapter_version: str
    prompt_version: str
    all: bool
    def __init__(self, tenant: _Optional[str] = ..., model_version: _Optional[str] = ..., adapter_version: _Optional[str] = ..., prompt_version: _Optional[str] = ..., all: _Optional[bool] = ...) -> None: ...

class InvalidateRequest(_message.Message):
    __slots__ = ("selector", "reason")
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    selector: Selector
    reason: str
    def __init__(self, selector: _Optional[_Union[Selector, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class InvalidateResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: InvalidationRecord
    def __init__(self, record: _Optional[_Union[InvalidationRecord, _Mapping]] = ...) -> None: ...

class InvalidationRecord(_message.Message):
    __slots__ = ("id", "time_ms", "caller", "selector", "reason", "epoch", "estimated_entries")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    id: str
    time_ms: int
    caller: str
    selector: Selector
    reason: str
    epoch: int
    estimated_entries: int
    def __init__(self, id: _Optional[str] = ..., time_ms: _Optional[int] = ..., caller: _Optional[str] = ..., selector: _Optional[_Union[Selector, _Mapping]] = ..., reason: _Optional[str] = ..., epoch: _Optional[int] = ..., estimated_entries: _Optional[int] = ...) -> None: ...

class ListInvalidationsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListInvalidationsResponse(_message.Message):
    __slots__ = ("records", "next_page_token")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[InvalidationRecord]
    next_page_token: str
    def __init__(self, records: _Optional[_Iterable[_Union[InvalidationRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("counters", "epoch", "confirmed", "member_id", "versions", "tiers", "uptime_seconds", "global_counters", "server", "verification", "verification_events", "verification_counts")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class GlobalCountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class VerificationCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_COUNTERS_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_EVENTS_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_COUNTS_FIELD_NUMBER: _ClassVar[int]
    counters: _containers.ScalarMap[str, int]
    epoch: int
    confirmed: bool
    member_id: str
    versions: _containers.RepeatedCompositeFieldContainer[VersionStats]
    tiers: _containers.RepeatedCompositeFieldContainer[TierUsage]
    uptime_seconds: float
    global_counters: _containers.ScalarMap[str, int]
    server: _cache_pb2.GetServerInfoResponse
    verification: _containers.RepeatedCompositeFieldContainer[VerificationStats]
    verification_events: _containers.RepeatedCompositeFieldContainer[VerificationEvent]
    verification_counts: _containers.ScalarMap[str, int]
    def __init__(self, counters: _Optional[_Mapping[str, int]] = ..., epoch: _Optional[int] = ..., confirmed: _Optional[bool] = ..., member_id: _Optional[str] = ..., versions: _Optional[_Iterable[_Union[VersionStats, _Mapping]]] = ..., tiers: _Optional[_Iterable[_Union[TierUsage, _Mapping]]] = ..., uptime_seconds: _Optional[float] = ..., global_counters: _Optional[_Mapping[str, int]] = ..., server: _Optional[_Union[_cache_pb2.GetServerInfoResponse, _Mapping]] = ..., verification: _Optional[_Iterable[_Union[VerificationStats, _Mapping]]] = ..., verification_events: _Optional[_Iterable[_Union[VerificationEvent, _Mapping]]] = ..., verification_counts: _Optional[_Mapping[str, int]] = ...) -> None: ...

class VerificationScope(_message.Message):
    __slots__ = ("model_version", "tenant", "prompt_version")
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_VERSION_FIELD_NUMBER: _ClassVar[int]
    model_version: str
    tenant: str
    prompt_version: str
    def __init__(self, model_version: _Optional[str] = ..., tenant: _Optional[str] = ..., prompt_version: _Optional[str] = ...) -> None: ...

class VerificationStats(_message.Message):
    __slots__ = ("scope", "state", "checks", "diverged", "baseline_checks", "baseline_diverged", "excess", "excess_lower", "excess_upper", "statistic", "threshold")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    DIVERGED_FIELD_NUMBER: _ClassVar[int]
    BASELINE_CHECKS_FIELD_NUMBER: _ClassVar[int]
    BASELINE_DIVERGED_FIELD_NUMBER: _ClassVar[int]
    EXCESS_FIELD_NUMBER: _ClassVar[int]
    EXCESS_LOWER_FIELD_NUMBER: _ClassVar[int]
    EXCESS_UPPER_FIELD_NUMBER: _ClassVar[int]
    STATISTIC_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    scope: VerificationScope
    state: str
    checks: int
    diverged: int
    baseline_checks: int
    baseline_diverged: int
    excess: float
    excess_lower: float
    excess_upper: float
    statistic: float
    threshold: float
    def __init__(self, scope: _Optional[_Union[VerificationScope, _Mapping]] = ..., state: _Optional[str] = ..., checks: _Optional[int] = ..., diverged: _Optional[int] = ..., baseline_checks: _Optional[int] = ..., baseline_diverged: _Optional[int] = ..., excess: _Optional[float] = ..., excess_lower: _Optional[float] = ..., excess_upper: _Optional[float] = ..., statistic: _Optional[float] = ..., threshold: _Optional[float] = ...) -> None: ...

class VerificationEvent(_message.Message):
    __slots__ = ("time_ms", "scope", "action", "caller", "reason", "checks", "diverged", "baseline_checks", "baseline_diverged", "excess", "excess_lower", "excess_upper", "member_id")
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    DIVERGED_FIELD_NUMBER: _ClassVar[int]
    BASELINE_CHECKS_FIELD_NUMBER: _ClassVar[int]
    BASELINE_DIVERGED_FIELD_NUMBER: _ClassVar[int]
    EXCESS_FIELD_NUMBER: _ClassVar[int]
    EXCESS_LOWER_FIELD_NUMBER: _ClassVar[int]
    EXCESS_UPPER_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    scope: VerificationScope
    action: str
    caller: str
    reason: str
    checks: int
    diverged: int
    baseline_checks: int
    baseline_diverged: int
    excess: float
    excess_lower: float
    excess_upper: float
    member_id: str
    def __init__(self, time_ms: _Optional[int] = ..., scope: _Optional[_Union[VerificationScope, _Mapping]] = ..., action: _Optional[str] = ..., caller: _Optional[str] = ..., reason: _Optional[str] = ..., checks: _Optional[int] = ..., diverged: _Optional[int] = ..., baseline_checks: _Optional[int] = ..., baseline_diverged: _Optional[int] = ..., excess: _Optional[float] = ..., excess_lower: _Optional[float] = ..., excess_upper: _Optional[float] = ..., member_id: _Optional[str] = ...) -> None: ...

class AcknowledgeVerificationRequest(_message.Message):
    __slots__ = ("scope", "reason")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    scope: VerificationScope
    reason: str
    def __init__(self, scope: _Optional[_Union[VerificationScope, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class AcknowledgeVerificationResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: VerificationEvent
    def __init__(self, event: _Optional[_Union[VerificationEvent, _Mapping]] = ...) -> None: ...

class VersionStats(_message.Message):
    __slots__ = ("model_version", "lookups", "stores", "rejected", "bypasses", "leases", "downstream", "degraded", "dead", "invalidations", "saved_latency_ms", "saved_prompt_tokens", "saved_completion_tokens")
    class LookupsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class StoresEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class RejectedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class BypassesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class LeasesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class DownstreamEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOOKUPS_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    BYPASSES_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    DOWNSTREAM_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    INVALIDATIONS_FIELD_NUMBER: _ClassVar[int]
    SAVED_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    SAVED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SAVED_COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model_version: str
    lookups: _containers.ScalarMap[str, int]
    stores: _containers.ScalarMap[str, int]
    rejected: _containers.ScalarMap[str, int]
    bypasses: _containers.ScalarMap[str, int]
    leases: _containers.ScalarMap[str, int]
    downstream: _containers.ScalarMap[str, int]
    degraded: int
    dead: int
    invalidations: int
    saved_latency_ms: int
    saved_prompt_tokens: int
    saved_completion_tokens: int
    def __init__(self, model_version: _Optional[str] = ..., lookups: _Optional[_Mapping[str, int]] = ..., stores: _Optional[_Mapping[str, int]] = ..., rejected: _Optional[_Mapping[str, int]] = ..., bypasses: _Optional[_Mapping[str, int]] = ..., leases: _Optional[_Mapping[str, int]] = ..., downstream: _Optional[_Mapping[str, int]] = ..., degraded: _Optional[int] = ..., dead: _Optional[int] = ..., invalidations: _Optional[int] = ..., saved_latency_ms: _Optional[int] = ..., saved_prompt_tokens: _Optional[int] = ..., saved_completion_tokens: _Optional[int] = ...) -> None: ...

class TierUsage(_message.Message):
    __slots__ = ("name", "bytes", "entries")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    bytes: int
    entries: int
    def __init__(self, name: _Optional[str] = ..., bytes: _Optional[int] = ..., entries: _Optional[int] = ...) -> None: ...

class PrewarmRequest(_message.Message):
    __slots__ = ("requests", "from_version", "ttl_seconds", "concurrency", "max_failures")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    MAX_FAILURES_FIELD_NUMBER: _ClassVar[int]
    requests: PrewarmRequestList
    from_version: PrewarmFromVersion
    ttl_seconds: int
    concurrency: int
    max_failures: int
    def __init__(self, requests: _Optional[_Union[PrewarmRequestList, _Mapping]] = ..., from_version: _Optional[_Union[PrewarmFromVersion, _Mapping]] = ..., ttl_seconds: _Optional[int] = ..., concurrency: _Optional[int] = ..., max_failures: _Optional[int] = ...) -> None: ...

class PrewarmRequestList(_message.Message):
    __slots__ = ("keys", "replays")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    REPLAYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[_cache_pb2.CacheKey]
    replays: _containers.RepeatedCompositeFieldContainer[_cache_pb2.ReplayRequest]
    def __init__(self, keys: _Optional[_Iterable[_Union[_cache_pb2.CacheKey, _Mapping]]] = ..., replays: _Optional[_Iterable[_Union[_cache_pb2.ReplayRequest, _Mapping]]] = ...) -> None: ...

class PrewarmFromVersion(_message.Message):
    __slots__ = ("model_version", "top_k")
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    model_version: str
    top_k: int
    def __init__(self, model_version: _Optional[str] = ..., top_k: _Optional[int] = ...) -> None: ...

class PrewarmItemResult(_message.Message):
    __slots__ = ("index", "outcome", "reason", "detail", "key_digest")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    KEY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    index: int
    outcome: PrewarmItemOutcome
    reason: str
    detail: str
    key_digest: bytes
    def __init__(self, index: _Optional[int] = ..., outcome: _Optional[_Union[PrewarmItemOutcome, str]] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ..., key_digest: _Optional[bytes] = ...) -> None: ...

class PrewarmResponse(_message.Message):
    __slots__ = ("state", "total", "done", "stored", "skipped", "failed", "skipped_by_reason", "failed_by_reason", "elapsed_ms", "eta_ms", "items", "error", "model_version", "not_replayable", "requested", "replayable")
    class SkippedByReasonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class FailedByReasonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_BY_REASON_FIELD_NUMBER: _ClassVar[int]
    FAILED_BY_REASON_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    ETA_MS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NOT_REPLAYABLE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    REPLAYABLE_FIELD_NUMBER: _ClassVar[int]
    state: PrewarmState
    total: int
    done: int
    stored: int
    skipped: int
    failed: int
    skipped_by_reason: _containers.ScalarMap[str, int]
    failed_by_reason: _containers.ScalarMap[str, int]
    elapsed_ms: int
    eta_ms: int
    items: _containers.RepeatedCompositeFieldContainer[PrewarmItemResult]
    error: str
    model_version: str
    not_replayable: int
    requested: int
    replayable: int
    def __init__(self, state: _Optional[_Union[PrewarmState, str]] = ..., total: _Optional[int] = ..., done: _Optional[int] = ..., stored: _Optional[int] = ..., skipped: _Optional[int] = ..., failed: _Optional[int] = ..., skipped_by_reason: _Optional[_Mapping[str, int]] = ..., failed_by_reason: _Optional[_Mapping[str, int]] = ..., elapsed_ms: _Optional[int] = ..., eta_ms: _Optional[int] = ..., items: _Optional[_Iterable[_Union[PrewarmItemResult, _Mapping]]] = ..., error: _Optional[str] = ..., model_version: _Optional[str] = ..., not_replayable: _Optional[int] = ..., requested: _Optional[int] = ..., replayable: _Optional[int] = ...) -> None: ...
