"""Python numbers out of polars aggregates, with their type.

polars types ``Series.max()``, ``.min()``, ``.median()``, ``.sum()`` and ``DataFrame.item()``-like results as
any Python literal (a date, a string, a list...) or None, whatever the column holds; on a numeric column they
are an int or a float. These helpers say so where the code relies on it, and fail loudly (TypeError, as
``float(None)`` does) on anything else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # this module is imported where polars may not be loaded yet
    import polars as pl


def number(value: object) -> float:
    """``value`` (an aggregate of a numeric column) as a float."""
    if isinstance(value, (int, float)):
        return float(value)
    raise TypeError(f"expected a number, got {type(value).__name__}: {value!r}")


def integer(value: object) -> int:
    """``value`` (an aggregate of a numeric column) as an int, truncated as ``int()`` does."""
    if isinstance(value, (int, float)):
        return int(value)
    raise TypeError(f"expected a number, got {type(value).__name__}: {value!r}")


def first_not_positive(values: pl.Series) -> int | None:
    """Position of the first value of a numeric series that is not a finite number above 0 (a blank passes; NaN does
    not: polars orders it above every number, so ``> 0`` held for it), else None."""
    bad = (values.is_not_null() & ~(values.is_finite() & (values > 0))).arg_true()
    return int(bad[0]) if len(bad) else None
