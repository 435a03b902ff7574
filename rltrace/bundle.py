"""Reading and writing trace bundles: a directory of ``manifest.json`` plus one Parquet file per table.

Reading is lazy (one polars LazyFrame per table, scanned by row group); writing is atomic: tables are written
under temporary names inside a temporary sibling directory that is renamed into place at the end, so a reader
never sees a half-written bundle or file.
"""

from __future__ import annotations

import copy
import difflib
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from rltrace.errors import BundleError, ValidationError, clean
from rltrace.manifest import MANIFEST_FILE, MAX_MANIFEST_BYTES, Manifest
from rltrace.sample_traces import list_samples
from rltrace.schema import FORMAT_MAJOR, FORMAT_MINOR, TABLES, TableSchema, parse_version
from rltrace.validate import check_frame

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self needs Python 3.11; only type checkers read this

TableLike: TypeAlias = pl.DataFrame | pa.Table | Mapping[str, Sequence[Any]] | None
ROW_GROUP_ROWS = 65_536


def polars_dtype(t: pa.DataType) -> pl.DataType:
    """The polars dtype of an Arrow type of this format."""
    return pl.from_arrow(pa.array([], type=t)).dtype  # type: ignore[union-attr]  # from_arrow of an Array: a Series


def polars_schema(table: TableSchema) -> dict[str, pl.DataType]:
    """Column name -> polars dtype of a bundle table, as the reader returns it."""
    return {c.name: polars_dtype(c.type) for c in table.columns}


class Bundle:
    """An opened trace bundle: the manifest and one polars LazyFrame per table (see :mod:`rltrace.schema`)."""

    def __init__(self, path: Path, manifest: Manifest, frames: dict[str, pl.LazyFrame]) -> None:
        self.path = path
        self.manifest = manifest
        self._frames = frames

    def table(self, name: str) -> pl.LazyFrame:
        """The named table, with every column of the current format version and its declared dtype."""
        if name not in self._frames:
            raise KeyError(f"no table {name!r}; tables are {', '.join(TABLES)}")
        return self._frames[name]

    @property
    def requests(self) -> pl.LazyFrame:
        return self._frames["requests"]

    @property
    def collectives(self) -> pl.LazyFrame:
        return self._frames["collectives"]

    @property
    def weight_syncs(self) -> pl.LazyFrame:
        return self._frames["weight_syncs"]

    @property
    def spans(self) -> pl.LazyFrame:
        return self._frames["spans"]

    @property
    def iterations(self) -> pl.LazyFrame:
        return self._frames["iterations"]

    def validate(self) -> None:
        """Check every page checksum, row count and value rule of every table; raises :class:`BundleError`
        (:class:`ValidationError` for a value) at the first problem."""
        for name in self._frames:
            self.validate_table(name)

    def validate_table(self, name: str) -> None:
        """:meth:`validate` for one table."""
        frame = self.table(name)
        file = _rel(self.path, TABLES[name].file)
        try:
            verify_pages(self.path / TABLES[name].file, file, self.manifest.tables.get(name))
            check_frame(frame, TABLES[name], file)
        except (pl.exceptions.PolarsError, OSError, pa.ArrowException) as e:
            raise BundleError(f"{file}: cannot be read ({_first_line(e)})") from None
        except BaseException as e:  # polars' Rust panic on a damaged file is a BaseException (pyo3)
            if type(e).__name__ != "PanicException":
                raise
            raise BundleError(f"{file}: cannot be read (damaged: the Parquet reader gave up)") from None

    def __repr__(self) -> str:
        return f"Bundle({str(self.path)!r}, run_id={self.manifest.run_id!r})"


RUN_FILE = "metrics.json"
"""what every replay run folder holds (``rltrace replay -o``): a run folder is not a bundle"""


def _what_it_is(root: Path) -> str:
    """For a folder that is no bundle: what it is when it is a replay's output, and what opens it."""
    if (root / RUN_FILE).is_file():
        return f": it is a replay run folder; `rltrace dashboard {root}` reports on it"
    runs = sorted(p.name for p in root.iterdir() if (p / RUN_FILE).is_file())[:5] if root.is_dir() else []
    if runs:
        return f": it holds replay run folders ({', '.join(runs)}); `rltrace dashboard {root}` reports on them"
    return ""


