"""Hand-made replay workloads for the engine and calibration tests."""

from __future__ import annotations

import numpy as np
import polars as pl
from rltrace.replay.cluster import Cluster
from rltrace.replay.costmodels.generation import FittedGeneration, GenerationCost
from rltrace.replay.costmodels.iteration import IterationModel
from rltrace.replay.job import Job
from rltrace.replay.run import Prepared

TAU = 0.01  # seconds per decode iteration in the closed-form cases


def make(lengths: list[list[int]], *, tau: float = TAU, train_s: float = 0.0, sync_s: float = 0.0,
         reward_s: float = 0.0, gen_gpus: int = 1, max_seqs: int = 1_000_000, kv_tokens: int = 1 << 40,
         prompt: int = 10, model: IterationModel | None = None) -> Prepared:
    """A one-job workload: ``lengths[s]`` are step s's output lengths; fixed per-iteration time, no prefill."""
    steps = len(lengths)
    out = np.concatenate([np.asarray(x, dtype=np.int64) for x in lengths])
    step = np.repeat(np.arange(steps, dtype=np.int32), [len(x) for x in lengths])
    frame = pl.DataFrame({"step": step, "group": np.zeros(len(out), np.int32),
                          "prompt_tokens": np.full(len(out), prompt),
                          "output_tokens": out, "job": np.zeros(len(out), np.int32)})
    first = np.concatenate([[0], np.cumsum([len(x) for x in lengths])]).astype(int).tolist()
    gen = FittedGeneration(model=model or IterationModel.fixed(tau), kv_tokens=kv_tokens)
    job = Job(id=0, name="job0", first=first, generation=gen, train_s=[train_s] * steps, forward_s=[0.0] * steps,
              optimizer_s=[0.0] * steps, sync_s=[sync_s] * steps, reward_s=[reward_s] * steps,
              other_s=[0.0] * steps)
    cluster = Cluster(gen_gpus=gen_gpus, train_gpus=1, gen_gpu="H100", train_gpu="H100", max_seqs=max_seqs)
    return Prepared(frame, [job], cluster, [])


def agentic(steps: list[list[list[tuple[int, float]]]], *, tau: float = TAU, train_s: float = 0.0,
            gen_gpus: int = 1, prompt: int = 10, generation: GenerationCost | None = None,
            gen_gpu: str = "H100") -> Prepared:
    """A multi-turn workload: ``steps[s][j]`` is trajectory j of step s, one (output tokens, environment
    seconds before the turn) per turn; each trajectory is its own prompt group, fixed ``tau`` per iteration."""
    rows = [(s, j, k, out, env) for s, trajs in enumerate(steps) for j, turns in enumerate(trajs)
            for k, (out, env) in enumerate(turns)]
    # Requests in arrival-like order: step, then turn, then trajectory (later turns after every first turn).
    rows.sort(key=lambda r: (r[0], r[2], r[1]))
    rid = {(s, j, k): i for i, (s, j, k, _, _) in enumerate(rows)}
    next_turn = [rid.get((s, j, k + 1), -1) for s, j, k, _, _ in rows]
    frame = pl.DataFrame({
        "step": np.array([r[0] for r in rows], np.int32), "group": np.array([r[1] for r in rows], np.int32),
        "prompt_tokens": np.array([prompt + 100 * r[2] for r in rows]), "output_tokens": np.array([r[3] for r in rows]),
        "env_s": np.array([r[4] for r in rows], float), "job": np.zeros(len(rows), np.int32),
        "next_turn": np.array(next_turn, np.int64)})
    counts = [sum(len(t) for t in trajs) for trajs in steps]
    first = np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()
    heads = [[rid[(s, j, 0)] for j in range(len(trajs))] for s, trajs in enumerate(steps)]
    n = len(steps)
    job = Job(id=0, name="job0", first=first,
              generation=generation or FittedGeneration(model=IterationModel.fixed(tau)),
              train_s=[train_s] * n, forward_s=[0.0] * n, optimizer_s=[0.0] * n, sync_s=[0.0] * n,
              reward_s=[0.0] * n, other_s=[0.0] * n, heads=heads)
    cluster = Cluster(gen_gpus=gen_gpus, train_gpus=1, gen_gpu=gen_gpu, train_gpu="H800", max_seqs=1000)
    return Prepared(frame, [job], cluster, [])
