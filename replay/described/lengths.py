"""A described job's prompt and response lengths (docs/described.md).

The default (``clipped_lognormal``) draws responses lognormal with log-space spread ``sigma``, the samples of one
prompt sharing ``group_correlation`` of their latent (a hard prompt's responses are all long), and clips each at
its cap: ``max_response``, else ``max_seq`` less its prompt. The median is solved so that the clipped responses'
mean is ``mean_response`` exactly on the drawn set, which piles a share of them at the cap when the mean is close
to it, as reasoning-RL runs do. ``sigma`` 1.0 and ``group_correlation`` 0.5 are the RollPacker-like sample's
(``rltrace synth --preset rollpacker``: max/median 26.9, the 25-32x that RL papers report). Prompts are lognormal
around ``mean_prompt`` (spread ``prompt_sigma``), one per prompt.
"""

from __future__ import annotations

import numpy as np
from rltrace.replay.described.description import Description

from rltrace.errors import ConfigError
from rltrace.limits import MAX_NEW_TOKENS
from rltrace.synth.distributions import Empirical, correlated_uniforms, normal_ppf


def _solve_scale(draw: np.ndarray, cap: np.ndarray, mean: float) -> float:
    """The factor ``k`` with ``mean(min(k x draw, cap)) == mean`` (the clipped mean grows with ``k``)."""
    lo, hi = 1e-9, 1.0
    while np.minimum(hi * draw, cap).mean() < mean:
        hi *= 2.0
        if hi > 1e12:
            raise ConfigError(f"batch.mean_response {mean:g} cannot be reached under the responses' caps (a mean of "
                              f"{cap.mean():,.0f} tokens: max_response, and max_seq less each drawn prompt); lower "
                              "it or raise the caps")
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if np.minimum(mid * draw, cap).mean() < mean:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def draw_lengths(d: Description, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt, response, cap) token counts of ``steps x prompts x samples`` samples, a prompt's samples adjacent
    (``cap``: each response's cap)."""
    b, n = d.batch, d.lengths
    rng = np.random.default_rng(d.seed)
    groups, per = steps * b.prompts, b.samples
    prompt_latent = normal_ppf(correlated_uniforms(rng, groups, 1, 0.0).ravel())
    # lognormal around the stated mean: median = mean / exp(sigma^2 / 2)
    prompts = b.mean_prompt * np.exp(n.prompt_sigma * prompt_latent - n.prompt_sigma ** 2 / 2)
    if b.max_seq:
        prompts = np.minimum(prompts, b.max_seq - 1)
    if prompts.max() > MAX_NEW_TOKENS:  # token counts are int32, as in a bundle
        raise ConfigError(f"batch.mean_prompt {b.mean_prompt:g} with lengths.prompt_sigma {n.prompt_sigma:g} draws "
                          f"prompts of {prompts.max():,.0f} tokens, above the limit of {MAX_NEW_TOKENS:,}")
    prompt = np.repeat(np.maximum(np.rint(prompts), 1).astype(np.int64), per)
    cap = (np.full(prompt.shape, float(b.max_response)) if b.max_response
           else (b.max_seq - prompt).astype(np.float64))
    if b.max_response and b.max_seq:
        cap = np.minimum(cap, b.max_seq - prompt)
    uniforms = correlated_uniforms(rng, groups, per, n.group_correlation).ravel()
    if n.kind == "empirical":
        draw = Empirical.from_file(n.path, n.column).quantile(uniforms)
        draw = np.maximum(draw, 1.0)
    else:
        draw = np.exp(n.sigma * normal_ppf(uniforms))
    if n.kind != "empirical" or n.scale_to_mean:
        draw = draw * _solve_scale(draw, cap, b.mean_response)
    response = np.clip(np.rint(np.minimum(draw, cap)), 1, None).astype(np.int64)
    return prompt, response, cap