def _sample_hint(name: str) -> str:
    """For a bare name that is no path here: the shipped samples' names (the nearest first), which the CLI and
    ``rltrace.open`` take in a bundle's place."""
    samples = list_samples()
    if os.sep in name or "/" in name or not samples:
        return ""
    if name in samples:  # open_bundle takes paths only
        return f" ({name} is a shipped sample's name: rltrace.open({name!r}) opens it)"
    near = difflib.get_close_matches(name, samples, n=len(samples), cutoff=0.4)
    return f" (nor a shipped sample: {', '.join([*near, *(s for s in samples if s not in near)])})"


def open_bundle(path: str | os.PathLike[str], *, validate: bool = True) -> Bundle:
    """Open a trace bundle directory.

    With ``validate`` (the default) every value is checked once, in one streaming pass per table; pass
    ``validate=False`` to skip that when the bundle is known good. Structural problems (missing files, a
    corrupt footer, missing required columns, wrong types, a newer major version) are always reported.
    Raises :class:`BundleError` or :class:`ValidationError`.
    """
    root = Path(path)
    if not root.exists():
        raise BundleError(f"{root}: no such file or directory{_sample_hint(str(path))}")
    if not root.is_dir():
        raise BundleError(f"{root}: not a trace bundle (expected a directory holding {MANIFEST_FILE})")
    mpath = root / MANIFEST_FILE
    if not mpath.is_file():
        raise BundleError(f"{root}: not a trace bundle (no {MANIFEST_FILE}){_what_it_is(root)}")
    mfile = _rel(root, MANIFEST_FILE)
    try:
        if mpath.stat().st_size > MAX_MANIFEST_BYTES:  # before reading it whole
            raise ValidationError(f"{mpath.stat().st_size:,} bytes: too large for a manifest", file=mfile)
        text = mpath.read_bytes()
    except OSError as e:
        raise BundleError(f"{mfile}: cannot be read ({e.strerror})") from None
    manifest = Manifest.from_json(text, file=mfile)
    version = _check_version(manifest.format_version, mfile)
    frames = {name: _scan(root, schema, version) for name, schema in TABLES.items()}
    bundle = Bundle(root, manifest, frames)
    if validate:
        bundle.validate()
    return bundle


def verify_pages(path: Path, file: str, rows: int | None = None) -> None:
    """Read every page of a Parquet file with its CRC checked (where the writer stored one), row group by row
    group, and compare its row count with the manifest's ``rows``: a flipped byte in a page, or a footer that
    lost rows, is a :class:`BundleError` naming the file. A missing file (a table newer than the bundle) passes.
    """
    if not path.is_file():
        return
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
        if rows is not None and pf.metadata.num_rows != rows:
            raise BundleError(f"{file}: holds {pf.metadata.num_rows:,} rows, the manifest says {rows:,} (a damaged "
                              "or replaced file)")
        read = 0
        for i in range(pf.num_row_groups):  # one row group in memory at a time
            got, declared = pf.read_row_group(i).num_rows, pf.metadata.row_group(i).num_rows
            if got != declared:
                raise BundleError(f"{file}: row group {i} holds {got:,} rows, its footer says {declared:,} (damaged)")
            read += got
        if read != pf.metadata.num_rows:
            raise BundleError(f"{file}: its row groups hold {read:,} rows, its footer says {pf.metadata.num_rows:,} "
                              "(damaged)")
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise BundleError(f"{file}: corrupt ({_first_line(e)})") from None


_I32_FIELD = 0x15  # Thrift compact protocol: the next field (id + 1), an i32


def _varint_end(data: bytes, at: int) -> int:
    while at < len(data) and data[at] & 0x80:
        at += 1
    return at + 1


def has_page_checksums(path: Path) -> bool | None:
    """Whether a Parquet file's pages carry CRCs (its first page's header holds one: PageHeader's fields 1-3 are the
    page type and sizes, field 4 the optional crc, all i32s); None for a file with no page (an empty table) or one
    that cannot be read (verification reports that)."""
    try:
        meta = pq.ParquetFile(path).metadata
        if meta.num_row_groups == 0 or meta.num_columns == 0:
            return None
        chunk = meta.row_group(0).column(0)
        first = min(o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o is not None and o > 0)
        with open(path, "rb") as f:
            f.seek(first)
            header = f.read(64)
    except (pa.ArrowException, OSError, ValueError):
        return None
    at = 0
    for _ in range(3):  # type, uncompressed size, compressed size
        if at >= len(header) or header[at] != _I32_FIELD:
            return None
        at = _varint_end(header, at + 1)
    return at < len(header) and header[at] == _I32_FIELD


