"""``ray``: a driver's ``ray.init`` makes every Ray worker record (:mod:`rltrace.collectors.ray_hook`)."""

from __future__ import annotations

from rltrace.collectors.sources import install_on_import, register


@register("ray")
def attach_ray() -> None:
    """Wrap Ray's worker setup hook when the job imports ray."""
    install_on_import("ray", "ray_hook")
