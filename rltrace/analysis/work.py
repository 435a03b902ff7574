"""What each run trained, against the work it was given: the "same work" view behind the report's ratios.

A scheduler can change the work as well as the time: one that trains the first samples to finish, aborts
stale long trajectories, or ends before the stragglers are trained trains shorter (or fewer) samples than the
recorded workload holds, and its samples/s is not comparable to a synchronous run's. Here every run is put
on the same work: the recorded samples and output tokens of the workload it replayed (long ones included).

``same_work_s`` is when the run had trained as many samples *and* as many output tokens as the workload holds
(the first training step's end by which both cumulative counts reached it). A run that never got there within
its steps is extrapolated at its own rate over the run (``extrapolated``): it trained 60% of the recorded
tokens in 100 s, so the same work is put at 167 s. Requests come from ``requests.parquet``'s
``trained_step`` / ``staleness`` / ``recorded`` columns (replay/run.py); an older run folder without them
counts its finished requests as trained and every row as recorded (``known`` false)."""

from __future__ import annotations

import numpy as np
import polars as pl

from rltrace.analysis.runs import Run

KS_CHANGED = 0.05
"""a trained length distribution this far (Kolmogorov-Smirnov distance: the largest gap between the two CDFs)
from the recorded one is "changed"; a run that trains every recorded sample once scores 0"""
TOKENS_CHANGED = 0.02
"""trained samples or tokens this far (relative) from the recorded totals are a changed workload"""


def _trained(run: Run) -> tuple[pl.DataFrame, bool]:
    """The requests a run trained on (job, step of training, output_tokens, staleness) and whether the run
    says so itself (else: its finished requests)."""
    r = run.requests
    if "trained_step" in r.columns:
        t = r.filter(pl.col("trained_step") >= 0)
        return t.select(_job(t), pl.col("trained_step").alias("step"), "output_tokens", "staleness"), True
    t = r.filter(pl.col("finished")) if "finished" in r.columns else r
    return t.select(_job(t), "step", "output_tokens", pl.lit(None, pl.Int32).alias("staleness")), False


def _job(frame: pl.DataFrame) -> pl.Expr:
    return pl.col("job").cast(pl.Int32) if "job" in frame.columns else pl.lit(0, pl.Int32).alias("job")


def recorded_lengths(run: Run) -> np.ndarray:
    """Output tokens of every request of the workload the run replayed (not the responses drawn again)."""
    r = run.requests
    if "recorded" in r.columns:
        r = r.filter(pl.col("recorded"))
    if run.steps is not None and run.steps.height and "job" in r.columns:
        # a run of several jobs' workload that replayed only some (a one-job scheduler given --jobs): its work is
        # the jobs it ran
        r = r.filter(pl.col("job").is_in(run.steps["job"].unique().to_list()))
    return r["output_tokens"].to_numpy().astype(np.float64)


def trained_lengths(run: Run) -> np.ndarray:
    """Output tokens of every request the run trained on."""
    return _trained(run)[0]["output_tokens"].to_numpy().astype(np.float64)


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


def same_work_time(run: Run) -> tuple[float, bool]:
    """Seconds the run took (or, extrapolated, would take) to train the recorded samples and tokens."""
    trained, _ = _trained(run)
    makespan = float(run.metrics.get("makespan_s", 0.0))
    lengths = recorded_lengths(run)
    per_step = trained.group_by("job", "step").agg(pl.len().alias("samples"), pl.col("output_tokens").sum())
    if run.steps is not None and run.steps.height:
        per_step = per_step.join(run.steps.select(pl.col("job").cast(pl.Int32), pl.col("step").cast(pl.Int32),
                                                  "end_s"), on=["job", "step"], how="left")
    else:  # no step times: the run's end stands for every step's
        per_step = per_step.with_columns(pl.lit(makespan).alias("end_s"))
    per_step = per_step.with_columns(pl.col("end_s").fill_null(makespan)).sort("end_s")
    ends = per_step["end_s"].to_numpy()
    t_samples, x_samples = _reach(ends, np.cumsum(per_step["samples"].to_numpy()), len(lengths), makespan)
    t_tokens, x_tokens = _reach(ends, np.cumsum(per_step["output_tokens"].to_numpy()), float(lengths.sum()), makespan)
    return max(t_samples, t_tokens), x_samples or x_tokens


