from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResponseFormatType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESPONSE_FORMAT_TYPE_UNSPECIFIED: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_TEXT: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_JSON_OBJECT: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_JSON_SCHEMA: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_REGEX: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_GRAMMAR: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_STRUCTURAL_TAG: _ClassVar[ResponseFormatType]

class LookupOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOOKUP_OUTCOME_UNSPECIFIED: _ClassVar[LookupOutcome]
    LOOKUP_OUTCOME_HIT: _ClassVar[LookupOutcome]
    LOOKUP_OUTCOME_MISS: _ClassVar[LookupOutcome]
    LOOKUP_OUTCOME_BYPASS: _ClassVar[LookupOutcome]

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_UNSPECIFIED: _ClassVar[Tier]
    TIER_HOT: _ClassVar[Tier]
    TIER_WARM: _ClassVar[Tier]

class BypassReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BYPASS_REASON_UNSPECIFIED: _ClassVar[BypassReason]
    BYPASS_REASON_NOT_CACHEABLE: _ClassVar[BypassReason]
    BYPASS_REASON_NON_DETERMINISTIC: _ClassVar[BypassReason]
    BYPASS_REASON_SIDE_EFFECTS: _ClassVar[BypassReason]
    BYPASS_REASON_PRIVATE_DATA: _ClassVar[BypassReason]
    BYPASS_REASON_REAL_TIME: _ClassVar[BypassReason]
    BYPASS_REASON_TOOLS: _ClassVar[BypassReason]
    BYPASS_REASON_ENTRY_TOO_LARGE: _ClassVar[BypassReason]
    BYPASS_REASON_VERIFICATION_FAILED: _ClassVar[BypassReason]

class StoreOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STORE_OUTCOME_UNSPECIFIED: _ClassVar[StoreOutcome]
    STORE_OUTCOME_STORED: _ClassVar[StoreOutcome]
    STORE_OUTCOME_WRITE_FAILED: _ClassVar[StoreOutcome]
    STORE_OUTCOME_BYPASSED: _ClassVar[StoreOutcome]
    STORE_OUTCOME_STALE_LEASE: _ClassVar[StoreOutcome]

class PacingMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PACING_MODE_UNSPECIFIED: _ClassVar[PacingMode]
    PACING_MODE_FASTEST: _ClassVar[PacingMode]
    PACING_MODE_TOKENS_PER_SECOND: _ClassVar[PacingMode]
    PACING_MODE_ORIGINAL: _ClassVar[PacingMode]

class ReportOutcomeVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPORT_OUTCOME_VERDICT_UNSPECIFIED: _ClassVar[ReportOutcomeVerdict]
    REPORT_OUTCOME_VERDICT_ACCEPTED: _ClassVar[ReportOutcomeVerdict]
    REPORT_OUTCOME_VERDICT_REJECTED: _ClassVar[ReportOutcomeVerdict]
