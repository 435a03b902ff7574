"""Which run to choose, and why: the report's first screen.

``table`` puts every run on the same work (analysis/work.py) and compares it with the baseline; ``choose``
picks the best run for an :class:`Objective`; ``reasons`` explains the choice in a few sentences built from
the metrics: which bubble the winner removed, which pool now bounds it, and what it changed about the work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from rltrace.analysis.compare import baseline_index
from rltrace.analysis.runs import Run
from rltrace.analysis.work import origin, work
from rltrace.errors import ConfigError
from rltrace.replay.schedulers import lookup
from rltrace.replay.schedulers.base import capabilities
from rltrace.replay.work import rates

OBJECTIVES = ("throughput", "cost")

PUBLISHED_ASYNC_X = 2.77
"""the largest speed-up over a synchronous baseline an asynchronous RL system reports on its own workload that
this page cites: AReaL, arXiv 2505.24298, abstract ("up to 2.77x training speedup")"""

BUBBLE_WORDS = {
    ("generation", "dependency"): "generation GPUs waiting for training and the weight sync",
    ("generation", "skewness"): "generation GPUs idle in each step's long tail",
    ("training", "dependency"): "trainers waiting for rollouts",
    ("training", "skewness"): "trainers waiting for a step's last long samples",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Objective:
    """What the user wants from a run."""

    goal: str = "throughput"
    """"throughput" (most samples/s for the same work) or "cost" (fewest dollars per 1k samples of it)"""
    max_staleness: int | None = None
    """only runs whose samples lag at most this many weight versions at training (0: on-policy)"""
    same_distribution: bool = True
    """only runs that trained the recorded samples and tokens, their length distribution unchanged (default: a run
    that changes the trained work does not lead unless the user allows it)"""

    def __post_init__(self) -> None:
        if self.goal not in OBJECTIVES:
            raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.goal!r}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ConfigError(f"--max-staleness must be >= 0, got {self.max_staleness}")

    def describe(self, origin: str = "recorded") -> str:
        """The objective in words, as the page states it (``origin``: how the workload came to be,
        :func:`~rltrace.analysis.work.origin`)."""
        words = ["most samples/s" if self.goal == "throughput" else "lowest $ per 1k samples",
                 "for the same work"]
        if self.max_staleness is not None:
            words.append(f"with staleness at most {self.max_staleness}")
        if self.same_distribution:
            words.append(f"training the {origin} length distribution unchanged")
        return " ".join(words)


def table(runs: list[Run], baseline: str | None = None) -> pl.DataFrame:
    """One row per run: its work (analysis/work.py) and, on the same work, samples/s, $ per 1k samples and
    their ratios to the baseline (``*_x``); the run's own figures as ``run_*``, and its bytes per step (``sync_gb``:
    the one model copy a weight sync delivers to each generation instance, ``alltoall_gb``: what one training GPU
    sends in expert all-to-alls; null where the run does not say); ``colocated``, a scheduler that runs both roles
    on the same GPUs; ``baseline`` marks its row.

    Same work: the time analysis/work.py finds for the recorded work, priced by rltrace.replay.work.rates as the
    replay prices the figures it puts in each run's metrics (so a folder written before them carries them too)."""
    if not runs or not all(isinstance(r, Run) for r in runs):
        raise ConfigError(f"table takes a non-empty list of runs (rltrace.analysis.runs.load_runs), got "
                          f"{type(runs).__name__} of {len(runs) if isinstance(runs, list) else '?'} items")
    w = work(runs)
    rows = []
    for run in runs:
        m = run.metrics
        volume = m.get("volume_bytes_per_step") or {}  # runs written before the key existed have none
        rows.append({"run": run.name, "scheduler": run.scheduler,
                     "run_samples_per_s": float(m.get("throughput_samples_per_s", 0.0)),
                     "run_tokens_per_s": float(m.get("throughput_tokens_per_s", 0.0)),
                     "step_time_s": float(m.get("step_time_s", {}).get("mean", 0.0)),
                     "run_usd_per_1k_samples": float(m.get("usd_per_1k_samples", 0.0)),
                     "makespan_s": float(m.get("makespan_s", 0.0)), "cost_usd": float(m.get("cost_usd", 0.0)),
                     # busy: a non-empty batch, whatever its size; used: weighted by the batch against the
                     # instance's peak (a long tail at batch 1 is busy and barely used)
                     "gen_busy": float(m.get("gpu_busy", m.get("gpu_utilization", {})).get("generation", 0.0)),
                     "gen_used": float(m.get("gpu_utilization", {}).get("generation", 0.0)),
                     "train_used": float(m.get("gpu_utilization", {}).get("training", 0.0)),
                     "colocated": bool(m.get("colocated", _colocates(run.scheduler))),
                     "pools": pools_label(m.get("cost_by_pool") or {}), "origin": origin(run.config),
                     "sync_gb": _gigabytes(volume.get("weight_sync")),
                     "alltoall_gb": _gigabytes(volume.get("expert_alltoall_per_train_rank"))})
    frame = pl.DataFrame(rows).join(w, on="run", how="left", maintain_order="left")
    same = [rates(int(r["recorded_samples"]), math.inf if r["same_work_s"] is None else float(r["same_work_s"]),
                  float(r["makespan_s"]), float(r["cost_usd"]))
            for r in frame.iter_rows(named=True)]  # work()'s time for the work, priced as the replay prices it
    frame = frame.with_columns(pl.Series("samples_per_s", [s[0] for s in same], pl.Float64),
                               pl.Series("usd_per_1k_samples", [s[1] for s in same], pl.Float64))
    base = frame.row(baseline_index(runs, baseline), named=True)
    ratios = [(pl.col(c) / base[c] if base[c] else pl.lit(None, pl.Float64)).alias(f"{c}_x")
              for c in ("samples_per_s", "usd_per_1k_samples", "run_samples_per_s", "run_tokens_per_s")]
    return frame.with_columns(*ratios, pl.col("run").eq(base["run"]).alias("baseline"))


