"""``torch``: c10d collectives and optimizer steps (:mod:`rltrace.collectors.torch_dist`), once torch is imported."""

from __future__ import annotations

from typing import Any

from rltrace.collectors import hooks, recorder
from rltrace.collectors.sources import register


@register("torch")
def attach_torch() -> None:
    """Patch torch.distributed and the optimizer hooks when the job imports torch."""
    hooks.when_imported("torch", _install)


def _install(_module: Any) -> None:
    rec = recorder.current()
    if rec is None:
        return
    with rec.guard("torch collector install"):
        from rltrace.collectors import torch_dist  # imports torch.distributed: only once torch is in use

        torch_dist.install()
