"""Same-work figures of one replay (rltrace.replay.work.same_work), table-driven: what every view shows and
sweep and advise rank by, including the runs that trained nothing, the short ones and the ones that changed work."""

from __future__ import annotations

import polars as pl
import pytest
from rltrace.replay.work import SAME_WORK_KEYS, same_work


def _requests(lengths: list[int], trained: list[int], recorded: list[bool]) -> pl.DataFrame:
    n = len(lengths)
    return pl.DataFrame({"job": [0] * n, "step": [0] * n, "output_tokens": lengths,
                         "trained_step": pl.Series(trained, dtype=pl.Int32),
                         "staleness": pl.Series([0] * n, dtype=pl.Int32), "recorded": recorded})


def _steps(ends: list[float]) -> pl.DataFrame:
    return pl.DataFrame({"job": [0] * len(ends), "step": list(range(len(ends))), "end_s": ends},
                        schema={"job": pl.Int32, "step": pl.Int32, "end_s": pl.Float64})


@pytest.mark.parametrize(("lengths", "trained", "recorded", "ends", "makespan", "cost", "expected"), [
    # every recorded sample trained by the second step's end: 4 samples in 10 s, $2 over 10 s
    ([100, 100, 100, 1000], [0, 0, 1, 1], [True] * 4, [5.0, 10.0], 10.0, 2.0,
     {"samples_per_s": 0.4, "usd_per_1k_samples": 500.0, "same_work_s": 10.0, "changed": False,
      "extrapolated": False}),
    # the long one never trained, a short redraw did: 400 of 1,300 tokens in 4 s, extrapolated to 13 s
    ([100, 100, 100, 1000, 100], [0, 0, 1, -1, 1], [True] * 4 + [False], [2.0, 4.0], 4.0, 1.0,
     {"samples_per_s": 4 / 13, "usd_per_1k_samples": 1.0 / 4 * 13 / 4 * 1000, "same_work_s": 13.0,
      "changed": True, "extrapolated": True}),
    # nothing trained: no time reaches the work
    ([100, 200], [-1, -1], [True, True], [3.0], 3.0, 1.0,
     {"samples_per_s": 0.0, "usd_per_1k_samples": None, "same_work_s": None, "changed": True,
      "extrapolated": True}),
    # no makespan: no cost per sample
    ([100], [0], [True], [0.0], 0.0, 0.0,
     {"samples_per_s": 0.0, "usd_per_1k_samples": None, "same_work_s": 0.0, "changed": False,
      "extrapolated": False}),
])
def test_same_work(lengths: list[int], trained: list[int], recorded: list[bool], ends: list[float], makespan: float,
                   cost: float, expected: dict[str, object]) -> None:
    got = same_work(_requests(lengths, trained, recorded), _steps(ends), makespan, cost)
    assert tuple(got) == SAME_WORK_KEYS
    for key, want in expected.items():
        assert got[key] == (pytest.approx(want) if isinstance(want, float) else want), key
