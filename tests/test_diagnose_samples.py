"""``rltrace diagnose`` without a recording of its own: the shipped samples (``tiny_rl_faults`` is a real recording
with three faults the job injected: sample_traces/README.md), a generation instance slowed in a synthetic bundle,
the worked example of docs/diagnose.md, and the interval arithmetic the straggler measure rests on."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import REPO, run_cli, small_config
from hypothesis import given, settings
from hypothesis import strategies as st
from rltrace.dashboards.report import build

import rltrace
from rltrace.analysis.diagnose import diagnose
from rltrace.analysis.expected import UNJUDGED
from rltrace.analysis.findings import KINDS, SCHEMA, WhatIf, covered
from rltrace.analysis.idle import _alternatives
from rltrace.analysis.runs import Run
from rltrace.analysis.whatif import Pricer
from rltrace.synth import synthesize

KEYS = {"kind", "phase", "rank", "instance", "lost_s_per_step", "evidence", "fix", "gain"}
STRAGGLE_S_PER_STEP = 2 * 0.15
"""tiny_rl_faults: rank 1 slept 0.15 s after each of its 2 micro-batches' backward"""
SYNC_DELAY_S_PER_STEP = 21 * 0.01
"""... and rank 0 waited 10 ms before each of the weight sync's 21 sends"""


