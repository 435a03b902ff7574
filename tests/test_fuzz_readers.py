"""Seeded fuzzing of the bundle readers (issue 26): over 1,000 reader calls on mutated bundles, every one
either rejected with one short line and exit 2, or read back exactly as written; no traceback, no hang.

Mutations (table-driven, ``random.Random(SEED)``): bit flips anywhere in every Parquet file (checksummed pages,
footers, page headers); every manifest field replaced by values of the wrong type, extreme values, control
characters, rich markup and lone surrogates; the manifest in other encodings and nested deep; every column of
every table with extreme values, another type, duplicated, dropped or joined by an unknown column. Readers are
called in-process (``rltrace.open`` plus a collect of every table, and the CLI's ``main()`` for ``inspect``),
with a few real ``rltrace`` subprocesses.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import REPO, RLTRACE

import rltrace
from rltrace.bundle import write_bundle
from rltrace.cli import main
from rltrace.errors import RltraceError
from rltrace.schema import TABLES

SEED = 26
FLIPS_PER_TABLE = 100  # x 5 tables
CALL_TIMEOUT_S = 30
MAX_LINE = 600  # "rltrace: error: " + a bounded message


class Hang(Exception):
    """A reader call ran past CALL_TIMEOUT_S."""


def _alarm(*_: Any) -> None:
    raise Hang


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny recorded sample rewritten by this rltrace (page checksums on)."""
    src = rltrace.open(REPO / "sample_traces" / "tiny_rl_cpu")
    path = tmp_path_factory.mktemp("fuzz") / "base"
    write_bundle(path, src.manifest, {n: src.table(n).collect() for n in TABLES})
    return path


