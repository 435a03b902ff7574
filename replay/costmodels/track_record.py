"""An estimate's track record: how the cost model did on the shipped public measurements nearest it.

`rltrace estimate decode|train` ends with it and `rltrace replay` notes it for its roofline generation: the points
of :mod:`.validation`'s sets nearest the estimate are predicted again (a few hundred at most: 0.01-0.4 s on a 2-core
VM) and summarised. Nearest is, in order: the same model (by architecture: a config.json of a catalog model is that
model) on the same GPU kind with the same weights' (or training) precision; on that kind in any precision; on
other kinds; then other models on the kind. The GPU count, parallelism, batch and lengths are not matched: the
scope names what was.
"""

from __future__ import annotations

import dataclasses
import functools

import polars as pl
from rltrace.replay.costmodels.validation import (
    GENERATION_CSV,
    HELD_OUT_CSV,
    PREDICT,
    TRAINING_CSV,
    TRAINING_HELD_OUT_CSV,
    load_points,
)

from rltrace.catalog import ModelSpec, load_models
from rltrace.catalog.models import catalog_entry, differences
from rltrace.errors import ConfigError


@dataclasses.dataclass(frozen=True, slots=True)
class TrackRecord:
    """The model's errors on the measurements nearest one estimate (``scope`` says which; ``points`` 0: none)."""

    metric: str
    """what was measured: decode TPOT, or training tokens/s per GPU"""
    above: str
    """what a positive error means: the model "slower" (a time) or "faster" (a rate) than measured"""
    scope: str
    points: int
    median_abs_error: float | None = None
    within_20pct: float | None = None
    median_error: float | None = None

    def to_json(self) -> dict[str, object]:
        """The record as plain values (``--json``)."""
        return dataclasses.asdict(self)

    def line(self) -> str:
        """One line for a person: the slice, its points and errors."""
        if not self.points:
            return f"track record: no {self.metric} measurement of {self.scope} in the validation set"
        assert self.median_abs_error is not None and self.within_20pct is not None and self.median_error is not None
        return (f"track record ({self.points} {self.metric} point{'s' if self.points > 1 else ''} of "
                f"{self.scope}): median |error| {100 * self.median_abs_error:.1f}%, "
                f"{100 * self.within_20pct:.0f}% within 20%, median {100 * self.median_error:+.1f}% "
                f"(+: the model {self.above})")


# the sets an estimate kind is held against: (CSVs, their layout, the set's name in the prediction (held-out points
# add ", held out" to it), its precision column, the metric printed, what a positive error means)
_RECORDS = {
    "decode": ((GENERATION_CSV, HELD_OUT_CSV), "generation", "generation TPOT", "weight_dtype", "decode TPOT",
               "slower"),
    "train": ((TRAINING_CSV, TRAINING_HELD_OUT_CSV), "training", "training tokens/s/GPU", "precision",
              "training tokens/s per GPU", "faster"),
}


def weights_precision(model: ModelSpec) -> str:
    """The validation sets' name of ``model``'s weights' type (fp8, bf16; fp32 where it is 4 bytes)."""
    return {1: "fp8", 2: "bf16", 4: "fp32"}.get(model.dtype_bytes, "bf16")


def catalog_name(model: ModelSpec) -> str | None:
    """The catalog model with ``model``'s architecture, its weights' type aside (its own name's entry first), or None:
    a config.json of Qwen3-32B is Qwen3-32B whatever its folder is called, and a folder of that name holding
    another shape is not."""
    for entry in (catalog_entry(model.name), *load_models().values()):
        if entry is not None and not differences(dataclasses.replace(entry, dtype_bytes=model.dtype_bytes), model):
            return entry.name
    return None


# a record replays every measurement it holds the model to (about 150 ms): once a process (a sweep asks each point)
@functools.lru_cache(maxsize=256)
def track_record(kind: str, model: ModelSpec, gpu: str, precision: str) -> TrackRecord:
    """The record of an estimate of ``kind`` (decode or train) for ``model`` on ``gpu`` in ``precision`` (decode: the
    weights' type; train: the linear layers')."""
    if kind not in _RECORDS:
        raise ConfigError(f"no track record for {kind!r}; known: {', '.join(_RECORDS)}")
    paths, layout, name, column, metric, above = _RECORDS[kind]
    points = pl.concat([load_points(path)[1] for path in paths], how="diagonal_relaxed")
    known = catalog_name(model)
    same_gpu = pl.col("gpu") == gpu
    tiers: list[tuple[pl.Expr, str]] = []
    if known is not None:
        same = pl.col("model") == known
        tiers += [(same & same_gpu & (pl.col(column).str.to_lowercase() == precision), f"{known} on {gpu}"),
                  (same & same_gpu, f"{known} on {gpu}"), (same, known)]
        tiers.append((same_gpu & ~same, f"other models on {gpu}, {known} unmeasured"))
    else:
        tiers.append((same_gpu, f"other models on {gpu}, {model.name}'s architecture unmeasured"))
    for where, scope in tiers:
        chosen = points.filter(where)
        if chosen.height:
            break
    else:
        return TrackRecord(metric, above, f"{known or model.name} on any GPU, nor of any model on {gpu}", 0)
    if scope == known:  # the model on other kinds only
        scope = f"{known} on {', '.join(sorted(chosen['gpu'].unique()))}"
    scope += f", {'/'.join(sorted(chosen[column].str.to_lowercase().unique()))}"  # the precision(s) measured
    error = (pl.col("predicted") - pl.col("measured")) / pl.col("measured")
    scored = (PREDICT[layout](chosen).filter(pl.col("set").str.starts_with(name))
              .select(error.alias("e"), (pl.col("set") != name).alias("held_out")).drop_nulls())
    if scored.is_empty():  # every point refused by the model
        return TrackRecord(metric, above, scope, 0)
    if held := int(scored["held_out"].sum()):  # points collected after the model was set: say how many
        scope += f", {held} held out"
    stats = scored.select(pl.col("e").abs().median().alias("abs"), (pl.col("e").abs() <= 0.20).mean().alias("w20"),
                          pl.col("e").median().alias("med")).row(0, named=True)
    return TrackRecord(metric, above, scope, scored.height, stats["abs"], stats["w20"], stats["med"])
