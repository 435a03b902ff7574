"""Generation cost fitted to a recording's own engine iterations (format 1.3's ``iterations`` table).

vLLM runs a generation as iterations: each one gives every running request one token, and the iteration that
admits a request also prefills its prompt. The replay engine charges exactly that (``.iteration``): per
iteration ``base + per_seq x batch + per_ctx x context_tokens``, and per admission wave ``prefill_base +
prefill_per_token x prompt_tokens``. So the fit happens where the engine's own cost lives, one row per
recorded iteration:

- the regressors are rebuilt from the requests: a request is in the iterations from the one that returned its
  first token to the one that returned its last (``first_token_ns`` and ``finish_ns`` against each
  iteration's end), so each iteration's batch, context (prompt plus tokens so far) and prefilled prompt
  tokens are exact, not averages over a request's life;
- the time is the iteration's cycle, from its start to the next iteration's start on the same engine (the
  engine's scheduling between iterations is part of generation time); the step's first cycle starts at the
  step's first request arrival and its last ends at its last finish, so the fitted iterations add up to the
  recorded generation time;
- least squares with a floor: a term that comes out negative is dropped and the rest refitted (no cost is
  negative), and the fitted times sum to the recorded ones on the fitted iterations (an intercept gives that by
  itself; without one it is a constraint of the fit): the as-recorded replay cannot be biased by the fit's
  shape, only by the engine's batching.

Per-request fits (``calibrate.fit_trace``) average an iteration time over each request's whole decode and
come out 6-15% short summed over a long-tailed recording's iterations, and 17-46% short where 4 or fewer
requests run (issue 25's outside job), which is where a long-tailed step spends most of its iterations.

``fit_iterations`` also takes per-step weights: the uncertainty of a replay (``replay/uncertainty.py``)
refits on steps drawn with replacement, so the fit's spread includes the machine's drift between steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from rltrace.replay.costmodels.generation import FittedGeneration
from rltrace.replay.costmodels.iteration import IterationModel, Linear
from rltrace.replay.workload import steady

TERMS = ("base", "per_seq", "per_ctx", "prefill_per_token", "prefill_base")
"""the fitted coefficients, in the order of the design matrix's columns"""
MIN_ITERATIONS = 10


@dataclass(frozen=True, slots=True)
class IterationFit:
    """Per-iteration cost fitted to recorded engine iterations, and how well it holds on them."""

    coef: dict[str, float]
    """seconds: ``base`` (per iteration), ``per_seq`` (per running request), ``per_ctx`` (per context token),
    ``prefill_per_token`` (per prompt token admitted), ``prefill_base`` (per iteration that admits)"""
    iterations: int
    steps: int
    median_abs_error: float
    """median |predicted - measured| / measured per iteration"""
    small_batch_error: float
    """(predicted - measured) / measured, summed over iterations of 4 or fewer running requests"""
    prefills_per_wave: float = 1.0
    """mean number of iterations that admitted requests, per step and engine: a step's prompts reach the
    engine over a few iterations (vLLM's engine core steps while the front end is still adding requests:
    3 per step in the tiny RL example), where the replay admits them as one wave"""
    beyond_longest_s: float = 0.0
    """mean seconds a wave ran past as many iterations as its longest request has tokens (the requests
    admitted an iteration or two late finish that much later: 2-3 iterations a step in the tiny RL example),
    which the replay, admitting the wave at once, adds to the wave's prefill"""

    def __str__(self) -> str:
        c = self.coef
        return (f"{c['base'] * 1e3:.3f} ms + {c['per_seq'] * 1e6:.2f} us x batch + {c['per_ctx'] * 1e9:.1f} ns x "
                f"context per iteration, prefill {c['prefill_base'] * 1e3:.2f} ms + "
                f"{c['prefill_per_token'] * 1e6:.2f} us x token, from {self.iterations} iterations of "
                f"{self.steps} steps, {self.prefills_per_wave:.1f} admitting iterations and "
                f"{self.beyond_longest_s * 1e3:.1f} ms past the longest request a wave "
                f"(median error {self.median_abs_error:.1%} per iteration, "
                f"{self.small_batch_error:+.1%} summed over batches <= 4)")

    def predict(self, features: pl.DataFrame) -> np.ndarray:
        """Seconds per iteration of ``features`` (from :func:`iteration_features`) under this fit."""
        predicted: np.ndarray = _design(features) @ np.array([self.coef[t] for t in TERMS])
        return predicted

    def generation(self, tp: int) -> FittedGeneration:
        """The replay engine's cost model for this fit, at the recorded tensor parallelism ``tp``."""
        c = self.coef
        model = IterationModel(compute=Linear(c["base"], c["per_seq"], c["per_ctx"]), memory=Linear())
        return FittedGeneration(model=model, recorded_tp=tp,
                                prefill_base_s=c["prefill_base"] * self.prefills_per_wave + self.beyond_longest_s,
                                prefill_per_token_s=c["prefill_per_token"])


