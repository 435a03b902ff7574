"""The Chrome trace-event format's rules, checked independently of the exporter (the format document:
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU)."""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from typing import Any

PHASES = {"B", "E", "X", "i", "I", "C", "b", "n", "e", "s", "t", "f", "P", "N", "O", "D", "M", "R", "c", "(", ")"}
METADATA = {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}
TOLERANCE_US = 1e-3  # a nanosecond: float rounding of us timestamps


def _reject(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def violations(text: str) -> list[str]:
    """Every rule the trace breaks (empty: valid). Checks strict JSON, event fields, X events nesting per
    thread (no partial overlaps), counter args numeric, names for every process and thread used, and flow
    events ("s", "t", "f"): an id and a cat each, one "s" first and one "f" last per (cat, id), time never
    going back along a flow, and each flow event inside a complete event of its own thread (the slice it
    binds to)."""
    try:
        trace = json.loads(text, parse_constant=_reject)
    except ValueError as e:
        return [f"not strict JSON: {e}"]
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["top level must be an object with a traceEvents list"]
    if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        return ["displayTimeUnit must be ms or ns"]
    problems: list[str] = []
    named_pids, named_threads = set(), set()
    used_pids, used_threads = set(), set()
    complete: dict[tuple[int, int], list[tuple[float, float, str]]] = defaultdict(list)
    flows: dict[tuple[str, Any], list[tuple[float, str, int, int]]] = defaultdict(list)
    for i, e in enumerate(trace["traceEvents"]):
        where = f"event {i}"
        if not isinstance(e, dict):
            problems.append(f"{where}: not an object")
            continue
        ph = e.get("ph")
        if ph not in PHASES:
            problems.append(f"{where}: unknown ph {ph!r}")
            continue
        if not isinstance(e.get("name"), str):
            problems.append(f"{where}: name must be a string")
        if not all(isinstance(e.get(k), int) and not isinstance(e.get(k), bool) for k in ("pid", "tid")):
            problems.append(f"{where}: pid and tid must be integers")
            continue
        if ph == "M":
            if e["name"] not in METADATA or not isinstance(e.get("args"), dict):
                problems.append(f"{where}: bad metadata event {e['name']!r}")
            elif e["name"] == "process_name":
                named_pids.add(e["pid"])
            elif e["name"] == "thread_name":
                named_threads.add((e["pid"], e["tid"]))
            continue
        ts = e.get("ts")
        if not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            problems.append(f"{where}: ts must be a finite number >= 0")
            continue
        used_pids.add(e["pid"])
        if ph == "X":
            dur = e.get("dur")
            if not isinstance(dur, (int, float)) or not math.isfinite(dur) or dur < 0:
                problems.append(f"{where}: X needs dur >= 0")
                continue
            used_threads.add((e["pid"], e["tid"]))
            complete[(e["pid"], e["tid"])].append((float(ts), float(ts) + float(dur), e["name"]))
        elif ph in ("s", "t", "f"):
            fid = e.get("id")
            if not isinstance(e.get("cat"), str) or not isinstance(fid, (int, str)) or isinstance(fid, bool):
                problems.append(f"{where}: flow event needs a string cat and an integer or string id")
                continue
            flows[(e["cat"], e["id"])].append((float(ts), ph, e["pid"], e["tid"]))
        elif ph == "C":
            args: Any = e.get("args")
            if not isinstance(args, dict) or not args or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in args.values()):
                problems.append(f"{where}: C needs numeric args")
    for key, events in complete.items():
        events.sort(key=lambda x: (x[0], -x[1]))
        stack: list[tuple[float, float, str]] = []
        for start, end, name in events:
            while stack and stack[-1][1] <= start + TOLERANCE_US:
                stack.pop()
            if stack and end > stack[-1][1] + TOLERANCE_US:
                problems.append(f"pid {key[0]} tid {key[1]}: {name!r} [{start}, {end}] partially overlaps "
                                f"{stack[-1][2]!r} [{stack[-1][0]}, {stack[-1][1]}]")
                break
            stack.append((start, end, name))
    problems += _flow_problems(flows, complete)
    problems += [f"pid {p}: no process_name" for p in sorted(used_pids - named_pids)]
    problems += [f"pid {p} tid {t}: no thread_name" for p, t in sorted(used_threads - named_threads)]
    return problems


def _flow_problems(flows: dict[tuple[str, Any], list[tuple[float, str, int, int]]],
                   complete: dict[tuple[int, int], list[tuple[float, float, str]]]) -> list[str]:
    problems: list[str] = []
    for (cat, fid), events in flows.items():
        phases = [ph for _, ph, _, _ in events]  # in file order
        if phases.count("s") != 1 or phases.count("f") != 1 or phases[0] != "s" or phases[-1] != "f":
            problems.append(f"flow {cat}/{fid}: needs one 's' first and one 'f' last, got {''.join(phases)}")
            continue
        times = [ts for ts, _, _, _ in events]
        if any(b < a - TOLERANCE_US for a, b in itertools.pairwise(times)):
            problems.append(f"flow {cat}/{fid}: goes back in time {times}")
        for ts, ph, pid, tid in events:
            slices = complete.get((pid, tid), [])
            if not any(start - TOLERANCE_US <= ts <= end + TOLERANCE_US for start, end, _ in slices):
                problems.append(f"flow {cat}/{fid}: {ph!r} at {ts} on pid {pid} tid {tid} is inside no slice")
                break
    return problems
