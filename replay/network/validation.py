"""Hold the collective model against measured NCCL timings: the public H100 tables in ../shared/data.

- aiconfigurator's NCCL sweep (ai-dynamo/aiconfigurator, Apache-2.0; NCCL on 2/4/8 H100 SXM of one node):
  all_gather, reduce_scatter, all_reduce, alltoall; ``message_size`` counts elements (half: 2 bytes, int8: 1),
  latency in ms; the same sweeps of H100, H200, B200 and A100 are packaged (:func:`one_node_compare`);
- Vidur's h100_dgx all-reduce profile (microsoft/vidur, MIT): ``size`` in bytes, time in ms, 2/4/8 GPUs; its
  dtype is not in the table; Vidur's profiler allocates float16 (GraphedCollective's default dtype in
  vidur/profiling/collectives/collectives_impl.py), so it is taken as half;
- Vidur's h100_dgx send/recv profile: one GPU sends to another, in one node (``devices_per_node`` 2: NVLink) or
  on two nodes (``devices_per_node`` 1: each node's NIC; vidur/profiling/utils.py places num_workers /
  devices_per_node nodes). rltrace has no point-to-point op; a weight sync to one generator is a broadcast over
  two ranks, one hop, so that is what the model times, on one NVSwitch node or on two nodes of one GPU and one
  400 Gb/s NIC each (the profile's name says DGX H100, whose datasheet gives each GPU its own 400 Gb/s
  ConnectX-7).

The model uses only spec-sheet figures (the GPU catalog's NVLink and HBM bandwidth, the NIC's line rate), NCCL's
own latencies and NVLS efficiency, two efficiency constants (NVLink and local copy) and the NIC's assumed one
(rltrace.replay.topologies.base), nothing fitted per size.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
from rltrace.replay.network.collectives import collective
from rltrace.replay.topologies import parse
from rltrace.replay.topologies.base import Topology

from rltrace import units
from rltrace.errors import ConfigError
from rltrace.scalars import first_not_positive

# the NCCL dtypes modelled
DTYPE_BYTES = {name: units.DTYPE_BYTES[name] for name in ("half", "int8", "float", "bfloat16")}
MODELLED_AS = {"send_recv": "broadcast"}  # one sender, one receiver: a two-rank broadcast is one hop
# aiconfigurator's op names (nccl-tests' binaries) -> the model's; its all-to-all is nccl-tests' alltoall_perf, whose
# size is each rank's send buffer (collector/network/collect_nccl.py), as the model's is
AIC_OPS = {"all_gather": "all_gather", "reduce_scatter": "reduce_scatter", "all_reduce": "all_reduce",
           "alltoall": "all_to_all"}


AIC_COLUMNS = ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency")
VIDUR_COLUMNS = ("num_workers", "devices_per_node", "size")


def read_table(path: Path, columns: tuple[str, ...], positive: tuple[str, ...] = ()) -> pl.DataFrame:
    """A measured table (Parquet, or CSV by its suffix) with at least ``columns``, none of them empty, and the
    ``positive`` ones numbers above 0 (cast to Float64); what is wrong with it, the file and column named, as a
    ConfigError."""
    try:
        frame = pl.read_parquet(path) if path.suffix.lower() == ".parquet" else pl.read_csv(path)
    except (pl.exceptions.PolarsError, OSError) as e:
        kind = "Parquet" if path.suffix.lower() == ".parquet" else "CSV"
        raise ConfigError(f"{path}: not a readable {kind} file ({str(e).splitlines()[0]})") from None
    return checked(frame, path, columns, positive)


def checked(frame: pl.DataFrame, path: str | Path, columns: tuple[str, ...],
            positive: tuple[str, ...] = ()) -> pl.DataFrame:
    """:func:`read_table`'s checks on a table already read (``path`` names it in the errors)."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ConfigError(f"{path}: missing columns {', '.join(missing)} (expected {', '.join(columns)})")
    empty = [c for c in columns if frame[c].null_count()]
    if empty:
        raise ConfigError(f"{path}: column {empty[0]} has empty values")
    for c in positive:
        try:
            values = frame[c].cast(pl.Float64, strict=True)
        except (pl.exceptions.PolarsError, TypeError):  # text (or a type polars cannot make a number of)
            raise ConfigError(f"{path}: column {c} holds values that are not numbers") from None
        bad = first_not_positive(values)  # blanks were refused above
        if bad is not None:
            raise ConfigError(f"{path}: column {c} must be a finite number above 0 in every row, got {values[bad]!r}")
        frame = frame.with_columns(values)
    return frame