RESPONSE_FORMAT_TYPE_UNSPECIFIED: ResponseFormatType
RESPONSE_FORMAT_TYPE_TEXT: ResponseFormatType
RESPONSE_FORMAT_TYPE_JSON_OBJECT: ResponseFormatType
RESPONSE_FORMAT_TYPE_JSON_SCHEMA: ResponseFormatType
RESPONSE_FORMAT_TYPE_REGEX: ResponseFormatType
RESPONSE_FORMAT_TYPE_GRAMMAR: ResponseFormatType
RESPONSE_FORMAT_TYPE_STRUCTURAL_TAG: ResponseFormatType
LOOKUP_OUTCOME_UNSPECIFIED: LookupOutcome
LOOKUP_OUTCOME_HIT: LookupOutcome
LOOKUP_OUTCOME_MISS: LookupOutcome
LOOKUP_OUTCOME_BYPASS: LookupOutcome
TIER_UNSPECIFIED: Tier
TIER_HOT: Tier
TIER_WARM: Tier
BYPASS_REASON_UNSPECIFIED: BypassReason
BYPASS_REASON_NOT_CACHEABLE: BypassReason
BYPASS_REASON_NON_DETERMINISTIC: BypassReason
BYPASS_REASON_SIDE_EFFECTS: BypassReason
BYPASS_REASON_PRIVATE_DATA: BypassReason
BYPASS_REASON_REAL_TIME: BypassReason
BYPASS_REASON_TOOLS: BypassReason
BYPASS_REASON_ENTRY_TOO_LARGE: BypassReason
BYPASS_REASON_VERIFICATION_FAILED: BypassReason
STORE_OUTCOME_UNSPECIFIED: StoreOutcome
STORE_OUTCOME_STORED: StoreOutcome
STORE_OUTCOME_WRITE_FAILED: StoreOutcome
STORE_OUTCOME_BYPASSED: StoreOutcome
STORE_OUTCOME_STALE_LEASE: StoreOutcome
PACING_MODE_UNSPECIFIED: PacingMode
PACING_MODE_FASTEST: PacingMode
PACING_MODE_TOKENS_PER_SECOND: PacingMode
PACING_MODE_ORIGINAL: PacingMode
REPORT_OUTCOME_VERDICT_UNSPECIFIED: ReportOutcomeVerdict
REPORT_OUTCOME_VERDICT_ACCEPTED: ReportOutcomeVerdict
REPORT_OUTCOME_VERDICT_REJECTED: ReportOutcomeVerdict

class CacheKey(_message.Message):
    __slots__ = ("tenant", "model_version", "adapter_version", "prompt_version", "sampling", "extra", "tools", "tool_choice", "parallel_tool_calls", "text", "chat", "token_ids", "input_sha256", "chat_template", "endpoint", "output")
    class ExtraEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROMPT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHA256_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    model_version: str
    adapter_version: str
    prompt_version: str
    sampling: SamplingParams
    extra: _containers.ScalarMap[str, str]
    tools: _containers.RepeatedScalarFieldContainer[str]
    tool_choice: str
    parallel_tool_calls: bool
    text: str
    chat: ChatMessages
    token_ids: TokenIds
    input_sha256: bytes
    chat_template: ChatTemplateOptions
    endpoint: str
    output: OutputOptions
    def __init__(self, tenant: _Optional[str] = ..., model_version: _Optional[str] = ..., adapter_version: _Optional[str] = ..., prompt_version: _Optional[str] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., extra: _Optional[_Mapping[str, str]] = ..., tools: _Optional[_Iterable[str]] = ..., tool_choice: _Optional[str] = ..., parallel_tool_calls: _Optional[bool] = ..., text: _Optional[str] = ..., chat: _Optional[_Union[ChatMessages, _Mapping]] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., input_sha256: _Optional[bytes] = ..., chat_template: _Optional[_Union[ChatTemplateOptions, _Mapping]] = ..., endpoint: _Optional[str] = ..., output: _Optional[_Union[OutputOptions, _Mapping]] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "max_tokens", "stop", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_p", "min_tokens", "stop_token_ids", "n", "logprobs", "ignore_eos", "response_format", "logit_bias", "top_logprobs", "return_logprobs", "prompt_logprobs", "length_penalty", "bad_words", "allowed_token_ids", "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens", "best_of", "use_beam_search", "truncate_prompt_tokens", "max_completion_tokens", "guided")
    class LogitBiasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    RETURN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    LENGTH_PENALTY_FIELD_NUMBER: _ClassVar[int]
    BAD_WORDS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_STR_IN_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPACES_BETWEEN_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BEST_OF_FIELD_NUMBER: _ClassVar[int]
    USE_BEAM_SEARCH_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GUIDED_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    min_p: float
    min_tokens: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    n: int
    logprobs: int
    ignore_eos: bool
    response_format: ResponseFormat
    logit_bias: _containers.ScalarMap[int, float]
    top_logprobs: int
    return_logprobs: bool
    prompt_logprobs: int
    length_penalty: float
    bad_words: _containers.RepeatedScalarFieldContainer[str]
    allowed_token_ids: _containers.RepeatedScalarFieldContainer[int]
    include_stop_str_in_output: bool
    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    best_of: int
    use_beam_search: bool
    truncate_prompt_tokens: int
    max_completion_tokens: int
    guided: GuidedDecoding
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., min_p: _Optional[float] = ..., min_tokens: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., n: _Optional[int] = ..., logprobs: _Optional[int] = ..., ignore_eos: _Optional[bool] = ..., response_format: _Optional[_Union[ResponseFormat, _Mapping]] = ..., logit_bias: _Optional[_Mapping[int, float]] = ..., top_logprobs: _Optional[int] = ..., return_logprobs: _Optional[bool] = ..., prompt_logprobs: _Optional[int] = ..., length_penalty: _Optional[float] = ..., bad_words: _Optional[_Iterable[str]] = ..., allowed_token_ids: _Optional[_Iterable[int]] = ..., include_stop_str_in_output: _Optional[bool] = ..., skip_special_tokens: _Optional[bool] = ..., spaces_between_special_tokens: _Optional[bool] = ..., best_of: _Optional[int] = ..., use_beam_search: _Optional[bool] = ..., truncate_prompt_tokens: _Optional[int] = ..., max_completion_tokens: _Optional[int] = ..., guided: _Optional[_Union[GuidedDecoding, _Mapping]] = ...) -> None: ...

