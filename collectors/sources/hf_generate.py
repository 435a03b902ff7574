"""``hf-generate``: Hugging Face ``generate`` calls (:mod:`rltrace.collectors.hf_generate`), once transformers'
generation module is imported."""

from __future__ import annotations

from rltrace.collectors.sources import install_on_import, register


@register("hf-generate")
def attach_hf_generate() -> None:
    """Patch ``GenerationMixin.generate`` when the job imports transformers' generation utilities (the collector
    module imports torch: only once transformers' generation is in use)."""
    install_on_import("transformers.generation.utils", "hf_generate")