def measured(directory: str | Path) -> pl.DataFrame:
    """source, op, dtype, gpus, nodes, size_bytes, measured_s from whichever tables ``directory`` holds."""
    root, parts = Path(directory), []
    if not root.is_dir():
        what = "a file" if root.exists() else "no such folder"
        raise ConfigError(f"{root}: {what} (--tables takes a folder of NCCL tables)")
    aic = root / "aic_nccl_perf.parquet"
    if aic.exists():
        frame = (read_table(aic, AIC_COLUMNS, ("num_gpus", "message_size", "latency"))
                 .with_columns(pl.col("nccl_dtype", "op_name").cast(pl.String))
                 .filter(pl.col("nccl_dtype").is_in(list(DTYPE_BYTES)), pl.col("op_name").is_in(list(AIC_OPS))))
        parts.append(frame.select(
            pl.lit("aiconfigurator").alias("source"), pl.col("op_name").replace_strict(AIC_OPS).alias("op"),
            pl.col("nccl_dtype").alias("dtype"), pl.col("num_gpus").alias("gpus"), pl.lit(1).alias("nodes"),
            (pl.col("message_size") * pl.col("nccl_dtype").replace_strict(DTYPE_BYTES, return_dtype=pl.Int64))
            .alias("size_bytes"),
            (pl.col("latency") / 1e3).alias("measured_s")))
    for op in ("all_reduce", "send_recv"):
        vidur = root / f"vidur_h100_dgx_{op}.csv"
        if vidur.exists():
            timed = (*VIDUR_COLUMNS, f"time_stats.{op}.median")
            parts.append(read_table(vidur, timed, timed).select(
                pl.lit("vidur").alias("source"), pl.lit(op).alias("op"), pl.lit("half").alias("dtype"),
                pl.col("num_workers").alias("gpus"),
                (pl.col("num_workers") // pl.col("devices_per_node")).alias("nodes"),
                pl.col("size").alias("size_bytes"), (pl.col(f"time_stats.{op}.median") / 1e3).alias("measured_s")))
    if not parts:
        raise ConfigError(f"{root}: no NCCL tables (aic_nccl_perf.parquet, vidur_h100_dgx_all_reduce.csv, "
                          "vidur_h100_dgx_send_recv.csv)")
    try:
        rows = (pl.concat(parts, how="vertical_relaxed")
                .with_columns(pl.col("gpus", "nodes").cast(pl.Int64),
                              pl.col("size_bytes").cast(pl.Float64).cast(pl.Int64),
                              pl.col("measured_s").cast(pl.Float64))
                .group_by("source", "op", "dtype", "gpus", "nodes", "size_bytes").agg(pl.col("measured_s").median()))
    except pl.exceptions.PolarsError as e:  # a column of text where a count, size or time belongs
        raise ConfigError(f"{root}: a table's columns are not numbers where they should be "
                          f"({str(e).splitlines()[0]})") from None
    if not rows.height:
        raise ConfigError(f"{root}: no measurement of an op ({', '.join(AIC_OPS)}) and dtype "
                          f"({', '.join(DTYPE_BYTES)}) the model knows")
    bad = rows.filter((pl.col("gpus") < 1) | (pl.col("nodes") < 1) | (pl.col("size_bytes") <= 0)
                      | ~(pl.col("measured_s") > 0) | (pl.col("gpus") % pl.col("nodes") != 0))
    if bad.height:
        row = bad.row(0, named=True)
        raise ConfigError(f"{root}: impossible measurement ({row['op']}, {row['gpus']} GPUs on {row['nodes']} nodes, "
                          f"{row['size_bytes']} bytes, {row['measured_s']} s): counts, sizes and times must be > 0")
    return rows


def compare(directory: str | Path, gpu: str = "H100") -> pl.DataFrame:
    """Every measured point beside the model's time (and the algorithm it picked) on NVSwitch nodes of ``gpu``
    (several: a leaf-spine of 400 Gb/s NICs); error = model / measured - 1."""
    rows = measured(directory)
    keys = rows.select("op", "dtype", "gpus", "nodes", "size_bytes").unique()
    topos = {(g, m): _topology(g, m, gpu) for g, m in keys.select("gpus", "nodes").unique().iter_rows()}
    modelled = [collective(topos[g, m], MODELLED_AS.get(op, op), g, b, dtype=dtype)
                for op, dtype, g, m, b in keys.iter_rows()]
    keys = keys.with_columns(pl.Series("model_s", [r.seconds for r in modelled]),
                             pl.Series("algorithm", [r.algorithm for r in modelled]))
    return rows.join(keys, on=["op", "dtype", "gpus", "nodes", "size_bytes"]).with_columns(
        (pl.col("model_s") / pl.col("measured_s") - 1).alias("error")).sort(
            "source", "op", "dtype", "gpus", "nodes", "size_bytes")


def _topology(gpus: int, nodes: int, gpu: str) -> Topology:
    if nodes == 1:
        return parse(f"nvswitch:gpus={gpus},gpu={gpu}")
    return parse(f"leaf-spine:nodes={nodes},gpus_per_node={gpus // nodes},nic_gbps=400,gpu={gpu}")


def summary(compared: pl.DataFrame, min_bytes: int = 64 << 20) -> pl.DataFrame:
    """Per source, op, dtype, GPU and node count and modelled algorithm: median and worst |error| at messages >=
    ``min_bytes``."""
    keys = ("source", "op", "dtype", "gpus", "nodes", "algorithm")
    big = compared.filter(pl.col("size_bytes") >= min_bytes)
    return big.group_by(*keys).agg(
        pl.len().alias("points"), pl.col("error").abs().median().alias("median_abs_error"),
        pl.col("error").abs().max().alias("max_abs_error")).sort(*keys)


# Public multi-node nccl-tests runs (replay/network/data/multinode_nccl.csv): each row its source, the cluster as
# the source states it, and the out-of-place time and busbw it printed. Nothing here is fitted to them.
MULTINODE_CSV = Path(__file__).resolve().parent / "data" / "multinode_nccl.csv"
SIZE_BANDS = ((0, 64 << 20, "< 64 MB"), (64 << 20, 1 << 30, "64 MB - 1 GB"), (1 << 30, 1 << 62, ">= 1 GB"))
_Bands = tuple[tuple[int, int, str], ...]  # (from bytes, to bytes, name), contiguous and ascending


def _size_band(bands: _Bands) -> pl.Expr:
    """Each row's band by its ``size_bytes``: the last band whose lower bound it reaches (the bands are contiguous, so
    each upper bound is the next band's lower one)."""
    band = pl.lit(bands[0][2])
    for lo, _, name in bands[1:]:
        band = pl.when(pl.col("size_bytes") >= lo).then(pl.lit(name)).otherwise(band)
    return band.alias("size_band")


def _band_order(bands: _Bands) -> pl.Expr:
    """A sort key that puts the bands small to large (their names sort otherwise: "64 MB - 1 GB" before "< 64 MB")."""
    return pl.col("size_band").replace_strict({name: i for i, (*_, name) in enumerate(bands)})


MULTINODE_COLUMNS = ("source", "cluster", "gpu", "nodes", "gpus_per_node", "nics_per_node", "nic_gbps", "op", "dtype",
                     "size_bytes", "time_us")
_COUNTS = ("nodes", "gpus_per_node", "nics_per_node", "size_bytes")  # whole numbers above 0


def multinode_measured(path: str | Path = MULTINODE_CSV, frame: pl.DataFrame | None = None) -> pl.DataFrame:
    """The multi-node validation rows of the CSV at ``path`` (or of ``frame``, read elsewhere: ``path`` names it) with
    their checks (see the CSV's columns; ``algorithm``, ``settings``, ``nvswitch`` and ``network`` are optional:
    auto, none, true, ib); what is wrong with them, as a ConfigError."""
    if frame is None and not Path(path).exists():
        raise ConfigError(f"{path}: no such file")
    positive = (*_COUNTS, "nic_gbps", "time_us")
    rows = (read_table(Path(path), MULTINODE_COLUMNS, positive) if frame is None
            else checked(frame, path, MULTINODE_COLUMNS, positive))
    for c in _COUNTS:
        if not bool((rows[c] == rows[c].round()).all()):
            raise ConfigError(f"{path}: column {c} must hold whole numbers")
    rows = rows.with_columns(pl.col(*_COUNTS).cast(pl.Int64))
    if not bool((rows["nodes"] * rows["gpus_per_node"] >= 2).all()):
        raise ConfigError(f"{path}: a collective needs at least 2 GPUs (nodes x gpus_per_node) in every row")
    defaults = {"algorithm": "auto", "settings": "", "nvswitch": "true", "network": "ib"}
    rows = rows.with_columns(pl.lit(v).alias(c) for c, v in defaults.items() if c not in rows.columns)
    rows = rows.with_columns(  # a blank cell: the default (a column of true/false cells stays boolean)
        pl.col(c).fill_null(v == "true") if rows.schema[c] == pl.Boolean else pl.col(c).cast(pl.Utf8).fill_null(v)
        for c, v in defaults.items())
    switched = {str(v).lower() for v in rows["nvswitch"].to_list()} - {"true", "false"}
    if switched:  # anything but "false" read as true: "maybe" was an NVSwitch node
        raise ConfigError(f"{path}: column nvswitch is true or false, got {min(switched)!r}")
    rows = rows.with_columns(pl.col("network").cast(pl.Utf8).str.to_lowercase())
    unknown = sorted(set(rows["network"].to_list()) - set(NETWORKS))
    if unknown:  # a misspelt "efa" would silently drop the plugin's latency
        raise ConfigError(f"{path}: unknown network {unknown[0]!r} (known: {', '.join(NETWORKS)})")
    return rows


# The inter-node latency each network's NCCL net plugin reports to NCCL (topologies' ``net_latency_us``), by the
# validation's network column. Only aws-ofi-nccl sets one: 75 us on p5.48xlarge (src/platform-aws.c from v1.7.0-aws,
# platform-aws.cpp from v1.15.0, through v1.16.3 alike; "Empirical testing on P5 had shown that NCCL's internal tuner
# choices work better with this value"), and every EFA row here is a p5.48xlarge. NCCL's InfiniBand/RoCE transport
# reports 0 ("Not set"); aws-ofi-nccl off AWS (Slingshot's CXI provider) keeps its default 0; GCP's TCPXO plugin
# states none in public source.
NET_PLUGIN_LATENCY_US = {"efa": 75.0}
# the networks a row may name (the packaged set's): only EFA's plugin reports a latency; the others are told apart
# for the reader, not the model
NETWORKS = ("ib", "roce", "efa", "slingshot", "gpudirect-tcpxo")


# NCCL_ALGO's names as the topologies' ``nccl_algo`` spells them (src/graph/tuning.cc ncclAlgoStr, any case)
NCCL_ALGO_NAMES = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree",
                   "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain"}
