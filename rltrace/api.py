"""The replay comparison as a library: what ``rltrace replay`` does, callable from a notebook.

``compare(source, schedulers)`` prepares a recorded bundle (or a shipped sample's name, or a described job's TOML,
or a job list), replays it under each scheduler and returns a :class:`Comparison`: the runs, their metrics and the
same-work table as polars frames, run folders and the HTML report on request. The CLI calls the same steps
(:func:`prepare`, :func:`replay_all`, :func:`spread`, :func:`finish`) with its progress around them::

    import rltrace
    cmp = rltrace.compare("rollpacker_qwen7b", ["disagg-sync", "one-step-async"], steps=2)
    cmp.table()          # one row per run: same-work samples/s, $ per 1k samples, ratios, what each trained
    cmp.metrics()        # one row per run: the fixed metric keys, flattened
    cmp.write("runs")    # run folders, as `rltrace replay -o runs`
    cmp.report("r.html")
"""

from __future__ import annotations

import difflib
import operator
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import polars as pl

from rltrace.analysis import verdict
from rltrace.analysis.runs import Run, write_order
from rltrace.bundle import Bundle
from rltrace.config import parse_set
from rltrace.dashboards.report import build as build_report
from rltrace.errors import ConfigError, clean
from rltrace.files import write_text
from rltrace.limits import check_output, check_replicates
from rltrace.replay.jobs import load_jobs, prepare_jobs
from rltrace.replay.loading import Shape
from rltrace.replay.notes import track_records
from rltrace.replay.run import Prepared, ReplayConfig, RunResult, two_kinds
from rltrace.replay.run import replay as run_replay
from rltrace.replay.schedulers import lookup, shipped
from rltrace.replay.schedulers.base import BASELINES, capabilities
from rltrace.replay.settings import Settings, resolve
from rltrace.replay.sources import open_source, source_of
from rltrace.replay.uncertainty import Spread, replicate, sources
from rltrace.sample_traces import resolve as resolve_bundle

Counter = Callable[[float, float], None]
"""progress of a counted stage: (done, total)"""


def source_path(source: str | Path | None) -> Path:
    """No source: the default sample. A shipped sample's name that is not a local path: that sample."""
    return resolve_bundle(source)


def schedulers_of(names: str | Sequence[str] | None, option: str = "schedulers") -> list[str]:
    """Scheduler names from a comma-separated string or a list; "all": every shipped scheduler; None: the
    baselines. Each name is checked (an unknown one is a ConfigError naming the known ones); ``option`` is what
    the messages call the argument (the CLI's ``--scheduler``)."""
    if names is not None and not isinstance(names, str) and (
            not isinstance(names, Sequence) or not all(isinstance(n, str) for n in names)):
        raise ConfigError(f"{option} takes scheduler names: one, a comma-separated string or a list of them "
                          f"(or \"all\"), got {names!r}")
    chosen = list(BASELINES) if names is None else [
        s.strip() for s in (names.split(",") if isinstance(names, str) else names)]
    if chosen == ["all"]:
        chosen = shipped()
    if not any(chosen):
        raise ConfigError(f"{option} needs at least one name (known: {', '.join(shipped())})")
    if not all(chosen):  # "a,,b" or a trailing comma: a name left out, as --gpu H100, is refused
        given = names if isinstance(names, str) else chosen
        raise ConfigError(f"{option} {given!r} has an empty name (known: {', '.join(shipped())})")
    for name in chosen:
        lookup(name)
    if len(set(chosen)) < len(chosen):
        given = names if isinstance(names, str) else ",".join(chosen)
        raise ConfigError(f"{option} {given!r} names a scheduler twice")
    return chosen


def named(names: str | Sequence[str] | None) -> bool:
    """Whether the schedulers were named one by one (a scheduler that cannot run on the source is refused with the
    reason) rather than left to "all" or the default baselines (it is left out, with a note)."""
    if names is None:
        return False
    given = [s.strip() for s in (names.split(",") if isinstance(names, str) else names) if s.strip()]
    return given not in (["all"], list(BASELINES))


