"""torch for the KV pool, imported at start on its own thread, or its absence.

Importing torch adds several hundred MiB to the process: done at start, the sidecar's
memory is what it will be, instead of growing when some caller first attaches. The
import runs on a thread so that neither the event loop nor the start waits for it;
the first pool creation (itself on a worker thread) waits for it instead. Without
torch (the server installed without the `kv` extra) the tier still serves, and every
attachment is refused FAILED_PRECONDITION naming the extra; one log line says so.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from concurrent.futures import Future

import structlog

from sidecar.errors import FailedPrecondition
from sidecar.kv.pool import SlotPool

log = structlog.get_logger("infercache.kv")

NO_TORCH = (
    "the KV hot tier needs torch, which is not installed here: install the server with "
    "the kv extra (pip install 'infercache[kv]'), or set INFERCACHE_KV_ENABLED=false"
)

CreatePool = Callable[[str, int, int, str], SlotPool]
"""sidecar.kv.torch_pool.create_pool: (device, num_slots, slot_bytes, shm_dir) -> pool."""


class TorchPreload:
    """Starts importing sidecar.kv.torch_pool (and so torch) when constructed."""

    def __init__(self) -> None:
        self._create: Future[CreatePool] = Future()
        threading.Thread(target=self._load, name="infercache-torch-preload", daemon=True).start()

    def _load(self) -> None:
        try:
            module = importlib.import_module("sidecar.kv.torch_pool")
        except ModuleNotFoundError as exc:
            if exc.name != "torch":
                self._create.set_exception(exc)
                return
            log.warning("kv_tier_without_torch", detail=NO_TORCH)
            self._create.set_result(_no_torch)
        except BaseException as exc:  # a broken torch: the first attachment says how
            self._create.set_exception(exc)
        else:
            self._create.set_result(module.create_pool)

    def create_pool(self, device: str, num_slots: int, slot_bytes: int, shm_dir: str) -> SlotPool:
        """A pool (see torch_pool.create_pool), once the import is done; blocks until then.

        FailedPrecondition(NO_TORCH) when torch is not installed."""
        return self._create.result()(device, num_slots, slot_bytes, shm_dir)


def _no_torch(device: str, num_slots: int, slot_bytes: int, shm_dir: str) -> SlotPool:
    raise FailedPrecondition(NO_TORCH)
