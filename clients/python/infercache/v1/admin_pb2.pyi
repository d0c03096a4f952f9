from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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
    __slots__ = ("counters", "epoch", "confirmed", "member_id")
    class CountersEntry(_message.Message):
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
    counters: _containers.ScalarMap[str, int]
    epoch: int
    confirmed: bool
    member_id: str
    def __init__(self, counters: _Optional[_Mapping[str, int]] = ..., epoch: _Optional[int] = ..., confirmed: _Optional[bool] = ..., member_id: _Optional[str] = ...) -> None: ...