def prepare(source: str | Path | None, shape: Shape, settings: Settings, schedulers: Sequence[str], *,
            jobs: Path | None = None) -> tuple[Prepared, Bundle | None]:
    """The replay's work from a bundle (or sample name), a described job's TOML, or a job list (``jobs``);
    returns it with the opened bundle (None for a described job or a job list)."""
    config, prices = settings.config, settings.prices
    if jobs is not None:
        if source is not None:
            raise ConfigError("give a bundle or a job list, not both")
        prepared = prepare_jobs(load_jobs(jobs), shape, config.cost, prices)
        prepared = replace(prepared, source={**source_of("job list", jobs), **prepared.source})  # and each job's
        single = [n for n in schedulers if not capabilities(lookup(n)).several_jobs]
        if single and len(prepared.jobs) > 1:
            prepared.notes.append(f"{', '.join(single)} replay(s) the first job only ({prepared.jobs[0].name})")
        return prepared, None
    path = source_path(source)
    prepared, bundle = open_source(path, shape, config.cost, prices)
    if bundle is not None and shape.reshapes:  # even the recorded shape, asked for, is a new draw: say so
        prepared.notes.append(f"the workload is drawn from the recorded one (seed {shape.seed or 0}): its steps and "
                              "samples are resampled, so even the recorded shape is a new draw (without --steps, "
                              "--prompts, --samples, --max-new-tokens and --model the recording replays as it ran)")
    return prepared, bundle


def one_kind(prepared: Prepared, schedulers: Sequence[str], *, named: bool) -> list[str]:
    """The schedulers that can run on ``prepared``'s cluster. One that colocates (every GPU in both roles) cannot
    run on generation and training pools of two GPU kinds, and ``as-recorded`` needs a bundle's recorded layout (a
    described job has none): named by the user it is refused with the reason, picked by "all" it is left out with a
    note (a colocated run priced and timed on one kind of the two would be neither)."""
    if not prepared.recorded:
        replaying = [n for n in schedulers if capabilities(lookup(n)).replays_recording]
        if replaying and not named:  # named, the replay refuses it with the reason
            prepared.notes.append(f"{', '.join(replaying)} replays a recording as it ran, and a described job has "
                                  "none: left out")
            schedulers = [n for n in schedulers if n not in replaying]
    c = prepared.cluster
    if c.gen_gpu == c.train_gpu:
        return list(schedulers)
    colocating = [n for n in schedulers if capabilities(lookup(n)).colocates]
    if not colocating:
        return list(schedulers)
    why = two_kinds(colocating, c)
    if named:
        raise ConfigError(f"{why}: replay on one kind (--gpu {c.train_gpu}) to compare it")
    prepared.notes.append(f"{why}: left out (replay on one kind, --gpu {c.train_gpu}, to compare it)")
    return [n for n in schedulers if n not in colocating]


def replay_all(prepared: Prepared, schedulers: Sequence[str], settings: Settings,
               counter: Callable[[str], Any] | None = None) -> dict[str, RunResult]:
    """Each scheduler's replay of ``prepared``. ``counter(name)``, when given, is a context manager yielding an
    object with ``update(done, total)`` for that replay's events (the CLI's progress bar)."""
    total = prepared.requests_frame.height
    results: dict[str, RunResult] = {}
    for name in schedulers:
        if counter is None:
            results[name] = run_replay(prepared, name, settings.config, settings.per_scheduler[name])
            continue
        # events: about one per request (more with aborts and turns, far fewer on the fast path); a guide only
        with counter(name) as bar:
            update: Callable[[float, float], None] = bar.update

            def events(n: int, update: Callable[[float, float], None] = update) -> None:
                update(n, total * 1.05)

            results[name] = run_replay(prepared, name, settings.config, settings.per_scheduler[name], progress=events)
            update(results[name].events, results[name].events)
    return results


def spread(source: Bundle, shape: Shape, settings: Settings, prepared: Prepared, schedulers: Sequence[str],
           count: int, progress: Counter | None = None) -> dict[str, Spread]:
    """``count`` replicate replays per scheduler (seeds and bootstrap draws of the fitted steps), where the
    replay has sources of spread; each run's spread summary goes into its metrics by :func:`finish`."""
    if not count or not sources(prepared, shape):
        return {}
    return replicate(source, shape, settings.config.cost, prepared, {n: settings.per_scheduler[n] for n in schedulers},
                     settings.config, settings.prices, count=count,
                     progress=None if progress is None else (lambda done, _: progress(done, count * len(schedulers))))


def finish(results: dict[str, RunResult], spreads: dict[str, Spread] | None = None) -> None:
    """Put each run's spread into its metrics (the replay put its same-work figures there: rltrace.replay.work,
    the one definition the terminal table, ``--json``, the run folders, the report, sweep and advise all show)."""
    for name, sp in (spreads or {}).items():
        results[name].metrics["spread"] = sp.summary()


