"""``rltrace estimate validate``: the cost models against public real measurements, as error tables."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from rltrace.cli.progress import stage, stderr
from rltrace.errors import ConfigError
from rltrace.replay.costmodels.validation import summarize, validate

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


def show_validation(data: list[Path] | None, by: list[str], as_json: bool, points_out: Path | None) -> None:
    """Predict every point, print the overall and per-slice error tables (or JSON), optionally write the points."""
    with stage(stderr(), "predicting every point"):
        results = validate(data)
    overall = summarize(results, [])
    sliced = summarize(results, by)
    skipped = results.filter(pl.col("error").is_null())
    if points_out is not None:
        try:
            results.write_csv(points_out)
        except OSError as e:
            raise ConfigError(f"cannot write {points_out}: {e.strerror or e}") from None
    if as_json:
        print(json.dumps({"overall": overall.to_dicts(), "by": by, "slices": sliced.to_dicts(),
                          "skipped": skipped.select("source", "model", "gpu", "skipped").to_dicts()}))
        return
    print("Cost model vs public measurements (error = (predicted - measured) / measured; median_error > 0: "
          "predicted above measured, i.e. slower for times, faster for throughputs)")
    print(_table(overall))
    if by:
        print(f"\nBy {', '.join(by)}:")
        print(_table(sliced))
    if skipped.height:
        reasons = skipped.group_by("skipped").len().sort("len", descending=True)
        print(f"\n{skipped.height} point(s) not predicted:")
        for reason, count in reasons.iter_rows():
            print(f"  {count} x {reason}")
