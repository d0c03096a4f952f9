"""Model fingerprints: a stable id for everything that determines a model's behaviour.

`fingerprint(dir)` hashes config.json, generation_config.json, the tokenizer files
(chat template included) and the safetensors weights into "fp1-<64 hex>", keeping
each component's digest so `diff(a, b)` can say what changed. A LoRA adapter
directory is fingerprinted on its own with kind="adapter" (its adapter_version).
`pod_fingerprint(dir, serving_config=F)` adds the declared serving options: the one
call both the sidecar (--model-path) and the vLLM connector make, so they agree.

This package lives in the client distribution (it needs blake3 and the standard
library only: the `fingerprint` and `vllm` extras) so that the connector runs it
without the server; the sidecar imports it from here.

Weights are hashed per tensor in name order: (name, dtype, shape, evidence), so
re-sharding or copying identical weights keeps the fingerprint, and shard headers
are validated strictly (see safetensors_header).

- full mode (the default): evidence is BLAKE3 of every byte of each tensor, hashed on
  a thread pool; memoised per file by (realpath, size, mtime_ns, inode, device,
  ctime_ns) in a JSON memo file, so a restart does not rehash. Catches every change.
- fast mode (an explicit opt-in): evidence is sampled bytes of *every* tensor: the
  whole tensor up to 16 KiB, else 8 windows of 256 bytes spread from its first to its
  last byte, at positions that depend only on its size. It catches fine-tunes, merged
  LoRAs, replaced tensors, dtype casts and any config/tokenizer change. It can miss an
  edit confined to bytes it does not sample: a single changed element, or a few changed
  rows of a large matrix (e.g. only some embedding rows retrained). Milliseconds for
  ~1,000 tensors on a warm page cache.

Fast and full fingerprints of the same directory differ by design (the mode is part
of the value); compare like with like.
"""

from infercache_client.fingerprint.api import (
    COMPONENTS,
    PREFIX,
    Fingerprint,
    Kind,
    default_cache_file,
    detect_kind,
    diff,
    fingerprint,
    fingerprint_async,
    pod_fingerprint,
)
from infercache_client.fingerprint.errors import FingerprintError
from infercache_client.fingerprint.files import ABSENT
from infercache_client.fingerprint.serving import load_serving_config
from infercache_client.fingerprint.weights import Mode

__all__ = [
    "ABSENT",
    "COMPONENTS",
    "PREFIX",
    "Fingerprint",
    "FingerprintError",
    "Kind",
    "Mode",
    "default_cache_file",
    "detect_kind",
    "diff",
    "fingerprint",
    "fingerprint_async",
    "load_serving_config",
    "pod_fingerprint",
]