class Tally:
    """Counts outcomes; every reader call goes through :meth:`read` or :meth:`cli`."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.problems: list[str] = []

    def read(self, path: Path, expect: dict[str, pl.DataFrame] | None, label: str) -> rltrace.Bundle | None:
        """Open and collect every table; compare with ``expect`` when accepted."""
        signal.alarm(CALL_TIMEOUT_S)
        try:
            bundle = rltrace.open(path)
            got = {n: bundle.table(n).collect() for n in TABLES}
        except RltraceError as e:
            self.outcomes["rejected"] += 1
            if len(str(e)) > 4 * MAX_LINE:
                self.problems.append(f"{label}: error of {len(str(e)):,} characters")
            return None
        except Hang:
            self.outcomes["hang"] += 1
            self.problems.append(f"{label}: hang")
            return None
        except BaseException as e:  # noqa: BLE001 - a traceback is what this test counts
            self.outcomes["traceback"] += 1
            self.problems.append(f"{label}: {type(e).__name__}: {str(e)[:200]}")
            return None
        finally:
            signal.alarm(0)
        self.outcomes["accepted"] += 1
        if expect is not None:
            for name, frame in expect.items():
                if not got[name].equals(frame):
                    self.outcomes["changed"] += 1
                    self.problems.append(f"{label}: {name} read back changed")
                    break
        return bundle

    def cli(self, argv: list[str], label: str) -> None:
        """The CLI in-process: exit 0 with no terminal control characters on stdout, or one line and exit 2."""
        out, err = io.StringIO(), io.StringIO()
        signal.alarm(CALL_TIMEOUT_S)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
        except Hang:
            self.outcomes["hang"] += 1
            self.problems.append(f"{label}: cli hang")
            return
        except BaseException as e:  # noqa: BLE001
            self.outcomes["traceback"] += 1
            self.problems.append(f"{label}: cli {type(e).__name__}: {str(e)[:200]}")
            return
        finally:
            signal.alarm(0)
        self.outcomes[f"cli exit {code}"] += 1
        lines = err.getvalue().splitlines()
        if code == 2:
            if len(lines) != 1 or len(lines[0]) > MAX_LINE or not lines[0].isprintable():
                self.problems.append(f"{label}: error output {err.getvalue()[:300]!r}")
        elif code != 0 or "\x1b" in out.getvalue() or "\x07" in out.getvalue():
            self.problems.append(f"{label}: exit {code}, control characters or stderr {err.getvalue()[:200]!r}")


def _copy(base: Path, work: Path) -> Path:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, work)
    return work


# ----------------------------------------------------------------------------------------------- mutations

_STRANGE = ["", "\x1b]0;pwned\x07\x1b[2J", "[/x]", "[bold]x", "x" * 100_000, "\u202e", "日本"]
_VALUES: list[Any] = [None, True, -1, 0, 1, 2**31 - 1, 2**63 - 1, 2**63, 10**12, 1.5, float("inf"), [], {},
                      [1, "a"], {"a": 1}, *_STRANGE]


def _leaves(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in _leaves(v, (*path, k))] + ([path] if path else [])
    return [path]


def _set(node: Any, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _manifest_cases(raw: dict[str, Any], rng: random.Random) -> list[tuple[str, bytes]]:
    """(label, manifest bytes): every field x several values, encodings, depth, surrogates, byte flips."""
    cases = []
    for path in _leaves(raw):
        for value in rng.sample(_VALUES, 6):
            m = json.loads(json.dumps(raw))
            _set(m, path, value)
            cases.append((f"manifest {'.'.join(path)}={str(value)[:20]!r}", json.dumps(m).encode()))
    text = json.dumps(raw)
    cases += [
        ("manifest utf-16", text.encode("utf-16")),
        ("manifest latin-1", text.replace('"vm"', '"v\u00e9"').encode("latin-1")),
        ("manifest utf-8 bom", b"\xef\xbb\xbf" + text.encode()),
        ("manifest deep", ('{"run_id": "x", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}").encode()),
        ("manifest deep object", ('{"run_id": "x", "extra": ' + '{"a":' * 5_000 + "1" + "}" * 5_001).encode()),
        ("manifest surrogate", text.replace('"run_id": "', '"run_id": "\\ud800').encode()),
        ("manifest surrogate key", text.replace('"extra": {', '"extra": {"\\udfff": 1, ').encode()),
        ("manifest NaN", text.replace('"created_ns": ', '"created_ns": NaN, "x": ').encode()),
        ("manifest huge int", text.replace('"created_ns": ', '"created_ns": 1' + "0" * 5000 + ', "x": ').encode()),
        ("manifest empty", b""),
        ("manifest array", b"[]"),
    ]
    data = text.encode()
    for i in range(100):
        flipped = bytearray(data)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        cases.append((f"manifest flip {i}", bytes(flipped)))
    return cases


def _column_values(field: pa.Field, rows: int, rng: random.Random) -> list[tuple[str, pa.Array]]:
    """Replacement columns for one field: extremes of its type, and arrays of other types."""
    t = field.type
    out: list[tuple[str, Any]] = []
    if pa.types.is_integer(t):
        info = (2**31 - 1, -(2**31)) if t == pa.int32() else (2**63 - 1, -(2**63))
        out += [("max", pa.array([info[0]] * rows, t)), ("min", pa.array([info[1]] * rows, t)),
                ("zero", pa.array([0] * rows, t)), ("as string", pa.array(["7"] * rows)),
                ("as float", pa.array([0.5] * rows))]
    elif pa.types.is_string(t):
        out += [(f"{s[:8]!r}", pa.array([s] * rows)) for s in rng.sample(_STRANGE, 4)]
        out += [("as int", pa.array([1] * rows, pa.int64()))]
    elif pa.types.is_boolean(t):
        out += [("as int", pa.array([2] * rows, pa.int8()))]
    else:  # list of ranks
        out += [("empty lists", pa.array([[]] * rows, t)), ("max rank", pa.array([[2**31 - 1]] * rows, t)),
                ("as string", pa.array(["0"] * rows))]
    out += [("nulls", pa.nulls(rows, t))]
    return out


def _table_cases(base: Path, rng: random.Random) -> list[tuple[str, str, pa.Table]]:
    """(label, table, new Arrow table): every column x (extremes, types, nulls), duplicated, dropped, unknown."""
    cases = []
    for name, schema in TABLES.items():
        table = pq.read_table(base / schema.file)
        if table.num_rows == 0:
            continue
        for i, field in enumerate(table.schema):
            for what, column in _column_values(field, table.num_rows, rng):
                cases.append((f"{name}.{field.name} {what}", name, table.set_column(i, field.name, column)))
            cases.append((f"{name}.{field.name} duplicated", name, table.append_column(field.name, table.column(i))))
            cases.append((f"{name}.{field.name} dropped", name, table.remove_column(i)))
        cases.append((f"{name} unknown column", name, table.append_column("zz_unknown", table.column(0))))
        cases.append((f"{name} long first value", name, _long_first(table, schema)))
    return cases


def _long_first(table: pa.Table, schema: Any) -> pa.Table:
    """A 10^6-character value in the table's first string column (the error line must stay short)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type):
            values = table.column(i).to_pylist()
            values[0] = "x" * 1_000_000
            return table.set_column(i, field.name, pa.array(values, field.type))
    return table


def _expected(table: pa.Table, name: str) -> pl.DataFrame:
    """What the reader must return for a table it accepts: the written values in the format's dtypes."""
    from rltrace.bundle import polars_dtype

    frame = pl.from_arrow(table)
    cols = []
    for c in TABLES[name].columns:
        dtype = polars_dtype(c.type)
        cols.append(frame[c.name].cast(dtype) if c.name in frame.columns else pl.Series(c.name, [c.default] *
                                                                                         frame.height, dtype))
    return pl.DataFrame(cols)


