"""What a sidecar knows about its own pod at one moment: the model and adapters it
serves, as a frozen value (IdentityCell holds the current one)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sidecar.errors import FailedPrecondition


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """Fingerprints measured at start (or at a re-check); empty when the sidecar was not
    given a model path."""

    model_version: str = ""
    adapter_versions: Mapping[str, str] = field(default_factory=dict)
    """Adapter name -> fingerprint; requests may name an adapter instead of its fingerprint."""
    allow_foreign_store: bool = False

    def resolve_adapter(self, adapter_version: str) -> str:
        """The fingerprint behind a configured adapter name, else the value unchanged."""
        return self.adapter_versions.get(adapter_version, adapter_version)

    def resolve_selector_adapter(self, adapter_version: str) -> str:
        """The fingerprint an invalidation selector's adapter means, resolved as keys are.

        A configured name becomes its fingerprint (keys store that), a configured
        fingerprint stays; anything else, on a pod with adapters, is refused: a rule
        for a value no key of this pod can carry would be committed and kill nothing.
        A pod without adapters keys on the value as sent, so the selector keeps it too.
        """
        if not self.adapter_versions:
            return adapter_version
        name = self.adapter_name(adapter_version)
        if name is not None:
            return self.resolve_adapter(name)
        served = ", ".join(sorted(self.adapter_versions))
        raise FailedPrecondition(
            f"selector.adapter_version {adapter_version!r} is not an adapter this pod "
            f"serves (by name or fingerprint: {served}); nothing was invalidated"
        )

    def adapter_name(self, adapter_version: str) -> str | None:
        """The configured adapter a request names (by name or by fingerprint), if any."""
        if adapter_version in self.adapter_versions:
            return adapter_version
        for name, fp in self.adapter_versions.items():
            if fp == adapter_version:
                return name
        return None

    def check_store(self, model_version: str) -> None:
        """Refuse results a caller claims for weights this pod does not run.

        A fleet-shared cache must not accept them: the pod cannot have computed them.
        """
        foreign = bool(self.model_version) and model_version != self.model_version
        if foreign and not self.allow_foreign_store:
            raise FailedPrecondition(
                f"key.model_version {model_version!r} is not this pod's model "
                f"({self.model_version}); leave it empty to mean this pod's model, or set "
                "INFERCACHE_ALLOW_FOREIGN_MODEL_STORE=true"
            )