def usd_label(value: float) -> str:
    """Dollars per 1k samples as every view prints them: three decimals, "-" for 0 (no GPU of the run has a
    price, so nothing was billed)."""
    return f"{value:.3f}" if value else "-"


def three_digits(value: float) -> str:
    """How every view prints same-work samples/s and the time for the work (the terminal table, the report's first
    screen, the verdict, sweep and advise): three significant digits with their trailing zeros, so a column lines
    up (6.00 beside 9.86), and whole numbers from 100 up (123, 1,235)."""
    text = f"{value:#.3g}"
    return f"{value:,.0f}" if abs(value) >= 100 or text.endswith(".") else text  # 99.96 -> "100", not "100."


def pools_label(by_pool: dict[str, Any]) -> str:
    """A run's billed pools as a user reads them: "generation 16 H20 $4.79, training 16 H800 $7.12" (GPUs at
    most, kind, the pool's cost over the run); "" where the run does not say."""
    return ", ".join(f"{pool} {p['gpus']} {p['gpu']} ${p['cost_usd']:,.2f}" if p["gpus"] else
                     f"{pool} {p['gpu']} ${p['cost_usd']:,.2f}" for pool, p in by_pool.items())


def _gigabytes(nbytes: float | None) -> float | None:
    """Bytes as GB (None stays None: the run does not say)."""
    return None if nbytes is None else float(nbytes) / 1e9


