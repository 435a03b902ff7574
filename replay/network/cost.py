"""Fabric capital cost: switch ports, transceivers, optical circuit switch ports, cables, interconnects.

The unit prices below are rltrace's planning assumptions for 400 Gb/s parts, not quotes: no public price list
was at hand when they were set (docs/fabrics.md says so). Override every one of them
(``--set network.prices.transceiver_usd=650`` on replay, ``--price`` on ``rltrace fabric bench``).
Counting: each GPU's NIC link is one switch port, two transceivers and one cable; each switch-to-switch link of a
NIC's speed two ports, two transceivers and one cable (a wider or narrower link: that many, by its bandwidth); each
optical uplink (RFabric) one electrical port, one transceiver, one OCS port and one cable (the OCS is passive: no
transceiver on its side); a datacenter interconnect is priced per Gb/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from rltrace.replay.topologies.base import Topology

from rltrace.errors import ConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class FabricPrices:
    switch_port_usd: float = 1_000.0
    transceiver_usd: float = 800.0
    ocs_port_usd: float = 2_500.0
    cable_usd: float = 100.0
    dci_usd_per_gbps: float = 1_000.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not 0 <= value < math.inf:
                raise ConfigError(f"{f.name} must be a price >= 0, got {value}")


def fabric_cost(topo: Topology, prices: FabricPrices | None = None) -> dict[str, float]:
    """Component counts and capital cost (USD) of ``topo``'s network beyond the NVSwitch domains."""
    p = prices or FabricPrices()
    links = topo.links()
    kinds = links.kind
    per_slot = max(1, int(getattr(topo, "nics", 1)) // max(topo.gpus_per_node, 1))  # NICs behind one GPU's link
    nic = int((kinds == "nic").sum()) // 2 * per_slot  # up and down of one GPU's link, each NIC priced
    # switch-to-switch links by their bandwidth in NIC-speed ports (an oversubscribed uplink is its 1 / oversub share:
    # fewer ports bought, not slower ones), or as many as the topology says a buyer needs (a leaf-spine's)
    port = float(getattr(topo, "nic_gbps", 0.0)) / 8 * 1e9 * float(getattr(topo, "nic_efficiency", 1.0))
    needed = getattr(topo, "switch_links", None)  # a topology that knows which of its links a buyer needs
    if needed is not None:
        fabric = math.ceil(needed() - 1e-6)
    elif port > 0:
        fabric = math.ceil(float(links.capacity_Bps[kinds == "fabric"].sum()) / 2 / port - 1e-6)
    else:
        fabric = int((kinds == "fabric").sum()) // 2
    ocs_pairs = int((kinds == "ocs").sum())
    optical = 0
    if ocs_pairs:
        h = getattr(topo, "k", 2) // 2
        optical = getattr(topo, "k", 0) * h * h  # every pod's optical uplinks
    dci_gbps = float(links.capacity_Bps[kinds == "dci"].sum()) * 8 / 1e9 / 2
    ports = nic + 2 * fabric + optical
    transceivers = 2 * nic + 2 * fabric + optical
    cables = nic + fabric + optical
    usd = (ports * p.switch_port_usd + transceivers * p.transceiver_usd + optical * p.ocs_port_usd
           + cables * p.cable_usd + dci_gbps * p.dci_usd_per_gbps)
    return {"switch_ports": ports, "transceivers": transceivers, "ocs_ports": optical, "cables": cables,
            "dci_gbps": dci_gbps, "capex_usd": usd}
