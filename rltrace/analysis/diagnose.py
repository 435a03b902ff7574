"""``rltrace diagnose``: what is wrong with a recorded job, ranked by the seconds per step it costs.

:func:`diagnose` runs every detector over a bundle's judged steps (all but the first, which carries start-up,
when more than two were recorded):

- ``straggler`` (:mod:`.stragglers`): a rank or generation instance slower than the others in a phase they
  share, with the others' waits in the collectives it entered last;
- ``slow_transfer`` (:mod:`.transfers`): weight syncs and collectives far below their transport's rate;
- ``config`` (:mod:`.capacity`): a generation engine whose running batch is capped below the step's batch
  (``max_num_seqs``, the KV cache);
- ``bubble`` (:mod:`.idle`): a pool's idle time, the requests that held the steps, and the scheduler or
  pool split that removes the most of it;
- ``slow_phase`` (:mod:`.expected`): a phase well above what the cost model gives for the recorded devices.

Every finding whose fix a replay can express is priced by one (:mod:`.whatif`): its gain in seconds a step,
with the 5%-95% range over the replay's bootstrap replicates. The result is a DataFrame, most seconds per
step first (:data:`rltrace.analysis.findings.SCHEMA`), plus the phase table of :mod:`.expected`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from rltrace.analysis import capacity, expected, idle, stragglers, transfers
from rltrace.analysis.findings import Context, Finding, frame, ranked, steady_steps
from rltrace.analysis.whatif import Pricer
from rltrace.bundle import Bundle, open_bundle
from rltrace.catalog.gpus import load_gpus
from rltrace.errors import ConfigError, HardwareUnknown
from rltrace.limits import MAX_SEED, check_int, check_replicates
from rltrace.replay.costmodels.profile import load_profile
from rltrace.replay.run import CostConfig, RunResult
from rltrace.replay.workload import extract
from rltrace.sample_traces import resolve
from rltrace.scalars import number

REPLAY_OFF = 0.10
"""an as-recorded replay whose mean step over the judged steps is further than this (relative) from the measured one
gets a note: the gains are differences between replays (a synthetic bundle's timings, for one, come from another
model than the replay's)"""

DEFAULT_REPLICATES = 10
"""bootstrap replicates behind each gain's spread"""


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The findings of one bundle (:data:`rltrace.analysis.findings.SCHEMA`, most seconds per step first), its
    phase table (:func:`rltrace.analysis.expected.phase_table`), the steps judged, their mean step time and
    notes on what could not be judged."""

    findings: pl.DataFrame
    phases: pl.DataFrame
    steps: tuple[int, ...]
    step_s: float
    notes: list[str] = field(default_factory=list)
    runs: list[tuple[str, RunResult]] = field(default_factory=list)
    """with ``keep_runs``: the recording replayed as it ran ("as recorded"), then each priced fix's replay
    ("fix N: ...", N its rank among the findings), for a report"""

    @property
    def judged(self) -> str:
        """The judged steps as the terminal and the report name them: "steps 1..5" ("no steps")."""
        return f"steps {self.steps[0]}..{self.steps[-1]}" if self.steps else "no steps"

    def to_json(self) -> dict[str, Any]:
        """The JSON ``rltrace diagnose --json`` prints (keys in docs/diagnose.md)."""
        findings = []
        for row in self.findings.iter_rows(named=True):
            gain = None
            if row["gain_s_per_step"] is not None:
                gain = {"s_per_step": row["gain_s_per_step"], "p05_s_per_step": row["gain_p05_s_per_step"],
                        "p95_s_per_step": row["gain_p95_s_per_step"], "replay": row["gain_replay"]}
            findings.append({k: row[k] for k in ("kind", "phase", "rank", "instance", "lost_s_per_step", "evidence",
                                                 "fix")} | {"gain": gain})
        return {"findings": findings, "phases": self.phases.to_dicts(), "steps_judged": list(self.steps),
                "step_s": None if math.isnan(self.step_s) else self.step_s, "notes": self.notes}


def _context(bundle: Bundle) -> tuple[Context, Any]:
    """The judged steps and their mean measured step time (NaN without finished requests), and the workload (None
    when no request finished: a request log's arrivals are not a measured step)."""
    finished = bundle.requests.select(pl.col("finish_ns").is_not_null().sum()).collect().item()
    workload = extract(bundle) if finished else None
    if workload is not None and workload.steps.height:
        steps = steady_steps(workload.steps["step"].to_list())
        wall = workload.steps.filter(pl.col("step").is_in(steps))["wall_s"].mean()
        return Context(steps, number(wall) if wall is not None else math.nan), workload
    recorded = pl.concat([bundle.spans.select("step").collect(), bundle.collectives.select("step").collect()])
    return Context(steady_steps(recorded["step"].unique().to_list()), math.nan), None


def diagnose(bundle: Bundle | str | os.PathLike[str], *, profile: str | None = None,
             replicates: int = DEFAULT_REPLICATES, seed: int = 0, keep_runs: bool = False,
             progress: Callable[[str], None] | None = None) -> Diagnosis:
    """Every finding about ``bundle`` (an opened bundle, a bundle folder or a shipped sample's name; see the module
    text). ``profile``: a `rltrace calibrate` profile of the recorded devices (expected times on a device the
    catalog lacks, the transport's measured rate); ``replicates``: bootstrap replicates behind each gain's spread
    (0: the point estimate only, else 2..1000); ``keep_runs``: keep the replays behind the gains
    (:attr:`Diagnosis.runs`)."""
    if not isinstance(bundle, Bundle):
        if not isinstance(bundle, (str, os.PathLike)):
            raise ConfigError(f"diagnose takes a bundle, a bundle folder or a sample name, got {bundle!r}")
        check_replicates("replicates", replicates)
        check_int("seed", seed, 0, MAX_SEED)
        bundle = open_bundle(resolve(bundle))
    check_replicates("replicates", replicates)
    check_int("seed", seed, 0, MAX_SEED)
    say = progress or (lambda _: None)
    ctx, workload = _context(bundle)
    notes = ["nodes are not judged: a bundle does not record which host ran which rank"]
    unfinished = workload is None and bundle.requests.select(pl.len()).collect().item() > 0
    if unfinished and not any(table.select(pl.len()).collect().item()
                              for table in (bundle.spans, bundle.collectives, bundle.weight_syncs)):
        kinds = {name.lower() for name in load_gpus()}
        gpu = any(pool.device.lower() in kinds for pool in bundle.manifest.cluster.values())
        model = bundle.manifest.model is not None
        flags = [flag for flag, known in (("--gpu KIND", gpu), ("--model NAME", model)) if not known]
        raise ConfigError(f"{bundle.path}: nothing to diagnose: no request finished (a request-log import records "
                          "arrivals only) and it holds no spans, collectives or weight syncs; "
                          f"`{' '.join(['rltrace replay', str(bundle.path), *flags])}` replays its requests")
    frame_profile = load_profile(profile) if profile else None
    cost = CostConfig(profile=profile or "")
    transport = _broadcast(frame_profile)
    say("stragglers and transfers")
    found: list[Finding] = [*stragglers.rank_stragglers(bundle, ctx), *stragglers.instance_stragglers(bundle, ctx),
                            *transfers.slow_syncs(bundle, ctx, transport),
                            *transfers.slow_collectives(bundle, ctx, transport[0] if transport else None)]
    phases = pl.DataFrame(schema=expected.SCHEMA)
    runs: list[tuple[str, RunResult]] = []
    if workload is None:
        notes.append(f"{'no request finished' if unfinished else 'no requests'}: generation, bubbles and engine "
                     "settings are not judged, and no replay prices a fix")
    else:
        load = capacity.engine_load(bundle.requests.collect())
        cap = capacity.running_cap(load, ctx)
        found += capacity.engine_limits(load, ctx)
        pricer = Pricer(bundle, cost, seed, cap)
        say("bubbles: replaying every scheduler and pool split")
        try:
            found += idle.bubbles(bundle, ctx, pricer)
        except HardwareUnknown:  # replay's own advice names flags that diagnose has not
            raise ConfigError(f"{bundle.path}: diagnose replays a job on the GPU kind and model it recorded, and this "
                              "bundle lacks one: `rltrace replay "
                              f"{bundle.path} --gpu KIND --model NAME` replays it on ones you give") from None
        replayed = pricer.replayed_step_s(ctx.steps)  # the steps the measured mean is taken over
        if ctx.step_s > 0 and math.isfinite(replayed) and abs(replayed / ctx.step_s - 1) > REPLAY_OFF:
            notes.append(f"the recording replayed as it ran takes {replayed:.3f} s a step against {ctx.step_s:.3f} s "
                         f"measured ({replayed / ctx.step_s - 1:+.0%}): a gain is the difference between two replays, "
                         "so read it against the replayed step")
        phases = expected.phase_table(bundle, workload, ctx, cost, frame_profile, cap, transport)
        explained = {f.phase for f in found if f.kind in ("straggler", "config")}
        found += [f for f in expected.slow_phases(phases, ctx) if f.phase not in explained]
        priced = [f for f in found if f.whatif is not None]
        for i, finding in enumerate(priced):
            say(f"pricing {i + 1}/{len(priced)}: {finding.whatif.label if finding.whatif else ''}")
            assert finding.whatif is not None
            finding.gain = pricer.gain(finding.whatif, replicates)
            if finding.lost_from_gain:
                finding.lost_s_per_step = finding.gain[0]
        # a cost that is a replay's gain must be one: above the floor, and above zero at the spread's low end
        found = [f for f in found if not f.lost_from_gain or f.gain is None
                 or (f.gain[0] >= ctx.floor() and f.gain[1] > 0)]
        if replicates == 0 and any(f.lost_from_gain and f.gain is not None for f in found):
            notes.append("--replicates 0: each replayed gain is a point estimate, not held against the replay's "
                         "spread (with replicates, a gain whose 5% end is at or below zero is left out)")
        if keep_runs:
            runs.append(("as recorded", pricer.result()))
            runs += [(f"fix {i + 1}: {f.kind} {f.phase}", pricer.result(f.whatif)) for i, f in enumerate(ranked(found))
                     if f.whatif is not None and f.gain is not None]
        if phases["expected_s"].null_count() == phases.height:
            devices = sorted({pool.device for pool in bundle.manifest.cluster.values() if pool.device}) or ["DEVICE"]
            given = ", and the profile given is of others" if profile else ""
            notes.append(f"no expected phase times: the recorded devices are not in the GPU catalog{given}; a profile "
                         "measured on them gives them, shown beside the measured ones (rltrace calibrate --device "
                         f"{devices[0]} --model CONFIG --ranks 2 -o P; --profile P)")
    return Diagnosis(frame(found), phases, ctx.steps, ctx.step_s, notes, runs)


def _broadcast(profile: pl.DataFrame | None) -> tuple[float, float] | None:
    """(bytes/s, seconds per operation) of the broadcasts a profile timed, if it did."""
    if profile is None or "bytes_per_s" not in profile.columns:
        return None
    rows = profile.filter(pl.col("regime") == "collective:broadcast")
    if not rows.height:
        return None
    overhead = rows["overhead_base_s"][0] if "overhead_base_s" in rows.columns else 0.0
    return float(rows["bytes_per_s"][0]), float(overhead or 0.0)
