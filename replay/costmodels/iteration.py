"""Decode iterations in closed form: the engine's hot path.

Between two events a generation instance runs a constant batch ``B``; each iteration adds ``B`` tokens to the
total context, so iteration ``j`` sees ``C0 + j x B`` context tokens. Every cost model here reduces one
iteration to ``max(compute(B, C), memory(B, C)) + extra(B)`` with all three terms linear in their arguments
(the roofline does, and so does a per-token latency fitted from a trace). The sum over ``n`` iterations of
the larger of two lines is then an arithmetic series on each side of their crossing: no per-token loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Linear:
    """``base + per_seq x batch + per_ctx x context_tokens`` seconds."""

    base: float = 0.0
    per_seq: float = 0.0
    per_ctx: float = 0.0

    def scaled(self, factor: float) -> Linear:
        return Linear(self.base * factor, self.per_seq * factor, self.per_ctx * factor)


def _series(a: float, b: float, first: int, last: int) -> float:
    """Sum of ``a + b j`` for integer j in [first, last)."""
    count = last - first
    return a * count + b * (first + last - 1) * count / 2 if count > 0 else 0.0


@dataclass(frozen=True, slots=True)
class IterationModel:
    """One decode iteration: ``max(compute, memory) + extra``, each term a :class:`Linear`."""

    compute: Linear
    memory: Linear
    extra: Linear = Linear()
    memory_by_batch: tuple[float, ...] = ()
    """seconds added to the memory term at each batch size (index = batch; the last entry beyond): terms not
    linear in the batch, e.g. the MoE experts a batch touches or CUDA-graph padding; () for none"""
    _k: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The nine coefficients as one flat tuple: ``seconds`` runs once per engine event.
        c, m, e = self.compute, self.memory, self.extra
        object.__setattr__(self, "_k", (c.base, c.per_seq, c.per_ctx, m.base, m.per_seq, m.per_ctx,
                                        e.base, e.per_seq, e.per_ctx))

    @classmethod
    def fixed(cls, seconds: float) -> IterationModel:
        """Every iteration takes ``seconds`` whatever the batch: the closed-form tests' model."""
        return cls(compute=Linear(seconds), memory=Linear(seconds))

    def scaled(self, factor: float) -> IterationModel:
        """Every term times ``factor`` (another TP degree or GPU kind of a fitted model)."""
        return IterationModel(self.compute.scaled(factor), self.memory.scaled(factor), self.extra.scaled(factor),
                              tuple(v * factor for v in self.memory_by_batch))

    def by_batch(self, batch: int) -> float:
        """The :attr:`memory_by_batch` seconds at ``batch``."""
        table = self.memory_by_batch
        return table[min(batch, len(table) - 1)] if table else 0.0


    def iteration(self, batch: int, context_tokens: float) -> float:
        """Seconds for one iteration of ``batch`` sequences holding ``context_tokens`` in total."""
        return self.seconds(batch, context_tokens, 1)

    def seconds(self, batch: int, context_tokens: float, iterations: int) -> float:
        """Seconds for ``iterations`` iterations starting at ``context_tokens``, growing by ``batch`` each."""
        n = iterations
        if n <= 0:
            return 0.0
        cb, cs, cc, mb, ms, mc, eb, es, ec = self._k
        # Each term as a line in the iteration index j: a + b j. Sum over j < n of a + b j = n a + b n(n-1)/2.
        a1, b1 = cb + cs * batch + cc * context_tokens, cc * batch
        a2, b2 = mb + ms * batch + mc * context_tokens + self.by_batch(batch), mc * batch
        tri = n * (n - 1) / 2
        extra = n * (eb + es * batch + ec * context_tokens) + ec * batch * tri
        if b1 == b2:
            return extra + n * (max(a2, a1)) + b1 * tri
        # compute - memory = (a1 - a2) + (b1 - b2) j changes sign once, at j = cross.
        k = min(max(math.ceil((a2 - a1) / (b1 - b2)), 0), n)
        if b1 > b2:  # memory dominates before k, compute from k on
            return extra + _series(a2, b2, 0, k) + _series(a1, b1, k, n)
        return extra + _series(a1, b1, 0, k) + _series(a2, b2, k, n)

    def iterations_within(self, batch: int, context_tokens: float, seconds: float, limit: int) -> int:
        """The most iterations (at most ``limit``) that finish within ``seconds``."""
        if seconds <= 0 or limit <= 0:
            return 0
        if self.seconds(batch, context_tokens, limit) <= seconds:
            return limit
        lo, hi = 0, limit  # seconds(lo) <= budget < seconds(hi); the sum is increasing in n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.seconds(batch, context_tokens, mid) <= seconds:
                lo = mid
            else:
                hi = mid
        return lo


