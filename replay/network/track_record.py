"""A collective's track record: how the network model did on the measured NCCL runs nearest it.

`rltrace fabric bench` ends with it: the points of :mod:`.validation`'s packaged sets nearest the collective are
priced again (0.01-0.08 s on a 2-core VM) and summarised. Nearest is the same op and size band (the validation's own
bands) on the same GPU kind, node shape (GPUs a node, NVSwitch or not) and node count, or in one node the same GPU
count; else the GPU kind at any count; else any kind. The measured clusters are what they are: the fabric of the
spec given (fat-tree, rail, leaf-spine) is not matched, and the scope names what was.
"""

from __future__ import annotations

import dataclasses

import polars as pl
from rltrace.replay.network.validation import (
    ONE_NODE_BANDS,
    SIZE_BANDS,
    multinode_compare,
    one_node_compare,
)


@dataclasses.dataclass(frozen=True, slots=True)
class FabricRecord:
    """The collective model's errors on the measured runs nearest one collective (``points`` 0: none)."""

    scope: str
    points: int
    sources: int = 0
    """independent sources among the points: clusters across nodes, one sweep per GPU kind in one node"""
    median_abs_error: float | None = None
    max_abs_error: float | None = None
    median_error: float | None = None
    """signed: > 0 the model is slower than measured"""

    def to_json(self) -> dict[str, object]:
        """The record as plain values (``--json``)."""
        return dataclasses.asdict(self)

    def line(self) -> str:
        """One line for a person: the slice, its points, sources and errors."""
        if not self.points:
            return f"track record: {self.scope}"
        assert self.median_abs_error is not None and self.max_abs_error is not None and self.median_error is not None
        return (f"track record ({self.points} measured point{'s' if self.points > 1 else ''} from {self.sources} "
                f"source{'s' if self.sources > 1 else ''}: {self.scope}): median |error| "
                f"{100 * self.median_abs_error:.1f}%, worst {100 * self.max_abs_error:.1f}%, median "
                f"{100 * self.median_error:+.1f}% (+: the model slower)")


def track_record(op: str, gpu: str, ranks: int, gpus_per_node: int, size_bytes: int,
                 nvswitch: bool = True) -> FabricRecord:
    """The record of ``op`` of ``size_bytes`` over ``ranks`` GPUs of kind ``gpu``, ``gpus_per_node`` a node (on an
    NVSwitch or not)."""
    nodes = -(-ranks // gpus_per_node)
    one = nodes == 1
    bands = ONE_NODE_BANDS if one else SIZE_BANDS
    lo, hi, band = next(b for b in reversed(bands) if size_bytes >= b[0])  # the last band is open above
    same = (pl.col("op") == op) & (pl.col("size_bytes") >= lo) & (pl.col("size_bytes") < hi)
    kind = pl.col("gpu") == gpu
    tiers: list[tuple[pl.Expr, str]] = []
    if one and nvswitch:  # the one-node sweeps ran 2, 4 and 8 GPUs of NVSwitch nodes
        tiers.append((same & kind & (pl.col("gpus") == ranks), f"{gpu}, {ranks} GPUs"))
    elif not one and ranks % gpus_per_node == 0:  # the multi-node runs fill every node
        shape = (pl.col("nodes") == nodes) & (pl.col("gpus_per_node") == gpus_per_node) & (
            pl.col("nvswitch") == nvswitch)
        switch = "" if nvswitch else " without NVSwitch"
        tiers.append((same & kind & shape, f"{gpu}, {nodes} nodes of {gpus_per_node} GPUs{switch}"))
    word = "GPU count" if one else "node count"
    tiers += [(same & kind, f"{gpu}, any {word}"), (same, f"any GPU kind and {word}")]
    what = f"{op} of {band}{' in one node' if one else ' across nodes'}"
    for where, scope in tiers:
        compared = one_node_compare(where=where) if one else multinode_compare(where=where)
        if compared.height:
            break
    else:
        return FabricRecord(f"{what}: no measured run", 0)
    stats = compared.select(pl.col("error").abs().median().alias("abs"), pl.col("error").abs().max().alias("max"),
                            pl.col("error").median().alias("med"),
                            pl.col("gpu" if one else "cluster").n_unique().alias("sources")).row(0, named=True)
    return FabricRecord(f"{what} on {scope}", compared.height, stats["sources"], stats["abs"], stats["max"],
                        stats["med"])