class ResponseFormat(_message.Message):
    __slots__ = ("type", "schema", "name", "strict", "description")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    type: ResponseFormatType
    schema: str
    name: str
    strict: bool
    description: str
    def __init__(self, type: _Optional[_Union[ResponseFormatType, str]] = ..., schema: _Optional[str] = ..., name: _Optional[str] = ..., strict: _Optional[bool] = ..., description: _Optional[str] = ...) -> None: ...

class GuidedDecoding(_message.Message):
    __slots__ = ("json", "regex", "choice", "grammar", "json_object", "structural_tag", "whitespace_pattern", "backend", "disable_any_whitespace", "disable_additional_properties", "disable_fallback")
    JSON_FIELD_NUMBER: _ClassVar[int]
    REGEX_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    JSON_OBJECT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURAL_TAG_FIELD_NUMBER: _ClassVar[int]
    WHITESPACE_PATTERN_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    DISABLE_ANY_WHITESPACE_FIELD_NUMBER: _ClassVar[int]
    DISABLE_ADDITIONAL_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    DISABLE_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    json: str
    regex: str
    choice: _containers.RepeatedScalarFieldContainer[str]
    grammar: str
    json_object: bool
    structural_tag: str
    whitespace_pattern: str
    backend: str
    disable_any_whitespace: bool
    disable_additional_properties: bool
    disable_fallback: bool
    def __init__(self, json: _Optional[str] = ..., regex: _Optional[str] = ..., choice: _Optional[_Iterable[str]] = ..., grammar: _Optional[str] = ..., json_object: _Optional[bool] = ..., structural_tag: _Optional[str] = ..., whitespace_pattern: _Optional[str] = ..., backend: _Optional[str] = ..., disable_any_whitespace: _Optional[bool] = ..., disable_additional_properties: _Optional[bool] = ..., disable_fallback: _Optional[bool] = ...) -> None: ...

class ChatTemplateOptions(_message.Message):
    __slots__ = ("add_generation_prompt", "continue_final_message", "add_special_tokens", "chat_template", "chat_template_kwargs", "documents", "mm_processor_kwargs")
    ADD_GENERATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FINAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    MM_PROCESSOR_KWARGS_FIELD_NUMBER: _ClassVar[int]
    add_generation_prompt: bool
    continue_final_message: bool
    add_special_tokens: bool
    chat_template: str
    chat_template_kwargs: str
    documents: str
    mm_processor_kwargs: str
    def __init__(self, add_generation_prompt: _Optional[bool] = ..., continue_final_message: _Optional[bool] = ..., add_special_tokens: _Optional[bool] = ..., chat_template: _Optional[str] = ..., chat_template_kwargs: _Optional[str] = ..., documents: _Optional[str] = ..., mm_processor_kwargs: _Optional[str] = ...) -> None: ...

