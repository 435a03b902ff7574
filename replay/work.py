"""The work a replay trained against the work it was given, and its figures on the same work.

A scheduler can change the work as well as the time: one that trains the first samples to finish, aborts stale
long trajectories, or ends before the stragglers are trained trains shorter (or fewer) samples than the recorded
workload holds, and its samples/s is not comparable to a synchronous run's. Every replay is therefore also put on
the same work: the recorded samples and output tokens of the workload it replayed (long ones included).

``same_work_s`` is when the run had trained as many samples *and* as many output tokens as the workload holds (the
first training step's end by which both cumulative counts reached it). A run that never got there within its steps
is extrapolated at its own rate over the run (``extrapolated``): it trained 60% of the recorded tokens in 100 s, so
the same work is put at 167 s. Requests carry ``trained_step`` / ``staleness`` / ``recorded`` (replay/run.py); a
frame without them (an older run folder) counts its finished requests as trained and every row as recorded.

:func:`same_work` gives the figures every view shows (the terminal table, ``--json``, the report, sweep rows and
advise's target); rltrace.analysis.work builds its per-run tables on the functions here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

KS_CHANGED = 0.05
"""a trained length distribution this far (Kolmogorov-Smirnov distance: the largest gap between the two CDFs)
from the recorded one is "changed"; a run that trains every recorded sample once scores 0"""
TOKENS_CHANGED = 0.02
"""trained samples or tokens this far (relative) from the recorded totals are a changed workload"""
SAME_WORK_KEYS = ("samples_per_s", "usd_per_1k_samples", "same_work_s", "changed", "extrapolated")
"""what :func:`same_work` gives each run (``metrics.json``'s ``same_work``)"""


def trained(requests: pl.DataFrame) -> tuple[pl.DataFrame, bool]:
    """The requests a run trained on (job, step of training, output_tokens, staleness) and whether the run says
    so itself (else: its finished requests)."""
    r = requests
    if "trained_step" in r.columns:
        t = r.filter(pl.col("trained_step") >= 0)
        return t.select(_job(t), pl.col("trained_step").alias("step"), "output_tokens", "staleness"), True
    t = r.filter(pl.col("finished")) if "finished" in r.columns else r
    return t.select(_job(t), "step", "output_tokens", pl.lit(None, pl.Int32).alias("staleness")), False


def _job(frame: pl.DataFrame) -> pl.Expr:
    return pl.col("job").cast(pl.Int32) if "job" in frame.columns else pl.lit(0, pl.Int32).alias("job")


def recorded_lengths(requests: pl.DataFrame, steps: pl.DataFrame | None) -> np.ndarray:
    """Output tokens of every request of the workload the run replayed (not the responses drawn again)."""
    r = requests
    if "recorded" in r.columns:
        r = r.filter(pl.col("recorded"))
    if steps is not None and steps.height and "job" in r.columns:
        # a run of several jobs' workload that replayed only some (a one-job scheduler given --jobs): its work is
        # the jobs it ran
        r = r.filter(pl.col("job").is_in(steps["job"].unique().to_list()))
    return r["output_tokens"].to_numpy().astype(np.float64)


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Largest gap between the two empirical CDFs (0: same distribution, 1: disjoint); 0 when either is empty."""
    if not len(a) or not len(b):
        return 0.0
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b)).max())


def _reach(ends: np.ndarray, cumulative: np.ndarray, target: float, makespan: float) -> tuple[float, bool]:
    """The first step end by which ``cumulative`` reached ``target``; else extrapolated at the run's rate."""
    hit = np.flatnonzero(cumulative >= target - 1e-9)
    if hit.size:
        return float(ends[hit[0]]), False
    done = float(cumulative[-1]) if len(cumulative) else 0.0
    return (makespan * target / done if done > 0 else float("inf")), True


def same_work_time(requests: pl.DataFrame, steps: pl.DataFrame | None, makespan_s: float) -> tuple[float, bool]:
    """Seconds the run took (or, extrapolated, would take) to train the recorded samples and tokens, and whether
    it was extrapolated."""
    done, _ = trained(requests)
    lengths = recorded_lengths(requests, steps)
    per_step = done.group_by("job", "step").agg(pl.len().alias("samples"), pl.col("output_tokens").sum())
    if steps is not None and steps.height:
        per_step = per_step.join(steps.select(pl.col("job").cast(pl.Int32), pl.col("step").cast(pl.Int32), "end_s"),
                                 on=["job", "step"], how="left")
    else:  # no step times: the run's end stands for every step's
        per_step = per_step.with_columns(pl.lit(makespan_s).alias("end_s"))
    per_step = per_step.with_columns(pl.col("end_s").fill_null(makespan_s)).sort("end_s")
    ends = per_step["end_s"].to_numpy()
    t_samples, x_samples = _reach(ends, np.cumsum(per_step["samples"].to_numpy()), len(lengths), makespan_s)
    t_tokens, x_tokens = _reach(ends, np.cumsum(per_step["output_tokens"].to_numpy()), float(lengths.sum()),
                                makespan_s)
    return max(t_samples, t_tokens), x_samples or x_tokens


def changed(recorded: np.ndarray, got: np.ndarray) -> tuple[bool, float]:
    """Whether the trained lengths ``got`` are another workload than ``recorded`` (KS_CHANGED, TOKENS_CHANGED), and
    their KS distance."""
    ks = ks_distance(got, recorded)
    samples_share = len(got) / len(recorded) if len(recorded) else 0.0
    tokens_share = float(got.sum() / recorded.sum()) if recorded.sum() else 0.0
    return bool(ks > KS_CHANGED or abs(samples_share - 1) > TOKENS_CHANGED
                or abs(tokens_share - 1) > TOKENS_CHANGED), ks


def rates(samples: int, seconds: float, makespan_s: float, cost_usd: float) -> tuple[float, float | None]:
    """Samples/s and $ per 1k samples of ``samples`` trained in ``seconds`` by a run that cost ``cost_usd`` over
    ``makespan_s`` (its GPUs cost the same per second whatever they do); 0 and None where no time reaches the work
    (``seconds`` infinite) or the run has no makespan."""
    rate = samples / seconds if seconds > 0 and np.isfinite(seconds) else 0.0
    dollars = (cost_usd / makespan_s * seconds / samples * 1000
               if makespan_s > 0 and samples and np.isfinite(seconds) else None)
    return rate, dollars


def same_work(requests: pl.DataFrame, steps: pl.DataFrame | None, makespan_s: float,
              cost_usd: float) -> dict[str, float | bool | None]:
    """The run's figures on the recorded work (:data:`SAME_WORK_KEYS`): samples/s (the recorded samples over
    ``same_work_s``), $ per 1k samples (the run's cost per second over that time: its GPUs cost the same per second
    whatever they do; None without a makespan), the time (None, and $ per 1k samples None, where the run trained
    nothing: no time reaches the work), whether it trained other work and whether the time was extrapolated past
    what it trained."""
    recorded = recorded_lengths(requests, steps)
    got = trained(requests)[0]["output_tokens"].to_numpy().astype(np.float64)
    seconds, extrapolated = same_work_time(requests, steps, makespan_s)
    rate, dollars = rates(len(recorded), seconds, makespan_s, cost_usd)
    return {"samples_per_s": rate, "usd_per_1k_samples": dollars,
            "same_work_s": seconds if np.isfinite(seconds) else None,
            "changed": changed(recorded, got)[0], "extrapolated": extrapolated}
