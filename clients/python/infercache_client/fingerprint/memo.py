"""Persistent memo of full-mode tensor digests, so a restart does not rehash gigabytes.

One JSON file maps each shard's real path to the identity it had when hashed
(device, inode, size, mtime_ns, ctime_ns) and the digest of every tensor in it. An
entry is used only if all of these still match: ctime cannot be set back, so a file
patched in place with its mtime restored misses, and so does another file system
mounted at the same path (another device). Entries are stored per tensor, not per file, so a memo
hit still feeds the shard-layout-independent weights digest.

Files modified less than RACY_NS before hashing began are not memoised: some file
systems keep timestamps at a coarse granularity, so a rewrite in the same tick could
leave size and mtime unchanged (git's "racy clean" problem).

The memo is a cache: it is trusted (keep it in a directory only you can write), a
corrupt or unreadable memo is ignored, and a failed write is logged, not raised.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infercache_client.fingerprint.errors import FingerprintError

FORMAT = "infercache-fingerprint-memo"
VERSION = 2  # 2: st_dev and st_ctime_ns joined the identity; v1 memos are ignored
RACY_NS = 2_000_000_000

# stdlib logging: the client distribution has no structlog; the sidecar routes these
# records through its own renderer (observability/logs.py).
log = logging.getLogger("infercache.fingerprint")


@dataclass(frozen=True, slots=True)
class FileKey:
    """The identity a shard had when it was hashed."""

    realpath: str
    size: int
    mtime_ns: int
    inode: int
    device: int = 0
    ctime_ns: int = 0

    @classmethod
    def of(cls, realpath: str, st: os.stat_result) -> FileKey:
        """Key for the file at `realpath` whose stat (fstat of the open fd) is `st`."""
        return cls(realpath, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns)

    def identity(self) -> tuple[int, int, int, int, int]:
        """What must match for a memo entry to be used."""
        return (self.size, self.mtime_ns, self.inode, self.device, self.ctime_ns)


@dataclass(frozen=True, slots=True)
class MemoTensor:
    """One tensor's full-mode digest as recorded in the memo."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    digest: bytes


class Memo:
    """The memo file at `path`, loaded once; `save()` merges and writes it atomically."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            # os.replace onto /dev/null or a directory would be destructive or fail late.
            raise FingerprintError(f"{self.path}: fingerprint cache file is not a regular file")
        self._files = _load(self.path)
        self._new: dict[str, dict[str, Any]] = {}

    def get(self, key: FileKey) -> tuple[MemoTensor, ...] | None:
        """The recorded tensors of the file `key` identifies, or None if not memoised."""
        entry = self._new.get(key.realpath) or self._files.get(key.realpath)
        if entry is None or _identity(entry) != key.identity():
            return None
        try:
            return tuple(_tensor_from_json(item) for item in entry["tensors"])
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, key: FileKey, tensors: tuple[MemoTensor, ...], started_ns: int) -> None:
        """Record `tensors` for `key` unless the file changed too recently (see RACY_NS)."""
        if key.mtime_ns > started_ns - RACY_NS:
            return
        self._new[key.realpath] = {
            "size": key.size,
            "mtime_ns": key.mtime_ns,
            "inode": key.inode,
            "device": key.device,
            "ctime_ns": key.ctime_ns,
            "tensors": [[t.name, t.dtype, list(t.shape), t.digest.hex()] for t in tensors],
        }

    def save(self) -> None:
        """Merge new entries into the file's current content and replace it atomically.

        Re-reading first keeps entries other processes wrote since we loaded; entries
        whose file no longer exists are dropped so the memo does not grow forever.
        """
        if not self._new:
            return
        files = {**_load(self.path), **self._new}
        files = {p: e for p, e in files.items() if os.path.exists(p)}
        body = json.dumps({"format": FORMAT, "version": VERSION, "files": files}, sort_keys=True)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".fingerprints-", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(body)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            log.warning(
                "fingerprint_memo_write_failed",
                extra={"path": str(self.path), "error": str(exc)},
            )
            return
        self._files, self._new = files, {}


def _tensor_from_json(item: Any) -> MemoTensor:
    name, dtype, shape, digest = item
    if not (
        isinstance(name, str)
        and isinstance(dtype, str)
        and isinstance(shape, list)
        and all(type(d) is int for d in shape)
        and isinstance(digest, str)
        and len(digest) == 64
    ):
        raise ValueError("malformed memo tensor")
    return MemoTensor(name, dtype, tuple(shape), bytes.fromhex(digest))


def _identity(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(entry.get(k) for k in ("size", "mtime_ns", "inode", "device", "ctime_ns"))


def _load(path: Path) -> dict[str, dict[str, Any]]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("fingerprint_memo_unreadable", extra={"path": str(path), "error": str(exc)})
        return {}
    if not (
        isinstance(obj, dict)
        and obj.get("format") == FORMAT
        and obj.get("version") == VERSION
        and isinstance(obj.get("files"), dict)
    ):
        log.warning("fingerprint_memo_unrecognised", extra={"path": str(path)})
        return {}
    return {p: e for p, e in obj["files"].items() if isinstance(e, dict)}