class OutputOptions(_message.Message):
    __slots__ = ("reasoning_effort", "verbosity", "modalities", "audio", "prediction", "web_search_options", "suffix", "echo", "encoding_format", "dimensions", "return_tokens_as_token_ids")
    REASONING_EFFORT_FIELD_NUMBER: _ClassVar[int]
    VERBOSITY_FIELD_NUMBER: _ClassVar[int]
    MODALITIES_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    WEB_SEARCH_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_FIELD_NUMBER: _ClassVar[int]
    ECHO_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKENS_AS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    reasoning_effort: str
    verbosity: str
    modalities: _containers.RepeatedScalarFieldContainer[str]
    audio: str
    prediction: str
    web_search_options: str
    suffix: str
    echo: bool
    encoding_format: str
    dimensions: int
    return_tokens_as_token_ids: bool
    def __init__(self, reasoning_effort: _Optional[str] = ..., verbosity: _Optional[str] = ..., modalities: _Optional[_Iterable[str]] = ..., audio: _Optional[str] = ..., prediction: _Optional[str] = ..., web_search_options: _Optional[str] = ..., suffix: _Optional[str] = ..., echo: _Optional[bool] = ..., encoding_format: _Optional[str] = ..., dimensions: _Optional[int] = ..., return_tokens_as_token_ids: _Optional[bool] = ...) -> None: ...

class ChatMessages(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "name", "tool_call_id", "parts", "tool_calls", "reasoning_content", "null_content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    REASONING_CONTENT_FIELD_NUMBER: _ClassVar[int]
    NULL_CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    name: str
    tool_call_id: str
    parts: _containers.RepeatedCompositeFieldContainer[ContentPart]
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    reasoning_content: str
    null_content: bool
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., name: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., reasoning_content: _Optional[str] = ..., null_content: _Optional[bool] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("text", "image", "audio", "file", "video")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    VIDEO_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: MediaRef
    audio: MediaRef
    file: MediaRef
    video: MediaRef
    def __init__(self, text: _Optional[str] = ..., image: _Optional[_Union[MediaRef, _Mapping]] = ..., audio: _Optional[_Union[MediaRef, _Mapping]] = ..., file: _Optional[_Union[MediaRef, _Mapping]] = ..., video: _Optional[_Union[MediaRef, _Mapping]] = ...) -> None: ...

class MediaRef(_message.Message):
    __slots__ = ("sha256", "detail", "format", "filename")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    sha256: bytes
    detail: str
    format: str
    filename: str
    def __init__(self, sha256: _Optional[bytes] = ..., detail: _Optional[str] = ..., format: _Optional[str] = ..., filename: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "type", "name", "arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    name: str
    arguments: str
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ComputeCost(_message.Message):
    __slots__ = ("latency_ms", "prompt_tokens", "completion_tokens")
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    latency_ms: int
    prompt_tokens: int
    completion_tokens: int
    def __init__(self, latency_ms: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ...) -> None: ...

class RequestTraits(_message.Message):
    __slots__ = ("side_effects", "private_data", "real_time", "tools")
    SIDE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_DATA_FIELD_NUMBER: _ClassVar[int]
    REAL_TIME_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    side_effects: bool
    private_data: bool
    real_time: bool
    tools: bool
    def __init__(self, side_effects: _Optional[bool] = ..., private_data: _Optional[bool] = ..., real_time: _Optional[bool] = ..., tools: _Optional[bool] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("key", "max_age_seconds", "request_id", "wait_ms", "traits")
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    TRAITS_FIELD_NUMBER: _ClassVar[int]
    key: CacheKey
    max_age_seconds: int
    request_id: str
    wait_ms: int
    traits: RequestTraits
    def __init__(self, key: _Optional[_Union[CacheKey, _Mapping]] = ..., max_age_seconds: _Optional[int] = ..., request_id: _Optional[str] = ..., wait_ms: _Optional[int] = ..., traits: _Optional[_Union[RequestTraits, _Mapping]] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("outcome", "payload", "tier", "age_ms", "key_digest", "degraded", "bypass_reason", "cost", "lease", "lease_holder", "bypass_code")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    AGE_MS_FIELD_NUMBER: _ClassVar[int]
    KEY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    BYPASS_REASON_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    BYPASS_CODE_FIELD_NUMBER: _ClassVar[int]
    outcome: LookupOutcome
    payload: bytes
    tier: Tier
    age_ms: int
    key_digest: bytes
    degraded: bool
    bypass_reason: str
    cost: ComputeCost
    lease: bytes
    lease_holder: bool
    bypass_code: BypassReason
    def __init__(self, outcome: _Optional[_Union[LookupOutcome, str]] = ..., payload: _Optional[bytes] = ..., tier: _Optional[_Union[Tier, str]] = ..., age_ms: _Optional[int] = ..., key_digest: _Optional[bytes] = ..., degraded: _Optional[bool] = ..., bypass_reason: _Optional[str] = ..., cost: _Optional[_Union[ComputeCost, _Mapping]] = ..., lease: _Optional[bytes] = ..., lease_holder: _Optional[bool] = ..., bypass_code: _Optional[_Union[BypassReason, str]] = ...) -> None: ...

class LookupBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[LookupRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[LookupRequest, _Mapping]]] = ...) -> None: ...

class LookupBatchResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[LookupResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[LookupResponse, _Mapping]]] = ...) -> None: ...

