"""AWS HyperPod's all-reduce points timed under aws-ofi-nccl's own tuner picks, beside the model's NCCL-like pick.

    python benchmarks/efa_tuner_regions.py

HyperPod's runs (replay/network/data/multinode_nccl.csv, cluster aws-p5-efa-hyperpod) loaded aws-ofi-nccl's tuner
plugin. On p5 with 8 ranks a node it picks an all-reduce's algorithm and protocol by where (message bytes, ranks)
falls among polygons in log2 space, first match wins, and defers to NCCL's tuner on 2 nodes or fewer
(aws/aws-ofi-nccl v1.16.3, src/tuner/nccl_ofi_regions.cpp: region_init_internal_p5_p5e, is_inside_region,
region_get_coll_info_internal_v2; the same p5 regions at 2daf7d30). The polygons below are that file's vertices;
the membership test is its ray casting, written again here. The model does not read the plugin
(docs/fabrics-multinode.md says why): this prints what doing so would change.
"""

from __future__ import annotations

import argparse
import math
import statistics

from rltrace.replay.network.collectives import collective
from rltrace.replay.network.validation import MULTINODE_CSV, multinode_measured, multinode_topology

Point = tuple[float, float]
MAX_SIZE, MAX_RANKS = 100.0 * 1024**3, 1024.0 * 1024  # TUNER_MAX_SIZE, TUNER_MAX_RANKS
EPS = 1e-10


def _log2(p: Point) -> Point:
    return (math.log2(p[0]) if p[0] > 0 else 0.0, math.log2(p[1]) if p[1] > 0 else 0.0)


def _extend(a: Point, b: Point, z: Point) -> Point:
    """The plugin's extend_region: the line through a and b, carried to z's x or y, whichever it meets first."""
    (ax, ay), (bx, by), (zx, zy) = _log2(a), _log2(b), _log2(z)
    if ax == bx:
        return 2**ax, 2**zy
    if ay == by:
        return 2**zx, 2**ay
    m = (ay - by) / (ax - bx)
    c = by - m * bx
    y = m * zx + c
    return (2**zx, 2**y) if y < zy else (2 ** ((zy - c) / m), 2**zy)


def _cross(a: Point, b: Point) -> float:
    return a[0] * b[1] - a[1] * b[0]


def _intersect(x0: Point, x1: Point, y0: Point, y1: Point) -> tuple[int, Point]:
    """1 if segment x0-x1 crosses y0-y1, -1 if not, 0 at y's ends or parallel; and where it meets y's line."""
    dx, dy = (x1[0] - x0[0], x1[1] - x0[1]), (y1[0] - y0[0], y1[1] - y0[1])
    d = _cross(dy, dx)
    if abs(d) < EPS:
        return 0, (0.0, 0.0)
    a = (_cross(x0, dx) - _cross(y0, dx)) / d
    at = (y0[0] + a * dy[0], y0[1] + a * dy[1])
    if a < -EPS or a > 1 + EPS:
        return -1, at
    if a < EPS or a > 1 - EPS:
        return 0, at
    b = (_cross(x0, dy) - _cross(y0, dy)) / d
    return (-1 if b < 0 or b > 1 else 1), at


def inside(point: Point, vertices: list[Point]) -> bool:
    """The plugin's is_inside_region (>= 0: inside or on an edge), in log2 space."""
    v, p = [_log2(x) for x in vertices], _log2(point)
    for i in range(len(v)):
        y0, y1 = v[i], v[(i + 1) % len(v)]
        r, at = _intersect(p, (p[0] + y1[1] - y0[1], p[1] - (y1[0] - y0[0])), y0, y1)
        if r != -1 and math.dist(at, p) < EPS:
            return True  # on the edge
    xs, ys = [x for x, _ in v], [y for _, y in v]
    if not (min(xs) <= p[0] <= max(xs) and min(ys) <= p[1] <= max(ys)):
        return False
    far = _log2((2 * MAX_SIZE, 2 * MAX_RANKS))
    return sum(_intersect(p, far, v[i], v[(i + 1) % len(v)])[0] == 1 for i in range(len(v))) % 2 == 1


