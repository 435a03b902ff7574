"""``rltrace replay``: re-run a bundle's workload under one or more schedulers and compare them."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rltrace import jsontext
from rltrace.analysis.verdict import pools_label, three_digits, usd_label
from rltrace.analysis.work import origin
from rltrace.api import (
    Comparison,
    finish,
    named,
    one_kind,
    prepare,
    replay_all,
    schedulers_of,
    spread,
)
from rltrace.catalog import load_gpus
from rltrace.cli.extras import needs_torch
from rltrace.cli.progress import Bar, stage, stderr
from rltrace.cli.tables import print_table, stdout_console
from rltrace.config import parse_set
from rltrace.dashboards.report import build as build_report
from rltrace.errors import ConfigError
from rltrace.files import write_text
from rltrace.limits import MAX_LOCAL_RANKS, MAX_STEPS, check_int, check_output, check_replicates
from rltrace.replay.described import is_description, load_description
from rltrace.replay.loading import Shape
from rltrace.replay.notes import track_records
from rltrace.replay.run import RunResult, model_spec
from rltrace.replay.schedulers.base import BASELINES
from rltrace.replay.settings import resolve
from rltrace.replay.uncertainty import DEFAULT_REPLICATES, Spread, sources


def parse_steps(spec: str) -> tuple[int, ...]:
    """``--recorded-steps``: START:STOP[:STRIDE] (a Python range) or a comma-separated list of step numbers."""
    try:
        if ":" in spec:
            parts = [int(p) for p in spec.split(":")]
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] < 1):
                raise ValueError
            chosen: range | tuple[int, ...] = range(*parts)  # lazy: its length is checked before it is built
        else:
            chosen = tuple(int(p) for p in spec.split(","))
    except ValueError:
        raise ConfigError(f"--recorded-steps {spec!r}: give START:STOP[:STRIDE] (stride >= 1) or a list such as "
                          "2,4,6") from None
    # a range's lowest step is its start (its stride is positive): min() would walk all of it
    if not len(chosen) or (chosen.start if isinstance(chosen, range) else min(chosen)) < 0:
        raise ConfigError(f"--recorded-steps {spec!r} selects no step (steps count from 0)")
    if len(chosen) > MAX_STEPS:
        raise ConfigError(f"--recorded-steps {spec!r} selects {len(chosen):,} steps, above the limit of {MAX_STEPS:,} "
                          "steps a bundle holds")
    return tuple(chosen)


def _gpu_kinds(spec: str | None) -> tuple[str | None, str | None]:
    """``--gpu``: one kind for both pools, or ``GENERATION,TRAINING``."""
    if spec is None:
        return None, None
    kinds = [k.strip() for k in spec.split(",")]
    if len(kinds) > 2 or not all(kinds):
        raise ConfigError(f"--gpu {spec!r}: give one GPU kind, or two as GENERATION,TRAINING (e.g. H20,H800)")
    return kinds[0], kinds[-1]


def replay(
    bundle: Annotated[Path | None, typer.Argument(
        help="Bundle directory, sample name or described job (a .toml run description, docs/described.md; "
             "default: the RollPacker-like sample).")] = None,
    scheduler: Annotated[str, typer.Option(
        "--scheduler", "-s", help="Scheduler name(s), comma-separated, or all.")] = ",".join(BASELINES),
    gen_gpus: Annotated[int | None, typer.Option(help="Generation GPUs (default: as recorded).")] = None,
    train_gpus: Annotated[int | None, typer.Option(help="Training GPUs (default: as recorded).")] = None,
    gpu: Annotated[str | None, typer.Option(help=f"GPU kind of both pools ({', '.join(load_gpus())}), or "
                                                 "GENERATION,TRAINING (e.g. H20,H800).")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor parallelism of generation instances.")] = None,
    max_seqs: Annotated[int | None, typer.Option(help="Most running sequences per instance (vLLM max_num_seqs; "
                                                 "default 256, a described job's framework's).")] = None,
    model: Annotated[str | None, typer.Option(help="Replay with another catalog model.")] = None,
    steps: Annotated[int | None, typer.Option(help="Steps to replay (resampled from the recording).")] = None,
    prompts: Annotated[int | None, typer.Option(help="Prompts per step (resampled).")] = None,
    samples: Annotated[int | None, typer.Option(help="Samples per prompt (resampled).")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Cap on output tokens.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for resampling (default 0, or a described job's own).",
                                              show_default=False)] = None,
    recorded_steps: Annotated[str | None, typer.Option(help="Replay (and fit costs to) only these recorded steps: "
                                                       "START:STOP[:STRIDE] (STOP excluded) or a list, e.g. 1:21:2 "
                                                       "or 2,4,6.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="key=value: cost.*, metrics.*, prices.GPU, network.*, fast_path, SCHEDULER.*")] = None,
    topology: Annotated[str | None, typer.Option(help="Route weight syncs and training collectives through a "
                                                 "topology, e.g. fat-tree:k=16,gpu=H800 (docs/fabrics.md).")] = None,
    sync_strategy: Annotated[str | None, typer.Option(help="Weight-sync strategy on the topology: per_tensor, "
                                                      "bucketed, tree, two_stage.")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Also run the replayed work as real torch kernels and "
                                          "collectives here, measured beside the model (needs torch).")] = False,
    device: Annotated[str | None, typer.Option(help="With --execute: cpu or cuda (default cpu).")] = None,
    ranks: Annotated[int | None, typer.Option(help="With --execute: local processes for collectives and weight "
                                              "syncs (default 2).")] = None,
    layers: Annotated[int | None, typer.Option(help="With --execute: layers executed (times scale to the model's; "
                                               "default 2).")] = None,
    jobs: Annotated[Path | None, typer.Option(
        help="Job list (TOML [[jobs]]: bundle, arrival_s, slo, ...): a scheduler of several jobs runs them all, "
             "the others the first.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Folder for one run folder per scheduler.")] = None,
    dashboard: Annotated[Path | None, typer.Option(help="Write the HTML comparison report of these runs here "
                                                  "(as `rltrace dashboard` would).")] = None,
    baseline: Annotated[str | None, typer.Option(help="With --dashboard: the run the others are compared to "
                                                 "(default: the first scheduler).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print {scheduler: metrics} as JSON on stdout.")] = False,
    replicates: Annotated[int | None, typer.Option(help="Replicates behind the spread of a replay from a recording or "
                                                   "a resampled workload (seeds, and a bootstrap of the steps its "
                                                   f"costs are fitted to); 0 turns it off.  [default: "
                                                   f"{DEFAULT_REPLICATES}]", show_default=False)] = None,
) -> None:
    """Replay a bundle under other schedulers, pool splits, GPU kinds, batch shapes or network fabrics.

    Writes OUT/<scheduler>/{metrics.json, timeline.parquet, requests.parquet, steps.parquet, config.json} with
    -o, an HTML report with --dashboard, and prints a comparison table (or JSON). Example:

        rltrace replay -s all --dashboard report.html

        rltrace replay --scheduler disagg-sync,one-step-async --gen-gpus 24 --train-gpus 8 -o runs

        rltrace replay examples/described/qwen3_30b_a3b_colocated.toml -s colocated-sync,one-step-async --json
    """
    if not execute and (device, ranks, layers) != (None, None, None):
        raise ConfigError("--device, --ranks and --layers go with --execute (they set how the replay is executed)")
    if dashboard is None and baseline is not None:
        raise ConfigError("--baseline goes with --dashboard (the report's baseline; the table compares to the first "
                          "scheduler)")
    device = "cpu" if device is None else device
    ranks, layers = 2 if ranks is None else ranks, 2 if layers is None else layers
    if execute:  # refuse what cannot run before any replay does
        if device not in ("cpu", "cuda") or ranks < 1 or layers < 1:
            raise ConfigError("--execute needs --device cpu|cuda, --ranks >= 1 and --layers >= 1")
        check_int("--ranks", ranks, 1, MAX_LOCAL_RANKS, what=" local processes (one per rank, on this machine)")
        if jobs is not None:
            raise ConfigError("--execute runs one job's kernels and collectives: it does not take --jobs (replay a "
                              "job's bundle or description alone with --execute)")
        with needs_torch("--execute"):
            from rltrace.replay.execute.kernels import require_device
        require_device(device)
    chosen = schedulers_of(scheduler, "--scheduler")
    given_replicates = replicates is not None
    replicates = check_replicates("--replicates", DEFAULT_REPLICATES if replicates is None else replicates)
    if output is not None:  # outputs checked before any replay runs
        check_output(output, "--output", folder=True)
    if dashboard is not None:
        check_output(dashboard, "--dashboard")
    if baseline is not None and baseline not in chosen:  # refused before any replay runs
        raise ConfigError(f"--baseline {baseline!r} is not among the replayed schedulers ({', '.join(chosen)})")
    # the flags' values go to the config as they are: the spec is read once, by the topology's own grammar
    flags = {"network.topology": topology, "network.sync_strategy": sync_strategy}
    flagged = " / ".join(f for f, v in (("--topology", topology), ("--sync-strategy", sync_strategy)) if v)
    settings = resolve(chosen, set_ or [], {k: v for k, v in flags.items() if v}, where=flagged or "--set")
    config = settings.config
    strategy = [f"--sync-strategy {sync_strategy}"] if sync_strategy else []
    strategy += [f"--set {item!r}" for item in set_ or [] if parse_set(item)[0] == "network.sync_strategy"]
    if config.network.topology is None and strategy:  # without a fabric no sync strategy runs: say so, not ignore it
        raise ConfigError(f"{strategy[0]}: a weight-sync strategy picks how a sync runs on a fabric; it needs "
                          "--topology")
    gen_gpu, train_gpu = _gpu_kinds(gpu)
    shape = Shape(gen_gpus=gen_gpus, train_gpus=train_gpus, gen_gpu=gen_gpu, train_gpu=train_gpu, tp=tp,
                  max_seqs=max_seqs, model=model,
                  steps=steps, prompts_per_step=prompts, samples_per_prompt=samples, max_new_tokens=max_new_tokens,
                  seed=seed, source_steps=parse_steps(recorded_steps) if recorded_steps else None)
    err = stderr()
    if jobs is not None and bundle is not None:
        raise ConfigError("give a BUNDLE or --jobs, not both")
    what = (f"preparing the jobs of {jobs}" if jobs is not None else
            f"drawing and pricing the described job {bundle}" if bundle is not None and is_description(bundle) else
            "opening and preparing the bundle")
    if bundle is not None and is_description(bundle):
        model = model or load_description(bundle).model  # the described model is what --execute runs
    with stage(err, what):
        prepared, source = prepare(bundle, shape, settings, chosen, jobs=jobs)
    spec = None
    if execute:  # what it would execute, refused before the replays when it cannot
        with needs_torch("--execute"):  # torch is an optional extra: only --execute imports it
            from rltrace.replay.execute.kernels import check_fits
            from rltrace.replay.execute.run import execute as run_execute
        spec = model_spec(source.manifest.model if source is not None else None, model)
        if spec is None:
            raise ConfigError("--execute needs the model's shapes: the bundle records no model (give --model)")
        check_fits(spec, device, layers)
    # a scheduler the user named is refused when it cannot run here; "all" or the default baselines leave it out
    chosen = one_kind(prepared, chosen, named=named(scheduler))
    if baseline is not None and baseline not in chosen:
        raise ConfigError(f"--baseline {baseline!r} is left out of this replay ({', '.join(chosen)})")
    prepared.notes.extend(track_records(prepared))
    results = replay_all(prepared, chosen, settings,
                         counter=lambda name: Bar(err, f"replay {name}", "events", piped_total=False))
    spreads: dict[str, Spread] = {}
    varied = bool(sources(prepared, shape)) if source is not None else False
    if source is not None and seed is not None and not shape.reshapes and not (replicates and varied):
        prepared.notes.append(f"--seed {seed} unused: nothing is drawn, the recording replays as it ran (--steps, "
                              "--prompts, --samples, --max-new-tokens or --model draw a workload from it)")
    if given_replicates and replicates and not varied:  # asked for a spread this replay cannot have: say so
        prepared.notes.append(f"--replicates {replicates}: no spread, " + (
            "a job list draws each job's workload once, from the job's own seed" if jobs is not None else
            "a described job draws one workload from its seed (replay other --seed values to see theirs)"
            if source is None else "nothing in this replay varies (a spread needs generation costs fitted to the "
            "recording's steps, or a resampled workload: --steps, --prompts, --samples, --max-new-tokens)"))
    if replicates and varied and source is not None:
        total = replicates * len(chosen)
        with Bar(err, f"{total} replicate replays for the spread", "replays", announce=True) as bar:
            spreads = spread(source, shape, settings, prepared, chosen, replicates, progress=bar.update)
    # one definition of the headline figures for the table, --json, the run folders and the report
    finish(results, spreads)
    executions = {}
    if spec is not None:
        for name, result in results.items():
            # announced at once: it starts processes and runs kernels, and a fast machine can finish it inside
            # the grace a piped stage gets before it speaks, leaving a piped user no line at all
            run_layers = min(layers, spec.layers)  # at most the model's own (a 2-layer model runs 2 of --layers 10)
            with Bar(err, f"executing {name}'s replay on {device} ({ranks} ranks, {run_layers} of {spec.layers} "
                     "layers)", "steps", announce=True) as bar:
                executions[name] = run_execute(prepared, result, source, spec, device=device, ranks=ranks,
                                               layers=layers, source_steps=shape.source_steps, progress=bar.update)
            result.metrics["execution"] = executions[name].summary()
            result.config["execution"] = executions[name].setup()  # what executed it, beside what priced it
    comparison = Comparison(results, prepared, source)
    if output is not None:
        comparison.write(output)
        for name, ex in executions.items():
            ex.frame.write_parquet(output / name / "execution.parquet")
    if dashboard is not None:
        with stage(err, f"writing the report {dashboard}"):
            write_text(dashboard, build_report(comparison.runs(), source, baseline))
    if as_json:  # stdout holds the JSON alone; what the replay decided on the way goes to stderr
        print(jsontext.dumps({name: r.metrics for name, r in results.items()}, indent=2))
        for note in comparison.notes:
            print(f"note: {note}", file=sys.stderr)
        return
    _print_table(results, comparison.notes, output, dashboard)
    for name, ex in executions.items():
        _print_execution(name, ex.summary())


def _print_execution(name: str, summary: dict[str, Any]) -> None:
    ranks = summary["ranks"]
    table = Table(title=f"Executed vs modelled ({name}; {summary['device']}, {ranks} rank{'s' * (ranks != 1)}, kernel "
                        f"times x{summary['layer_scale']:g} for the model's depth)", title_justify="left")
    for col in ("phase", "modelled s", "measured s", "measured / modelled"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for phase, t in summary["phases"].items():
        modelled = t["modelled_s"]
        known = not math.isnan(modelled) and modelled > 0  # the "kernels" rows list kernel kinds alone (NaN modelled)
        table.add_row(phase, f"{modelled:.4g}" if known else "-", f"{t['measured_s']:.4g}",
                      f"{t['measured_s'] / modelled:.2f}" if known else "-")
    print_table(stdout_console(), table)
    if ranks < 2:  # the table would end at the kernels with no word on the rest
        print("note: on 1 rank no collective or weight sync is executed (give --ranks 2 or more)")


def _print_table(results: dict[str, RunResult], notes: list[str], output: Path | None, dashboard: Path | None) -> None:
    console = stdout_console()
    table = Table(title="Replay (samples/s and $/1k samples on the same work: the workload's own samples and tokens; "
                        "bubbles: dependency / skewness share of each pool's GPU-time)", title_justify="left")
    for col in ("scheduler", "samples/s", "$/1k samples", "work", "run samples/s", "step s", "gen bubbles",
                "train bubbles", "stale"):
        table.add_column(col, justify="left" if col in ("scheduler", "work") else "right", no_wrap=True)
    for name, r in results.items():
        m, b, w = r.metrics, r.metrics["bubble_fraction"], r.metrics["same_work"]
        table.add_row(
            name, three_digits(w["samples_per_s"]), usd_label(w["usd_per_1k_samples"]),
            "changed" if w["changed"] else f"as {origin(r.config)}",
            f"{m['throughput_samples_per_s']:.2f}",
            f"{m['step_time_s']['mean']:.2f}",
            f"{b['generation']['dependency']:.0%} / {b['generation']['skewness']:.0%}",
            f"{b['training']['dependency']:.0%} / {b['training']['skewness']:.0%}", str(m["staleness"]["max"]),
        )
    print_table(console, table)
    for name, r in results.items():  # where pools are of two GPU kinds, each pool's kind and cost
        by_pool = r.metrics.get("cost_by_pool") or {}
        if len({p["gpu"] for p in by_pool.values()}) > 1:
            console.print(f"cost ({name}): {pools_label(by_pool)}", markup=False)
    changed = [name for name, r in results.items() if r.metrics["same_work"]["changed"]]
    if changed:
        console.print(f"changed work: {', '.join(changed)} trained other samples or lengths than the workload's "
                      "own (its run figures are on that work; the same-work ones put it on the workload's)",
                      markup=False)
    for name, r in results.items():
        spread = r.metrics.get("spread")
        if spread:
            rate = spread.get("same_work.samples_per_s") or spread["throughput_samples_per_s"]  # older runs: own rate
            step = spread["step_time_s.mean"]
            point = r.metrics["same_work"]["samples_per_s"]
            outside = ("; the table's samples/s lies outside this range: it is one draw, the range is over draws "
                       "(docs/replay.md)" if "same_work.samples_per_s" in spread
                       and not rate["p05"] <= point <= rate["p95"] else "")
            console.print(f"spread ({name}, {spread['replicates']} replicates over {' and '.join(spread['sources'])}): "
                          f"samples/s median {rate['median']:.3g}, 90% {rate['p05']:.3g}-{rate['p95']:.3g}; "
                          f"step s median {step['median']:.3g}, 90% {step['p05']:.3g}-{step['p95']:.3g}{outside}",
                          markup=False)
    for name, r in results.items():
        lat = r.metrics.get("latency")
        if lat and lat["requests"]:
            q, ttft, tpot, e2e = (lat[k] for k in ("queue_s", "ttft_s", "tpot_s", "e2e_s"))
            console.print(f"latency ({name}, {lat['requests']:,} requests, p50 / p99): queueing {q['p50']:.3g} / "
                          f"{q['p99']:.3g} s, TTFT {ttft['p50']:.3g} / {ttft['p99']:.3g} s, TPOT "
                          f"{tpot['p50'] * 1e3:.3g} / {tpot['p99'] * 1e3:.3g} ms, end-to-end {e2e['p50']:.3g} / "
                          f"{e2e['p99']:.3g} s", markup=False, soft_wrap=True)
    for name, r in results.items():
        net = r.metrics.get("network")
        if net:
            experts = net.get("expert_alltoall_s", 0.0)
            console.print(f"network ({name}): {net['topology']}, {net['sync_strategy']} weight sync "
                          f"{net['weight_sync_s']:.3f} s, training collectives {net['collective_s']:.3f} s"
                          f"{f', expert all-to-alls {experts:.3f} s' if experts else ''} per step, "
                          f"busiest link {net['max_link_utilization']:.0%}, fabric ${net['fabric']['capex_usd']:,.0f}",
                          markup=False)
    for note in notes:
        console.print(f"note: {note}", markup=False)
    if output is not None:
        console.print(f"wrote {len(results)} run folder(s) under {output}", markup=False)
    if dashboard is not None:
        console.print(f"wrote the report {dashboard}", markup=False)
