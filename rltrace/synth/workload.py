"""Seeded synthetic RL workloads: the same config and seed always give the same tables, byte for byte."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from rltrace.calibration.defaults import ADAM_BYTES_PER_PARAM
from rltrace.catalog import ModelSpec, get_gpu, get_model
from rltrace.config import to_dict
from rltrace.files import sha256_of
from rltrace.manifest import Manifest, Pool, RLConfig
from rltrace.synth.agentic import Turns, draw_turns, generate
from rltrace.synth.config import LengthConfig, SynthConfig
from rltrace.synth.distributions import Empirical, LengthDist, Lognormal, LognormalPareto, correlated_uniforms
from rltrace.synth.timing import KV_BLOCK_TOKENS, Costs, costs, decode_engine, ns


@dataclass(frozen=True, slots=True)
class SynthResult:
    """A synthetic run: the manifest and one DataFrame per table (write it with ``rltrace.write_bundle``)."""

    manifest: Manifest
    tables: dict[str, pl.DataFrame]


def memory_notes(cfg: SynthConfig) -> list[str]:
    """Notes on pools whose model state cannot fit in their GPUs' memory: an engine's weights (over its ``tp``
    GPUs) or a trainer rank's BF16 weights and Adam state (sharded over every training GPU), as ``estimate``
    counts them. The times are drawn all the same."""
    model, notes = get_model(cfg.model), []
    gen, train = get_gpu(cfg.generation.device), get_gpu(cfg.training.device)
    weights = model.weight_bytes / cfg.generation.tp
    if weights > gen.memory_bytes:
        notes.append(f"{model.name}'s weights take {weights / 1e9:.0f} GB per generation GPU at tp "
                     f"{cfg.generation.tp}, more than one {gen.name} holds ({gen.memory_bytes / 1e9:.0f} GB): the "
                     "engines' times are of engines that could not load it (raise generation.tp)")
    state = model.params * (model.dtype_bytes + ADAM_BYTES_PER_PARAM) / cfg.training.gpus
    if state > train.memory_bytes:
        notes.append(f"{model.name}'s weights and Adam state take {state / 1e9:.0f} GB per training GPU over "
                     f"{cfg.training.gpus} FSDP ranks, more than one {train.name} holds "
                     f"({train.memory_bytes / 1e9:.0f} GB): the trainer's times are of one that could not run "
                     "(raise training.gpus)")
    return notes


def length_dist(cfg: LengthConfig) -> LengthDist:
    """The distribution a :class:`LengthConfig` describes."""
    if cfg.kind == "empirical":
        return Empirical.from_file(cfg.path, cfg.column, scale=cfg.scale)
    if cfg.kind == "lognormal_pareto":
        return LognormalPareto(cfg.median, cfg.sigma, cfg.tail_fraction, cfg.tail_alpha, cfg.tail_start_quantile)
    return Lognormal(cfg.median, cfg.sigma)


def synthesize(cfg: SynthConfig) -> SynthResult:
    """Generate a whole run: lengths for every step at once, then timestamps step by step."""
    cfg.check()
    model = get_model(cfg.model)
    c = costs(cfg, model, get_gpu(cfg.generation.device), get_gpu(cfg.training.device))
    rng = np.random.default_rng(cfg.seed)
    groups, per = cfg.steps * cfg.prompts_per_step, cfg.samples_per_prompt

    turns: Turns | None = None
    if cfg.agentic.turns > 1:
        turns = draw_turns(cfg, rng, groups, length_dist(cfg.output))
        output, truncated = turns.output[:, 0], turns.truncated[:, 0]
    else:
        uniforms = correlated_uniforms(rng, groups, per, cfg.output.group_correlation)
        raw = length_dist(cfg.output).quantile(uniforms.ravel())
        output = np.clip(np.rint(raw), 1, cfg.max_new_tokens).astype(np.int64)
        truncated = raw >= cfg.max_new_tokens
    prompt_u = correlated_uniforms(rng, groups, 1, 0.0).ravel()
    prompt = np.repeat(np.maximum(np.rint(length_dist(cfg.prompt).quantile(prompt_u)), 1).astype(np.int64), per)

    n = cfg.prompts_per_step * per
    # Times are float seconds from the run's start (float64 near 1e9 s since the epoch would quantise to
    # ~0.25 us); the integer epoch offset is added once, at the end.
    t = 0.0
    parts: dict[str, list[pl.DataFrame]] = {"requests": [], "collectives": [], "weight_syncs": [], "spans": []}
    for step in range(cfg.steps):
        sl = slice(step * n, (step + 1) * n)
        frames, t = _step(cfg, c, model, step, t, prompt[sl], output[sl], truncated[sl],
                          turns.rows(sl) if turns is not None else None)
        for name, frame in frames.items():
            parts[name].append(frame)
    start = cfg.timing.start_ns
    tables = {
        name: pl.concat(frames).with_columns(pl.col(r"^.*_ns$") + start) for name, frames in parts.items()
    }
    return SynthResult(_manifest(cfg, model), tables)


def _step(
    cfg: SynthConfig,
    c: Costs,
    model: ModelSpec,
    step: int,
    t0: float,
    prompt: np.ndarray,
    output: np.ndarray,
    truncated: np.ndarray,
    turns: Turns | None,
) -> tuple[dict[str, pl.DataFrame], float]:
    n = len(output)
    if turns is None:
        requests, spans, generated_s = _generate(cfg, c, step, t0, prompt, output, truncated)
        tokens = float((prompt + output).sum())
    else:
        requests, spans, generated_s, tokens = generate(cfg, c, step, t0, prompt, turns)
    collectives, syncs, more_spans, t = _train(cfg, c, model, step, generated_s, n, tokens)
    spans += more_spans
    span_frame = pl.DataFrame(
        {
            "step": [step] * len(spans),
            "actor": [s[0] for s in spans],
            "phase": [s[1] for s in spans],
            "name": [s[2] for s in spans],
            "start_ns": ns([s[3] for s in spans]),
            "end_ns": ns([s[4] for s in spans]),
        }
    )
    frames = {"requests": requests, "collectives": collectives, "weight_syncs": syncs, "spans": span_frame}
    return frames, t + cfg.timing.step_gap_s


def _generate(
    cfg: SynthConfig, c: Costs, step: int, t0: float, prompt: np.ndarray, output: np.ndarray, truncated: np.ndarray
) -> tuple[pl.DataFrame, list[tuple[str, str, str, float, float]], float]:
    """Single-turn generation: the requests frame, the engines' generate spans, and when the last sample finished."""
    per = cfg.samples_per_prompt
    n = len(output)
    group = np.arange(n) // per
    engine = group % c.engines  # a prompt's samples go to one engine, as SamplingParams(n=...) does
    sched = np.empty(n)
    first = np.empty(n)
    finish = np.empty(n)
    spans: list[tuple[str, str, str, float, float]] = []
    for e in range(c.engines):
        idx = np.flatnonzero(engine == e)
        if idx.size == 0:
            continue
        s, f, d = decode_engine(prompt[idx], output[idx], c, cfg.timing.max_num_seqs)
        sched[idx], first[idx], finish[idx] = t0 + s, t0 + f, t0 + d
        spans.append((f"rollout/engine{e}", "generate", "LLM.generate", t0, t0 + float(d.max())))
    sample = np.arange(n) % per
    cached = np.where(sample > 0, (prompt // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS, 0)
    requests = pl.DataFrame(
        {
            "step": np.full(n, step, dtype=np.int32),
            "_group": group,
            "_sample": sample,
            "_engine": engine,
            "prompt_tokens": prompt.astype(np.int32),
            "output_tokens": output.astype(np.int32),
            "cached_tokens": cached.astype(np.int32),
            "arrival_ns": np.full(n, ns(t0), dtype=np.int64),
            "scheduled_ns": ns(sched),
            "first_token_ns": ns(first),
            "finish_ns": ns(finish),
            "finish_reason": np.where(truncated, "length", "stop"),
            "policy_version": np.full(n, step, dtype=np.int32),
        }
    )
    requests = requests.select(  # ids as strings, built column-wise, in schema order
        "step",
        pl.format("{}:{}:{}", "step", "_group", "_sample").alias("request_id"),
        pl.format("{}:{}", "step", "_group").alias("group_id"),
        pl.format("rollout/engine{}", "_engine").alias("engine"),
        pl.exclude("step", "_group", "_sample", "_engine"),
    )

    return requests, spans, t0 + float(finish.max() - t0)


def _train(
    cfg: SynthConfig, c: Costs, model: ModelSpec, step: int, t: float, n: int, tokens: float
) -> tuple[pl.DataFrame, pl.DataFrame, list[tuple[str, str, str, float, float]], float]:
    """Stages after generation, back to back: reward (per sample or trajectory), reference (and critic for
    PPO), train, optimizer, sync. Returns collectives, weight syncs, spans and the end time."""
    ranks = cfg.training.gpus
    spans: list[tuple[str, str, str, float, float]] = []
    spans.append(("reward/worker0", "reward", "reward_fn", t, t + n * cfg.timing.reward_s_per_sample))
    t += n * cfg.timing.reward_s_per_sample
    trainer_phases = [("reference", "ref.compute_log_prob", tokens * c.forward_s_per_token)]
    if cfg.algorithm.lower() == "ppo":
        trainer_phases.append(("critic", "critic.update", tokens * c.train_s_per_token))
    for phase, name, dur in trainer_phases:
        spans += [(f"trainer/rank{r}", phase, name, t, t + dur) for r in range(ranks)]
        t += dur
    collectives, train_s = _fsdp_collectives(cfg, c, step, t, tokens, model.layers)
    spans += [(f"trainer/rank{r}", "train", "actor.update", t, t + train_s) for r in range(ranks)]
    t += train_s
    spans += [(f"trainer/rank{r}", "optimizer", "optimizer.step", t, t + c.optimizer_s) for r in range(ranks)]
    t += c.optimizer_s
    dsts = [f"rollout/engine{e}" for e in range(c.engines)]
    syncs = pl.DataFrame(
        {
            "version": [step + 1] * len(dsts),
            "src": ["trainer/rank0"] * len(dsts),
            "dst": dsts,
            "bytes": [model.weight_bytes] * len(dsts),
            "tensors": [model.tensors] * len(dsts),
            "method": ["nccl"] * len(dsts),
            "start_ns": [int(ns(t))] * len(dsts),
            "end_ns": [int(ns(t + c.sync_s))] * len(dsts),
            "step": [step] * len(dsts),
        }
    )
    spans += [(a, "weight_sync", "update_weights", t, t + c.sync_s) for a in ["trainer/rank0", *dsts]]
    return collectives, syncs, spans, t + c.sync_s


def _fsdp_collectives(
    cfg: SynthConfig, c: Costs, step: int, start: float, tokens: float, layers: int
) -> tuple[pl.DataFrame, float]:
    """FSDP per-layer collectives of one train span, on every rank in lockstep; returns them and the span length.

    Forward: all_gather of each layer (1/3 of compute). Backward, last layer first: all_gather at the start
    of the layer's slot, reduce_scatter of its gradients at the end (2/3 of compute). A slot never ends
    before its communication, so slow networks stretch the span.
    """
    ranks = cfg.training.gpus
    compute = tokens * c.train_s_per_token
    fslot = max(compute / 3 / layers, c.all_gather_s)
    bslot = max(2 * compute / 3 / layers, c.all_gather_s + c.reduce_scatter_s)
    fwd_start = start + np.arange(layers) * fslot
    bwd_start = start + layers * fslot + np.arange(layers) * bslot
    starts = np.concatenate([fwd_start, bwd_start, bwd_start + bslot - c.reduce_scatter_s])
    ends = np.concatenate([fwd_start + c.all_gather_s, bwd_start + c.all_gather_s, bwd_start + bslot])
    ops = ["all_gather"] * (2 * layers) + ["reduce_scatter"] * layers
    order = np.argsort(starts, kind="stable")  # issue order on each rank = sequence numbers
    per_rank = len(ops)
    shard, full = c.shard_elems, c.shard_elems * ranks
    count = np.array([shard if o == "all_gather" else full for o in ops], dtype=np.int64)[order]
    op = np.array(ops)[order]
    small, big = shard * 2, full * 2  # bf16 bytes
    bytes_in = np.where(op == "all_gather", small, big)
    bytes_out = np.where(op == "all_gather", big, small)
    rows = ranks * per_rank
    frame = pl.DataFrame(
        {
            "step": np.full(rows, step, dtype=np.int32),
            "rank": np.repeat(np.arange(ranks, dtype=np.int32), per_rank),
            "op": np.tile(op, ranks),
            "count": np.tile(count, ranks),
            "bytes_in": np.tile(bytes_in, ranks),
            "bytes_out": np.tile(bytes_out, ranks),
            "seq": np.tile(step * per_rank + np.arange(per_rank, dtype=np.int64), ranks),
            "start_ns": np.tile(ns(starts[order]), ranks),
            "end_ns": np.tile(ns(ends[order]), ranks),
        }
    ).with_columns(  # constant columns, broadcast by polars rather than built as Python lists
        pl.lit("fsdp").alias("pg"),
        pl.lit(pl.Series([list(range(ranks))], dtype=pl.List(pl.Int32))).first().alias("pg_ranks"),
        pl.lit("bfloat16").alias("dtype"),
        pl.lit(None, dtype=pl.Int32).alias("peer"),
        pl.lit(True).alias("async_op"),
    )
    return frame, layers * (fslot + bslot)


def _portable(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with each file they name (a model's config.json, an empirical lengths file) given by its name and
    the SHA-256 of its bytes, not by a path that depends on where the command ran: the manifest keeps them and the
    run id hashes them, so the same inputs give the same bundle in any folder and on any machine."""
    def named(path: str, parts: int) -> str:
        return "/".join(Path(path).parts[-parts:])

    out = {**params}
    if str(out["model"]).endswith(".json"):
        out["model"], out["model_sha256"] = named(out["model"], 2), sha256_of(out["model"])  # its folder names it
    for table in ("output", "prompt"):
        if out[table]["path"]:
            path = out[table]["path"]
            out[table] = {**out[table], "path": named(path, 1), "path_sha256": sha256_of(path)}
    return out


def _manifest(cfg: SynthConfig, model: ModelSpec) -> Manifest:
    params = _portable(to_dict(cfg))
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    gen, train = cfg.generation, cfg.training
    hosts = [f"gen-node{i}" for i in range(math.ceil(gen.gpus / 8))]
    hosts += [f"train-node{i}" for i in range(math.ceil(train.gpus / 8))]
    return Manifest(
        run_id=f"synth-{cfg.name}-{digest}",
        created_ns=cfg.timing.start_ns,
        source="synth",
        command=["rltrace", "synth"],
        hosts=hosts,
        cluster={
            "rollout": Pool(device=gen.device, count=gen.gpus, tp=gen.tp),
            "trainer": Pool(device=train.device, count=train.gpus, tp=train.tp),
        },
        model=model.info(),
        rl=RLConfig(
            algorithm=cfg.algorithm,
            prompts_per_step=cfg.prompts_per_step,
            samples_per_prompt=cfg.samples_per_prompt,
            max_new_tokens=cfg.max_new_tokens,
        ),
        notes=[
            "synthetic workload from `rltrace synth`; timestamps follow the simple model in docs/synth.md",
        ],
        extra={"synth": params},
    )
