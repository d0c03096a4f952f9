from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KvDtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KV_DTYPE_UNSPECIFIED: _ClassVar[KvDtype]
    KV_DTYPE_FLOAT32: _ClassVar[KvDtype]
    KV_DTYPE_FLOAT16: _ClassVar[KvDtype]
    KV_DTYPE_BFLOAT16: _ClassVar[KvDtype]
    KV_DTYPE_FLOAT8_E4M3FN: _ClassVar[KvDtype]
    KV_DTYPE_FLOAT8_E5M2: _ClassVar[KvDtype]

class KvSlotLayout(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KV_SLOT_LAYOUT_UNSPECIFIED: _ClassVar[KvSlotLayout]
    KV_SLOT_LAYOUT_LAYER_KV_TOKEN_HEAD_DIM: _ClassVar[KvSlotLayout]
KV_DTYPE_UNSPECIFIED: KvDtype
KV_DTYPE_FLOAT32: KvDtype
KV_DTYPE_FLOAT16: KvDtype
KV_DTYPE_BFLOAT16: KvDtype
KV_DTYPE_FLOAT8_E4M3FN: KvDtype
KV_DTYPE_FLOAT8_E5M2: KvDtype
KV_SLOT_LAYOUT_UNSPECIFIED: KvSlotLayout
KV_SLOT_LAYOUT_LAYER_KV_TOKEN_HEAD_DIM: KvSlotLayout

class KvLayout(_message.Message):
    __slots__ = ("num_layers", "num_kv_heads", "head_dim", "tokens_per_block", "dtype", "tp_size", "tp_rank", "kv_scales_id", "rope_config", "slot_layout", "extra")
    class ExtraEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_BLOCK_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    TP_SIZE_FIELD_NUMBER: _ClassVar[int]
    TP_RANK_FIELD_NUMBER: _ClassVar[int]
    KV_SCALES_ID_FIELD_NUMBER: _ClassVar[int]
    ROPE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    SLOT_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    num_layers: int
    num_kv_heads: int
    head_dim: int
    tokens_per_block: int
    dtype: KvDtype
    tp_size: int
    tp_rank: int
    kv_scales_id: str
    rope_config: str
    slot_layout: KvSlotLayout
    extra: _containers.ScalarMap[str, str]
    def __init__(self, num_layers: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., head_dim: _Optional[int] = ..., tokens_per_block: _Optional[int] = ..., dtype: _Optional[_Union[KvDtype, str]] = ..., tp_size: _Optional[int] = ..., tp_rank: _Optional[int] = ..., kv_scales_id: _Optional[str] = ..., rope_config: _Optional[str] = ..., slot_layout: _Optional[_Union[KvSlotLayout, str]] = ..., extra: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SharedMemoryPool(_message.Message):
    __slots__ = ("path", "size_bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    size_bytes: int
    def __init__(self, path: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class CudaIpcPool(_message.Message):
    __slots__ = ("gpu_uuid", "ipc_handle", "storage_size_bytes", "storage_offset_bytes", "ref_counter_handle", "ref_counter_offset", "event_handle", "event_sync_required")
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    IPC_HANDLE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORAGE_OFFSET_BYTES_FIELD_NUMBER: _ClassVar[int]
    REF_COUNTER_HANDLE_FIELD_NUMBER: _ClassVar[int]
    REF_COUNTER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EVENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    EVENT_SYNC_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    gpu_uuid: str
    ipc_handle: bytes
    storage_size_bytes: int
    storage_offset_bytes: int
    ref_counter_handle: bytes
    ref_counter_offset: int
    event_handle: bytes
    event_sync_required: bool
    def __init__(self, gpu_uuid: _Optional[str] = ..., ipc_handle: _Optional[bytes] = ..., storage_size_bytes: _Optional[int] = ..., storage_offset_bytes: _Optional[int] = ..., ref_counter_handle: _Optional[bytes] = ..., ref_counter_offset: _Optional[int] = ..., event_handle: _Optional[bytes] = ..., event_sync_required: _Optional[bool] = ...) -> None: ...

class PoolHandle(_message.Message):
    __slots__ = ("pool_id", "num_slots", "slot_bytes", "block_bytes", "dtype", "slot_shape", "shared_memory", "cuda_ipc", "generations")
    POOL_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_SLOTS_FIELD_NUMBER: _ClassVar[int]
    SLOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_BYTES_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SLOT_SHAPE_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
    CUDA_IPC_FIELD_NUMBER: _ClassVar[int]
    GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    pool_id: str
    num_slots: int
    slot_bytes: int
    block_bytes: int
    dtype: KvDtype
    slot_shape: _containers.RepeatedScalarFieldContainer[int]
    shared_memory: SharedMemoryPool
    cuda_ipc: CudaIpcPool
    generations: SlotGenerations
    def __init__(self, pool_id: _Optional[str] = ..., num_slots: _Optional[int] = ..., slot_bytes: _Optional[int] = ..., block_bytes: _Optional[int] = ..., dtype: _Optional[_Union[KvDtype, str]] = ..., slot_shape: _Optional[_Iterable[int]] = ..., shared_memory: _Optional[_Union[SharedMemoryPool, _Mapping]] = ..., cuda_ipc: _Optional[_Union[CudaIpcPool, _Mapping]] = ..., generations: _Optional[_Union[SlotGenerations, _Mapping]] = ...) -> None: ...

class SlotGenerations(_message.Message):
    __slots__ = ("path", "size_bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    size_bytes: int
    def __init__(self, path: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("lease_id", "expires_at_unix_ms", "ttl_ms")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    expires_at_unix_ms: int
    ttl_ms: int
    def __init__(self, lease_id: _Optional[str] = ..., expires_at_unix_ms: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class AttachHotTierRequest(_message.Message):
    __slots__ = ("model_fingerprint", "adapter_fingerprint", "layout", "gpu_uuid", "process_name", "tenants", "domain_key")
    MODEL_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_NAME_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_KEY_FIELD_NUMBER: _ClassVar[int]
    model_fingerprint: str
    adapter_fingerprint: str
    layout: KvLayout
    gpu_uuid: str
    process_name: str
    tenants: _containers.RepeatedScalarFieldContainer[str]
    domain_key: bytes
    def __init__(self, model_fingerprint: _Optional[str] = ..., adapter_fingerprint: _Optional[str] = ..., layout: _Optional[_Union[KvLayout, _Mapping]] = ..., gpu_uuid: _Optional[str] = ..., process_name: _Optional[str] = ..., tenants: _Optional[_Iterable[str]] = ..., domain_key: _Optional[bytes] = ...) -> None: ...

class AttachHotTierResponse(_message.Message):
    __slots__ = ("attachment_id", "pool", "layout", "scope_id", "max_chain_blocks", "default_lease_ttl_ms", "max_lease_ttl_ms", "attachment_ttl_ms", "trust_domain")
    ATTACHMENT_ID_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_CHAIN_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENT_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    TRUST_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    attachment_id: str
    pool: PoolHandle
    layout: KvLayout
    scope_id: str
    max_chain_blocks: int
    default_lease_ttl_ms: int
    max_lease_ttl_ms: int
    attachment_ttl_ms: int
    trust_domain: str
    def __init__(self, attachment_id: _Optional[str] = ..., pool: _Optional[_Union[PoolHandle, _Mapping]] = ..., layout: _Optional[_Union[KvLayout, _Mapping]] = ..., scope_id: _Optional[str] = ..., max_chain_blocks: _Optional[int] = ..., default_lease_ttl_ms: _Optional[int] = ..., max_lease_ttl_ms: _Optional[int] = ..., attachment_ttl_ms: _Optional[int] = ..., trust_domain: _Optional[str] = ...) -> None: ...

class DetachHotTierRequest(_message.Message):
    __slots__ = ("attachment_id",)
    ATTACHMENT_ID_FIELD_NUMBER: _ClassVar[int]
    attachment_id: str
    def __init__(self, attachment_id: _Optional[str] = ...) -> None: ...

class DetachHotTierResponse(_message.Message):
    __slots__ = ("released_slots",)
    RELEASED_SLOTS_FIELD_NUMBER: _ClassVar[int]
    released_slots: int
    def __init__(self, released_slots: _Optional[int] = ...) -> None: ...

class LookupPrefixRequest(_message.Message):
    __slots__ = ("attachment_id", "tenant", "cache_salt", "block_hashes", "lease_ttl_ms", "hot_only")
    ATTACHMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    HOT_ONLY_FIELD_NUMBER: _ClassVar[int]
    attachment_id: str
    tenant: str
    cache_salt: str
    block_hashes: _containers.RepeatedScalarFieldContainer[bytes]
    lease_ttl_ms: int
    hot_only: bool
    def __init__(self, attachment_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cache_salt: _Optional[str] = ..., block_hashes: _Optional[_Iterable[bytes]] = ..., lease_ttl_ms: _Optional[int] = ..., hot_only: _Optional[bool] = ...) -> None: ...

class LookupPrefixResponse(_message.Message):
    __slots__ = ("matched_blocks", "slot_ids", "lease", "retry_later", "retry_after_ms", "promoted_blocks", "slot_generations")
    MATCHED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SLOT_IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RETRY_LATER_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    PROMOTED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SLOT_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    matched_blocks: int
    slot_ids: _containers.RepeatedScalarFieldContainer[int]
    lease: Lease
    retry_later: bool
    retry_after_ms: int
    promoted_blocks: int
    slot_generations: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, matched_blocks: _Optional[int] = ..., slot_ids: _Optional[_Iterable[int]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., retry_later: _Optional[bool] = ..., retry_after_ms: _Optional[int] = ..., promoted_blocks: _Optional[int] = ..., slot_generations: _Optional[_Iterable[int]] = ...) -> None: ...

class AllocateBlocksRequest(_message.Message):
    __slots__ = ("attachment_id", "count", "lease_id", "lease_ttl_ms")
    ATTACHMENT_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    attachment_id: str
    count: int
    lease_id: str
    lease_ttl_ms: int
    def __init__(self, attachment_id: _Optional[str] = ..., count: _Optional[int] = ..., lease_id: _Optional[str] = ..., lease_ttl_ms: _Optional[int] = ...) -> None: ...

class AllocateBlocksResponse(_message.Message):
    __slots__ = ("slot_ids", "lease", "slot_generations")
    SLOT_IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    SLOT_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    slot_ids: _containers.RepeatedScalarFieldContainer[int]
    lease: Lease
    slot_generations: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, slot_ids: _Optional[_Iterable[int]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., slot_generations: _Optional[_Iterable[int]] = ...) -> None: ...

class BlockCommit(_message.Message):
    __slots__ = ("slot_id", "block_hash")
    SLOT_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    slot_id: int
    block_hash: bytes
    def __init__(self, slot_id: _Optional[int] = ..., block_hash: _Optional[bytes] = ...) -> None: ...

class CommitBlocksRequest(_message.Message):
    __slots__ = ("attachment_id", "lease_id", "tenant", "cache_salt", "blocks")
    ATTACHMENT_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    attachment_id: str
    lease_id: str
    tenant: str
    cache_salt: str
    blocks: _containers.RepeatedCompositeFieldContainer[BlockCommit]
    def __init__(self, attachment_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cache_salt: _Optional[str] = ..., blocks: _Optional[_Iterable[_Union[BlockCommit, _Mapping]]] = ...) -> None: ...

class CommitBlocksResponse(_message.Message):
    __slots__ = ("committed_blocks", "already_cached")
    COMMITTED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    ALREADY_CACHED_FIELD_NUMBER: _ClassVar[int]
    committed_blocks: int
    already_cached: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, committed_blocks: _Optional[int] = ..., already_cached: _Optional[_Iterable[bool]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("attachment_id", "lease_id")
    ATTACHMENT_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    attachment_id: str
    lease_id: str
    def __init__(self, attachment_id: _Optional[str] = ..., lease_id: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released_slots",)
    RELEASED_SLOTS_FIELD_NUMBER: _ClassVar[int]
    released_slots: int
    def __init__(self, released_slots: _Optional[int] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("attachment_id", "lease_id", "lease_ttl_ms")
    ATTACHMENT_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    attachment_id: str
    lease_id: str
    lease_ttl_ms: int
    def __init__(self, attachment_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., lease_ttl_ms: _Optional[int] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class RenewAttachmentRequest(_message.Message):
    __slots__ = ("attachment_id",)
    ATTACHMENT_ID_FIELD_NUMBER: _ClassVar[int]
    attachment_id: str
    def __init__(self, attachment_id: _Optional[str] = ...) -> None: ...

class RenewAttachmentResponse(_message.Message):
    __slots__ = ("expires_at_unix_ms", "attachment_ttl_ms")
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENT_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    expires_at_unix_ms: int
    attachment_ttl_ms: int
    def __init__(self, expires_at_unix_ms: _Optional[int] = ..., attachment_ttl_ms: _Optional[int] = ...) -> None: ...
