"""Multi-turn agentic trajectories for ``rltrace synth`` (``agentic.turns > 1``).

Each sample is a trajectory of ``turns`` generation turns. Between two turns the environment works (a tool
call, a sandbox step: lognormal ``env_median_s``) and returns an observation (lognormal
``observation_median_tokens``) that, with everything generated so far, becomes the next turn's prompt. A
trajectory stays on one engine (its prefix cache lives there). Timing follows the single-turn model
(docs/synth.md) turn by turn: each turn's requests on an engine are priced as one wave, turn k+1 arrives when
turn k finished plus the environment time, and a turn waits FIFO for one of the engine's ``max_num_seqs`` slots,
which all turns share.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import polars as pl

from rltrace.synth.config import MAX_ENV_S, SynthConfig
from rltrace.synth.distributions import LengthDist, correlated_uniforms
from rltrace.synth.timing import KV_BLOCK_TOKENS, Costs, decode_costs, ns


@dataclass(frozen=True, slots=True)
class Turns:
    """Per trajectory (rows) and turn (columns): output tokens, truncation, observation tokens returned
    after the turn, and environment seconds before the turn (0 for the first)."""

    output: np.ndarray
    truncated: np.ndarray
    observation: np.ndarray
    env_s: np.ndarray

    def rows(self, sl: slice) -> Turns:
        return Turns(self.output[sl], self.truncated[sl], self.observation[sl], self.env_s[sl])


def draw_turns(cfg: SynthConfig, rng: np.random.Generator, groups: int, output: LengthDist) -> Turns:
    """Every trajectory's per-turn lengths and environment times (turns of one prompt's samples correlate
    like single-turn samples of one prompt do)."""
    per, turns, a = cfg.samples_per_prompt, cfg.agentic.turns, cfg.agentic
    u = correlated_uniforms(rng, groups, per * turns, cfg.output.group_correlation)
    raw = output.quantile(u.ravel()).reshape(groups * per, turns)
    shape = raw.shape
    # a far tail draw is capped (a turn's observation at the output cap, an environment step at a day): at the
    # largest spreads config.py allows, an uncapped one overflowed the int64 nanosecond timestamps
    observation = np.minimum(np.rint(a.observation_median_tokens * np.exp(a.observation_sigma
                                                                          * rng.standard_normal(shape))),
                             cfg.max_new_tokens)
    env = np.minimum(a.env_median_s * np.exp(a.env_sigma * rng.standard_normal(shape)), MAX_ENV_S)
    env[:, 0] = 0.0
    return Turns(
        output=np.clip(np.rint(raw), 1, cfg.max_new_tokens).astype(np.int64),
        truncated=raw >= cfg.max_new_tokens,
        observation=observation.astype(np.int64),
        env_s=env,
    )


def _schedule(service: np.ndarray, env_s: np.ndarray, t0: float, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrival and scheduled times (s) of one engine's turns (rows: trajectories, columns: turns): turn k + 1
    arrives when turn k finished plus the environment's time, and a turn waits FIFO for one of the engine's
    ``slots`` running sequences, which every turn shares (vLLM's max_num_seqs)."""
    n, n_turns = service.shape
    arrival, sched = np.empty((n, n_turns)), np.empty((n, n_turns))
    if n <= slots:  # every trajectory holds a slot: a turn starts as it arrives
        ready = np.full(n, t0)
        for k in range(n_turns):
            arrival[:, k] = sched[:, k] = ready + env_s[:, k]
            ready = sched[:, k] + service[:, k]
        return arrival, sched
    pending = [(t0 + float(env_s[i, 0]), i, 0) for i in range(n)]  # (arrival, trajectory, turn), in arrival order
    heapq.heapify(pending)
    free = [t0] * slots
    while pending:  # a next turn arrives no earlier than the turn it follows, so arrival order is FIFO
        at, i, k = heapq.heappop(pending)
        start = max(at, heapq.heappop(free))
        arrival[i, k], sched[i, k] = at, start
        heapq.heappush(free, start + float(service[i, k]))
        if k + 1 < n_turns:
            heapq.heappush(pending, (start + float(service[i, k]) + float(env_s[i, k + 1]), i, k + 1))
    return arrival, sched


