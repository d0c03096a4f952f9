"""Model fingerprint benchmark: what each way of identifying a model's weights notices
when the weights change, and what it costs.

Builds a synthetic checkpoint in a temp dir (default ~1 GiB, 999 tensors: 83
Qwen2-style layers of 12 tensors plus embedding, final norm and lm_head, bf16,
five shards with an index, a ~9 MB tokenizer.json), then variants of it:

    full fine-tune, one tensor replaced, merged LoRA (rank-16 delta on q/v of every
    layer), one element changed, chat template changed, bf16 -> fp16 cast, and the
    identical weights re-sharded into three shards in another order.

Methods compared: "8KB-header" (BLAKE3 of config.json + the first 8 KiB of the
first two shards: what hashing "the file header" amounts to), fingerprint fast
mode, fingerprint full mode (no memo). It prints which method notices which
variant, each method's time with a warm page cache and, when the page cache can be
emptied (/proc/sys/vm/drop_caches, else posix_fadvise DONTNEED, checked with
mincore), cold; and full mode's throughput against a plain sequential read of the
same shards. The last line holds key=value pairs.

    .venv/bin/python -m bench.fingerprint --quick      # ~128 MiB
    .venv/bin/python -m bench.fingerprint              # ~1 GiB
    .venv/bin/python -m bench.fingerprint --size 4GiB
    .venv/bin/python -m bench.fingerprint --smoke      # ~8 MiB, a few seconds

checkpoints.py builds the checkpoints, methods.py holds the methods and the timing.
"""
