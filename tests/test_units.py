"""One dtype table and one bus factor for the whole project (rltrace/units.py), and no copies of either."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from rltrace.units import BUS_FACTORS, DTYPE_BYTES, bus_factor, dtype_bytes

REPO = Path(__file__).resolve().parents[1]
SOURCES = [p for d in ("rltrace", "replay", "collectors", "dashboards") for p in (REPO / d).rglob("*.py")
           if p.name != "units.py"]


@pytest.mark.parametrize(("op", "n", "factor"), [
    ("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0), ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875),
    ("all_to_all", 16, 0.9375), ("broadcast", 8, 1.0), ("all_reduce", 1, 0.0),
])
def test_bus_factors_are_nccl_tests(op: str, n: int, factor: float) -> None:
    assert bus_factor(op, n) == factor


@pytest.mark.parametrize(("name", "size"), [
    ("bf16", 2), ("BFloat16", 2), (" c10::BFloat16 ", 2), ("float", 4), ("half", 2), ("fp8", 1),
    ("float8_e4m3fn", 1), ("long int", 8), ("int8", 1), ("complex32", None),
])
def test_dtype_sizes_by_every_name(name: str, size: int | None) -> None:
    assert dtype_bytes(name) == size


def _code(path: Path) -> str:
    """The file without its comments and strings (docstrings state the factors in words)."""
    kept = [tok.string for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
            if tok.type not in (tokenize.COMMENT, tokenize.STRING)]
    return " ".join(kept)


def test_no_module_spells_out_a_bus_factor() -> None:
    # (n - 1) / n over a count of ranks, whatever its name (NVLS's (channels - 1) / channels, a constant, is a share)
    ring = re.compile(r"\(\s*([a-z_]\w*)\s*-\s*1\s*\)\s*/\s*\1\b")
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in SOURCES for m in ring.finditer(_code(p))]
    assert not found, f"use rltrace.units.bus_factor: {found}"
    assert set(BUS_FACTORS) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"}


def test_no_module_holds_its_own_dtype_table() -> None:
    names = set(DTYPE_BYTES)
    copies = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                sizes = [v for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, int)]
                if len(keys & names) >= 2 and len(sizes) == len(node.values):
                    copies.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not copies, f"read element sizes from rltrace.units.DTYPE_BYTES: {copies}"
