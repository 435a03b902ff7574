"""JSON as strict parsers read it.

Python's ``json`` writes a non-finite float as a bare ``NaN`` or ``Infinity``, which is not JSON: a browser's
``JSON.parse``, ``jq`` and most other languages' parsers refuse the whole document. The files of a run and a sweep
(metrics.json, config.json, points/*.json) and every ``--json`` output go through :func:`dumps`, which writes such a
value as ``null`` (no figure), never as a number.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float, at any depth of dicts, lists and tuples, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """:func:`json.dumps` of :func:`finite` ``(value)``; ``kwargs`` as json.dumps takes them."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
