"""``torch``: c10d collectives and optimizer steps (:mod:`rltrace.collectors.torch_dist`), once torch is imported."""

from __future__ import annotations

from rltrace.collectors.sources import install_on_import, register


@register("torch")
def attach_torch() -> None:
    """Patch torch.distributed and the optimizer hooks when the job imports torch (the collector module imports
    torch.distributed: only once torch is in use)."""
    install_on_import("torch", "torch_dist")
