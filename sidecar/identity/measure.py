"""Measure the pod's identity from its configuration: the model's and adapters'
fingerprints (on worker threads), and the watcher that polls their paths for changes."""

from __future__ import annotations

import asyncio
import functools

import structlog
from infercache_client.fingerprint import fingerprint_async, pod_fingerprint

from sidecar.config import IdentityConfig
from sidecar.identity.cell import IdentityCell
from sidecar.identity.pod import PodIdentity
from sidecar.identity.watch import IdentityWatcher, WatchedPath

log = structlog.get_logger("infercache.identity")


async def identify_pod(config: IdentityConfig) -> PodIdentity:
    """Fingerprint the configured model and adapters (on worker threads)."""
    if not config.model_path and not config.adapters:
        return PodIdentity(allow_foreign_store=config.allow_foreign_model_store)
    cache_file = config.fingerprint_cache_file
    model = ""
    if config.model_path:
        # pod_fingerprint: the very call the vLLM connector makes on the same inputs.
        fp = await asyncio.to_thread(
            pod_fingerprint,
            config.model_path,
            mode=config.fingerprint_mode,
            cache_file=cache_file,
            serving_config=config.serving_config,
        )
        log.info(
            "model_fingerprint",
            fingerprint=fp.value,
            path=config.model_path,
            mode=fp.mode,
            components=fp.components(),
            tensors=fp.tensors,
        )
        model = fp.value
    adapters: dict[str, str] = {}
    for name, path in config.adapters.items():
        afp = await fingerprint_async(
            path, kind="adapter", mode=config.fingerprint_mode, cache_file=cache_file
        )
        log.info("adapter_fingerprint", adapter=name, fingerprint=afp.value, path=path)
        adapters[name] = afp.value
    return PodIdentity(model, adapters, config.allow_foreign_model_store)


def watched_paths(config: IdentityConfig) -> dict[str, WatchedPath]:
    """Label -> path for every file set a fingerprint of this pod reads."""
    paths: dict[str, WatchedPath] = {}
    if config.model_path:
        paths["model files"] = WatchedPath(config.model_path)
        if config.serving_config:
            paths["serving config"] = WatchedPath(config.serving_config)
    for name, path in config.adapters.items():
        paths[f"adapter {name} files"] = WatchedPath(path, adapter=name)
    return paths


def identity_watcher(config: IdentityConfig, cell: IdentityCell) -> IdentityWatcher:
    """The watcher that re-measures the pod's identity when its files change: the
    files of each fingerprint the pod was started with (none when it was given none)."""
    known = {label: w for label, w in watched_paths(config).items() if w.version(cell.pod)}
    return IdentityWatcher(
        cell,
        known,
        functools.partial(identify_pod, config),
        config.model_recheck_interval_s,
    )
