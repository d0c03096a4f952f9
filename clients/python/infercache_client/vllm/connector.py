"""InfercacheConnector: vLLM's KV connector API on top of the sidecar's KV hot tier."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

from infercache_client.kv.pool import torch_dtype
from infercache_client.vllm.config import ConfigError, ConnectorConfig
from infercache_client.vllm.cost import LoadCostModel
from infercache_client.vllm.events import ConnectorEvents, InfercacheKVEvents, layout_name
from infercache_client.vllm.gauge import LoadGauge
from infercache_client.vllm.identity import AdapterFingerprints, layout_of, model_fingerprint
from infercache_client.vllm.link import SidecarLink
from infercache_client.vllm.metadata import InfercacheMetadata
from infercache_client.vllm.scheduler import SchedulerSide
from infercache_client.vllm.stats import InfercachePromMetrics, InfercacheStats
from infercache_client.vllm.worker import WorkerSide

log = logging.getLogger("infercache_client.vllm")


class InfercacheConnector(KVConnectorBase_V1):
    """Version-bound KV reuse across vLLM engines through the infercache sidecar.

    The scheduler-role instance looks up, pins and plans; the worker-role instance
    copies. Both attach to the sidecar with the fingerprint of the weights vLLM loaded
    and the KV layout, so only blocks of the same weights and layout are ever found.
    """

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any) -> None:
        """Called by vLLM's connector factory (kv_connector_module_path)."""
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        transfer = vllm_config.kv_transfer_config
        self.config = ConnectorConfig.from_extra(transfer.kv_connector_extra_config)
        layout = layout_of(vllm_config)
        groups = getattr(kv_cache_config, "kv_cache_groups", None)
        if groups is not None and len(groups) > 1:
            # Block ids are per group; the chain and the copies assume one.
            raise ConfigError(
                f"the infercache connector supports one KV cache group, this model has "
                f"{len(groups)} (hybrid attention)"
            )
        fingerprint = model_fingerprint(vllm_config, self.config)
        is_scheduler = role == KVConnectorRole.SCHEDULER
        self.link = SidecarLink(
            self.config.sidecar,
            model_fingerprint=fingerprint,
            layout=layout,
            process_name="vllm-scheduler" if is_scheduler else "vllm-worker",
            timeout_s=self.config.lookup_timeout_s if is_scheduler else self.config.rpc_timeout_s,
            attach_timeout_s=self.config.attach_timeout_s,
            retry_s=self.config.retry_s,
            tenant=self.config.tenant,
            domain_key_file=self.config.domain_key_file,
        )
        # Attach now, at engine start, so the first request finds the pool; every later
        # attach runs in the background (a frozen sidecar never stalls the engine loop).
        self.link.attach_now()
        self.scheduler: SchedulerSide | None = None
        self.worker: WorkerSide | None = None
        item = torch.empty((), dtype=torch_dtype(layout.dtype)).element_size()
        block_bytes = (
            (layout.num_layers * 2 * layout.tokens_per_block * layout.num_kv_heads)
            * layout.head_dim
            * item
        )
        if is_scheduler:
            # A cache miss must never fail a request: a block that cannot be loaded is
            # recomputed (vLLM's default for load failures is to fail the request).
            transfer.kv_load_failure_policy = "recompute"
            self.scheduler = SchedulerSide(
                self.link,
                tenant=self.config.tenant,
                block_size=layout.tokens_per_block,
                adapters=AdapterFingerprints(self.config),
                lookup_timeout_s=self.config.lookup_timeout_s,
                events=self._events(vllm_config, fingerprint, layout),
                gauge=LoadGauge(
                    LoadCostModel(margin=self.config.load_margin),
                    block_bytes=block_bytes,
                    block_size=layout.tokens_per_block,
                ),
            )
        else:
            self.worker = WorkerSide(
                self.link,
                num_layers=layout.num_layers,
                block_size=layout.tokens_per_block,
                num_kv_heads=layout.num_kv_heads,
                head_dim=layout.head_dim,
                block_bytes=block_bytes,
            )
        log.info(
            "infercache: %s connector for %s (fingerprint %s) via %s",
            role.name.lower(),
            vllm_config.model_config.model,
            fingerprint[:24],
            self.config.sidecar,
        )

    def _events(self, vllm_config: Any, fingerprint: str, layout: Any) -> ConnectorEvents | None:
        """KV events of the pool's blocks, when vLLM publishes events (--kv-events-config)."""
        events_config = getattr(vllm_config, "kv_events_config", None)
        if events_config is None or not events_config.enable_kv_cache_events:
            return None
        link = self.link

        def scope_id() -> str | None:
            tier = link.tier()
            return tier.scope_id if tier is not None else None

        return ConnectorEvents(
            model_fingerprint=fingerprint,
            layout=layout_name(layout),
            tenant=self.config.tenant,
            block_size=layout.tokens_per_block,
            scope_id=scope_id,
        )

    @property
    def requires_kv_delivery(self) -> bool:
        """A best-effort cache: a dropped save is a later miss."""
        return False

    # -- worker side ---------------------------------------------------------------

    def _meta(self) -> InfercacheMetadata | None:
        if not self.has_connector_metadata():
            return None
        meta = self._get_connector_metadata()
        return meta if isinstance(meta, InfercacheMetadata) else None

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        """The step's metadata, before its forward pass: the worker allocates its saves'
        slots meanwhile."""
        super().bind_connector_metadata(connector_metadata)
        meta = self._meta()
        if self.worker is not None and meta is not None:
            self.worker.bind(meta)

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """vLLM's paged KV cache, one tensor per attention layer."""
        if self.worker is not None:
            self.worker.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Load this step's external blocks (synchronously: see worker.py)."""
        meta = self._meta()
        if self.worker is not None and meta is not None:
            self.worker.start_load_kv(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Nothing to wait for: start_load_kv loaded every layer."""

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any
    ) -> None:
        """Nothing per layer: wait_for_save copies every layer once the pass is done."""

    def wait_for_save(self) -> None:
        """Save the prompt blocks this step completed."""
        meta = self._meta()
        if self.worker is not None and meta is not None:
            self.worker.wait_for_save(meta)

    def get_block_ids_with_load_errors(self) -> set[int]:
        """Blocks vLLM must recompute."""
        return self.worker.take_load_errors() if self.worker is not None else set()

    def get_kv_connector_kv_cache_events(self) -> InfercacheKVEvents | None:
        """BlockStored events of the saves committed since the last call, and the count of
        saves that ended (to the scheduler)."""
        if self.worker is None:
            return None
        events, settled = self.worker.take_committed_events()
        return InfercacheKVEvents(events, settled) if events or settled else None

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        """This half's counters and (worker) step timings since the last call."""
        if self.worker is not None:
            return self.worker.take_stats()
        if self.scheduler is not None:
            counts = self.scheduler.gauge.take_counts()
            return InfercacheStats(data=dict(counts)) if counts else None
        return None

    @classmethod
    def build_kv_connector_stats(
        cls, data: dict[str, Any] | None = None
    ) -> KVConnectorStats | None:
        """vLLM rebuilds the stats it aggregates for its log from their data."""
        return InfercacheStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(
        cls,
        vllm_config: Any,
        metric_types: dict[Any, Any],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> KVConnectorPromMetrics | None:
        """The counters on vLLM's /metrics (stats.py)."""
        return InfercachePromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def shutdown(self) -> None:
        """Let the saves in flight commit (bounded), then detach from the sidecar."""
        if self.scheduler is not None:
            self.scheduler.close()
        if self.worker is not None:
            self.worker.close()
        self.link.close()

    # -- scheduler side ------------------------------------------------------------

    def on_new_request(self, request: Any) -> None:
        """Start the request's lookup as soon as vLLM has it."""
        if self.scheduler is not None:
            self.scheduler.on_new_request(request)

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        """Tokens loadable from the sidecar beyond the local prefix cache's (None: not
        known yet, vLLM asks again next step)."""
        assert self.scheduler is not None
        return self.scheduler.get_num_new_matched_tokens(request, num_computed_tokens), False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        """Pin and plan the load of the promised blocks."""
        assert self.scheduler is not None
        self.scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        """This step's loads and saves for the worker."""
        assert self.scheduler is not None
        return self.scheduler.build_connector_meta(scheduler_output)

    def request_finished(
        self, request: Any, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        """Release the request's pins; vLLM may free its blocks at once (saves are sync)."""
        if self.scheduler is not None:
            self.scheduler.request_finished(request)
        return False, None

    def update_connector_output(self, connector_output: Any) -> None:
        """A step's output: the worker's timings of it feed the cost model; its
        committed-block events are published at the next take_events."""
        if self.scheduler is None:
            return
        self.scheduler.step_output(connector_output)
        events = getattr(connector_output, "kv_cache_events", None)
        if self.scheduler.events is not None and events:
            self.scheduler.events.add(events.get_all_events())
            self.scheduler.events.settle(getattr(events, "settled", 0))

    def has_pending_push_work(self) -> bool:
        """Saves announced to the worker whose commit has not come back: vLLM keeps
        stepping (without a request) until they have, so their blocks are published
        at once, not at the next request (events.py)."""
        return (
            self.scheduler is not None
            and self.scheduler.events is not None
            and self.scheduler.events.awaiting()
        )

    def take_events(self) -> Iterable[Any]:
        """Events for vLLM's publisher: the pool's blocks (events.py)."""
        if self.scheduler is None or self.scheduler.events is None:
            return ()
        return self.scheduler.events.take()
