"""Bubbles with their causes: each pool's idle time, the requests that held a step, and what removes it.

The idle time comes from the recording replayed as it ran (``as-recorded``, which holds a recording's step
time within a few percent; docs/replay.md): each pool's GPU-time is split into busy time, the dependency
bubble (waiting for the other pool or the weight sync) and the long-tail (skewness) bubble (waiting, inside
the step's tail window, for its last samples). The requests that held a step are the recording's own: the
ones that finished inside the tail window (after ``TAIL_QUANTILE`` of the step's samples had finished).

What removes the most of it is found by replaying the recording under every shipped scheduler and, under
``disagg-sync``, other splits of the same GPUs between the pools (in whole generation instances); the change that
shortens the step most is the finding's fix, and its gain is what the step loses to the bubble. A change whose replay
trains other work than the recording (fewer samples, or other lengths: ``rltrace.replay.work``) is left out, since its
shorter step is no gain on the recorded work.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from rltrace.analysis.findings import Context, Finding, WhatIf
from rltrace.analysis.whatif import Pricer
from rltrace.bundle import Bundle
from rltrace.replay.schedulers.base import SCHEDULERS, capabilities
from rltrace.scalars import number

IDLE_SHARE = 0.10
"""a pool idle less than this share of its GPU-time has no bubble worth a finding"""
TAIL_QUANTILE = 0.8
"""a step's tail window starts when this share of its samples has finished (as in the replay's metrics)"""
MIN_TAIL_S = 0.01
"""a tail window shorter than this is no long tail"""
SPLIT_SHARES = (0.25, 1 / 3, 0.5, 2 / 3, 0.75)
"""generation's share of the GPUs in the other pool splits tried, to whole generation instances (plus one instance
either way)"""
WORDS = {
    "one-step-async": "generation of step k+1 overlaps training of step k (samples one weight version stale)",
    "fully-async": "generation never waits for training and samples train in finish order (bounded staleness)",
    "colocated-sync": "every GPU generates, then every GPU trains (switching weights between them)",
    "disagg-sync": "separate pools, strictly on-policy",
    "streamrl": "generation streams into training, with skewness-aware dispatch",
    "rollpacker": "long rollouts packed into tail rounds",
    "rollart": "trajectory-level asynchrony for agentic rollouts",
    "rollmux": "pools shared across jobs",
    "orchestrrl": "adaptive routing and pool orchestration",
}


def holders(bundle: Bundle, ctx: Context) -> str:
    """The requests that held the judged steps (finishing in their tail windows), in words."""
    r = (bundle.requests.filter(pl.col("step").is_in(ctx.steps), pl.col("finish_ns").is_not_null())
         .select("step", "request_id", "engine", "output_tokens", "finish_ns").collect())
    if not r.height:
        return ""
    tails = r.group_by("step").agg(pl.col("finish_ns").quantile(TAIL_QUANTILE, "lower").alias("_a"),
                                   pl.col("finish_ns").max().alias("_b"),
                                   pl.col("output_tokens").median().alias("_median"))
    r = r.join(tails, on="step")
    held = r.filter(pl.col("finish_ns") > pl.col("_a"))
    tail_s = number(((tails["_b"] - tails["_a"]) / 1e9).mean())
    longest = tails.with_columns(((pl.col("_b") - pl.col("_a")) / 1e9).alias("_t"))
    worst = longest.sort("_t", "step", descending=True).row(0, named=True)
    mine = held.filter(pl.col("step") == worst["step"]).sort("finish_ns", descending=True).head(3)
    if not mine.height or worst["_t"] < MIN_TAIL_S:
        return (f"No long tail: the last {1 - TAIL_QUANTILE:.0%} of each step's samples finished within "
                f"{worst['_t'] * 1e3:.1f} ms of the rest.")
    names = ", ".join(f"{rid} ({tokens:,} tokens)" for rid, tokens in mine.select("request_id", "output_tokens")
                      .iter_rows())
    return (f"The last {1 - TAIL_QUANTILE:.0%} of each step's samples finished {tail_s:.3f} s after the rest on "
            f"average; in step {worst['step']} ({worst['_t']:.3f} s) the last were {names}, against a median of "
            f"{worst['_median']:,.0f} tokens.")


def _pools(metrics: dict[str, Any], step_s: float) -> dict[str, tuple[float, float, float]]:
    """pool -> (idle share, dependency seconds a step, long-tail seconds a step) of one replay's metrics."""
    out = {}
    for pool, busy in metrics.get("gpu_utilization", {}).items():
        parts = metrics.get("bubble_fraction", {}).get(pool, {})
        out[pool] = (1.0 - float(busy), float(parts.get("dependency", 0.0)) * step_s,
                     float(parts.get("skewness", 0.0)) * step_s)
    return out


