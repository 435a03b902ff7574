"""What each run trained, against the work it was given: the "same work" view behind the report's ratios.

The definitions (what "same work" is, when a run changed it, how a short run is extrapolated) live with the
replay that computes them for every run (rltrace.replay.work); here they are tables over run folders. A run
folder written without ``trained_step`` / ``recorded`` columns counts its finished requests as trained and every
row as recorded (``known`` false)."""

from __future__ import annotations

import numpy as np
import polars as pl

from rltrace.analysis.runs import Run
from rltrace.replay.work import changed, ks_distance, recorded_lengths, same_work_time, trained

__all__ = ["ks_distance", "origin", "run_recorded_lengths", "run_same_work_time", "trained_ccdf", "trained_lengths",
           "work"]


_ORIGINS = {"description": "described", "job list": "given"}


def origin(config: dict[str, object]) -> str:
    """How a run's workload came to be, as every view words its unchanged work ("as recorded", "as described"):
    from config.json's ``source``; a job list's, from its jobs' when they agree, else "given" (a run folder
    without a source: "recorded")."""
    source = config.get("source")
    if not isinstance(source, dict):
        return "recorded"
    jobs = source.get("jobs")
    if source.get("kind") == "job list" and isinstance(jobs, list):
        kinds = {_ORIGINS.get(j.get("kind", ""), "recorded") if isinstance(j, dict) else "" for j in jobs}
        return kinds.pop() if len(kinds) == 1 else "given"
    return _ORIGINS.get(source.get("kind", ""), "recorded")


def run_recorded_lengths(run: Run) -> np.ndarray:
    """Output tokens of every request of the workload the run replayed (not the responses drawn again)."""
    return recorded_lengths(run.requests, run.steps)


def trained_lengths(run: Run) -> np.ndarray:
    """Output tokens of every request the run trained on."""
    return trained(run.requests)[0]["output_tokens"].to_numpy().astype(np.float64)


def run_same_work_time(run: Run) -> tuple[float, bool]:
    """Seconds the run took (or, extrapolated, would take) to train the recorded samples and tokens."""
    return same_work_time(run.requests, run.steps, float(run.metrics.get("makespan_s", 0.0)))


def work(runs: list[Run]) -> pl.DataFrame:
    """One row per run: the work it was given and the work it trained.

    recorded_samples, recorded_tokens, trained_samples, trained_tokens, samples_share and tokens_share (trained
    over recorded), recorded_p50/p99/max and trained_p50/p99/max (output tokens), ks (distance between the
    two length distributions), changed (the run trained a different workload: see rltrace.replay.work's
    KS_CHANGED, TOKENS_CHANGED), stale_mean / stale_max (versions behind at training), same_work_s, extrapolated,
    known."""
    rows = []
    for run in runs:
        done, known = trained(run.requests)
        rec, got = run_recorded_lengths(run), done["output_tokens"].to_numpy().astype(np.float64)
        same, extrapolated = run_same_work_time(run)
        is_changed, ks = changed(rec, got)
        stale = done["staleness"].drop_nulls().to_numpy()
        recorded_stale = run.metrics.get("staleness", {})
        samples_share = len(got) / len(rec) if len(rec) else 0.0
        tokens_share = float(got.sum() / rec.sum()) if rec.sum() else 0.0
        rows.append({
            "run": run.name, "recorded_samples": len(rec), "recorded_tokens": int(rec.sum()),
            "trained_samples": len(got), "trained_tokens": int(got.sum()),
            "samples_share": samples_share, "tokens_share": tokens_share,
            **_quantiles("recorded", rec), **_quantiles("trained", got), "ks": ks,
            "changed": is_changed,
            "stale_mean": float(stale.mean()) if len(stale) else float(recorded_stale.get("mean", 0.0)),
            "stale_max": int(stale.max()) if len(stale) else int(recorded_stale.get("max", 0)),
            # None where no time reaches the work (the run trained nothing), as the replay's metrics say it
            "same_work_s": same if np.isfinite(same) else None, "extrapolated": extrapolated, "known": known,
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
        rec = run_recorded_lengths(run)
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
