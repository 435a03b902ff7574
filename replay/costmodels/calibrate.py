"""Calibration: fit cost-model factors to what was measured, and say how well they fit.

``fit_generation`` fits a recording's generation cost: per engine iteration where the recording has them
(format 1.3; :mod:`.iteration_fit`), else from its request timings (``fit_trace``: each request's time per
output token, first token to finish, against the mean number of requests running on its engine over its
decode iterations). ``fit_kernel_tables`` fits the roofline's efficiency factors per TP to measured
kernel tables (Vidur's and aiconfigurator's public H100 data) and writes them as a profile that
``--profile`` loads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from rltrace.replay.costmodels.generation import FittedGeneration
from rltrace.replay.costmodels.iteration import IterationModel, Linear
from rltrace.replay.costmodels.iteration_fit import fit_iterations, iteration_features
from rltrace.replay.workload import steady

from rltrace.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TraceFit:
    """A per-token latency fit ``seconds = base + per_seq x batch`` and its error on the requests it used."""

    base_s: float
    per_seq_s: float
    prefill_s: float
    requests: int
    median_abs_error: float
    """median |predicted - measured| / measured per-request time per token"""

    def __str__(self) -> str:
        return (f"{self.base_s * 1e3:.3f} ms + {self.per_seq_s * 1e6:.2f} us x batch per token (from "
                f"requests: no engine iterations recorded), prefill {self.prefill_s * 1e3:.1f} ms, from "
                f"{self.requests} requests (median error {self.median_abs_error:.1%})")


def _area_at(times: np.ndarray, value: np.ndarray, area: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Area under a step function (``value[i]`` from ``times[i]``) from its start to each t."""
    i = np.clip(np.searchsorted(times, t, side="right") - 1, 0, len(times) - 1)
    area_t: np.ndarray = area[i] + value[i] * (t - times[i])
    return area_t


def mean_running(engine: np.ndarray, start: np.ndarray, end: np.ndarray, base: float = 1.0,
                  slope: float = 0.0) -> np.ndarray:
    """For each request [start, end) on its engine, the mean number of requests running on that engine,
    averaged over its decode iterations: the integral of B / tau(B) over the integral of 1 / tau(B), with
    tau(B) = base + slope x B the time of one iteration at batch B (slope 0: a plain time average)."""
    out = np.empty(len(start))
    for e in np.unique(engine):
        mine = engine == e
        times = np.concatenate([start[mine], end[mine]])
        delta = np.concatenate([np.ones(mine.sum()), -np.ones(mine.sum())])
        order = np.argsort(times, kind="stable")
        times, count = times[order], np.cumsum(delta[order])
        rate = 1.0 / (base + slope * count)  # iterations per second at each stretch's batch
        areas = []
        for value in (count * rate, rate):
            area = np.concatenate([[0.0], np.cumsum(value[:-1] * np.diff(times))])
            areas.append(_area_at(times, value, area, end[mine]) - _area_at(times, value, area, start[mine]))
        out[mine] = areas[0] / areas[1]
    return out


def fit_line(batch: np.ndarray, seconds: np.ndarray, weight: np.ndarray | None = None) -> tuple[float, float, float]:
    """Weighted least squares ``seconds = base + slope x batch``: (base, slope, the slope's standard error;
    inf when the data cannot give one)."""
    w = np.sqrt(np.ones(len(batch)) if weight is None else weight.astype(float))
    design = np.column_stack([np.ones_like(batch, dtype=float), batch])
    coef, *_ = np.linalg.lstsq(design * w[:, None], seconds * w, rcond=None)
    dof = len(batch) - 2
    spread = float(np.sum(w**2 * (batch - np.average(batch, weights=w**2)) ** 2))
    if dof <= 0 or spread <= 0:
        return float(coef[0]), float(coef[1]), float("inf")
    residual = (seconds - design @ coef) * w
    return float(coef[0]), float(coef[1]), float(np.sqrt(residual @ residual / dof / spread))


