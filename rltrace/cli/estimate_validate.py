"""``rltrace estimate validate``: the cost models against public real measurements, as error tables."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rltrace import jsontext
from rltrace.cli.progress import Bar, stage, stderr
from rltrace.errors import ConfigError
from rltrace.replay.costmodels import aiconfigurator
from rltrace.replay.costmodels.validation import check_slices, summarize, validate
from rltrace.replay.described.validation import pairs, summary, validate_runs
from rltrace.replay.run import CostConfig

_PCT = ("median_abs_error", "p90_abs_error", "worst_abs_error", "within_10pct", "within_20pct", "median_error")


def _table(frame: pl.DataFrame) -> str:
    """A fixed-width text table; error shares as percentages (signed for the bias column)."""
    if frame.is_empty():
        return "(no point predicted)"
    shown = frame.with_columns(
        [(pl.col(c) * 100).round(1).cast(pl.Utf8) + "%" for c in _PCT if c != "median_error"]
        + [pl.format("{}%", (pl.col("median_error") * 100).round(1))]
    )
    header = list(shown.columns)
    rows = [[str(v) for v in r] for r in shown.iter_rows()]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def show_validation(data: list[Path] | None, by: list[str], as_json: bool, points_out: Path | None,
                    backends: tuple[str, ...] | None = None) -> None:
    """Predict every point under each generation backend (default: the roofline, and the kernel database where it is
    installed), print the overall and per-slice error tables (or JSON), optionally write the points."""
    check_slices(by)
    if backends is None:
        backends = ("roofline", "kernels") if aiconfigurator.version() is not None else ("roofline",)
    elif "kernels" in backends and aiconfigurator.version() is None:
        raise ConfigError(f"--backend kernels: {aiconfigurator.PACKAGE} is not installed "
                          "(pip install 'rltrace[kernels]')")
    if points_out is not None and not points_out.parent.is_dir():
        raise ConfigError(f"cannot write {points_out}: no such folder {points_out.parent}")
    with stage(stderr(), "predicting every point"):
        results = validate(data, backends)
    overall = summarize(results, [])
    sliced = summarize(results, by)
    skipped = results.filter(pl.col("error").is_null())
    if points_out is not None:
        try:
            results.write_csv(points_out)
        except OSError as e:
            raise ConfigError(f"cannot write {points_out}: {e.strerror or e}") from None
    if as_json:
        print(jsontext.dumps({"overall": overall.to_dicts(), "by": by, "slices": sliced.to_dicts(),
                              "skipped": skipped.select("source", "backend", "model", "gpu", "skipped").to_dicts()}))
        return
    print("Cost model vs public measurements (error = (predicted - measured) / measured; median_error > 0: "
          "predicted above measured, i.e. slower for times, faster for throughputs)")
    print(_table(overall))
    if by:
        print(f"\nBy {', '.join(by)}:")
        print(_table(sliced))
    if skipped.height:
        reasons = skipped.group_by("backend", "skipped").len().sort(["len", "backend", "skipped"],
                                                                     descending=[True, False, False])
        print(f"\n{skipped.height} point(s) not predicted:")
        for backend, reason, count in reasons.iter_rows():
            print(f"  {count} x {backend}: {reason}")


_RL_PCT = ("median_abs_error", "p90_abs_error", "within_15pct", "within_20pct", "median_error", "error",
           "ratio_error")


def _percent(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns([pl.format("{}%", (pl.col(c) * 100).round(1)) for c in _RL_PCT if c in frame.columns])


def _write_points(frame: pl.DataFrame, path: Path) -> None:
    try:
        frame.write_csv(path)
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from None


def show_rl_validation(data: Path | None, as_json: bool, points_out: Path | None, backend: str = "roofline") -> None:
    """Replay every published RL run (generation priced by ``backend``), print the per-run, per-set and per-pair
    tables (or JSON)."""
    with Bar(stderr(), "replaying the published RL runs", "runs") as bar:
        results = validate_runs(data, CostConfig(generation=backend), progress=bar.update)
    sets, pair = summary(results), pairs(results)
    if points_out is not None:
        _write_points(results, points_out)
    if as_json:
        print(jsontext.dumps({"sets": sets.to_dicts(), "pairs": pair.to_dicts(), "runs": results.to_dicts()}))
        return
    print("Described jobs vs published RL runs (error = (predicted - measured) / measured step time; a run is "
          "scored only where its source states every input, the mean response above all)")
    runs = results.select("run_id", "split", pl.col("scored").str.extract(r"^(yes|no)"), "mode", "measured_step_s",
                          "predicted_step_s", "error").with_columns(pl.col("predicted_step_s").round(1))
    print(_table_plain(_percent(runs)))
    print("\nBy set:")
    print(_table_plain(_percent(sets)))
    if pair.height:
        print("\nSchedules compared on one workload (ratio: the first run's step over the second's):")
        shown = pair.select("pair", "scored", "measured_ratio", "predicted_ratio", "direction_right").with_columns(
            pl.col("measured_ratio").round(2), pl.col("predicted_ratio").round(2))
        print(_table_plain(shown))
    skipped = results.filter(pl.col("skipped") != "")
    for row in skipped.iter_rows(named=True):
        print(f"not predicted: {row['run_id']}: {row['skipped']}")


def _table_plain(frame: pl.DataFrame) -> str:
    """A fixed-width text table of any frame."""
    header = list(frame.columns)
    rows = [["" if v is None else str(v) for v in r] for r in frame.iter_rows()]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])