NCCL_PROTO_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}
# NAME=value or NAME="value"; a value is a comma list, spaces allowed after a comma, a trailing comma ignored
NCCL_SETTING = re.compile(r'\b(NCCL_ALGO|NCCL_PROTO)=(?:"([^"]*)"|([^\s,"]+(?:\s*,\s*[^\s,"]+)*,?))')


def nccl_env(settings: str | None) -> tuple[str, str]:
    """(nccl_algo, nccl_proto) for a topology from a row's stated NCCL_ALGO / NCCL_PROTO: ``Ring,Tree`` (any case,
    quoted or not, repeats once) is ``ring+tree``; unset is auto. What the model cannot hold is a ConfigError, not a
    silent default: NCCL's per-collective form (``allreduce:tree``) or exclusions (``^nvls``), an algorithm it lacks
    (PAT), and a list of protocols (its protocols are picked one at a time)."""
    env = {m.group(1): m.group(2) or m.group(3) for m in NCCL_SETTING.finditer(settings or "")}
    algo, proto = "auto", "auto"
    if "NCCL_ALGO" in env:
        names = [a.strip().lower() for a in env["NCCL_ALGO"].strip(",").split(",")]
        unknown = [a for a in names if a not in NCCL_ALGO_NAMES]
        if unknown:
            raise ConfigError(f"NCCL_ALGO={env['NCCL_ALGO']}: {unknown[0]!r} is not modelled (known: "
                              f"{', '.join(NCCL_ALGO_NAMES)}; no per-collective form or exclusions)")
        algo = "+".join(dict.fromkeys(NCCL_ALGO_NAMES[a] for a in names))
    if "NCCL_PROTO" in env:
        names = [p.strip().lower() for p in env["NCCL_PROTO"].strip(",").split(",")]
        if len(set(names)) != 1 or names[0] not in NCCL_PROTO_NAMES:
            raise ConfigError(f"NCCL_PROTO={env['NCCL_PROTO']}: the model runs one stated protocol (LL, LL128 or "
                              "Simple), not a list")
        proto = NCCL_PROTO_NAMES[names[0]]
    return algo, proto


