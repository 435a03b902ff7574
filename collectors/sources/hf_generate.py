"""``hf-generate``: Hugging Face ``generate`` calls (:mod:`rltrace.collectors.hf_generate`), once transformers'
generation module is imported."""

from __future__ import annotations

from typing import Any

from rltrace.collectors import hooks, recorder
from rltrace.collectors.sources import register


@register("hf-generate")
def attach_hf_generate() -> None:
    """Patch ``GenerationMixin.generate`` when the job imports transformers' generation utilities."""
    hooks.when_imported("transformers.generation.utils", _install)


def _install(module: Any) -> None:
    rec = recorder.current()
    if rec is None:
        return
    with rec.guard("hf generate collector install"):
        from rltrace.collectors import hf_generate  # imports torch: only once transformers' generation is in use

        hf_generate.install(module)