def test_the_json_has_the_documented_keys_and_ranks_by_seconds_per_step() -> None:
    done = run_cli("diagnose", "tiny_rl_cpu", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert {"bundle", "run_id", "findings", "phases", "steps_judged", "step_s", "notes"} <= set(out)
    lost = [f["lost_s_per_step"] for f in out["findings"]]
    assert lost == sorted(lost, reverse=True)
    for finding in out["findings"]:
        assert set(finding) == KEYS and finding["kind"] in KINDS
        if finding["gain"] is not None:
            g = finding["gain"]
            assert g["p05_s_per_step"] <= g["p95_s_per_step"] and g["replay"]
    assert [p["phase"] for p in out["phases"]] == ["generate", "train", "optimizer", "weight_sync"]
    assert out["steps_judged"] == [1, 2, 3]  # the sample's 4 steps, the first (start-up) left out


def test_the_shipped_faulty_recording_names_its_three_faults() -> None:
    d = diagnose(rltrace.open("tiny_rl_faults"))
    assert "reference" not in d.phases["phase"].to_list()  # no log-prob spans in this job: no such row
    found = {f["kind"]: f for f in d.findings.iter_rows(named=True)}
    assert set(found) >= {"straggler", "slow_transfer", "config"}, d.findings
    straggler, sync, config = found["straggler"], found["slow_transfer"], found["config"]
    assert (straggler["phase"], straggler["rank"]) == ("train", 1) and "rank 0 waited" in straggler["evidence"]
    assert abs(straggler["lost_s_per_step"] / STRAGGLE_S_PER_STEP - 1) <= 0.25
    assert (sync["phase"], sync["rank"], sync["instance"]) == ("weight_sync", 0, "rollout/engine0")
    assert abs(sync["lost_s_per_step"] / SYNC_DELAY_S_PER_STEP - 1) <= 0.25
    assert (config["phase"], config["instance"]) == ("generate", "rollout/engine0")
    assert "exactly 2 requests" in config["evidence"]
    # the cap's cost: the replay of the whole batch at once against the recorded waves; at least the queueing
    assert config["lost_s_per_step"] > 1.0 and config["gain_p05_s_per_step"] > 1.0


def test_the_docs_worked_example_is_the_current_output() -> None:
    done = run_cli("diagnose", "tiny_rl_faults")
    assert done.returncode == 0, done.stderr
    doc = (REPO / "docs" / "diagnose.md").read_text().splitlines()
    start = doc.index("$ rltrace diagnose tiny_rl_faults") + 1
    end = next(i for i in range(start, len(doc)) if doc[i].startswith("```"))
    # the CLI pads wrapped lines to the console's width, which an editor may strip
    assert [line.rstrip() for line in doc[start:end]] == [line.rstrip() for line in done.stdout.splitlines()]



def test_the_reports_gains_say_how_the_fix_runs_mean_step_follows_them() -> None:
    """A gain is per judged step (steps 1..5); the 'fix N' runs' mean step counts the warm-up step 0 too, which a
    rank's or a transfer's fix leaves as it ran, so it moves by 5/6 of the gain (0.300 s read as 0.250 s with no
    word on why); a configuration fix applies to step 0 as well."""
    d = diagnose(rltrace.open("tiny_rl_faults"), replicates=0, keep_runs=True)
    runs = dict(d.runs)
    recorded = runs["as recorded"].metrics["step_time_s"]["mean"]
    steps = runs["as recorded"].metrics["steps"]
    judged = len(d.steps)
    assert judged < steps  # step 0 is not judged
    checked = 0
    for n, row in enumerate(d.findings.iter_rows(named=True), start=1):
        if row["kind"] not in ("straggler", "slow_transfer"):  # a scheduler or a cap: step 0 changes too
            continue
        fix = next(r for name, r in d.runs if name.startswith(f"fix {n}:"))
        moved = recorded - fix.metrics["step_time_s"]["mean"]
        assert moved == pytest.approx(row["gain_s_per_step"] * judged / steps, rel=0.02, abs=1e-3), row["kind"]
        checked += 1
    assert checked == 2
    page = html.unescape(build([Run.from_result(name, r) for name, r in d.runs], rltrace.open("tiny_rl_faults"),
                               diagnosis=d))
    assert f"findings over {d.judged}" in page and f"{judged}/{steps} of such a gain" in page

@pytest.mark.slow  # over 5 s on 2 cores
def test_a_gpu_sample_is_held_against_its_cost_model() -> None:
    d = diagnose(rltrace.open("rollpacker_qwen7b"), replicates=0, keep_runs=True)
    assert d.findings.schema == pl.Schema(SCHEMA)
    phases = {r["phase"]: r for r in d.phases.iter_rows(named=True)}
    for phase in ("generate", "train", "optimizer", "weight_sync"):  # H800s and Qwen2.5-7B: all in the catalogs
        assert phases[phase]["expected_s"] is not None and phases[phase]["expected_s"] > 0, phase
    # synth moved one copy of the weights to each of the 16 engines at once at 50 GB/s, the default sync bandwidth:
    # expected is one copy's time (not 16 copies', 16x the measured)
    assert phases["weight_sync"]["ratio"] == pytest.approx(1.0, rel=0.02)
    # its reference log-prob spans are a row of their own, measured (tiny_rl, which has none, gets no such row)
    assert phases["reference"]["measured_s"] > 0 and phases["reference"]["expected_s"] is None
    # its long tail (outputs up to 26.9x the median) is a bubble some scheduler removes
    assert "bubble" in d.findings["kind"].to_list()
    # priced on the recorded work: rollart's replay trains two thirds of the recorded tokens, so its shorter step is
    # no gain, and the fix is a scheduler that trains them all
    bubble = d.findings.filter(pl.col("kind") == "bubble")
    pricer = Pricer(rltrace.open("rollpacker_qwen7b"))
    rollart = WhatIf(label="rollart", scheduler="rollart")
    assert pricer.changes_work(rollart) and pricer.gain(rollart, replicates=0)[0] > bubble["gain_s_per_step"][0]
    # a synthetic sample's steps come from synth's timing model, 27% off the replay's: the gains' base is said
    note = next(n for n in d.notes if n.startswith("the recording replayed as it ran takes"))
    replayed, measured = (float(x) for x in re.findall(r"([\d.]+) s", note)[:2])
    assert measured == pytest.approx(d.step_s, abs=1e-3) and replayed < 0.9 * measured
    fixes = [run for name, run in d.runs if name.startswith("fix ")]
    assert fixes and not any(run.metrics["same_work"]["changed"] for run in fixes)
    # the report says what the terminal says: that note beside the gains, and the phase table
    page = html.unescape(build([Run.from_result(name, r) for name, r in d.runs], rltrace.open("rollpacker_qwen7b"),
                               diagnosis=d))
    assert note in page and "Is it normal" in page
    measured = phases["weight_sync"]["measured_s"]
    assert f"<td>weight_sync</td><td>{measured:.3f}</td>" in page


@pytest.mark.parametrize("sample", ["streamrl_qwen32b", "rollpacker_qwen7b"])
def test_the_pool_splits_tried_are_whole_generation_instances(sample: str) -> None:
    """streamrl_qwen32b runs TP 4 on 32 GPUs: a split of 21 generation GPUs is no cluster (it was an error)."""
    pricer = Pricer(rltrace.open(sample))
    cluster = pricer.prepared(pricer.base_shape).cluster
    splits = [(alt.gen_gpus, alt.train_gpus) for alt in _alternatives(pricer) if alt.gen_gpus is not None]
    assert splits and all(g % cluster.tp == 0 and g + t == cluster.gen_gpus + cluster.train_gpus for g, t in splits)
    assert cluster.gen_gpus - cluster.tp in dict(splits) or cluster.gen_gpus + cluster.tp in dict(splits)


def _slowed(folder: Path, engine: str, factor: float) -> Path:
    """A synthetic two-instance bundle whose ``engine`` decodes ``factor`` times slower (its requests' times
    after arrival stretched), written through the public API."""
    src = synthesize(small_config("steps=6"))
    req = pl.DataFrame(src.tables["requests"]) if not isinstance(src.tables["requests"], pl.DataFrame) \
        else src.tables["requests"]
    slow = pl.col("engine") == engine
    stretched = [pl.when(slow).then(pl.col("arrival_ns") + ((pl.col(c) - pl.col("arrival_ns")) * factor)
                                    .cast(pl.Int64)).otherwise(pl.col(c)).alias(c)
                 for c in ("scheduled_ns", "first_token_ns", "finish_ns")]
    tables = {**src.tables, "requests": req.with_columns(stretched)}
    return rltrace.write_bundle(folder, src.manifest, tables)


def test_a_slow_generation_instance_is_a_straggler_and_an_even_pair_is_not(tmp_path: Path) -> None:
    even = diagnose(rltrace.open(_slowed(tmp_path / "even", "rollout/engine1", 1.0)), replicates=0)
    assert "straggler" not in even.findings["kind"].to_list(), even.findings
    slow = diagnose(rltrace.open(_slowed(tmp_path / "slow", "rollout/engine1", 2.0)), replicates=0)
    found = slow.findings.filter(pl.col("kind") == "straggler")
    assert found.select("phase", "instance", "rank").rows() == [("generate", "rollout/engine1", None)]
    assert "ms each against" in found["evidence"][0]


def test_a_bundle_whose_requests_generated_nothing_is_diagnosed(tmp_path: Path) -> None:
    # every request with 0 output tokens (a valid bundle): the replay's generation intervals are all empty and
    # the useful-share weight divided by their peak concurrency, 0 (ZeroDivisionError and a traceback)
    src = synthesize(small_config("steps=4"))
    req = pl.DataFrame(src.tables["requests"]).with_columns(pl.lit(0, pl.Int32).alias("output_tokens"))
    bundle = rltrace.open(rltrace.write_bundle(tmp_path / "nothing", src.manifest, {**src.tables, "requests": req}))
    generate = diagnose(bundle, replicates=0).phases.filter(pl.col("phase") == "generate").row(0, named=True)
    assert generate["measured_s"] > 0 and generate["expected_s"] == 0.0  # nothing to generate, in no time


intervals = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 200)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(spans=intervals, inside=intervals)
def test_covered_time_matches_a_count_of_covered_instants(spans, inside) -> None:
    s = np.array([a for a, _ in spans], dtype=np.int64)
    e = s + np.array([d for _, d in spans], dtype=np.int64)
    i_s = np.array([a for a, _ in inside], dtype=np.int64)
    i_e = i_s + np.array([d for _, d in inside], dtype=np.int64)
    got = covered(s, e, i_s, i_e)
    grid = np.arange(0, 1300) + 0.5  # unit cells [t, t + 1): covered when some interval holds the whole cell
    hit = np.zeros(len(grid), dtype=bool)
    for a, b in zip(i_s, i_e):
        hit |= (grid > a) & (grid < b)
    for k, (a, b) in enumerate(zip(s, e)):
        assert got[k] == hit[(grid > a) & (grid < b)].sum()