def multinode_topology(nodes: int, gpus_per_node: int, nics_per_node: int, nic_gbps: float, gpu: str,
                       nvswitch: bool = True, network: str = "ib", sharp: bool = False,
                       nccl_algo: str = "auto", nccl_proto: str = "auto") -> Topology:
    """A cluster as a source states it: nodes of NVSwitch GPUs (or a 4-GPU NVLink mesh, ``nvswitch`` false), their
    NICs on one non-blocking switch (no source describes its switches; a leaf holds them all), the latency its
    ``network``'s NCCL plugin reports (:data:`NET_PLUGIN_LATENCY_US`), SHARP in that switch where the run turned
    NCCL's CollNet on (``sharp``), and the NCCL_ALGO / NCCL_PROTO the run set (:func:`nccl_env`)."""
    return parse(f"leaf-spine:nodes={nodes},gpus_per_node={gpus_per_node},nics_per_node={nics_per_node},"
                 f"nic_gbps={nic_gbps},leaf_down={nodes * gpus_per_node},gpu={gpu},"
                 f"nvswitch={str(nvswitch).lower()},net_latency_us={NET_PLUGIN_LATENCY_US.get(network, 0.0)},"
                 f"sharp={str(sharp).lower()},nccl_algo={nccl_algo},nccl_proto={nccl_proto}")


