"""``rltrace estimate``: what the cost model predicts for one decode iteration, prefill or training step."""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from rltrace import jsontext
from rltrace.calibration.defaults import GPU_MEMORY_UTILIZATION
from rltrace.catalog import get_gpu, get_model, load_gpus
from rltrace.cli.estimate_validate import show_rl_validation, show_validation
from rltrace.cli.options import refuse_unused
from rltrace.errors import ConfigError
from rltrace.limits import MAX_GPUS, MAX_NEW_TOKENS, MAX_PER_STEP, MAX_TOKENS, check_int, check_output
from rltrace.replay.costmodels import Roofline
from rltrace.replay.costmodels.profile import device_from_profile, factors, load_profile
from rltrace.replay.costmodels.track_record import track_record, weights_precision
from rltrace.replay.costmodels.training import PRECISIONS, check_expert_parallel, training_state_bytes
from rltrace.replay.costmodels.validation import BACKENDS, DTYPE_BYTES


class Kind(str, Enum):
    decode = "decode"
    prefill = "prefill"
    train = "train"
    validate = "validate"
    validate_rl = "validate-rl"


USES: dict[Kind, set[str]] = {
    Kind.decode: {"model", "gpu", "tp", "ep", "batch", "context", "precision", "profile"},
    Kind.prefill: {"model", "gpu", "tp", "ep", "samples", "tokens", "prompts", "precision", "profile"},
    Kind.train: {"model", "gpu", "tp", "ep", "context", "tokens", "gpus", "precision"},  # --tp: refused below
    Kind.validate: {"data", "by", "points", "backend"},
    Kind.validate_rl: {"data", "points", "backend"},
}
"""the options each kind reads (``--json`` every one); another given on the command line would be ignored"""
READERS = {name: [k.value for k, names in USES.items() if name in names] for names in USES.values() for name in names}


