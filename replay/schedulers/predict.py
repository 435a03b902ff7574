"""Predictors: what a policy may assume about output lengths that are not generated yet.

A scheduler's :class:`~.view.View` reveals a request's length only once it has finished. Policies that act on
lengths before then ask one of these, each with its accuracy a parameter of the scheduler's own config:

- :class:`RecentLengths`: quantiles of the lengths of recently finished requests (RollArt's recent median,
  StreamRL's P50/P90 estimates), with a stated prior until anything has finished;
- :class:`LongTailRanker`: marks the predicted longest share of a batch at a stated recall, a model of
  StreamRL's output-length ranker (the paper measures 87% recall on the longest 20%). It reads the true
  lengths to place its hits and misses, and returns only its marks;
- :class:`Oracle`: the true lengths, for upper bounds only; :meth:`.view.View.oracle` marks the run's metrics.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import numpy as np

DEFAULT_PRIOR_TOKENS = 1024
"""output tokens assumed before any response has finished, for a job whose source records no length cap (an
assumption, not a measurement: each scheduler's config can state its own)"""


def prior_tokens(configured: int, cap: int | None) -> float:
    """The typical length to assume before anything has finished: ``configured`` if set (> 0), else half the
    job's length cap (responses spread below it), else :data:`DEFAULT_PRIOR_TOKENS`."""
    if configured > 0:
        return float(configured)
    return cap / 2 if cap else float(DEFAULT_PRIOR_TOKENS)


class RecentLengths:
    """Output lengths of the last ``window`` finished requests; quantiles of them as estimates (``prior`` x the
    quantile's ratio to the median, up to the length cap, while none has finished)."""

    __slots__ = ("_seen", "cap", "prior")

    def __init__(self, window: int, prior: float, cap: int | None = None) -> None:
        self._seen: deque[int] = deque(maxlen=max(window, 1))
        self.prior, self.cap = prior, cap

    def observe(self, tokens: int) -> None:
        """A request finished with ``tokens`` output tokens."""
        self._seen.append(tokens)

    def __len__(self) -> int:
        return len(self._seen)

    def quantiles(self, qs: Sequence[float]) -> list[float]:
        """The ``qs`` (0-100) percentiles of the recent lengths. Before any finish: the prior as the median
        and the cap (or twice the prior) as the 90th percentile and above, linearly between."""
        if self._seen:
            return [float(v) for v in np.percentile(self._seen, list(qs))]
        top = float(self.cap) if self.cap else 2 * self.prior
        return [self.prior * q / 50 if q <= 50 else self.prior + (top - self.prior) * min((q - 50) / 40, 1.0)
                for q in qs]

    def median(self) -> float:
        """The median recent length (``statistics.median`` semantics), or the prior."""
        if not self._seen:
            return self.prior
        s = sorted(self._seen)
        mid = len(s) // 2
        return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


class LongTailRanker:
    """Marks the predicted longest ``fraction`` of a batch: each truly-long request is marked with
    probability ``recall``; the misses' marks fall on regular requests at random (false positives), so the
    mark count stays ceil(fraction x n). Seeded: the same run draws the same marks."""

    __slots__ = ("_lengths", "recall", "rng")

    def __init__(self, lengths: Sequence[int], *, recall: float, rng: np.random.Generator) -> None:
        self._lengths, self.recall, self.rng = lengths, recall, rng

    def long_tail(self, rids: Sequence[int], fraction: float) -> np.ndarray:
        """Boolean mask over ``rids``: predicted long-tail."""
        n = len(rids)
        k = max(1, math.ceil(fraction * n))
        lengths = np.array([self._lengths[r] for r in rids])
        truth = np.zeros(n, dtype=bool)
        truth[np.argsort(-lengths, kind="stable")[:k]] = True
        hit = truth & (self.rng.random(n) < self.recall)
        missing = k - hit.sum()
        others = np.flatnonzero(~truth)  # the misses' slots go to regular samples (false positives)
        hit[self.rng.choice(others, size=min(missing, len(others)), replace=False)] = True
        return hit

    def order(self, rids: Sequence[int]) -> list[int]:
        """Admission order within a group: a ranker that only marks the tail orders nothing (random)."""
        order: list[int] = self.rng.permutation(np.asarray(rids)).tolist()
        return order


class Oracle:
    """True output lengths, including of requests not generated yet: for upper bounds only."""

    __slots__ = ("_lengths",)

    def __init__(self, lengths: Sequence[int]) -> None:
        self._lengths = lengths

    def output(self, rid: int) -> int:
        return self._lengths[rid]

    def long_tail(self, rids: Sequence[int], fraction: float) -> np.ndarray:
        """The true longest ``fraction`` of ``rids`` (ties: earlier first)."""
        k = max(1, math.ceil(fraction * len(rids)))
        mask = np.zeros(len(rids), dtype=bool)
        mask[np.argsort(-np.array([self._lengths[r] for r in rids]), kind="stable")[:k]] = True
        return mask

    def order(self, rids: Sequence[int]) -> list[int]:
        """Longest first (ties: earlier first)."""
        return sorted(rids, key=lambda r: -self._lengths[r])