def generate(
    cfg: SynthConfig, c: Costs, step: int, t0: float, prompt: np.ndarray, turns: Turns
) -> tuple[pl.DataFrame, list[tuple[str, str, str, float, float]], float, float]:
    """One step's turns: the requests frame (ns from the run start; the epoch offset is added later), the
    generate and environment spans (seconds), the end of the last turn, and the training tokens (each
    trajectory's whole final context)."""
    n, n_turns = turns.output.shape
    per = cfg.samples_per_prompt
    group = np.arange(n) // per
    engine = group % c.engines
    # Turn k's prompt: the trajectory's prompt plus every earlier turn's output and observation.
    grown = np.cumsum(turns.output + turns.observation, axis=1) - (turns.output + turns.observation)
    prompts = prompt[:, None] + grown
    service, head = np.empty((n, n_turns)), np.empty((n, n_turns))
    arrival, sched = np.empty((n, n_turns)), np.empty((n, n_turns))
    for e in range(c.engines):
        idx = np.flatnonzero(engine == e)
        if idx.size == 0:
            continue  # fewer prompts than engines
        for k in range(n_turns):
            service[idx, k], prefill, tpot = decode_costs(prompts[idx, k], turns.output[idx, k], c,
                                                          cfg.timing.max_num_seqs)
            head[idx, k] = prefill + tpot  # first token: prefill and one decode iteration after scheduling
        arrival[idx], sched[idx] = _schedule(service[idx], turns.env_s[idx], t0, cfg.timing.max_num_seqs)
    first, finish = sched + head, sched + service
    spans = [(f"rollout/engine{e}", "generate", "agent.rollout", t0, float(finish[engine == e].max()))
             for e in range(c.engines) if (engine == e).any()]
    traj = [f"{step}:{g}:{i % per}" for i, g in enumerate(group.tolist())]
    for k in range(1, n_turns):
        spans += [(f"environment/{traj[i]}", "environment", "env.step", float(finish[i, k - 1]), float(arrival[i, k]))
                  for i in range(n)]
    # Turn k > 0 finds the previous turn's context (all but the new observation) in the prefix cache; a first
    # turn finds its prompt there when another sample of its prompt came first. Whole KV blocks only.
    prefix = np.where(np.arange(n_turns) > 0, prompts - np.roll(turns.observation, 1, axis=1), prompts)
    cached = (prefix // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    traj_of_row = np.repeat(np.arange(n), n_turns)
    turn = np.tile(np.arange(n_turns), n)
    sample = traj_of_row % per
    frame = pl.DataFrame(
        {
            "step": np.full(n * n_turns, step, dtype=np.int32),
            "request_id": [f"{traj[i]}:{k}" for i, k in zip(traj_of_row.tolist(), turn.tolist())],
            "group_id": [f"{step}:{g}" for g in group[traj_of_row].tolist()],
            "engine": [f"rollout/engine{e}" for e in engine[traj_of_row].tolist()],
            "prompt_tokens": prompts.ravel().astype(np.int32),
            "output_tokens": turns.output.ravel().astype(np.int32),
            "cached_tokens": np.where((turn > 0) | (sample > 0), cached.ravel(), 0).astype(np.int32),
            "arrival_ns": ns(arrival.ravel()),
            "scheduled_ns": ns(sched.ravel()),
            "first_token_ns": ns(first.ravel()),
            "finish_ns": ns(finish.ravel()),
            "finish_reason": np.where(turns.truncated.ravel(), "length", "stop"),
            "policy_version": np.full(n * n_turns, step, dtype=np.int32),
            "turn": turn.astype(np.int32),
            "trajectory_id": [traj[i] for i in traj_of_row.tolist()],
        }
    )
    tokens = float((prompts[:, -1] + turns.output[:, -1]).sum())
    return frame, spans, float(finish.max()), tokens
