"""Token-length distributions for synthetic workloads.

Every distribution is defined by its quantile function ``quantile(u)``. Sampling goes through a Gaussian
copula: a standard-normal latent ``z`` per sample is mapped to ``quantile(Phi(z))``. That keeps each
distribution's marginal exact while letting samples of one prompt share part of their latent
(``group_correlation``): GRPO responses to a hard prompt tend to all be long.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import polars as pl

from rltrace.errors import ConfigError


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF, vectorised (Abramowitz & Stegun 7.1.26 erf, |error| < 1.5e-7)."""
    x = np.abs(z) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-x * x)
    cdf: np.ndarray = 0.5 * (1.0 + np.sign(z) * erf)
    return cdf


_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
      -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
      -1.328068155288572e01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
      4.374664141464968e00, 2.938163982698783e00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)


def normal_ppf(u: np.ndarray) -> np.ndarray:
    """Standard normal inverse CDF, vectorised (Acklam's rational approximation, relative error < 1.2e-9)."""
    u = np.clip(np.asarray(u, dtype=float), 1e-300, 1 - 1e-16)
    out = np.empty_like(u)
    low, high = u < 0.02425, u > 1 - 0.02425
    mid = ~(low | high)
    q = u[mid] - 0.5
    r = q * q
    num = ((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5]
    den = ((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1.0
    out[mid] = num * q / den
    for mask, sign, p in ((low, 1.0, u[low]), (high, -1.0, 1.0 - u[high])):
        q = np.sqrt(-2.0 * np.log(p))
        num = ((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5]
        den = (((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1.0
        out[mask] = sign * num / den
    return out


class LengthDist(Protocol):
    """A distribution of token counts (before truncation and rounding)."""

    def quantile(self, u: np.ndarray) -> np.ndarray:
        """Inverse CDF at probabilities ``u`` in (0, 1)."""
        ...


@dataclass(frozen=True, slots=True)
class Lognormal:
    """Lognormal with the given median and log-space standard deviation ``sigma``."""

    median: float
    sigma: float

    def quantile(self, u: np.ndarray) -> np.ndarray:
        return self.median * np.exp(self.sigma * normal_ppf(np.atleast_1d(u)))

    def cdf(self, x: np.ndarray) -> np.ndarray:
        x = np.maximum(np.asarray(x, dtype=float), 1e-300)
        return normal_cdf(np.log(x / self.median) / self.sigma)


@dataclass(frozen=True, slots=True)
class LognormalPareto:
    """A lognormal body mixed with a Pareto tail.

    With probability ``1 - tail_fraction`` a length comes from the body, otherwise from a Pareto(``alpha``)
    starting at the body's ``tail_start_quantile`` quantile. Heavier tails (smaller ``alpha``) give the
    25-32x max/median skew reported for reasoning-model rollouts.
    """

    median: float
    sigma: float
    tail_fraction: float
    alpha: float
    tail_start_quantile: float = 0.9

    @property
    def body(self) -> Lognormal:
        return Lognormal(self.median, self.sigma)

    @property
    def tail_start(self) -> float:
        return float(self.body.quantile(np.array([self.tail_start_quantile]))[0])

    def cdf(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        xm = self.tail_start
        pareto = np.where(x > xm, 1.0 - (xm / np.maximum(x, xm)) ** self.alpha, 0.0)
        return (1.0 - self.tail_fraction) * self.body.cdf(x) + self.tail_fraction * pareto

    def quantile(self, u: np.ndarray) -> np.ndarray:
        # The mixture has no closed-form inverse. Bisect it once on a fixed grid, uniform in logit(u), and
        # interpolate log(x): O(grid) CDF evaluations instead of O(samples), and smooth enough in those
        # coordinates that the interpolation error is far below sampling noise (tested: cdf(quantile(u)) ~ u).
        grid_u, grid_logx = self._grid()
        u = np.clip(np.atleast_1d(np.asarray(u, dtype=float)), grid_u[0], grid_u[-1])
        x: np.ndarray = np.exp(np.interp(_logit(u), _logit(grid_u), grid_logx))
        return x

    def _grid(self, points: int = 4097) -> tuple[np.ndarray, np.ndarray]:
        u = 1.0 / (1.0 + np.exp(-np.linspace(-23.0, 27.0, points)))  # 1e-10 .. 1 - 2e-12
        lo = np.full(u.shape, np.log(self.median) - 12 * self.sigma)
        # a length past 1e18 tokens is one past any cap: a near-zero alpha must not make the bound infinite
        hi = np.full(u.shape, min(np.log(self.tail_start) + 60.0 / self.alpha, LOG_LONGEST))
        for _ in range(64):
            mid = 0.5 * (lo + hi)
            below = self.cdf(np.exp(mid)) < u
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        return u, 0.5 * (lo + hi)


LOG_LONGEST = math.log(1e18)
"""the log of the longest length a distribution's quantiles are searched up to (every cap is far below it)"""


def _logit(u: np.ndarray) -> np.ndarray:
    logit: np.ndarray = np.log(u) - np.log1p(-u)
    return logit


@dataclass(frozen=True, slots=True)
class Empirical:
    """Lengths resampled from observed values (e.g. a production request trace), optionally scaled."""

    values: np.ndarray
    scale: float = 1.0

    def quantile(self, u: np.ndarray) -> np.ndarray:
        x: np.ndarray = np.quantile(self.values, np.atleast_1d(u), method="inverted_cdf") * self.scale
        return x

    @classmethod
    def from_file(cls, path: str | Path, column: str, *, scale: float = 1.0) -> Empirical:
        """Read one numeric column of a CSV, JSON-lines or Parquet file."""
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: no such file (empirical length source)")
        try:
            if p.suffix == ".parquet":
                frame = pl.read_parquet(p, columns=[column])
            elif p.suffix in (".jsonl", ".ndjson"):
                frame = pl.read_ndjson(p).select(column)
            else:
                frame = pl.read_csv(p, columns=[column])
        except pl.exceptions.ColumnNotFoundError:
            raise ConfigError(f"{p}: no column {column!r}") from None
        except (pl.exceptions.PolarsError, OSError) as e:
            raise ConfigError(f"{p}: cannot read ({str(e).splitlines()[0]})") from None
        try:
            values = frame.get_column(column).drop_nulls().cast(pl.Float64).to_numpy()
        except pl.exceptions.PolarsError:  # text that is not a number
            raise ConfigError(f"{p}: column {column!r} must hold non-negative numbers") from None
        if values.size == 0:
            raise ConfigError(f"{p}: column {column!r} holds no values")
        if not np.isfinite(values).all() or (values < 0).any():
            raise ConfigError(f"{p}: column {column!r} must hold non-negative numbers")
        if not (values > 0).any():  # every length would be drawn as 0, then clipped to 1 token (or scaled from 1)
            raise ConfigError(f"{p}: column {column!r} holds only zeros: no length to draw")
        return cls(np.sort(values), scale)


def correlated_uniforms(rng: np.random.Generator, groups: int, per_group: int, correlation: float) -> np.ndarray:
    """``groups x per_group`` uniforms whose normal latents correlate ``correlation`` within a group."""
    if not 0.0 <= correlation < 1.0:
        raise ConfigError(f"group_correlation must be in [0, 1), got {correlation}")
    shared = rng.standard_normal((groups, 1))
    own = rng.standard_normal((groups, per_group))
    z = np.sqrt(correlation) * shared + np.sqrt(1.0 - correlation) * own
    u: np.ndarray = np.clip(normal_cdf(z), 1e-12, 1 - 1e-12)
    return u
