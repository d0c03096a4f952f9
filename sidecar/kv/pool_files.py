"""The KV pool's shared-memory files: created locked, and stale ones removed at start.

A sidecar killed with SIGKILL cannot unlink its pool file (1 GiB by default) or its
generations file; in a memory-backed volume they keep their memory until removed, so
without a sweep one crash leaves too little room for the restarted sidecar's pool.

Each file is created under a temporary name, `flock`ed (LOCK_SH) and only then renamed
to its final name (`infercache-kv-*`, `infercache-kvgen-*`), and the creating sidecar
keeps that lock for its life: the lock belongs to the open file, which a dead process
no longer has. So a file with a final name that nobody holds locked belongs to no
living sidecar. At start `remove_stale` takes LOCK_EX without waiting on each regular
file of the directory whose name is ours, and unlinks those it gets; a file another
running sidecar holds (two sidecars sharing one directory) is left alone. Symbolic
links, directories and other names are never touched. Model processes that still map
a removed file keep their mapping (the memory is freed when they unmap it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

POOL_PREFIX = "infercache-kv-"
GENERATIONS_PREFIX = "infercache-kvgen-"
_OURS = re.compile(r"infercache-kv(?:gen)?-\d+-[0-9a-f]{16}")
_TEMPORARY = ".infercache-creating-"


@dataclass(frozen=True, slots=True)
class LockedFile:
    """A new empty file under its final name, locked while `fd` stays open."""

    path: str
    fd: int

    def release(self) -> None:
        """Unlink the file, then close the locking descriptor (in that order: a sweeper
        never sees it unlocked under its name)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self.fd)


def create_locked(
    directory: str, prefix: str, token: str | None = None, mode: int = 0o600
) -> LockedFile:
    """An empty file `<prefix><pid>-<token>` in `directory` (token: 16 hex digits, fresh
    when not given), created with `mode` and already locked when it appears under that
    name."""
    token = secrets.token_hex(8) if token is None else token
    if not re.fullmatch(r"[0-9a-f]{16}", token):
        raise ValueError("the token must be 16 lower-case hex digits")
    name = f"{prefix}{os.getpid()}-{token}"
    temporary = Path(directory) / f"{_TEMPORARY}{name}"
    final = Path(directory) / name
    fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.rename(temporary, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        os.close(fd)
        raise
    return LockedFile(str(final), fd)


def is_ours(name: str) -> bool:
    """Whether a file name is one of our pool or generations files."""
    return _OURS.fullmatch(name) is not None


def remove_stale(directory: str) -> list[tuple[str, int]]:
    """Unlink every pool or generations file in `directory` that no living sidecar holds:
    (path, size in bytes) of each removed. A missing directory removes nothing."""
    removed: list[tuple[str, int]] = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return removed
    for name in names:
        if not is_ours(name):
            continue
        path = os.path.join(directory, name)
        size = _remove_if_unlocked(path)
        if size is not None:
            removed.append((path, size))
    return removed


def _remove_if_unlocked(path: str) -> int | None:
    """Unlink `path` if it is a regular file nobody holds locked; its size, else None."""
    try:
        # O_NOFOLLOW: a symbolic link planted under our name is not followed.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None  # gone, a link, or not ours to open
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # a living sidecar's
        # Still the file we locked under that name (not replaced meanwhile)?
        current = os.lstat(path)
        if (current.st_dev, current.st_ino) != (st.st_dev, st.st_ino):
            return None
        os.unlink(path)
        return st.st_size
    except OSError:
        return None
    finally:
        os.close(fd)