_TL = _extend((402653184, 2048), (402653184, 4096), (MAX_SIZE, MAX_RANKS))
_N1 = _extend((8053063680, 160), (9663676416, 192), (MAX_SIZE, MAX_RANKS))
_RS = _N1  # the plugin builds extended_ring_simple from the same two points
REGIONS: list[tuple[str, str, list[Point]]] = [  # p5 / p5e, 8 ranks a node, all-reduce, in the plugin's order
    ("tree", "LL128", [(0, 16), (31457280, 16), (37748736, 32), (117440512, 64), (301989888, 128), (301989888, 256),
                       (335544320, 512), (536870912, 1024), (402653184, 2048), (402653184, 4096), _TL, (0, _TL[1])]),
    ("nvls_tree", "Simple", [(31457281, 16), (MAX_SIZE, 16), (31457281, 16)]),
    ("ring", "LL128", [(31457280, 17), (1073741824, 17), (2147483648, 64), (2147483648, 128), (1342177280, 160),
                       (2147483648, 256), (1074790400, 256), (444596224, 160), (301989888, 128), (117440512, 64),
                       (37748736, 32)]),
    ("nvls_tree", "Simple", [(2147483648, 128), (6442450944, 128), (8053063680, 160), (9663676416, 192), _N1, _TL,
                             (402653184, 4096), (402653184, 2048), (536870912, 1024), (335544320, 512),
                             (301989888, 256), (310378496, 160), (444596224, 160), (1074790400, 256),
                             (2684354560, 256), (2147483648, 224), (1342177280, 160)]),
    ("ring", "Simple", [(1073741824, 17), (_RS[0], 17), _RS, (9663676416, 192), (8053063680, 160),
                        (2684354560, 64), (1610612736, 32)]),
]


def plugin_pick(nbytes: float, ranks: int, nodes: int) -> tuple[str, str] | None:
    """The plugin's (algorithm, protocol), or None where it defers to NCCL's tuner."""
    if nodes <= 2:
        return None
    return next(((a, p) for a, p, v in REGIONS if inside((nbytes, ranks), v)), None)


def main() -> None:
    rows = multinode_measured().filter(cluster="aws-p5-efa-hyperpod", op="all_reduce")
    print(f"{MULTINODE_CSV.name}, cluster aws-p5-efa-hyperpod (p5.48xlarge, EFA), all-reduce: {rows.height} points")
    print("nodes  size MiB  model pick          error   plugin pick         error")
    big: list[tuple[float, float]] = []
    for r in rows.iter_rows(named=True):
        topo = multinode_topology(r["nodes"], r["gpus_per_node"], r["nics_per_node"], r["nic_gbps"], r["gpu"],
                                  network="efa")
        n, size, measured = r["nodes"] * r["gpus_per_node"], r["size_bytes"], r["time_us"] / 1e6
        auto = collective(topo, "all_reduce", n, size, dtype=r["dtype"])
        pick = plugin_pick(size, n, r["nodes"])
        plug = collective(topo, "all_reduce", n, size, pick[0], r["dtype"], pick[1]) if pick else auto
        errors = (auto.seconds / measured - 1, plug.seconds / measured - 1)
        if r["nodes"] > 2 and size >= 64 << 20:
            big.append(errors)
        print(f"{r['nodes']:5d}  {size >> 20:8d}  {auto.algorithm + '/' + auto.protocol:18s} {errors[0]:+7.1%}   "
              f"{plug.algorithm + '/' + plug.protocol:18s} {errors[1]:+7.1%}")
    for name, i in (("model's picks", 0), ("plugin's picks", 1)):
        e = [abs(x[i]) for x in big]
        print(f"4-32 nodes, >= 64 MB, {name}: {len(e)} points, median |error| {statistics.median(e):.1%}, "
              f"{sum(x <= 0.2 for x in e)} within 20%")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # no options: --help, or refused
    main()