def choose(frame: pl.DataFrame, objective: Objective) -> tuple[str | None, str]:
    """The best run of ``table``'s frame for the objective, or None and why no run qualifies."""
    eligible = frame
    if objective.max_staleness is not None:
        eligible = eligible.filter(pl.col("stale_max") <= objective.max_staleness)
    if objective.same_distribution:
        eligible = eligible.filter(~pl.col("changed"))
    if not eligible.height:
        return None, f"no run meets the objective ({objective.describe()})"
    if objective.goal == "throughput":
        best = eligible.sort("samples_per_s", "run", descending=[True, False])
    else:
        best = eligible.filter(pl.col("usd_per_1k_samples") > 0).sort("usd_per_1k_samples", "run")  # $0: unpriced
        if not best.height:
            return None, "no run has a cost (prices unknown)"
    return str(best["run"][0]), ""


def reasons(runs: list[Run], frame: pl.DataFrame, winner: str) -> list[str]:
    """Why ``winner`` wins, against the baseline, in sentences built from the metrics: the time on the same
    work, the bubble it removed, its bottleneck, and what it changed about the trained work."""
    by_name = {r.name: r for r in runs}
    w, b = frame.filter(pl.col("run") == winner).row(0, named=True), frame.filter(pl.col("baseline")).row(0, named=True)
    out = []
    if frame.height == 1:
        out.append(f"{winner} is the only run: nothing to compare it with (replay several schedulers, -s all).")
    elif winner == b["run"]:
        out.append(f"{winner} is the baseline and no other run beats it on this objective.")
    else:
        x = w["samples_per_s_x"] or 0.0
        if w["same_work_s"] is None:
            out.append(f"{winner} trained none of the {w['origin']} work.")
        else:
            trained = (f"{winner} trains the {w['origin']} work ({w['recorded_samples']:,} samples, "
                       f"{tokens_label(w['recorded_tokens'])} output tokens) in {_secs(w['same_work_s'])}")
            extrapolated = " (extrapolated: it trained less than that within its steps)" if w["extrapolated"] else ""
            if b["same_work_s"] is None:
                out.append(f"{trained}{extrapolated}; {b['run']} trained nothing, so no ratio to it.")
            else:
                cost_x = w["usd_per_1k_samples_x"]
                cost = (f" at {cost_x:.2f}x the cost per sample" if cost_x is not None
                        else " (no cost ratio: the GPUs have no price)")
                out.append(f"{trained} against {_secs(b['same_work_s'])} for {b['run']}: {x:.2f}x the samples/s"
                           f"{cost}{extrapolated}.")
        removed = _removed_bubble(by_name[b["run"]].metrics, by_name[winner].metrics)
        if removed:
            out.append(removed)
        if x > PUBLISHED_ASYNC_X and b["gen_used"] > 0:
            out.append(f"A {x:.1f}x lead is possible here because {b['run']}'s generation GPUs were busy "
                       f"{b['gen_busy']:.0%} of its run but used only {b['gen_used']:.0%} of their batch capacity (a "
                       f"long tail runs at small batches; at most {1 / b['gen_used']:.1f}x from filling them); "
                       f"published asynchronous systems report up to {PUBLISHED_ASYNC_X}x on their own workloads "
                       "(AReaL, arXiv 2505.24298).")
    out.append(_bottleneck(w))
    out.append(_work_change(w))
    return out


def _colocates(scheduler: str) -> bool:
    """Whether the scheduler runs both roles on the same GPUs, for a run folder whose metrics.json does not say
    (written before it did); False for a scheduler this install does not know."""
    try:
        return capabilities(lookup(scheduler)).colocates
    except ConfigError:
        return False


def _removed_bubble(base: dict[str, Any], best: dict[str, Any]) -> str:
    """The bubble (pool, part) whose share of the pool's GPU-time fell most from the baseline."""
    drops = []
    for pool in ("generation", "training"):
        for part in ("dependency", "skewness"):
            was = float(base.get("bubble_fraction", {}).get(pool, {}).get(part, 0.0))
            now = float(best.get("bubble_fraction", {}).get(pool, {}).get(part, 0.0))
            drops.append((was - now, pool, part, was, now))
    drop, pool, part, was, now = max(drops)
    if drop < 0.05:
        return ""
    head = "It removes most of the" if now <= was / 2 else "The bubble it shrinks most is the"
    return (f"{head} {part} bubble of the {pool} pool ({BUBBLE_WORDS[(pool, part)]}): "
            f"{was:.0%} of that pool's GPU-time before, {now:.0%} now.")