class StoreRequest(_message.Message):
    __slots__ = ("key", "payload", "ttl_seconds", "cost", "request_id", "lease", "traits", "chunks", "replay")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    TRAITS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    key: CacheKey
    payload: bytes
    ttl_seconds: int
    cost: ComputeCost
    request_id: str
    lease: bytes
    traits: RequestTraits
    chunks: _containers.RepeatedCompositeFieldContainer[ChunkBoundary]
    replay: ReplayRequest
    def __init__(self, key: _Optional[_Union[CacheKey, _Mapping]] = ..., payload: _Optional[bytes] = ..., ttl_seconds: _Optional[int] = ..., cost: _Optional[_Union[ComputeCost, _Mapping]] = ..., request_id: _Optional[str] = ..., lease: _Optional[bytes] = ..., traits: _Optional[_Union[RequestTraits, _Mapping]] = ..., chunks: _Optional[_Iterable[_Union[ChunkBoundary, _Mapping]]] = ..., replay: _Optional[_Union[ReplayRequest, _Mapping]] = ...) -> None: ...

class ReplayRequest(_message.Message):
    __slots__ = ("path", "content_type", "body")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    path: str
    content_type: str
    body: bytes
    def __init__(self, path: _Optional[str] = ..., content_type: _Optional[str] = ..., body: _Optional[bytes] = ...) -> None: ...

class ChunkBoundary(_message.Message):
    __slots__ = ("size_bytes", "tokens", "offset_ms")
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MS_FIELD_NUMBER: _ClassVar[int]
    size_bytes: int
    tokens: int
    offset_ms: int
    def __init__(self, size_bytes: _Optional[int] = ..., tokens: _Optional[int] = ..., offset_ms: _Optional[int] = ...) -> None: ...

