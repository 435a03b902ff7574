"""The merge of a recording in bounded memory: N collective rows in real shards, merged, peak RSS measured.

    python benchmarks/merge_memory.py [--rows 10000000] [--ranks 8] [--p2p-every 0]

Writes the shards a recording of an R-rank job leaves (one shard per rank, the recorder's own Parquet flush
files of up to 262,144 rows and its meta.json), each rank issuing rows/R collectives on the world group (all
reduces, with an all_gather every 7th and a broadcast every 50th op, 100 ops per step, ranks a few
microseconds apart and one rank lagging a step label behind, as real ranks do), optionally a send from rank 0
to rank 1 every K ops. Then runs the real `rltrace record --merge` in a child process and prints that child's
peak RSS (getrusage) and wall time, and checks the bundle: every row kept, one step and seq per operation.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _bench import at_least, run

FLUSH_ROWS = 262_144  # the recorder's largest flush (MAX_BUFFER_ROWS)
MEASURE = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(done.returncode)")


def write_shards(root: Path, rows: int, ranks: int, p2p_every: int) -> int:
    """One shard per rank under ``root``/shards; returns the rows written."""
    from rltrace.schema import TABLES

    schema = TABLES["collectives"].arrow_schema()
    per_rank = rows // ranks
    written = 0
    for rank in range(ranks):
        shard = root / "shards" / f"bench-{1000 + rank}-{rank:06x}"
        shard.mkdir(parents=True)
        seq_base, file_no = 0, 0
        while seq_base < per_rank:
            n = min(FLUSH_ROWS, per_rank - seq_base)
            seq = np.arange(seq_base, seq_base + n, dtype=np.int64)
            op = np.full(n, "all_reduce", dtype=object)
            op[seq % 7 == 3] = "all_gather"
            op[seq % 50 == 0] = "broadcast"
            peer = np.where(op == "broadcast", 0, -1)
            if p2p_every and rank in (0, 1):
                send = seq % p2p_every == 1
                op[send] = "send" if rank == 0 else "recv"
                peer[send] = 1 - rank
            step = (seq // 100 - (rank == ranks - 1) * (seq % 100 < 2)).clip(0).astype(np.int32)
            start = 1_700_000_000_000_000_000 + seq * 20_000 + rank * 3_000
            count = np.full(n, 1 << 20, dtype=np.int64)
            ranks_list = pa.ListArray.from_arrays(np.arange(0, (n + 1) * ranks, ranks, dtype=np.int32),
                                                  pa.array(np.tile(np.arange(ranks, dtype=np.int32), n)))
            table = pa.Table.from_arrays([
                pa.array(step), pa.array(np.full(n, rank, dtype=np.int32)), pa.array(np.full(n, "world", dtype=object)),
                ranks_list, pa.array(op, type=pa.string()), pa.array(np.full(n, "bfloat16", dtype=object)),
                pa.array(count), pa.array(count * 2), pa.array(count * 2),
                pa.array(peer.astype(np.int32), mask=peer < 0), pa.array(seq), pa.array(start),
                pa.array(start + 15_000), pa.array(np.zeros(n, dtype=bool)),
            ], schema=schema)
            file_no += 1
            pq.write_table(table, shard / f"collectives-{file_no:06d}.parquet", compression="zstd")
            seq_base += n
            written += n
        meta = {"pid": 1000 + rank, "host": "bench", "argv": ["train.py"], "started_ns": rank, "roles": ["trainer"],
                "rank": rank, "world": f"127.0.0.1:29500/{ranks}", "engines": {}, "backends": {"world": "nccl"},
                "errors": {}, "dropped": 0}
        (shard / "meta.json").write_text(json.dumps(meta))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=at_least(1), default=10_000_000)
    parser.add_argument("--ranks", type=at_least(1), default=8)
    parser.add_argument("--p2p-every", type=int, default=0, help="a send from rank 0 to 1 every K ops (0: none)")
    args = parser.parse_args()
    rltrace = str(Path(sys.executable).parent / "rltrace")
    tmp = Path(tempfile.mkdtemp(prefix="rltrace-merge-"))
    try:
        t0 = time.perf_counter()
        rows = write_shards(tmp / "rec", args.rows, args.ranks, args.p2p_every)
        print(f"wrote {rows:,} collective rows in {args.ranks} shards ({time.perf_counter() - t0:.1f} s, "
              f"{sum(f.stat().st_size for f in (tmp / 'rec').rglob('*.parquet')) / 2**20:.0f} MiB)")
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", MEASURE, rltrace, "record", "--merge", str(tmp / "rec"),
                               "-o", str(tmp / "run")], capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        peak = int(done.stdout.strip().splitlines()[-1]) / 1024  # ru_maxrss is KiB on Linux
        import polars as pl

        coll = pl.scan_parquet(tmp / "run" / "collectives.parquet", glob=False)
        check = coll.select(pl.len().alias("rows"), pl.struct("seq", "step").n_unique().alias("ops"),
                            pl.col("seq").n_unique().alias("seqs")).collect(engine="streaming").row(0, named=True)
        print(f"merged {check['rows']:,} rows ({check['seqs']:,} operations, {check['ops']:,} (seq, step) pairs): "
              f"peak RSS {peak:.0f} MiB, {wall:.1f} s")
        print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}")
        assert check["rows"] == rows and check["ops"] == check["seqs"], "the merge lost rows or split an operation"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    run(main)