def test_without_replicates_a_note_says_gains_were_not_held_against_their_spread() -> None:
    """tiny_rl_faults' train bubble (1.40 s a step under fully-async) has a spread reaching zero, so the default
    run leaves it out; --replicates 0 cannot test that, lists it, and said nothing about why the lists differ."""
    plain = diagnose(rltrace.open("tiny_rl_faults"), replicates=0)
    spread = diagnose(rltrace.open("tiny_rl_faults"))
    extra = plain.findings.join(spread.findings, on=["kind", "phase"], how="anti")
    assert extra.select("kind", "phase").rows() == [("bubble", "train")]
    assert any(n.startswith("--replicates 0: each replayed gain is a point estimate") for n in plain.notes)
    assert not any("--replicates 0" in n for n in spread.notes)


@pytest.mark.parametrize("sample", ["streamrl_qwen32b", "rollart_qwen3_8b"])
def test_a_recording_on_two_gpu_kinds_is_diagnosed_without_colocating_it(sample: str) -> None:
    """The bubble check priced every scheduler, colocated-sync included, on H20 generation and H800 training pools,
    which a replay refuses: diagnose ended with an error instead of findings on both such samples."""
    pricer = Pricer(rltrace.open(sample))
    assert "colocated-sync" not in {alt.scheduler for alt in _alternatives(pricer)}
    done = run_cli("diagnose", sample, "--replicates", "0", "--json")
    assert done.returncode == 0, done.stderr
    assert "findings" in json.loads(done.stdout)