def work(runs: list[Run]) -> pl.DataFrame:
    """One row per run: the work it was given and the work it trained.

    recorded_samples, recorded_tokens, trained_samples, trained_tokens, samples_share and tokens_share (trained
    over recorded), recorded_p50/p99/max and trained_p50/p99/max (output tokens), ks (distance between the
    two length distributions), changed (the run trained a different workload: see KS_CHANGED,
    TOKENS_CHANGED), stale_mean / stale_max (versions behind at training), same_work_s, extrapolated, known."""
    rows = []
    for run in runs:
        trained, known = _trained(run)
        rec, got = recorded_lengths(run), trained["output_tokens"].to_numpy().astype(np.float64)
        same, extrapolated = same_work_time(run)
        stale = trained["staleness"].drop_nulls().to_numpy()
        recorded_stale = run.metrics.get("staleness", {})
        samples_share = len(got) / len(rec) if len(rec) else 0.0
        tokens_share = float(got.sum() / rec.sum()) if rec.sum() else 0.0
        ks = ks_distance(got, rec)
        rows.append({
            "run": run.name, "recorded_samples": len(rec), "recorded_tokens": int(rec.sum()),
            "trained_samples": len(got), "trained_tokens": int(got.sum()),
            "samples_share": samples_share, "tokens_share": tokens_share,
            **_quantiles("recorded", rec), **_quantiles("trained", got), "ks": ks,
            "changed": bool(ks > KS_CHANGED or abs(samples_share - 1) > TOKENS_CHANGED
                            or abs(tokens_share - 1) > TOKENS_CHANGED),
            "stale_mean": float(stale.mean()) if len(stale) else float(recorded_stale.get("mean", 0.0)),
            "stale_max": int(stale.max()) if len(stale) else int(recorded_stale.get("max", 0)),
            "same_work_s": same, "extrapolated": extrapolated, "known": known,
        })
    return pl.DataFrame(rows)


def _quantiles(prefix: str, a: np.ndarray) -> dict[str, float]:
    if not len(a):
        return {f"{prefix}_p50": 0.0, f"{prefix}_p99": 0.0, f"{prefix}_max": 0.0}
    p50, p99 = np.percentile(a, [50, 99])
    return {f"{prefix}_p50": float(p50), f"{prefix}_p99": float(p99), f"{prefix}_max": float(a.max())}


def trained_ccdf(runs: list[Run], points: int = 200) -> pl.DataFrame:
    """run, tokens, ccdf: P(trained length > tokens) per run, plus the recorded workload's as run
    "recorded" (one per distinct workload: "recorded (NAME)" where runs replayed different ones). At most
    ``points`` log-spaced lengths each, the 8 longest always kept (the tail)."""
    parts = []
    seen: dict[tuple[int, float], str] = {}
    for run in runs:
        rec = recorded_lengths(run)
        key = (len(rec), float(rec.sum()))
        if key not in seen:
            seen[key] = "recorded" if not seen else f"recorded ({run.name})"
            parts.append(_ccdf(seen[key], rec, points))
        parts.append(_ccdf(run.name, trained_lengths(run), points))
    return pl.concat(parts)


def _ccdf(name: str, values: np.ndarray, points: int) -> pl.DataFrame:
    a = np.sort(values)
    if not len(a):
        return pl.DataFrame(schema={"run": pl.String, "tokens": pl.Float64, "ccdf": pl.Float64})
    distinct = np.unique(a)
    xs = distinct if len(distinct) <= points else np.unique(
        np.concatenate([np.geomspace(max(distinct[0], 1.0), distinct[-1], points), distinct[-8:]]))
    return pl.DataFrame({"run": name, "tokens": xs, "ccdf": 1.0 - np.searchsorted(a, xs, side="right") / len(a)})