@dataclass(frozen=True, slots=True)
class PrefillModel:
    """Prefill of T tokens in P prompts: ``max(c1 T + c2 T^2 / P, m0 + m1 T) + e0 + e1 T`` seconds
    (linear GEMM and KV-write terms, causal attention quadratic in each prompt's length)."""

    per_token: float = 0.0
    per_token_sq_per_prompt: float = 0.0
    memory_base: float = 0.0
    memory_per_token: float = 0.0
    extra_base: float = 0.0
    extra_per_token: float = 0.0

    def seconds(self, tokens: int, prompts: int) -> float:
        if tokens <= 0:
            return 0.0
        compute = self.per_token * tokens + self.per_token_sq_per_prompt * tokens * tokens / prompts
        memory = self.memory_base + self.memory_per_token * tokens
        return (max(memory, compute)) + self.extra_base + self.extra_per_token * tokens

    def seconds_array(self, tokens: np.ndarray, prompts: np.ndarray) -> np.ndarray:
        """:meth:`seconds` elementwise (0 where no tokens)."""
        t = tokens.astype(np.float64)
        compute = self.per_token * t + self.per_token_sq_per_prompt * t * t / np.maximum(prompts, 1)
        memory = self.memory_base + self.memory_per_token * t
        return np.where(t > 0, np.maximum(compute, memory) + self.extra_base + self.extra_per_token * t, 0.0)


def seconds_array(
    model: IterationModel, batch: np.ndarray, context_tokens: np.ndarray, iterations: np.ndarray
) -> np.ndarray:
    """:meth:`IterationModel.seconds` for arrays of segments at once (same closed form, elementwise)."""
    cb, cs, cc, mb, ms, mc, eb, es, ec = model._k
    n = iterations.astype(np.float64)
    b = batch.astype(np.float64)
    a1, b1 = cb + cs * b + cc * context_tokens, cc * b
    a2, b2 = mb + ms * b + mc * context_tokens, mc * b
    if model.memory_by_batch:
        table = np.asarray(model.memory_by_batch)
        a2 = a2 + table[np.minimum(batch.astype(np.int64), len(table) - 1)]
    tri = n * (n - 1) / 2
    extra = n * (eb + es * b + ec * context_tokens) + ec * b * tri
    diff = b1 - b2
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = np.where(diff != 0, np.ceil((a2 - a1) / np.where(diff != 0, diff, 1.0)), 0.0)
    k = np.clip(cross, 0, n)

    def series(a: np.ndarray, s: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
        count = last - first
        return np.where(count > 0, a * count + s * (first + last - 1) * count / 2, 0.0)

    zero = np.zeros_like(n)
    early_mem = series(a2, b2, zero, k) + series(a1, b1, k, n)  # b1 > b2: memory first, then compute
    early_cmp = series(a1, b1, zero, k) + series(a2, b2, k, n)  # b1 < b2: compute first, then memory
    parallel = n * np.maximum(a1, a2) + b1 * tri
    total = np.where(diff > 0, early_mem, np.where(diff < 0, early_cmp, parallel))
    return np.where(n > 0, extra + total, 0.0)
