"""Decode iterations in closed form: the engine's hot path.

Between two events a generation instance runs a constant batch ``B``; each iteration adds ``B`` tokens to the
total context, so iteration ``j`` sees ``C0 + j x B`` context tokens. Every cost model here reduces one
iteration to ``max(compute(B, C), memory(B, C)) + extra(B)`` with all three terms linear in their arguments
(the roofline does, and so does a per-token latency fitted from a trace). The sum over ``n`` iterations of
the larger of two lines is then an arithmetic series on each side of their crossing: no per-token loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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

    @classmethod
    def fixed(cls, seconds: float) -> IterationModel:
        """Every iteration takes ``seconds`` whatever the batch: the closed-form tests' model."""
        return cls(compute=Linear(seconds), memory=Linear(seconds))

    def scaled(self, factor: float) -> IterationModel:
        """Every term times ``factor`` (another TP degree or GPU kind of a fitted model)."""
        return IterationModel(self.compute.scaled(factor), self.memory.scaled(factor), self.extra.scaled(factor))

    def iteration(self, batch: int, context_tokens: float) -> float:
        """Seconds for one iteration of ``batch`` sequences holding ``context_tokens`` in total."""
        c, m, e = self.compute, self.memory, self.extra
        return (
            max(c.base + c.per_seq * batch + c.per_ctx * context_tokens,
                m.base + m.per_seq * batch + m.per_ctx * context_tokens)
            + e.base + e.per_seq * batch + e.per_ctx * context_tokens
        )

    def seconds(self, batch: int, context_tokens: float, iterations: int) -> float:
        """Seconds for ``iterations`` iterations starting at ``context_tokens``, growing by ``batch`` each."""
        if iterations <= 0:
            return 0.0
        c, m, e = self.compute, self.memory, self.extra
        # Both terms as lines in the iteration index j: value a + b j.
        a1, b1 = c.base + c.per_seq * batch + c.per_ctx * context_tokens, c.per_ctx * batch
        a2, b2 = m.base + m.per_seq * batch + m.per_ctx * context_tokens, m.per_ctx * batch
        n = iterations
        if b1 == b2:
            total = _series(max(a1, a2), b1, 0, n)
        else:
            # compute - memory = (a1 - a2) + (b1 - b2) j changes sign once, at j = cross.
            cross = (a2 - a1) / (b1 - b2)
            k = min(max(math.ceil(cross), 0), n)
            early, late = ((a2, b2), (a1, b1)) if b1 > b2 else ((a1, b1), (a2, b2))
            total = _series(*early, 0, k) + _series(*late, k, n)
        ea, eb = e.base + e.per_seq * batch + e.per_ctx * context_tokens, e.per_ctx * batch
        return total + _series(ea, eb, 0, n)

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
