"""``ray``: a driver's ``ray.init`` makes every Ray worker record (:mod:`rltrace.collectors.ray_hook`)."""

from __future__ import annotations

from typing import Any

from rltrace.collectors import hooks, recorder
from rltrace.collectors.sources import register


@register("ray")
def attach_ray() -> None:
    """Wrap Ray's worker setup hook when the job imports ray."""
    hooks.when_imported("ray", _install)


def _install(module: Any) -> None:
    rec = recorder.current()
    if rec is None:
        return
    with rec.guard("ray hook install"):
        from rltrace.collectors import ray_hook

        ray_hook.install(module)