def _bottleneck(row: dict[str, Any]) -> str:
    gen, train = row["gen_busy"], row["train_used"]
    if row.get("colocated"):  # one pool of GPUs taking turns: its idle time is neither role's
        return (f"Its GPUs generate {gen:.0%} and train {train:.0%} of the run (one pool taking turns): the rest "
                "is switching between the roles and waiting inside a step (the bubbles below).")
    pool, busy = ("generation", gen) if gen >= train else ("training", train)
    if busy >= 0.7:
        return (f"Its bottleneck is the {pool} pool (busy {busy:.0%}; generation {gen:.0%}, training {train:.0%}): "
                f"more {pool} GPUs, not more of the other pool, would speed it up.")
    return (f"Neither pool is saturated (generation busy {gen:.0%}, training {train:.0%}): what remains is "
            "waiting between them (the bubbles below).")


def _work_change(row: dict[str, Any]) -> str:
    given = row["origin"]
    same = (f"trained {row['trained_samples']:,} samples ({row['samples_share']:.1%} of the {given}) and "
            f"{tokens_label(row['trained_tokens'])} tokens ({row['tokens_share']:.1%}), staleness mean "
            f"{row['stale_mean']:.2f}, max {row['stale_max']}")
    if not row["changed"]:
        return f"It {same}: the {given} length distribution, unchanged."
    return (f"It changes the trained work: it {same}; trained lengths p99 {row['trained_p99']:,.0f} against "
            f"{row['recorded_p99']:,.0f} {given} (max {row['trained_max']:,.0f} against {row['recorded_max']:,.0f}; "
            f"KS distance {row['ks']:.2f}).")


def _secs(s: float) -> str:
    """Seconds as the report's table prints them (three digits), in hours from an hour up."""
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{three_digits(s)} s"


def tokens_label(n: float) -> str:
    """A token count as every view prints it: 1.23M, 4.3k, 512."""
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else f"{n:.0f}"


def workload_origin(frame: pl.DataFrame) -> str:
    """How the runs' workload came to be, in one word for a sentence about all of them (:func:`table`'s
    ``origin``): "recorded", "described", or "given" where they differ."""
    kinds = set(frame["origin"]) if "origin" in frame.columns else {"recorded"}
    return kinds.pop() if len(kinds) == 1 else "given"


def alternatives(frame: pl.DataFrame, goal: str = "throughput") -> list[tuple[str, str]]:
    """The winner under other objectives: (objective in words, run and its figure)."""
    out, given = [], workload_origin(frame)
    best = "cheapest per sample" if goal == "cost" else "fastest"  # the goal the last two rank by
    same = f"on the {given} work (a run that changes it is left out)"
    for label, objective in ((f"cheapest per sample {same}", Objective(goal="cost")),
                             (f"{best} on-policy (staleness 0) {same}", Objective(goal=goal, max_staleness=0)),
                             (f"{best} of any trained work (a run may change it)",
                              Objective(goal=goal, same_distribution=False))):
        name, why = choose(frame, objective)
        if name is None:
            out.append((label, why))
            continue
        row = frame.filter(pl.col("run") == name).row(0, named=True)
        figure = (f"${row['usd_per_1k_samples']:.3f} per 1k samples" if objective.goal == "cost"
                  else f"{three_digits(row['samples_per_s'])} samples/s, {row['samples_per_s_x'] or 0:.2f}x")
        changed = (f", changes the trained work: {row['tokens_share']:.0%} of the {given} tokens"
                   if row["changed"] else "")
        out.append((label, f"{name} ({figure}{changed})"))
    return out