def _cpu_profile(path: Path, efficiency: float) -> Path:
    rows = [{"gpu": "cpu", "tp": 1, "regime": regime, "efficiency": efficiency, "kernels": 8, "median_abs_error": 0.1,
             "source": "measured on cpu (tiny)", "peak_flops": 1e12, "peak_bytes_per_s": 5e10}
            for regime in ("compute", "memory", "attention")]
    pl.DataFrame(rows).write_parquet(path)
    return path


def test_a_request_log_import_is_refused_in_diagnoses_terms(tmp_path: Path) -> None:
    # it lacks a GPU kind and a model; the replay's "give a catalog GPU kind (--gpu)" named a flag diagnose has not.
    # Its arrivals are no measured step: with a GPU and model given it was judged (a 617 s step, a trainer's bubble)
    (tmp_path / "req.csv").write_text("arrival,prompt,output\n0.0,100,50\n0.1,120,60\n")
    done = run_cli("import", "csv", str(tmp_path / "req.csv"), "-o", str(tmp_path / "b"),
                   "--map", "arrival=arrival,prompt=prompt,output=output")
    assert done.returncode == 0, done.stderr
    done = run_cli("diagnose", str(tmp_path / "b"))
    assert done.returncode == 2 and done.stderr.count("rltrace: error:") == 1, done.stderr  # progress lines aside
    assert "nothing to diagnose: no request finished (a request-log import records arrivals only)" in done.stderr
    assert f"`rltrace replay {tmp_path / 'b'} --gpu KIND --model NAME`" in done.stderr
    assert "(--gpu)" not in done.stderr and "give --gpu" not in done.stderr
    # with the GPU kind and model given at import it was judged: a step no request measured, a trainer's bubble
    done = run_cli("import", "csv", str(tmp_path / "req.csv"), "-o", str(tmp_path / "g"),
                   "--map", "arrival=arrival,prompt=prompt,output=output", "--gpu", "H100", "--model", "Qwen2.5-7B")
    assert done.returncode == 0, done.stderr
    done = run_cli("diagnose", str(tmp_path / "g"))
    assert done.returncode == 2 and "nothing to diagnose: no request finished" in done.stderr, done.stderr
    assert f"`rltrace replay {tmp_path / 'g'}` replays its requests" in done.stderr


def test_a_profile_given_is_not_asked_for_again(tmp_path: Path) -> None:
    # a profile without broadcasts (or of other devices) still read "no transport rate: give --profile"
    d = diagnose("tiny_rl_cpu", profile=str(_cpu_profile(tmp_path / "p.parquet", 0.5)), replicates=0)
    sync = d.phases.filter(pl.col("phase") == "weight_sync")["expected_from"][0]
    assert sync.startswith("no transport rate: the profile timed no broadcast") and "give --profile" not in sync
    other = pl.read_parquet(_cpu_profile(tmp_path / "q.parquet", 0.5)).with_columns(pl.lit("H100").alias("gpu"))
    other.write_parquet(tmp_path / "h100.parquet")
    note = next(n for n in diagnose("tiny_rl_cpu", profile=str(tmp_path / "h100.parquet"), replicates=0).notes
                if n.startswith("no expected phase times"))
    assert "and the profile given is of others" in note and "--device cpu " in note


def test_a_profiles_estimate_on_an_uncatalogued_device_is_shown_not_judged(tmp_path: Path) -> None:
    """A CPU profile's efficiency reads 2.6% in one calibration and 94% in another: with a high one, the healthy
    tiny_rl_cpu sample got slow_phase findings for generation (41x) and training (9x)."""
    d = diagnose("tiny_rl_cpu", profile=str(_cpu_profile(tmp_path / "p.parquet", 0.9)), replicates=0)
    phases = {r["phase"]: r for r in d.phases.iter_rows(named=True)}
    for phase in ("generate", "train"):
        assert phases[phase]["expected_s"] and not phases[phase]["judged"], phase
        assert phases[phase]["expected_from"].endswith(UNJUDGED)
    assert "slow_phase" not in d.findings["kind"].to_list()
    gpu = {r["phase"]: r["judged"] for r in diagnose("rollpacker_qwen7b", replicates=0).phases.iter_rows(named=True)}
    assert gpu["generate"] and gpu["train"]  # a catalogued GPU's expectation is judged
