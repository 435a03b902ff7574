"""Configuration smells of a generation engine: a running batch capped below the step's batch.

vLLM runs at most ``max_num_seqs`` requests at once, and no more than its KV cache holds; the rest wait in its
queue. Per generation instance and step, from the requests' own times:

- *running*: the most requests running at once (from leaving the queue, ``scheduled_ns``, to ``finish_ns``);
- *queued*: requests that left the queue only after another request of the same instance finished, i.e. that
  waited for a slot (a request scheduled as soon as it arrived never counts, whatever its arrival);
- *preempted*: the engine's preemptions (``num_preemptions``), which vLLM makes when the KV cache runs out.

An instance is capped when requests queued in at least half of the judged steps: at a constant running batch
below the step's batch (``max_num_seqs``, or ``max_num_batched_tokens``), or with preemptions (a KV cache too
small for the batch). What it costs is priced by a replay (the recording replayed at the cap, against the same
with the cap raised to the step's batch): a batch that had fitted runs its requests side by side rather than
in waves. Without a replay, the cost is estimated as each step's generation time less its longest request's
own time from scheduling to finish (what the step would take were every request running from the start).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from rltrace.analysis.findings import Context, Finding, WhatIf
from rltrace.scalars import integer, number

QUEUED_STEPS = 0.5
"""an instance is capped when requests queued in at least this share of the judged steps"""


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """Per generation instance and step: requests, the most running at once, queued requests and their mean
    wait, preemptions, generation seconds and the longest request's seconds from scheduling to finish."""

    frame: pl.DataFrame
    """engine, step, requests, running, queued, queue_s, preemptions, gen_s, longest_s"""


def engine_load(requests: pl.DataFrame) -> EngineLoad:
    """Each instance's load per step (see :class:`EngineLoad`), from a bundle's requests."""
    rows = []
    done = requests.filter(pl.col("finish_ns").is_not_null())
    for (engine, step), r in done.group_by("engine", "step", maintain_order=True):
        arrival = r["arrival_ns"].to_numpy()
        start = r["scheduled_ns"].fill_null(r["arrival_ns"]).to_numpy()
        finish = r["finish_ns"].to_numpy()
        ends = np.sort(finish)
        # running at once: +1 at each start, -1 at each finish (a finish before a start at the same instant)
        times = np.concatenate([start, finish])
        delta = np.concatenate([np.ones(len(start)), -np.ones(len(finish))])
        order = np.lexsort((delta, times))
        running = int(np.cumsum(delta[order]).max())
        # queued: some request of this instance finished after it arrived and before it left the queue
        freed = np.searchsorted(ends, start, side="right") - np.searchsorted(ends, arrival, side="right")
        queued = freed > 0
        rows.append({"engine": engine, "step": step, "requests": r.height, "running": running,
                     "queued": int(queued.sum()),
                     "queue_s": float((start - arrival)[queued].mean() / 1e9) if queued.any() else 0.0,
                     "preemptions": int(r["num_preemptions"].sum()),
                     "gen_s": float(finish.max() - arrival.min()) / 1e9,
                     "longest_s": float((finish - start).max()) / 1e9})
    schema = {"engine": pl.String, "step": pl.Int32, "requests": pl.Int64, "running": pl.Int64, "queued": pl.Int64,
              "queue_s": pl.Float64, "preemptions": pl.Int64, "gen_s": pl.Float64, "longest_s": pl.Float64}
    return EngineLoad(pl.DataFrame(rows, schema=schema, orient="row").sort("engine", "step"))


def running_cap(load: EngineLoad, ctx: Context) -> int | None:
    """The running batch the capped instances held (their largest), or None when no instance was capped."""
    capped = [integer(f.frame["running"].max()) for f in _capped(load, ctx)]
    return max(capped) if capped else None


def _capped(load: EngineLoad, ctx: Context) -> list[EngineLoad]:
    judged = load.frame.filter(pl.col("step").is_in(ctx.steps))
    out = []
    for _, rows in judged.group_by("engine", maintain_order=True):
        if rows.height and rows.filter(pl.col("queued") > 0).height >= QUEUED_STEPS * rows.height:
            out.append(EngineLoad(rows))
    return out


def engine_limits(load: EngineLoad, ctx: Context) -> list[Finding]:
    """One ``config`` finding per capped instance (see the module text)."""
    findings = []
    for capped in _capped(load, ctx):
        rows = capped.frame
        engine = str(rows["engine"][0])
        cap = integer(rows["running"].max())
        batch = integer(rows["requests"].max())
        preempted = int(rows["preemptions"].sum())
        steady = rows["running"].n_unique() == 1
        estimate = number((rows["gen_s"] - rows["longest_s"]).clip(lower_bound=0).mean())
        gen_s, longest_s = number(rows["gen_s"].mean()), number(rows["longest_s"].mean())
        queued = (f"{number(rows['queued'].mean()):.3g} of its {number(rows['requests'].mean()):.3g} requests a step "
                  f"waited for a slot, {number(rows['queue_s'].mean()):.3f} s on average")
        if preempted:
            evidence = (f"{engine} ran at most {cap} requests at once and preempted {preempted} in "
                        f"{rows.height} steps (its KV cache ran out); {queued}.")
            fix = (f"Give {engine} a KV cache that holds the step's {batch} requests: raise gpu_memory_utilization "
                   "(VLLM_CPU_KVCACHE_SPACE on CPU) or tensor parallelism, or lower max_model_len.")
        else:
            held = f"exactly {cap} requests in every step" if steady else f"at most {cap} requests"
            evidence = (f"{engine} ran {held} at once while the step gave it {batch}: {queued}; generation took "
                        f"{gen_s:.3f} s a step against {longest_s:.3f} s for its longest request alone.")
            fix = (f"Raise {engine}'s max_num_seqs (and max_num_batched_tokens) to at least {batch}, the step's "
                   "batch on it; if its KV cache cannot hold them, give it more (gpu_memory_utilization, "
                   "VLLM_CPU_KVCACHE_SPACE on CPU).")
        findings.append(Finding(kind="config", phase="generate", instance=engine, lost_s_per_step=estimate,
                                evidence=evidence, fix=fix, lost_from_gain=True,
                                whatif=WhatIf(label=f"max_num_seqs {max(batch, cap + 1)} instead of {cap}",
                                              uncap=True, max_seqs=max(batch, cap + 1))))
    return findings