def multinode_compare(path: str | Path = MULTINODE_CSV, where: pl.Expr | None = None,
                      frame: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every multi-node point of the CSV at ``path`` (or of ``frame``, :func:`multinode_measured`; ``where``: those
    it selects) beside the model's time, algorithm and protocol, under the algorithm the run forced (NCCL_ALGO) or
    NCCL-like auto selection; error = model_s / measured_s - 1."""
    rows = multinode_measured(path, frame)
    if "line" not in rows.columns:  # a CSV's rows: the file's line, the header first (a log's rows carry theirs)
        rows = rows.with_row_index("line", offset=2)
    rows = rows if where is None else rows.filter(where)
    model_s, algos, protos = [], [], []
    for r in rows.iter_rows(named=True):
        settings = str(r["settings"] or "")
        try:  # a setting, GPU, op or dtype the model does not know: the row, so the one line says where
            topo = multinode_topology(r["nodes"], r["gpus_per_node"], r["nics_per_node"], r["nic_gbps"], r["gpu"],
                                      str(r["nvswitch"]).lower() != "false", str(r["network"]),
                                      "NCCL_COLLNET_ENABLE=1" in settings, *nccl_env(settings))
            c = collective(topo, r["op"], r["nodes"] * r["gpus_per_node"], r["size_bytes"], r["algorithm"],
                           r["dtype"])
        except ConfigError as e:
            raise ConfigError(f"{path}: line {r['line']}: {e}") from None
        model_s.append(c.seconds)
        algos.append(c.algorithm)
        protos.append(c.protocol)
    return rows.drop("line").with_columns(
        (pl.col("time_us") / 1e6).alias("measured_s"), pl.Series("model_s", model_s),
        pl.Series("model_algorithm", algos), pl.Series("model_protocol", protos), _size_band(SIZE_BANDS),
    ).with_columns((pl.col("model_s") / pl.col("measured_s") - 1).alias("error"))


def multinode_summary(compared: pl.DataFrame) -> pl.DataFrame:
    """Median and worst |error| by op, GPU kind, node count and size band."""
    keys = ("op", "gpu", "nodes", "size_band")
    return compared.group_by(*keys).agg(
        pl.len().alias("points"), pl.col("cluster").n_unique().alias("clusters"),
        pl.col("error").abs().median().alias("median_abs_error"),
        pl.col("error").abs().max().alias("max_abs_error")).sort("op", "gpu", "nodes", _band_order(SIZE_BANDS))


# aiconfigurator's one-node NCCL sweeps of four GPU kinds, packaged (replay/network/data/one_node_nccl.parquet; each
# row its source file at ai-dynamo/aiconfigurator @ 095f58a5, Apache-2.0): nccl-tests' all_gather, reduce_scatter,
# all_reduce and alltoall binaries on 2, 4 and 8 GPUs of one node (collector/network/collect_nccl.py: ``-t`` GPUs
# as threads of one process, ``-a 1``, the out-of-place time), half and int8, 512 B to 512 MiB. H100 and H200 under
# NCCL 2.29.2, B200 2.29.2, A100 2.27.3. The model's NVLink and copy constants were read off a different H100
# sweep (../shared/data/kernels/h100, the 2.27.3 folder's); none of these took part in them, but the local pass's SM
# rule and the all-to-all's self copy (2026-11-26) were chosen with these in view (docs/fabrics-validation.md).
ONE_NODE_PARQUET = Path(__file__).resolve().parent / "data" / "one_node_nccl.parquet"
ONE_NODE_BANDS = ((0, 1 << 20, "< 1 MB"), (1 << 20, 64 << 20, "1 - 64 MB"), (64 << 20, 1 << 62, ">= 64 MB"))
ONE_NODE_COLUMNS = ("source", "gpu", "op", "dtype", "gpus", "size_bytes", "time_us")


def one_node_compare(path: str | Path = ONE_NODE_PARQUET, where: pl.Expr | None = None) -> pl.DataFrame:
    """Every packaged one-node point (``where``: those it selects) beside the model's time, algorithm and protocol
    on one NVSwitch node of its GPU kind; error = model_s / measured_s - 1."""
    if not Path(path).exists():
        raise ConfigError(f"{path}: no one-node validation table")
    rows = read_table(Path(path), ONE_NODE_COLUMNS)
    rows = rows if where is None else rows.filter(where)
    keys = rows.select("gpu", "op", "dtype", "gpus", "size_bytes").unique(maintain_order=True)
    # one node per GPU kind and count, built once: a topology caches its links for every collective on it
    nodes = keys.select("gpu", "gpus").unique().iter_rows()
    topos = {(gpu, g): parse(f"nvswitch:gpus={g},gpu={gpu}") for gpu, g in nodes}
    modelled = [collective(topos[gpu, g], op, g, b, dtype=dtype) for gpu, op, dtype, g, b in keys.iter_rows()]
    keys = keys.with_columns(pl.Series("model_s", [m.seconds for m in modelled]),
                             pl.Series("model_algorithm", [m.algorithm for m in modelled]),
                             pl.Series("model_protocol", [m.protocol for m in modelled]))
    return rows.join(keys, on=["gpu", "op", "dtype", "gpus", "size_bytes"]).with_columns(
        (pl.col("time_us") / 1e6).alias("measured_s"), _size_band(ONE_NODE_BANDS),
    ).with_columns((pl.col("model_s") / pl.col("measured_s") - 1).alias("error"))


def one_node_summary(compared: pl.DataFrame) -> pl.DataFrame:
    """Median (signed and |error|) and worst |error| by GPU kind, op, GPU count and size band."""
    keys = ("gpu", "op", "gpus", "size_band")
    return compared.group_by(*keys).agg(
        pl.len().alias("points"), pl.col("error").median().alias("median_error"),
        pl.col("error").abs().median().alias("median_abs_error"),
        pl.col("error").abs().max().alias("max_abs_error")).sort("gpu", "op", "gpus", _band_order(ONE_NODE_BANDS))