class StoreResponse(_message.Message):
    __slots__ = ("outcome", "key_digest", "ttl_seconds", "bypass_reason", "bypass_code")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    KEY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BYPASS_REASON_FIELD_NUMBER: _ClassVar[int]
    BYPASS_CODE_FIELD_NUMBER: _ClassVar[int]
    outcome: StoreOutcome
    key_digest: bytes
    ttl_seconds: int
    bypass_reason: str
    bypass_code: BypassReason
    def __init__(self, outcome: _Optional[_Union[StoreOutcome, str]] = ..., key_digest: _Optional[bytes] = ..., ttl_seconds: _Optional[int] = ..., bypass_reason: _Optional[str] = ..., bypass_code: _Optional[_Union[BypassReason, str]] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("server_version", "key_schema_version", "model_version", "adapter_versions", "warm_tier")
    class AdapterVersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    KEY_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    WARM_TIER_FIELD_NUMBER: _ClassVar[int]
    server_version: str
    key_schema_version: int
    model_version: str
    adapter_versions: _containers.ScalarMap[str, str]
    warm_tier: str
    def __init__(self, server_version: _Optional[str] = ..., key_schema_version: _Optional[int] = ..., model_version: _Optional[str] = ..., adapter_versions: _Optional[_Mapping[str, str]] = ..., warm_tier: _Optional[str] = ...) -> None: ...

class Pacing(_message.Message):
    __slots__ = ("mode", "tokens_per_second", "max_delay_ms")
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    MAX_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    mode: PacingMode
    tokens_per_second: float
    max_delay_ms: int
    def __init__(self, mode: _Optional[_Union[PacingMode, str]] = ..., tokens_per_second: _Optional[float] = ..., max_delay_ms: _Optional[int] = ...) -> None: ...

class LookupStreamRequest(_message.Message):
    __slots__ = ("lookup", "pacing")
    LOOKUP_FIELD_NUMBER: _ClassVar[int]
    PACING_FIELD_NUMBER: _ClassVar[int]
    lookup: LookupRequest
    pacing: Pacing
    def __init__(self, lookup: _Optional[_Union[LookupRequest, _Mapping]] = ..., pacing: _Optional[_Union[Pacing, _Mapping]] = ...) -> None: ...

class LookupStreamHeader(_message.Message):
    __slots__ = ("lookup", "model_version", "chunk_count", "total_bytes", "finish_reason")
    LOOKUP_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    lookup: LookupResponse
    model_version: str
    chunk_count: int
    total_bytes: int
    finish_reason: str
    def __init__(self, lookup: _Optional[_Union[LookupResponse, _Mapping]] = ..., model_version: _Optional[str] = ..., chunk_count: _Optional[int] = ..., total_bytes: _Optional[int] = ..., finish_reason: _Optional[str] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("data", "tokens", "offset_ms", "index", "cached")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    tokens: int
    offset_ms: int
    index: int
    cached: bool
    def __init__(self, data: _Optional[bytes] = ..., tokens: _Optional[int] = ..., offset_ms: _Optional[int] = ..., index: _Optional[int] = ..., cached: _Optional[bool] = ...) -> None: ...

class LookupStreamResponse(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: LookupStreamHeader
    chunk: Chunk
    def __init__(self, header: _Optional[_Union[LookupStreamHeader, _Mapping]] = ..., chunk: _Optional[_Union[Chunk, _Mapping]] = ...) -> None: ...

class StoreStreamFinish(_message.Message):
    __slots__ = ("finish_reason", "cost")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    finish_reason: str
    cost: ComputeCost
    def __init__(self, finish_reason: _Optional[str] = ..., cost: _Optional[_Union[ComputeCost, _Mapping]] = ...) -> None: ...

class StoreStreamRequest(_message.Message):
    __slots__ = ("open", "chunk", "finish")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    open: StoreRequest
    chunk: Chunk
    finish: StoreStreamFinish
    def __init__(self, open: _Optional[_Union[StoreRequest, _Mapping]] = ..., chunk: _Optional[_Union[Chunk, _Mapping]] = ..., finish: _Optional[_Union[StoreStreamFinish, _Mapping]] = ...) -> None: ...

class StoreStreamResponse(_message.Message):
    __slots__ = ("store", "chunk_count", "total_bytes")
    STORE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    store: StoreResponse
    chunk_count: int
    total_bytes: int
    def __init__(self, store: _Optional[_Union[StoreResponse, _Mapping]] = ..., chunk_count: _Optional[int] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class ReportOutcomeRequest(_message.Message):
    __slots__ = ("key_digest", "verdict", "reason", "request_id")
    KEY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key_digest: bytes
    verdict: ReportOutcomeVerdict
    reason: str
    request_id: str
    def __init__(self, key_digest: _Optional[bytes] = ..., verdict: _Optional[_Union[ReportOutcomeVerdict, str]] = ..., reason: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ReportOutcomeResponse(_message.Message):
    __slots__ = ("evicted", "model_version")
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    evicted: bool
    model_version: str
    def __init__(self, evicted: _Optional[bool] = ..., model_version: _Optional[str] = ...) -> None: ...