@dataclass
class Comparison:
    """Replays of one workload under several schedulers."""

    results: dict[str, RunResult]
    prepared: Prepared
    source: Bundle | None
    """the recorded bundle (None for a described job or a job list)"""

    @property
    def notes(self) -> list[str]:
        """What the replay decided on the way, as the CLI prints it: cost models chosen and their track record,
        schedulers left out, jobs a one-job scheduler did not run, repricings, then each run's own (its network's,
        its scheduler's), each once."""
        own = (note for result in self.results.values() for note in result.config.get("notes", []))
        return list(dict.fromkeys([*self.prepared.notes, *own]))

    def __repr__(self) -> str:  # the dataclass's own would print every request of every run
        where = self.prepared.source.get("path") or (self.source.path if self.source is not None else "given jobs")
        return f"Comparison({', '.join(self.results)} on {where}; {len(self.prepared.notes)} notes)"

    def runs(self) -> list[Run]:
        """The runs as the analysis reads them (:class:`rltrace.analysis.runs.Run`)."""
        return [Run.from_result(name, result) for name, result in self.results.items()]

    def table(self, baseline: str | None = None) -> pl.DataFrame:
        """One row per run: same-work samples/s and $ per 1k samples with their ratios to ``baseline`` (default:
        the first run), the run's own figures, and what it trained (:func:`rltrace.analysis.verdict.table`)."""
        return verdict.table(self.runs(), _name(baseline, "baseline"))

    def metrics(self) -> pl.DataFrame:
        """One row per run: its fixed metric keys, nested ones flattened with dots (``step_time_s.mean``)."""
        rows = [{"scheduler": name, **_flat(result.metrics)} for name, result in self.results.items()]
        return pl.DataFrame(rows, infer_schema_length=None)

    def timeline(self) -> pl.DataFrame:
        """Every run's timeline (timeline.parquet: requests, phases and instances' busy spans), with a ``run``
        column."""
        return pl.concat([r.timeline.with_columns(pl.lit(n).alias("run")) for n, r in self.results.items()],
                         how="diagonal_relaxed")

    def write(self, folder: str | Path) -> Path:
        """One run folder per scheduler under ``folder`` (what ``rltrace replay -o`` writes). Run folders an
        earlier replay left there are kept, and a note (:attr:`notes`) names them: a report or ``load_runs`` of
        the folder reads them beside these."""
        out = check_output(_path(folder, "folder"), "folder", folder=True)  # as -o: not in a bundle, not onto a file
        for name, result in self.results.items():
            result.write(out / name)
        write_order(out, list(self.results))  # load_runs reads them back in this order: the same baseline
        earlier = sorted(p.name for p in out.iterdir() if p.name not in self.results and (p / "metrics.json").is_file())
        note = (f"{out} also holds {', '.join(earlier)} from an earlier replay, not rewritten now: a report or "
                f"load_runs of {out} reads them beside these (write to an empty folder to compare these runs alone)")
        if earlier and note not in self.prepared.notes:  # a second write of the same folder says it once
            self.prepared.notes.append(note)
        return out

    def report(self, path: str | Path, baseline: str | None = None) -> Path:
        """The HTML comparison report (``rltrace replay --dashboard``)."""
        if _name(baseline, "baseline") is not None and baseline not in self.results:
            raise ConfigError(f"baseline {baseline!r} is not among the replayed schedulers ({', '.join(self.results)})")
        out = check_output(_path(path, "path"), "path")  # as --dashboard: a file in an existing folder
        write_text(out, build_report(self.runs(), self.source, baseline))
        return out


def _path(value: Any, what: str) -> Path:
    """``value`` as a Path, when it is a string or path-like; a ConfigError naming ``what`` otherwise."""
    if isinstance(value, str | os.PathLike):
        return Path(value)
    raise ConfigError(f"{what} must be a path (a string or pathlib.Path), got {clean(repr(value), 60)}")


def _name(value: Any, what: str) -> str | None:
    """``value`` when it is a string or None; a ConfigError naming ``what`` otherwise."""
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{what} must be a run's name (a string), got {clean(repr(value), 60)}")


def _settings(settings: str | Iterable[str] | Mapping[str, Any]) -> list[str]:
    """``--set`` items from one "key=value" string, an iterable of them, or a mapping of keys to values (each value
    written as the CLI reads it: ``True`` as ``true``; ``None`` is refused)."""
    if isinstance(settings, str):
        return [settings]
    if isinstance(settings, Mapping):
        items = []
        for key, value in settings.items():
            if value is None or not isinstance(value, str | bool | int | float):
                raise ConfigError(f"settings[{key!r}] must be a string, number or bool, got {clean(repr(value), 60)}")
            items.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
        return items
    if isinstance(settings, Iterable):
        items = list(settings)  # a generator is read once, here
        if all(isinstance(item, str) for item in items):
            return items
    raise ConfigError(f"settings takes \"key=value\" strings (one, or a list) or a mapping of keys to values, got "
                      f"{clean(repr(settings), 60)}")