def _batch_slope(batch: np.ndarray, per_token: np.ndarray, tokens: np.ndarray) -> tuple[float, float]:
    """Least squares ``per_token = base + slope x batch``, each request weighted by its token count (a
    3-token request's time per token is mostly its prefill stall), kept only when the slope is clearly
    measured (positive, at least three standard errors); else the mean per-token time over all tokens (total
    decode time over total tokens, the estimator that keeps mean generation time right).

    On a shared CPU, contention moves per-token time by 2x at a fixed batch; a slope fitted to that noise
    would extrapolate badly to other batch sizes.
    """
    base, slope, stderr = fit_line(batch, per_token, tokens)
    if slope > 0 and base >= 0 and slope >= 3 * stderr:
        return base, slope
    return float(np.average(per_token, weights=tokens)), 0.0


def fit_generation(requests: pl.DataFrame, iterations: pl.DataFrame | None = None, tp: int = 1,
                   step_weights: dict[int, float] | None = None) -> tuple[FittedGeneration, str]:
    """A recording's generation cost and a one-line account of the fit: per engine iteration when the
    recording has at least ten steady ones (:func:`.iteration_fit.fit_iterations`), else from its requests
    (:func:`fit_trace`). ``step_weights`` weighs steps (a bootstrap draw; absent steps weigh 0)."""
    if iterations is not None and iterations.height:
        fit = fit_iterations(iteration_features(iterations, requests), step_weights)
        if fit is not None:
            return fit.generation(tp), f"per engine iteration: {fit}"
    cost, report = fit_trace(requests, tp, step_weights)
    return cost, str(report)


def fit_trace(requests: pl.DataFrame, tp: int = 1,
              step_weights: dict[int, float] | None = None) -> tuple[FittedGeneration, TraceFit]:
    """Fit per-token decode latency against running batch size from a recording's requests (the fallback of
    :func:`fit_generation` for a recording without engine iterations).

    The first step is left out when the recording has more than two: its decode carries vLLM's start-up
    (17.7 ms per token in step 0 against 5.7-9.7 ms later, in one CI recording of the tiny RL example).
    ``step_weights`` weighs each step's requests (a bootstrap draw of steps; absent steps weigh 0)."""
    r = steady(requests.filter(pl.col("output_tokens") >= 2, pl.col("finish_ns") > pl.col("first_token_ns")))
    if r.height < 2:
        raise ConfigError("too few requests with two or more output tokens to fit decode latency from the trace")
    t0 = r["arrival_ns"].min()
    engine = r["engine"].rank("dense").to_numpy()
    first = (r["first_token_ns"] - t0).to_numpy() / 1e9
    finish = (r["finish_ns"] - t0).to_numpy() / 1e9
    sched = (r["scheduled_ns"].fill_null(r["arrival_ns"]) - t0).to_numpy() / 1e9
    tokens = r["output_tokens"].to_numpy() - 1
    per_token = (finish - first) / tokens
    batch = mean_running(engine, first, finish)
    weight = tokens.astype(np.float64)
    if step_weights is not None:  # the batch above still counts every request: they all ran
        weight = weight * r["step"].replace_strict(step_weights, default=0.0, return_dtype=pl.Float64).to_numpy()

    base, slope = _batch_slope(batch, per_token, weight)
    for _ in range(3):  # a request's time per token averages tau over its iterations, not over time: refit
        if slope <= 0:
            break
        batch = mean_running(engine, first, finish, base, slope)
        base, slope = _batch_slope(batch, per_token, weight)
    predicted = base + slope * batch
    error = float(np.median((np.abs(predicted - per_token) / per_token)[weight > 0]))
    # Prefill: the median wait from scheduling to first token (robust to a warm-up outlier).
    prefill = float(np.median(first - sched))
    fit = TraceFit(float(base), float(slope), max(prefill, 0.0), r.height, error)
    model = IterationModel(compute=Linear(base=fit.base_s, per_seq=fit.per_seq_s), memory=Linear())
    return FittedGeneration(model=model, recorded_tp=tp, prefill_base_s=fit.prefill_s), fit
