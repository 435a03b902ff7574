"""``safetensors``: which process wrote a weights file a reload reads (:mod:`rltrace.collectors.weight_files`)."""

from __future__ import annotations

from typing import Any

from rltrace.collectors import hooks
from rltrace.collectors.sources import register


@register("safetensors")
def attach_weight_files() -> None:
    """Patch ``safetensors.torch`` when the job imports it."""
    hooks.when_imported("safetensors.torch", _install)


def _install(module: Any) -> None:
    from rltrace.collectors import weight_files

    weight_files.install(module)