def compare(source: str | Path | None = None, schedulers: str | Sequence[str] | None = None, *,
            jobs: str | Path | None = None, settings: str | Iterable[str] | Mapping[str, Any] = (),
            topology: str | None = None, sync_strategy: str | None = None, replicates: int = 0,
            **shape: Any) -> Comparison:
    """Replay ``source`` (a bundle folder, a shipped sample's name, a described job's TOML; None: the default
    sample) or a job list (``jobs``) under ``schedulers`` (names, a comma-separated string, "all"; None: the
    baselines). ``settings`` are ``--set key=value`` strings (or a mapping of keys to values), ``shape`` the
    keyword arguments of :class:`rltrace.replay.loading.Shape` (``steps``, ``gen_gpus``, ``gpu``,
    ``samples_per_prompt``, ...),
    ``replicates`` the replays behind each run's spread (0: none, else 2..1000). What was left out or decided on
    the way is in :attr:`Comparison.notes`, as the CLI prints it."""
    chosen = schedulers_of(schedulers)
    check_replicates("replicates", replicates)
    flags = {k: v for k, v in {"network.topology": topology, "network.sync_strategy": sync_strategy}.items() if v}
    items = _settings(settings)
    resolved = resolve(chosen, items, flags, where="topology= / sync_strategy=")
    asked = sync_strategy or next((v for k, v in map(parse_set, items) if k == "network.sync_strategy"), None)
    if asked and not resolved.config.network.topology:  # without a fabric no strategy runs: say so, not ignore it
        raise ConfigError(f"sync_strategy={asked!r}: a weight-sync strategy picks how a sync runs on a fabric; it "
                          "needs a topology (topology='fat-tree:k=8', for one)")
    how = shape_of(shape)
    prepared, bundle = prepare(source, how, resolved, chosen, jobs=_path(jobs, "jobs") if jobs is not None else None)
    chosen = one_kind(prepared, chosen, named=named(schedulers))
    prepared.notes.extend(track_records(prepared))
    results = replay_all(prepared, chosen, resolved)
    spreads = spread(bundle, how, resolved, prepared, chosen, replicates) if bundle is not None else {}
    finish(results, spreads)
    return Comparison(results, prepared, bundle)


def shape_of(given: dict[str, Any]) -> Shape:
    """:class:`Shape` from ``compare``'s keyword arguments, each name and the CLI's ways of writing them checked
    with one clear message (the CLI's ``--prompts`` is ``prompts_per_step``, ``--recorded-steps`` is
    ``source_steps``)."""
    known = [f.name for f in fields(Shape)]
    unknown = sorted(set(given) - set(known))
    if unknown:
        near = [CLI_SPELLINGS[unknown[0]]] if unknown[0] in CLI_SPELLINGS else difflib.get_close_matches(
            unknown[0], [*known, *COMPARE_ARGUMENTS], n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise ConfigError(f"compare: unknown argument {unknown[0]!r}{hint}; the workload's shape takes "
                          f"{', '.join(known)}")
    for key in ("gpu", "gen_gpu", "train_gpu"):
        if isinstance(given.get(key), str) and "," in given[key]:
            raise ConfigError(f"{key}={given[key]!r}: one GPU kind; give gen_gpu and train_gpu for two (the CLI's "
                              "--gpu GENERATION,TRAINING)")
    steps = given.get("source_steps")
    if steps is not None:
        try:
            if isinstance(steps, str):
                raise TypeError
            numbers = tuple(steps)  # a generator is read once, here
            if any(isinstance(s, bool) for s in numbers):
                raise TypeError
            given = {**given, "source_steps": tuple(operator.index(s) for s in numbers)}  # numpy integers too
        except TypeError:
            raise ConfigError(f"source_steps takes recorded step numbers, e.g. range(0, 2) or [2, 4, 6], got "
                              f"{steps!r}") from None
    return Shape(**given)


COMPARE_ARGUMENTS = ("schedulers", "jobs", "settings", "topology", "sync_strategy", "replicates")
"""compare()'s own keywords, beside the shape's: what a misspelt argument may have meant"""
CLI_SPELLINGS = {"prompts": "prompts_per_step", "samples": "samples_per_prompt", "recorded_steps": "source_steps",
                 "scheduler": "schedulers"}
"""the CLI's option names that are another keyword here"""


def _flat(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float, str, bool)) or value is None:
            out[f"{prefix}{key}"] = value
    return out


__all__ = ["Comparison", "ReplayConfig", "Shape", "compare", "finish", "one_kind", "prepare", "replay_all",
           "schedulers_of", "spread"]
