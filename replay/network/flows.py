"""Flow-level network model: max-min fair rates by progressive filling, and flows run to completion.

Rates are recomputed whenever a flow starts or ends. Everything is numpy over arrays of flows and links:
progressive filling raises every unfrozen flow's rate together until some link saturates, freezes the flows
crossing it, and repeats, so it takes one pass per distinct bottleneck level (one or two for a ring).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rltrace.errors import ConfigError

EPS = 1e-9  # relative: a flow with this share of its bytes left is done


def max_min_rates(indptr: np.ndarray, ids: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rate (bytes/s) of each flow, given its links (CSR) and the links' capacities."""
    n = len(indptr) - 1
    rate = np.zeros(n)
    frozen = np.diff(indptr) == 0  # a flow that crosses no link (a GPU to itself) is not limited here
    rate[frozen] = np.inf
    residual = capacity.astype(np.float64).copy()
    if np.any(capacity[ids] <= 0):
        raise ConfigError("a flow crosses a link with no capacity (an optical circuit that is not set up?)")
    # the unfrozen flows' (flow, link) entries, dropped as their flows freeze: each level costs what is left
    flow, link = np.repeat(np.arange(n), np.diff(indptr)), ids
    level = 0.0  # every unfrozen flow's rate: the increments so far, summed in the same order for each
    while len(flow):
        count = np.bincount(link, minlength=len(capacity))
        used = count > 0
        share = np.full(len(capacity), np.inf)
        share[used] = residual[used] / count[used]
        inc = float(share.min())
        level += inc
        residual[used] -= inc * count[used]
        full = share <= inc * (1 + 1e-9)  # the bottleneck links: saturated now, by construction
        newly = flow[full[link]]
        rate[newly] = level
        frozen[newly] = True
        keep = ~frozen[flow]
        flow, link = flow[keep], link[keep]
    return rate


@dataclass(frozen=True, slots=True)
class FlowRun:
    """When each flow finished, and the bytes every link carried."""

    finish_s: np.ndarray
    link_bytes: np.ndarray
    events: int

    @property
    def makespan_s(self) -> float:
        return float(self.finish_s.max()) if len(self.finish_s) else 0.0


def run_flows(indptr: np.ndarray, ids: np.ndarray, capacity: np.ndarray, nbytes: np.ndarray,
              start_s: np.ndarray | None = None) -> FlowRun:
    """Run flows of ``nbytes`` from ``start_s`` (0 by default) to completion under max-min sharing."""
    n = len(nbytes)
    start = np.zeros(n) if start_s is None else np.asarray(start_s, dtype=np.float64)
    left = np.asarray(nbytes, dtype=np.float64).copy()
    finish = np.full(n, np.nan)
    lengths = np.diff(indptr)
    flow_of = np.repeat(np.arange(n), lengths)
    link_bytes = np.bincount(ids, weights=left[flow_of], minlength=len(capacity))
    # the rates depend only on the links these flows cross: number them 0.. once, not every link at every event
    crossed, ids = np.unique(ids, return_inverse=True)
    capacity = np.asarray(capacity)[crossed]
    now, events = 0.0, 0
    done = left <= 0
    finish[done] = start[done]
    while not done.all():
        active = ~done & (start <= now + EPS)
        if not active.any():
            now = float(start[~done].min())
            continue
        idx = np.flatnonzero(active)
        sub_ptr = np.concatenate([[0], np.cumsum(lengths[idx])])
        sub_ids = ids[_gather(indptr, idx)]
        rate = max_min_rates(sub_ptr, sub_ids, capacity)
        with np.errstate(divide="ignore"):
            until = np.where(np.isinf(rate), 0.0, left[idx] / rate)
        waiting = start[~done & ~active]
        step = min(float(until.min()), float(waiting.min()) - now if len(waiting) else np.inf)
        left[idx] = np.where(np.isinf(rate), 0.0, left[idx] - rate * step)
        now += step
        ended = idx[left[idx] <= EPS * np.maximum(np.asarray(nbytes, dtype=np.float64)[idx], 1.0)]
        left[ended] = 0.0
        finish[ended] = now
        done[ended] = True
        events += 1
    return FlowRun(finish, link_bytes, events)


def _gather(indptr: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The CSR entries of flows ``idx``, in order, without a Python loop."""
    lengths = indptr[idx + 1] - indptr[idx]
    offsets = np.repeat(indptr[idx] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    entries: np.ndarray = np.arange(lengths.sum()) + offsets
    return entries
