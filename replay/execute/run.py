"""``rltrace replay --execute``: the replayed work run as real kernels and collectives, beside the model.

Per replayed step:

- **generation**: the decode iterations at the step's replayed shape (the token-weighted mean running batch
  of its requests and their mean context), executed as the model's kernels; the executed generation time is
  the replayed generation span times measured / modelled iteration time (every iteration at one shape is
  executed once and counted, not run millions of times);
- **prefill**: the step's prompts as one prefill (modelled: the cost model's prefill time);
- **train**: forward and backward of one training GPU's share of the step's tokens (data parallel over the
  training pool; modelled: the replay's trainer time);
- **weight_sync**: a real broadcast of the step's model copy from rank 0 to the other ranks (modelled: the
  replay's sync time), at most ``max_sync_bytes`` moved and scaled linearly beyond;
- **collectives**: the collectives of the recorded step the replayed step came from, re-issued in recorded order
  (modelled: their recorded durations), when the bundle has them and ``ranks`` > 1.

Kernel times are scaled from ``layers`` executed layers to the model's depth (``layer_scale`` in the output).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from rltrace.replay.costmodels.calibrate import mean_running
from rltrace.replay.execute import comms
from rltrace.replay.execute.kernels import ModelKernels, check_fits
from rltrace.replay.execute.replay_comms import logical_ops
from rltrace.replay.run import Prepared, RunResult

from rltrace.bundle import Bundle
from rltrace.catalog import ModelSpec
from rltrace.errors import ConfigError

MAX_SYNC_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class Execution:
    """Measured beside modelled seconds per step, phase and kernel kind."""

    frame: pl.DataFrame
    """step, phase, kind, modelled_s, measured_s, shape"""
    layer_scale: float
    device: str
    ranks: int
    layers: int
    """layers executed (the kernel times scale by ``layer_scale`` to the model's)"""

    def setup(self) -> dict[str, object]:
        """What executed the replay, as its run's config.json records it: device, collective backend, ranks, layers
        executed and the scale to the model's depth."""
        return {"device": self.device, "backend": comms.backend_of(self.device), "ranks": self.ranks,
                "layers": self.layers, "layer_scale": self.layer_scale}

    def summary(self) -> dict[str, object]:
        """:meth:`setup` and each phase's modelled and measured seconds, as metrics.json's ``execution``."""
        per_phase = (self.frame.group_by("phase").agg(pl.col("modelled_s").sum(), pl.col("measured_s").sum())
                     .sort("phase"))
        return {**self.setup(),
                "phases": {r["phase"]: {"modelled_s": r["modelled_s"], "measured_s": r["measured_s"]}
                           for r in per_phase.iter_rows(named=True)}}


def _step_shapes(result: RunResult) -> pl.DataFrame:
    """Per step: generation span, token-weighted mean running batch, mean context, prompts and tokens."""
    r = result.requests.filter(pl.col("finished"))
    if r.height == 0:
        raise ConfigError("the replay finished no requests: nothing to execute")
    start, end = r["start_s"].to_numpy(), r["finish_s"].to_numpy()
    batch = mean_running(r["instance"].to_numpy(), start, end)
    r = r.with_columns(pl.Series("batch", batch))
    return r.group_by("step").agg(
        (pl.col("finish_s").max() - pl.col("start_s").min()).alias("span_s"),
        ((pl.col("batch") * pl.col("output_tokens")).sum() / pl.col("output_tokens").sum()).alias("batch"),
        (pl.col("prompt_tokens") + pl.col("output_tokens") / 2).mean().alias("context"),
        pl.len().alias("prompts"), pl.col("prompt_tokens").sum().alias("prompt_tokens"),
        (pl.col("prompt_tokens") + pl.col("output_tokens")).sum().alias("tokens"),
    ).sort("step")


def execute(prepared: Prepared, result: RunResult, bundle: Bundle | None, model: ModelSpec, *, device: str = "cpu",
            ranks: int = 2, layers: int = 2, max_sync_bytes: int = MAX_SYNC_BYTES,
            source_steps: Sequence[int] | None = None,
            progress: Callable[[int, int], None] | None = None) -> Execution:
    """Run the replay ``result`` of ``prepared`` as real kernels (``model``'s shapes) and collectives;
    ``source_steps``: the recorded steps the replay took, in order (None: all of them); ``progress(done, total)``
    after each step's kernels and after the collectives (total: steps + 1)."""
    job = prepared.jobs[0]
    tp = prepared.cluster.tp
    shapes = _step_shapes(result)
    largest = shapes.select(pl.col("batch").round().clip(1), pl.col("context").round().clip(1)).sort(
        pl.col("batch") * pl.col("context")).row(-1)
    check_fits(model, device, layers, decode=(int(largest[0]), int(largest[1])))  # before any kernel runs
    kernels = ModelKernels(model, device, layers)
    rows: list[tuple[int, str, str, float, float, str]] = []
    decode_cache: dict[tuple[int, int], float] = {}
    it_model = job.generation.iteration_model(tp)
    for done, s in enumerate(shapes.iter_rows(named=True)):
        if progress is not None:
            progress(done, shapes.height + 1)
        step = s["step"]
        b, c = max(1, round(s["batch"])), max(1, round(s["context"]))
        if (b, c) not in decode_cache:
            t = kernels.decode(b, c)
            decode_cache[(b, c)] = t.seconds
            rows += [(step, "kernels", "decode_gemm", float("nan"), t.gemm_s, f"batch={b}"),
                     (step, "kernels", "decode_attention", float("nan"), t.attention_s, f"batch={b},context={c}")]
        modelled_it = it_model.iteration(b, b * c)
        rows.append((step, "generation", "decode", s["span_s"], s["span_s"] * decode_cache[(b, c)] / modelled_it,
                     (f"batch={b},context={c},iteration_modelled={modelled_it:.3g}s,"
                      f"measured={decode_cache[(b, c)]:.3g}s")))
        pre = kernels.prefill(int(s["prompt_tokens"]), int(s["prompts"]))
        modelled_prefill = job.generation.prefill_seconds(int(s["prompt_tokens"]), int(s["prompts"]), tp)
        rows.append((step, "prefill", "prefill", modelled_prefill, pre.seconds,
                     f"tokens={s['prompt_tokens']},prompts={s['prompts']}"))
        if step < job.steps:  # data parallel: each training GPU runs its share of the step's tokens, concurrently
            share = max(1, int(s["tokens"]) // prepared.cluster.train_gpus)
            tr = kernels.train(share)
            rows.append((step, "train", "train_fwd_bwd", job.trainer_seconds(step), tr.seconds,
                         f"tokens={s['tokens']},per_gpu={share}"))
    if progress is not None:
        progress(shapes.height, shapes.height + 1)
    rows += _communication(prepared, bundle, device, ranks, max_sync_bytes, source_steps)
    if progress is not None:
        progress(shapes.height + 1, shapes.height + 1)
    frame = pl.DataFrame(rows, schema={"step": pl.Int32, "phase": pl.String, "kind": pl.String,
                                       "modelled_s": pl.Float64, "measured_s": pl.Float64, "shape": pl.String},
                         orient="row")
    return Execution(frame, kernels.scale, device, ranks, kernels.layers)


def recorded_steps(bundle: Bundle, steps: int, source_steps: Sequence[int] | None = None) -> list[int]:
    """The recorded step whose collectives each of ``steps`` replayed steps re-issues: the replay's own
    (``source_steps``, else the bundle's steps in order), a resampled replay's step ``i`` the ``i``-th of them
    cyclically."""
    recorded = list(source_steps) if source_steps else (
        bundle.requests.select(pl.col("step").unique().sort()).collect()["step"].to_list())
    return [recorded[i % len(recorded)] for i in range(steps)] if recorded else []


def _communication(prepared: Prepared, bundle: Bundle | None, device: str, ranks: int, max_sync_bytes: int,
                   source_steps: Sequence[int] | None = None) -> list[tuple[int, str, str, float, float, str]]:
    """Weight syncs (one broadcast per step) and each replayed step's recorded collectives (:func:`recorded_steps`),
    on ``ranks`` real processes."""
    if ranks < 2:
        return []
    job = prepared.jobs[0]
    ops: list[comms.Op] = []
    meta: list[tuple[int, str, str, float, str, float]] = []
    for step in range(job.steps):
        nbytes = (job.sync_bytes or [0.0] * job.steps)[step]
        if nbytes > 0:
            moved = min(nbytes, max_sync_bytes)
            ops.append(comms.Op("broadcast", int(moved) // 4, "float32", tuple(range(ranks))))
            meta.append((step, "weight_sync", "broadcast", job.sync_s[step], f"bytes={nbytes:.0f}", nbytes / moved))
    if bundle is not None:
        # Only what replay-comms would run: an op it cannot issue (no local rank pair, an unsupported kind)
        # is left out here as it is there (its ``skip`` says why).
        logical = logical_ops(bundle, ranks).filter(pl.col("skip").is_null())
        for step, recorded in enumerate(recorded_steps(bundle, job.steps, source_steps)):
            mine = logical.filter(pl.col("step") == recorded)
            for row, op in zip(mine.iter_rows(named=True), mine["op_spec"].to_list()):
                ops.append(op)
                meta.append((step, "collectives", row["op"], row["recorded_s"],
                             f"bytes={row['bytes']},recorded_step={recorded}", 1.0))
    if not ops:
        return []
    seconds = comms.run(ops, ranks, device)
    return [(step, phase, kind, modelled, float(sec) * factor, shape)
            for (step, phase, kind, modelled, shape, factor), sec in zip(meta, seconds) if not np.isnan(sec)]