def estimate(
    ctx: typer.Context,
    kind: Annotated[Kind, typer.Argument(help="decode (one iteration), prefill, train (one optimizer step), "
                                               "validate (the model against public real measurements) or "
                                               "validate-rl (described jobs against published RL runs).")],
    model: Annotated[str | None, typer.Option(
        help="Catalog model (e.g. Qwen2.5-7B) or a Hugging Face config.json.")] = None,
    gpu: Annotated[str | None, typer.Option(
        help=f"GPU kind from the catalog ({', '.join(load_gpus())}).")] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree (decode, prefill).")] = 1,
    ep: Annotated[int, typer.Option(help="Expert-parallel ranks (MoE; decode/prefill: 1 or --tp, whole experts "
                                         "per rank, all-reduced as TP's; train: the trainer's EP group, "
                                         "all-to-alls).")] = 1,
    samples: Annotated[int, typer.Option(help="Samples per prompt sharing its prefix (prefill: one prefill, "
                                              "later samples recompute only the uncached tail).")] = 1,
    batch: Annotated[int, typer.Option(help="Running sequences (decode).")] = 1,
    context: Annotated[int, typer.Option(help="Mean context length in tokens (decode); train: tokens per "
                                              "sequence (its causal attention).")] = 1024,
    tokens: Annotated[int | None, typer.Option(
        help="Tokens (prefill: prompt tokens, default 4096; train: tokens per step, default one --context sequence "
             "per GPU).", show_default=False)] = None,
    prompts: Annotated[int, typer.Option(help="Prompts the prefill tokens are split over.")] = 1,
    gpus: Annotated[int, typer.Option(help="GPUs sharing the training step.")] = 8,
    precision: Annotated[str | None, typer.Option(
        help="bf16, fp16 or fp8. train: the linear layers' (Transformer Engine's FP8 recipes; attention stays BF16; "
             "default bf16); decode, prefill: the weights' (default: the model's own, a config.json's "
             "quantization_config included).")] = None,
    profile: Annotated[Path | None, typer.Option(
        help="Efficiency profile from `rltrace calibrate` (TOML or Parquet).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: seconds, bound, terms.")] = False,
    data: Annotated[list[Path] | None, typer.Option(
        help="validate: a validation CSV (repeatable; default: the shipped sets); validate-rl: one runs CSV in "
             "the shipped set's layout.")] = None,
    by: Annotated[str, typer.Option(help="validate: slices of the error table, comma-separated (gpu, model, "
                                         "engine, dtype, regime, origin: the source's repository), within the "
                                         "set and backend every table is sliced by.")] = (
        "gpu,model,dtype"),
    points: Annotated[Path | None, typer.Option(
        help="validate: also write every point, predicted and measured, to this CSV.")] = None,
    backend: Annotated[str | None, typer.Option(
        help="validate, validate-rl: generation backends, comma-separated: roofline, kernels (aiconfigurator-core's "
             "measured kernels, `pip install 'rltrace[kernels]'`). validate's default: both where the package is "
             "installed; validate-rl's: roofline.")] = None,
) -> None:
    """Predict one iteration's time with the roofline cost model, and the bound it hit.

    Hold it against your own measurements; docs/costmodels-roofline.md states the formulas and defaults.

    Example: rltrace estimate decode --model Llama-2-7B --gpu H100 --batch 32 --context 2048 --json

    `rltrace estimate validate` predicts every point of the shipped public measurements (vLLM/SGLang TPOT, TTFT,
    offline throughput, training tokens/s/GPU, vLLM's KV-cache sizing; sources in docs/costmodels-sources.md) and prints
    the errors by slice. `rltrace estimate validate-rl` replays every published RL run of the shipped set
    (docs/described.md) from its stated setup and prints the step and phase errors, by split, and each sync-vs-async
    pair's ratio.
    """
    if points is not None:
        check_output(points, "--points")  # before the validation's work, not after it
    if profile is not None and kind not in (Kind.decode, Kind.prefill):
        # a profile holds inference kernels' factors; training runs at its MFU, and the validation checks the
        # shipped calibration
        raise ConfigError(f"--profile prices decode and prefill estimates; estimate {kind.value} does not use it")
    refuse_unused(ctx, "estimate", kind.value, READERS)
    if kind is Kind.validate:
        show_validation(data or None, [b.strip() for b in by.split(",") if b.strip()], as_json, points,
                        backends=_backends(backend) if backend is not None else None)
        return
    if kind is Kind.validate_rl:
        if data and len(data) > 1:
            raise ConfigError("validate-rl takes one --data file (a runs CSV in the shipped set's layout)")
        chosen = _backends(backend) if backend is not None else ("roofline",)
        if len(chosen) > 1:
            raise ConfigError("validate-rl takes one --backend (roofline or kernels)")
        show_rl_validation(data[0] if data else None, as_json, points, backend=chosen[0])
        return
    if model is None or gpu is None:
        raise ConfigError(f"estimate {kind.value} needs --model and --gpu")
    if tokens is None:  # train: one sequence per GPU, where both are in range (else the checks below say which not)
        one_each = kind is Kind.train and 1 <= context <= MAX_NEW_TOKENS and 1 <= gpus <= MAX_GPUS
        tokens = min(context * gpus, MAX_TOKENS) if one_each else 4096
    # every number in its range before any arithmetic (a 23-digit --batch overflowed numpy)
    for name, value, lo, hi in (("--batch", batch, 1, MAX_PER_STEP), ("--context", context, 0, MAX_NEW_TOKENS),
                                ("--tokens", tokens, 1, MAX_TOKENS), ("--prompts", prompts, 1, MAX_PER_STEP),
                                ("--samples", samples, 1, MAX_PER_STEP), ("--gpus", gpus, 1, MAX_GPUS),
                                ("--tp", tp, 1, MAX_GPUS), ("--ep", ep, 1, MAX_GPUS)):
        check_int(name, value, lo, hi)
    if precision is not None and precision not in PRECISIONS:
        raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if kind is Kind.train and tp != 1:
        raise ConfigError("estimate train prices data and expert parallelism over --gpus (--ep); --tp is for decode "
                          "and prefill")
    loaded = load_profile(profile) if profile else None
    try:
        spec = get_gpu(gpu)
    except ConfigError:  # a device the catalog lacks: the peaks a profile measured on it (calibrate --device cpu)
        measured = device_from_profile(loaded, gpu) if loaded is not None else None
        if measured is None:
            raise
        spec = measured
    fitted = factors(loaded, spec.name, tp) if loaded is not None else None
    arch = get_model(model)
    if kind is Kind.train:
        check_expert_parallel(arch, ep, gpus, "--ep")
    elif precision is not None and arch.dtype_bytes != DTYPE_BYTES[precision]:  # the weights served in it
        arch = dataclasses.replace(arch, dtype_bytes=DTYPE_BYTES[precision])
    cost = Roofline(model=arch, gpu=spec, tp=tp, ep=ep)
    if fitted is not None:  # the profile's factors, in the profile's own GEMM form
        cost = dataclasses.replace(cost, compute_efficiency=fitted.compute_efficiency,
                                   memory_efficiency=fitted.memory_efficiency,
                                   attention_efficiency=fitted.attention_efficiency,
                                   engine_overhead=fitted.engine_overhead, gemm_ramp=False)
    kv_tokens = 0
    if kind is Kind.decode:
        result = cost.decode(batch, context)
        kv_tokens = batch * context
        what = f"decode iteration, batch {batch}, mean context {context:,}"
    elif kind is Kind.prefill:
        result = cost.prefill(tokens, prompts, samples)
        kv_tokens = tokens
        shared = f", {samples} samples each sharing its prefix" if samples > 1 else ""
        what = f"prefill of {tokens:,} tokens in {prompts} prompt(s){shared}"
    else:
        precision = precision or "bf16"
        if tokens < context:  # a step's attention is priced over whole sequences of --context tokens
            raise ConfigError(f"--tokens {tokens:,} is less than one --context {context:,}-token sequence")
        result = cost.train(tokens, gpus, seq_len=context, precision=precision)
        what = (f"training step of {tokens:,} tokens in {context:,}-token sequences on {gpus} GPUs ({precision}"
                f"{f', ep {ep}' if ep > 1 else ''})")
    state_gb = training_state_bytes(arch, gpus) / 1e9 if kind is Kind.train else 0.0
    fits = state_gb <= spec.memory_bytes / 1e9 if kind is Kind.train else cost.fits(kv_tokens)
    weights = precision or weights_precision(cost.model)
    # the shipped measurements nearest this estimate (a profile's factors are not what they validate; no measurement
    # times a prefill alone)
    record = (track_record(kind.value, arch, spec.name, weights)
              if kind is not Kind.prefill and not profile else None)
    if as_json:
        extra: dict[str, object] = {"fits": fits, "memory_needed_gb": state_gb if kind is Kind.train
                                    else cost.memory_needed_gb(kv_tokens)}
        print(jsontext.dumps({**result.to_json(), **extra, "track_record": record.to_json() if record else None}))
        return
    if kind is Kind.train:
        print(f"{cost.model.name} on {cost.gpu.name}: {what}")
        a2a = f", expert all-to-alls {result.comm_s * 1e3:.3f} ms" if arch.is_moe and ep > 1 else ""
        print(f"  {result.seconds * 1e3:.3f} ms (compute {result.compute_s * 1e3:.3f} ms{a2a})")
        if (sequences := tokens // context) < gpus:  # the model splits tokens evenly, whole sequences or not
            print(f"  note: {sequences:,} sequence{'s' * (sequences != 1)} on {gpus} GPUs: priced as if each GPU "
                  "trained an equal share of the tokens, which takes splitting sequences (context parallelism); "
                  "data parallelism alone leaves GPUs idle")
    else:
        print(f"{cost.model.name} on {cost.gpu.name} (tp {tp}, {weights} weights): {what}")
        print(f"  {result.seconds * 1e3:.3f} ms, {result.bound}-bound "
              f"(compute {result.compute_s * 1e3:.3f} ms, memory {result.memory_s * 1e3:.3f} ms, "
              f"tp comm {result.comm_s * 1e3:.3f} ms"
              + (f", engine {result.engine_s * 1e3:.3f} ms" if result.engine_s else "") + ")")
    if kind is not Kind.train:
        # what the kernels' work does not explain: their fixed parts and ramps (a fused-MoE layer's at narrow expert
        # widths too) and the host's launches
        top = f"top-{arch.experts_per_token}"
        experts = f"experts: {result.experts:.1f} of {arch.experts} read per MoE layer ({top}); " if arch.is_moe else ""
        print(f"  {experts}kernel fixed parts, ramps and launches {result.floor_s * 1e3:.3f} ms")
        if ep > 1:  # TP's collectives and, routing balanced, its bytes a rank reads: only the experts' width differs
            print(f"  ep {ep}: whole experts per rank inside the TP group, all-reduced as TP's (vLLM's expert "
                  "parallelism without data parallelism); routing balanced, so it differs from --ep 1 only where "
                  "the fused-MoE kernel computes (full-width experts)")
    if record is not None:
        print(f"  {record.line()}")
    elif kind is Kind.prefill:
        print("  track record: no direct measurement of a prefill's time in the validation set (its TTFT points "
              "include queueing: docs/costmodels-misses.md)")
    else:
        print("  track record: none for a profile's efficiencies (the validation holds the defaults)")
    if not fits and kind is Kind.train:
        print(f"  note: does not fit: a fully sharded Adam trainer holds {state_gb:,.1f} GB per GPU of weights, "
              f"gradients and optimizer state before activations, and {cost.gpu.name} has "
              f"{cost.gpu.memory_bytes / 1e9:.1f} GB (it needs at least "
              f"{math.ceil(state_gb * gpus / (cost.gpu.memory_bytes / 1e9))} GPUs)")
    elif not fits:
        share = cost.rank_memory().share / 1e9
        print(f"  note: needs {cost.memory_needed_gb(kv_tokens):,.1f} GB per GPU for weights, activations, buffers "
              f"and KV cache; vLLM's {GPU_MEMORY_UTILIZATION:g} of {cost.gpu.name}'s {cost.gpu.memory_bytes / 1e9:.1f} "
              f"GB is {share:.1f} GB (it would preempt or queue)")


def _backends(text: str) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(b.strip() for b in text.split(",") if b.strip()))
    unknown = [b for b in chosen if b not in BACKENDS]
    if unknown or not chosen:
        raise ConfigError(f"--backend: unknown {', '.join(unknown) or '(none given)'}; "
                          f"choose from {', '.join(BACKENDS)}")
    return chosen
