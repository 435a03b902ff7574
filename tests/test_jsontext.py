"""Every JSON rltrace writes is strict JSON: a figure that is not a finite number is null (rltrace/jsontext.py)."""

from __future__ import annotations

import json
import math

import pytest

from rltrace import jsontext


@pytest.mark.parametrize(("value", "text"), [
    ({"a": math.nan, "b": [math.inf, 1.5, -math.inf], "c": (2, "x")},
     '{"a": null, "b": [null, 1.5, null], "c": [2, "x"]}'),
    ({"nested": {"deeper": [{"x": float("nan")}]}}, '{"nested": {"deeper": [{"x": null}]}}'),
    ([0.0, -0.0, 1e308], "[0.0, -0.0, 1e+308]"),
])
def test_non_finite_floats_are_written_as_null(value: object, text: str) -> None:
    assert jsontext.dumps(value) == text
    json.loads(jsontext.dumps(value), parse_constant=lambda word: pytest.fail(f"{word} in the output"))