# ------------------------------------------------------------------------------------------------- the test


@pytest.mark.slow  # over 5 s on 2 cores
def test_fuzzed_readers_never_crash_hang_or_change_values(base: Path, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    tally = Tally()
    previous = signal.signal(signal.SIGALRM, _alarm)
    started = time.perf_counter()
    try:
        reference = tally.read(base, None, "base")
        assert reference is not None
        ref = {n: reference.table(n).collect() for n in TABLES}
        work = tmp_path / "b"

        # 1. bit flips in every Parquet file: rejected, or read back unchanged (page checksums, row counts)
        for name, schema in TABLES.items():
            data = (base / schema.file).read_bytes()
            for i in range(FLIPS_PER_TABLE):
                _copy(base, work)
                flipped = bytearray(data)
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
                (work / schema.file).write_bytes(bytes(flipped))
                tally.read(work, ref, f"flip {name} #{i}")
                if i % 10 == 0:
                    tally.cli(["inspect", str(work)], f"inspect flip {name} #{i}")

        # 2. manifest: fields, types, extremes, encodings, depth, flips; accepted means parsed as written
        raw = json.loads((base / "manifest.json").read_text())
        for i, (label, content) in enumerate(_manifest_cases(raw, rng)):
            _copy(base, work)
            (work / "manifest.json").write_bytes(content)
            bundle = tally.read(work, ref, label)
            if bundle is not None:
                written = json.loads(content.decode("utf-8-sig" if content.startswith(b"\xef\xbb\xbf") else "utf-8"))
                again = json.loads(bundle.manifest.to_json())
                for key, value in written.items():
                    if key in again and key != "extra" and again[key] != value:
                        tally.outcomes["changed"] += 1
                        tally.problems.append(f"{label}: manifest field {key} read back as {again[key]!r}")
            if i % 4 == 0:
                tally.cli(["inspect", str(work), "--json"] if i % 8 else ["inspect", str(work)], f"inspect {label}")

        # 3. every column of every table: extremes, other types, nulls, duplicated, dropped, unknown
        for i, (label, name, table) in enumerate(_table_cases(base, rng)):
            _copy(base, work)
            pq.write_table(table, work / TABLES[name].file, write_page_checksum=True)
            expect = dict(ref)
            try:
                expect[name] = _expected(table, name)
            except (pl.exceptions.PolarsError, pa.ArrowException, TypeError, ValueError):
                expect.pop(name)  # not castable: the reader must reject it (or hold nothing to compare)
            tally.read(work, expect, label)
            if i % 2 == 0:
                tally.cli(["inspect", str(work)], f"inspect {label}")
    finally:
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.perf_counter() - started
    calls = sum(tally.outcomes.values())
    print(f"\nfuzzed reader calls: {calls} in {elapsed:.1f} s; {dict(tally.outcomes)}")
    assert not tally.problems, "\n".join(tally.problems[:30])
    assert calls >= 1000, calls
    assert tally.outcomes["rejected"] > 100 and tally.outcomes["accepted"] > 100  # both paths exercised


@pytest.mark.parametrize("mutation", ["manifest not utf-8", "duplicate column", "phase markup", "deep json"])
def test_real_cli_on_a_damaged_bundle(base: Path, tmp_path: Path, mutation: str) -> None:
    """The installed entry point, in its own process: one line and exit 2, or a clean table."""
    work = _copy(base, tmp_path / "b")
    if mutation == "manifest not utf-8":
        (work / "manifest.json").write_bytes((work / "manifest.json").read_bytes().replace(b'"vm"', b'"\xff"'))
    elif mutation == "duplicate column":
        t = pq.read_table(work / "spans.parquet")
        pq.write_table(t.append_column("phase", t.column("phase")), work / "spans.parquet")
    elif mutation == "phase markup":
        t = pq.read_table(work / "spans.parquet")
        i = t.schema.get_field_index("phase")
        pq.write_table(t.set_column(i, "phase", pa.array(["[/x]\x1b[2J"] * t.num_rows)), work / "spans.parquet")
    else:
        (work / "manifest.json").write_text('{"run_id": "x", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}")
    # The installed console script from a temp folder (`python -m rltrace` in the repo root imports the source tree).
    done = subprocess.run([RLTRACE, "inspect", str(work)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          check=False)
    assert "Traceback" not in done.stderr
    if mutation == "phase markup":
        assert done.returncode == 0, done.stderr
        assert "[/x]\\x1b[2J" in done.stdout and "\x1b" not in done.stdout
    else:
        assert done.returncode == 2
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("rltrace: error: ")
