"""Hand-made replay workloads for the engine and calibration tests."""

from __future__ import annotations

import numpy as np
import polars as pl
from rltrace.replay.cluster import Cluster
from rltrace.replay.costmodels.generation import FittedGeneration
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
    frame = pl.DataFrame({"step": step, "group": np.zeros(len(out), np.int32), "prompt_tokens": np.full(len(out), prompt),
                          "output_tokens": out, "job": np.zeros(len(out), np.int32)})
    first = np.concatenate([[0], np.cumsum([len(x) for x in lengths])]).astype(int).tolist()
    gen = FittedGeneration(model=model or IterationModel.fixed(tau), kv_tokens=kv_tokens)
    job = Job(id=0, name="job0", first=first, generation=gen, train_s=[train_s] * steps, forward_s=[0.0] * steps,
              optimizer_s=[0.0] * steps, sync_s=[sync_s] * steps, reward_s=[reward_s] * steps,
              other_s=[0.0] * steps)
    cluster = Cluster(gen_gpus=gen_gpus, train_gpus=1, gen_gpu="H100", train_gpu="H100", max_seqs=max_seqs)
    return Prepared(frame, [job], cluster, [])
