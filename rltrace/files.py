"""Files as rltrace writes and identifies them: one output written so that a reader never sees half of it, and
the digest that names a file's content."""

from __future__ import annotations

import gzip
import hashlib
import os
import uuid
from pathlib import Path

from rltrace.errors import ConfigError


def write_text(path: Path, text: str) -> int:
    """Write atomically (a reader never sees half a file), gzip-compressed when the name ends in .gz; return
    the bytes written. A missing folder or an unwritable path is bad input (a ConfigError)."""
    if not path.parent.exists():
        raise ConfigError(f"{path}: folder {path.parent} does not exist")
    data = text.encode("utf-8")
    if path.suffix == ".gz":
        # gzip's default level: a 1M-request trace shrinks 7.5x in 2.7 s (benchmarks/dashboard_speed.py)
        data = gzip.compress(data, compresslevel=6, mtime=0)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")  # its own: two writers never share one
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException as e:  # a full disk, or Ctrl-C: no temporary file left behind
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise ConfigError(f"{path}: cannot write ({e.strerror})") from None
        raise
    return len(data)


def sha256_of(path: str | os.PathLike[str]) -> str:
    """The SHA-256 hex digest of the bytes of the file at ``path`` (an OSError where it cannot be read)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