def _alternatives(pricer: Pricer) -> list[WhatIf]:
    """Every shipped scheduler but as-recorded (and, on pools of two GPU kinds, those that colocate: every GPU in
    both roles), then other pool splits under disagg-sync."""
    cluster = pricer.prepared(pricer.base_shape).cluster
    one_kind = cluster.gen_gpu == cluster.train_gpu
    out = [WhatIf(label=f"{name} ({WORDS.get(name, 'its own schedule')})", scheduler=name)
           for name in SCHEDULERS.shipped()
           if name != "as-recorded" and (one_kind or not capabilities(SCHEDULERS.lookup(name)).colocates)]
    gen, train, tp = cluster.gen_gpus, cluster.train_gpus, cluster.tp
    total = gen + train
    splits = {round(total * share / tp) * tp for share in SPLIT_SHARES} | {gen - tp, gen + tp}  # whole instances
    for g in sorted(s for s in splits if 1 <= s < total and s != gen):
        out.append(WhatIf(label=f"{g} generation and {total - g} training devices instead of {gen} and {train} "
                                "(disagg-sync)", scheduler="disagg-sync", gen_gpus=g, train_gpus=total - g))
    return out


def bubbles(bundle: Bundle, ctx: Context, pricer: Pricer) -> list[Finding]:
    """One ``bubble`` finding when a pool idles at least ``IDLE_SHARE`` of its time and some scheduler or
    split removes at least the diagnosis's floor of the step (see the module text)."""
    metrics: dict[str, Any] = pricer.metrics()
    base_s = float(metrics["step_time_s"]["steady_mean"])
    pools = _pools(metrics, base_s)
    if not pools or max(idle for idle, _, _ in pools.values()) < IDLE_SHARE:
        return []
    best: tuple[float, WhatIf] | None = None
    for alt in _alternatives(pricer):
        gain = pricer.gain(alt, replicates=0)[0]
        if pricer.changes_work(alt):
            continue  # it trains fewer or other samples: its shorter step is no gain on the recorded work
        if best is None or gain > best[0]:
            best = (gain, alt)
    if best is None or best[0] < ctx.floor():
        return []
    gain, alt = best
    alt_metrics = pricer.metrics(alt.scheduler, alt.gen_gpus, alt.train_gpus)
    idle_s = {pool: (dep + tail) for pool, (_, dep, tail) in pools.items()}
    pool = max(idle_s, key=lambda p: idle_s[p])
    said = "; ".join(f"the {p} pool idled {share:.0%} of its time ({dep:.3f} s a step waiting on the other pool "
                     f"or the weight sync, {tail:.3f} s in the long tail)" for p, (share, dep, tail) in pools.items())
    stale = alt_metrics.get("staleness", {})
    stale_max = int(stale.get("max", 0)) if isinstance(stale, dict) else 0
    under = alt.scheduler if alt.gen_gpus is None else alt.label
    evidence = (f"Replayed as recorded, {said}. {holders(bundle, ctx)} Replayed under {under}, the "
                f"step takes {base_s - gain:.3f} s instead of {base_s:.3f} s.")
    if alt.gen_gpus is not None:
        fix = f"Move devices between the pools: {alt.label}."
    else:
        fix = f"Schedule as {alt.label}" + (f"; samples train up to {stale_max} weight version(s) stale." if stale_max
                                            else ".")
    return [Finding(kind="bubble", phase="generate" if pool == "generation" else "train", lost_s_per_step=gain,
                    evidence=evidence, fix=fix, whatif=alt, lost_from_gain=True)]