def _check_version(text: str, file: str) -> tuple[int, int]:
    try:
        version = parse_version(text)
    except ValueError:
        raise ValidationError(f"format_version {clean(repr(text), 40)} is not 'major.minor'", file=file) from None
    if version[0] != FORMAT_MAJOR:
        raise BundleError(
            f"{file}: format version {clean(text, 40)} is not readable by this rltrace, which reads "
            f"{FORMAT_MAJOR}.0 to {FORMAT_MAJOR}.{FORMAT_MINOR} (newer minors too)"
        )
    return version


def _scan(root: Path, table: TableSchema, version: tuple[int, int]) -> pl.LazyFrame:
    path = root / table.file
    file = _rel(root, table.file)
    if path.exists() and not path.is_file():
        raise BundleError(f"{file}: is {'a folder' if path.is_dir() else 'not a regular file'}, not a Parquet table")
    if not path.is_file():
        if version < table.since:  # written before the table existed
            return pl.LazyFrame(schema=polars_schema(table))
        raise BundleError(f"{file}: missing (every bundle holds {', '.join(t.file for t in TABLES.values())})")
    try:
        stored = pq.read_schema(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:  # a column name that is not UTF-8
        raise BundleError(f"{file}: not a valid Parquet file ({_first_line(e)})") from None
    duplicated = sorted({n for n in stored.names if stored.names.count(n) > 1})
    if duplicated:
        raise ValidationError("appears more than once in the file", file=file, column=duplicated[0])
    if version <= (FORMAT_MAJOR, FORMAT_MINOR):
        # Only a newer minor version adds columns; an unknown one in a file of a version this reader knows is
        # damage (a flipped byte in the footer renames 'step' to 'stfp', and the optional column would silently
        # read as its default).
        unknown = [n for n in stored.names if n not in table.names]
        if unknown:
            raise ValidationError(f"unknown column in a format {version[0]}.{version[1]} file", file=file,
                                  column=clean(unknown[0], 80))
    exprs: list[pl.Expr] = []
    for col in table.columns:
        dtype = polars_dtype(col.type)
        if col.name not in stored.names:
            if col.required and version >= col.since:
                raise ValidationError("missing required column", file=file, column=col.name)
            exprs.append(pl.lit(col.default, dtype=dtype).alias(col.name))
            continue
        problem = _type_mismatch(stored.field(col.name).type, col.type)
        if problem:
            raise ValidationError(problem, file=file, column=col.name)
        exprs.append(pl.col(col.name).cast(dtype))
    return pl.scan_parquet(path, glob=False).select(exprs)  # a path, never a pattern: 'run[1]' is a folder name


def _family(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _family(t.value_type)
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return f"list of {_family(t.value_type)}"
    return str(t)


def _type_mismatch(stored: pa.DataType, wanted: pa.DataType) -> str | None:
    if _family(stored) == _family(wanted):
        return None
    return f"has type {stored}, expected {_family(wanted)} ({wanted})"


def _rel(root: Path, name: str) -> str:
    return str(root / name)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


# --------------------------------------------------------------------------------------------- writing


def to_arrow(table: TableSchema, data: TableLike) -> pa.Table:
    """Convert user data to the table's exact Arrow schema, filling absent optional columns.

    Raises :class:`ValidationError` for unknown or missing required columns and for values that do not fit
    the column type (no silent truncation: casts are safe casts).
    """
    schema = table.arrow_schema()
    if data is None:
        return schema.empty_table()
    if isinstance(data, pl.DataFrame):
        src = data.to_arrow()
    elif isinstance(data, pa.Table):
        src = data
    else:
        try:
            src = pa.table(
                {k: list(v) if not isinstance(v, (pa.Array, pa.ChunkedArray)) else v for k, v in data.items()}
            )
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise ValidationError(f"cannot build a table ({_first_line(e)})", file=table.file) from None
    unknown = [n for n in src.column_names if n not in table.names]
    if unknown:
        raise ValidationError("unknown column (not in format v1)", file=table.file, column=unknown[0])
    arrays = []
    for col in table.columns:
        if col.name not in src.column_names:
            if col.required and col.default is None:
                raise ValidationError("missing required column", file=table.file, column=col.name)
            arrays.append(pa.array([col.default] * src.num_rows, type=col.type))
            continue
        try:
            arrays.append(src.column(col.name).cast(col.type, safe=True))
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise ValidationError(
                f"cannot store as {col.type} ({_first_line(e)})", file=table.file, column=col.name
            ) from None
    return pa.Table.from_arrays(arrays, schema=schema)


class TableWriter:
    """Streams one table into a Parquet file, row group by row group, under a temporary name.

    ``close()`` renames the file into place, so readers see either nothing or the whole file. Collectors
    use this to flush bounded buffers; :func:`write_bundle` uses it for whole tables.
    """

    def __init__(self, path: Path, table: TableSchema, *, row_group_rows: int = ROW_GROUP_ROWS) -> None:
        self.path = Path(path)
        self.table = table
        self.rows = 0
        self._row_group_rows = row_group_rows
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{uuid.uuid4().hex[:8]}")
        # page checksums (CRC32 of every page): the reader verifies them, so a flipped byte is an error, not a
        # silently changed value
        self._writer = pq.ParquetWriter(self._tmp, table.arrow_schema(), compression="zstd", write_page_checksum=True)

    def write(self, data: TableLike) -> None:
        """Append rows (converted to the exact schema; raises ValidationError if they do not fit)."""
        arrow = to_arrow(self.table, data)
        if arrow.num_rows:
            self._writer.write_table(arrow, row_group_size=self._row_group_rows)
            self.rows += arrow.num_rows

    def close(self) -> int:
        """Finish the file and move it into place; returns the number of rows written."""
        self._writer.close()
        os.replace(self._tmp, self.path)
        return self.rows

    def abort(self) -> None:
        """Drop the partial file."""
        self._writer.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_bundle(
    path: str | os.PathLike[str],
    manifest: Manifest,
    tables: Mapping[str, TableLike],
    *,
    overwrite: bool = False,
) -> Path:
    """Validate and write a bundle atomically; returns its path.

    ``tables`` maps table names to data (polars DataFrame, Arrow table or a mapping of columns); absent
    tables are written empty. Values are validated before anything is written, so an invalid table never
    reaches disk. The manifest written is a copy of ``manifest`` with ``tables`` set to the row counts; the
    caller's object is not changed (:func:`save_bundle` returns the copy). With ``overwrite``, an existing bundle
    (and only a bundle, or an empty directory) at ``path`` is replaced.
    """
    save_bundle(path, manifest, tables, overwrite=overwrite)
    return Path(path)


def save_bundle(
    path: str | os.PathLike[str],
    manifest: Manifest,
    tables: Mapping[str, TableLike],
    *,
    overwrite: bool = False,
) -> Manifest:
    """:func:`write_bundle`, returning the manifest written (a copy of ``manifest`` with its row counts)."""
    final = Path(path)
    unknown = set(tables) - set(TABLES)
    if unknown:
        raise ValidationError(f"unknown table {min(unknown)!r} (tables are {', '.join(TABLES)})")
    check_target(final, overwrite)
    arrow = {name: to_arrow(schema, tables.get(name)) for name, schema in TABLES.items()}
    for name, data in arrow.items():
        check_frame(pl.from_arrow(data).lazy(), TABLES[name], TABLES[name].file)  # type: ignore[union-attr]  # of a Table: a DataFrame
    return write_atomically(final, manifest, lambda name, w: w.write(arrow[name]))


def check_target(final: Path, overwrite: bool) -> None:
    """Refuse to write a bundle at ``final`` unless it is free, or (with ``overwrite``) a bundle or an empty
    directory."""
    if final.exists():
        if not overwrite:
            raise BundleError(f"{final}: already exists (pass --force to replace it)")
        if not final.is_dir() or (not (final / MANIFEST_FILE).is_file() and any(final.iterdir())):
            raise BundleError(f"{final}: exists and is not a trace bundle; refusing to replace it")


def write_atomically(final: Path, manifest: Manifest, fill: Callable[[str, TableWriter], None]) -> Manifest:
    """Write every table (``fill(name, writer)`` writes its rows) and the manifest into a temporary folder
    beside ``final``, then rename it into place: a reader never sees a partial bundle, and a failure (a full
    disk) leaves none behind. Returns the manifest written: a copy of ``manifest`` (which is left unchanged)
    whose ``tables`` holds each table's row count."""
    written = copy.deepcopy(manifest)
    written.tables = {}
    tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as e:  # name the folder the user asked for, not the temporary one beside it
        raise BundleError(f"{final}: cannot write a bundle there ({e.strerror or e})") from None
    try:
        for name, schema in TABLES.items():
            with TableWriter(tmp / schema.file, schema) as w:
                fill(name, w)
            written.tables[name] = w.rows
        (tmp / MANIFEST_FILE).write_text(written.to_json(), encoding="utf-8")
        if final.exists():
            old = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old)
        else:
            os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return written