def _within(totals: np.ndarray, lo: np.ndarray, hi: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per iteration, the sum of ``value`` over the requests whose span [lo, hi] covers it."""
    diff = np.zeros(len(totals) + 1)
    np.add.at(diff, lo, value)
    np.add.at(diff, hi + 1, -value)
    return np.cumsum(diff)[:-1]


def iteration_features(iterations: pl.DataFrame, requests: pl.DataFrame) -> pl.DataFrame:
    """One row per recorded iteration: ``step, engine, seconds, batch, context_tokens, prefill_tokens,
    prefills`` (the regressors of :func:`fit_iterations`). Iterations of an engine that ran no request with
    a first token are dropped."""
    frames = []
    reqs = requests.filter(pl.col("first_token_ns").is_not_null(), pl.col("finish_ns").is_not_null())
    for (engine,), it in iterations.sort("start_ns").group_by(["engine"], maintain_order=True):
        mine = reqs.filter(pl.col("engine") == engine)
        if mine.height == 0 or it.height == 0:
            continue
        ends = it["end_ns"].to_numpy()
        n = len(ends)
        # The iteration that returned a token ends at or after the token's timestamp (the engine stamps the
        # output while that iteration's step() call processes it).
        first = np.minimum(np.searchsorted(ends, mine["first_token_ns"].to_numpy()), n - 1)
        last = np.maximum(np.minimum(np.searchsorted(ends, mine["finish_ns"].to_numpy()), n - 1), first)
        prompt = mine["prompt_tokens"].to_numpy().astype(np.float64)
        batch = _within(ends, first, last, np.ones(len(first)))
        # context at iteration i: prompt + (i - first) tokens for each request in it
        context = _within(ends, first, last, prompt - first) + np.arange(n) * batch
        prefill_tokens = np.zeros(n)
        np.add.at(prefill_tokens, first, prompt)
        admits = np.zeros(n)
        np.add.at(admits, first, 1.0)
        # Cycle time: to the next iteration's start in the same step; a step's first cycle from its first
        # arrival, its last to its last finish (submission before, and output handling after, are generation).
        arrivals = mine.group_by("step").agg(pl.col("arrival_ns").min().alias("a"),
                                             pl.col("finish_ns").max().alias("f"),
                                             pl.col("output_tokens").max().alias("longest"))
        frame = it.select("step", "engine", "start_ns", "end_ns").with_columns(
            pl.Series("batch", batch), pl.Series("context_tokens", context),
            pl.Series("prefill_tokens", prefill_tokens), pl.Series("prefills", (admits > 0).astype(np.float64)))
        # An iteration no request was in (the engine stepping while a prompt waits) adds its time to the
        # cycle before it: dropped from the fit, its time is not.
        frame = frame.filter(pl.col("batch") > 0).join(arrivals, on="step", how="left").with_columns(
            pl.when(pl.int_range(pl.len()).over("step") == 0).then(pl.min_horizontal("a", "start_ns"))
            .otherwise("start_ns").alias("from_ns"),
            pl.col("start_ns").shift(-1).over("step").fill_null(pl.max_horizontal("f", "start_ns")).alias("to_ns"))
        # The replay runs a wave in as many iterations as its longest request has tokens; the engine ran more
        # (requests admitted one or two iterations late finish that much later): mark those last iterations.
        position = pl.int_range(pl.len()).over("step")
        extra = (pl.len().over("step") - pl.col("longest")).clip(lower_bound=0)
        frames.append(frame.select(
            "step", "engine", ((pl.col("to_ns") - pl.col("from_ns")) / 1e9).alias("seconds"),
            "batch", "context_tokens", "prefill_tokens", "prefills",
            (position >= pl.len().over("step") - extra).cast(pl.Float64).alias("beyond")))
    if not frames:
        return pl.DataFrame(schema={"step": pl.Int32, "engine": pl.String, "seconds": pl.Float64,
                                    "batch": pl.Float64, "context_tokens": pl.Float64,
                                    "prefill_tokens": pl.Float64, "prefills": pl.Float64, "beyond": pl.Float64})
    return pl.concat(frames)


def _design(f: pl.DataFrame) -> np.ndarray:
    """The regressors of :data:`TERMS`, one row per iteration."""
    return np.column_stack([np.ones(f.height), f["batch"].to_numpy(), f["context_tokens"].to_numpy(),
                            f["prefill_tokens"].to_numpy(), f["prefills"].to_numpy()])


def _nonnegative_lstsq(design: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Weighted least squares with every coefficient >= 0 whose weighted predictions sum to the weighted
    measurements: drop the most negative term and refit until none is negative (at most five terms, so the
    active set settles in a few solves). While the intercept (column 0) is in, plain least squares keeps the
    sum by itself; once it is dropped (a batch cost that grows faster than linearly pushes it below zero) the
    sum is a constraint of the fit (its KKT system), without which the line over-predicts the recorded
    generation time (7% on the tiny RL example with such a cost)."""
    active = list(range(design.shape[1]))
    w = np.sqrt(weight)
    while True:
        coef = np.zeros(design.shape[1])
        if active and 0 in active:
            sol, *_ = np.linalg.lstsq(design[:, active] * w[:, None], y * w, rcond=None)
            coef[active] = sol
        elif active:
            a = design[:, active]
            gram = (a * weight[:, None]).T @ a
            total = weight @ a
            kkt = np.block([[gram, total[:, None]], [total[None, :], np.zeros((1, 1))]])
            rhs = np.concatenate([(a * weight[:, None]).T @ y, [weight @ y]])
            sol, *_ = np.linalg.lstsq(kkt, rhs, rcond=None)
            coef[active] = sol[:-1]
        worst = int(np.argmin(coef))
        if coef[worst] >= 0:
            return coef
        active.remove(worst)


def fit_iterations(features: pl.DataFrame, step_weights: dict[int, float] | None = None) -> IterationFit | None:
    """Fit the per-iteration cost to ``features`` (from :func:`iteration_features`), leaving out the warm-up
    step as every trace fit does; None when fewer than ten iterations remain. ``step_weights`` weighs each
    step's iterations (a bootstrap draw of steps; a step absent from it gets weight 0)."""
    f = steady(features) if features.height else features
    if step_weights is not None:
        f = f.with_columns(pl.col("step").replace_strict(step_weights, default=0.0, return_dtype=pl.Float64)
                           .alias("_w")).filter(pl.col("_w") > 0)
    if f.height < MIN_ITERATIONS:
        return None
    y = f["seconds"].to_numpy()
    design = _design(f)
    weight = f["_w"].to_numpy() if "_w" in f.columns else np.ones(f.height)
    coef = _nonnegative_lstsq(design, y, weight)
    predicted = design @ coef
    small = f["batch"].to_numpy() <= 4
    small_error = float(predicted[small].sum() / y[small].sum() - 1) if small.any() and y[small].sum() > 0 else 0.0
    waves = f.group_by("step", "engine").agg(pl.col("prefills").sum(), (pl.col("seconds") * pl.col("beyond")).sum(),
                                              pl.col("_w").first() if "_w" in f.columns else pl.lit(1.0).alias("_w"))
    per_wave = float(np.average(waves["prefills"].to_numpy(), weights=waves["_w"].to_numpy()))
    beyond = float(np.average(waves["seconds"].to_numpy(), weights=waves["_w"].to_numpy()))
    return IterationFit(coef=dict(zip(TERMS, (float(c) for c in coef))), iterations=f.height,
                        steps=f["step"].n_unique(),
                        median_abs_error=float(np.median(np.abs(predicted - y) / np.maximum(y, 1e-12))),
                        small_batch_error=small_error, prefills_per_wave=max(per_wave, 1.0),
                        beyond_longest_s=beyond)
