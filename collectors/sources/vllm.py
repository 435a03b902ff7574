"""``vllm``: requests, generate spans and weight updates (:mod:`rltrace.collectors.vllm_collector`), as each of
vLLM's engine modules is imported."""

from __future__ import annotations

from rltrace.collectors import hooks
from rltrace.collectors.sources import register


@register("vllm")
def attach_vllm() -> None:
    """Patch vLLM's engines and ``LLM`` entry point when the job imports them."""
    # vllm_collector imports neither vLLM nor torch: taking its module table here costs a recording nothing
    from rltrace.collectors.vllm_collector import MODULES

    for name, install in MODULES.items():
        hooks.when_imported(name, install)
