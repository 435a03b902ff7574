"""Each seed system on its own paper's setup: the described setups under examples/papers/ replay under the seed
scheduler and its paper's baseline, and `benchmarks/reproduce.py --json` reports every row on both workloads."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers import REPO, load_script
from rltrace.replay.described import is_description, load_description
from rltrace.replay.jobs import JobSpec, load_jobs, prepare_jobs
from rltrace.replay.loading import Shape
from rltrace.replay.run import CostConfig

import rltrace
from rltrace.errors import ConfigError

KEYS = {"system", "paper", "baseline", "measure", "claim", "sample", "paper_range", "ratio_sample", "inside_sample",
        "oracle_sample", "ratio_described", "inside_described", "described"}


def _reproduce() -> ModuleType:
    return load_script(REPO / "benchmarks" / "reproduce.py")


def test_every_paper_setup_is_a_described_job_with_its_source() -> None:
    papers = REPO / "examples" / "papers"
    described = [p for p in sorted(papers.glob("*.toml")) if p.name != "rollmux_jobs.toml"]
    assert {p.stem for p in described} >= {"streamrl", "rollpacker", "orchestrrl", "rollart"}
    for path in described:
        d = load_description(path)
        assert d.source.startswith("arXiv "), path  # where the setup comes from
        assert "Assumed" in path.read_text(), path  # and what the paper does not give
    jobs = load_jobs(papers / "rollmux_jobs.toml")
    assert {j.bundle.rsplit("/", 1)[-1] for j in jobs} == {"rollmux_a.toml", "rollmux_b.toml", "rollmux_c.toml"}
    assert all(is_description(j.bundle) for j in jobs)


def test_a_job_list_keeps_each_jobs_own_pools_on_the_first_jobs_gpu_kinds() -> None:
    papers = REPO / "examples" / "papers"
    small, large = (JobSpec(name=n, bundle=str(papers / f"rollmux_{n}.toml"), steps=1) for n in ("a", "c"))
    prepared = prepare_jobs([small, large], Shape(), CostConfig())
    assert [(j.cluster.gen_gpus, j.cluster.train_gpus) for j in prepared.jobs if j.cluster] == [(8, 8), (16, 16)]
    assert (prepared.cluster.gen_gpus, prepared.cluster.train_gpus) == (8, 8)  # one-job schedulers: the first's
    assert any("the jobs' pools differ" in note for note in prepared.notes)
    same = prepare_jobs([small, large], Shape(gen_gpus=8, train_gpus=8), CostConfig())  # the flags set every job's
    assert {(j.cluster.gen_gpus, j.cluster.train_gpus) for j in same.jobs if j.cluster} == {(8, 8)}
    assert not any("pools differ" in note for note in same.notes)
    # a job described on other GPU kinds (StreamRL's 32 + 32 H800) is retargeted to the first job's, pools kept
    streamrl = JobSpec(name="s", bundle=str(papers / "streamrl.toml"), steps=1)
    mixed = prepare_jobs([small, streamrl], Shape(), CostConfig())
    assert [(j.cluster.gen_gpu, j.cluster.train_gpu, j.cluster.gen_gpus) for j in mixed.jobs if j.cluster] == [
        ("H20", "H800", 8), ("H20", "H800", 32)]
    assert any("s runs on H800 + H800 alone" in note and "retargeted" in note for note in mixed.notes)
    alone = prepare_jobs([streamrl], Shape(gen_gpu="H20", train_gpu="H800"), CostConfig()).jobs[0]
    assert mixed.jobs[1].trainer_seconds(0) == alone.trainer_seconds(0)  # priced on the GPUs it runs on


@pytest.mark.slow  # every row on the samples and the papers' setups: about 30 s on 2 cores
def test_reproduce_json_has_every_row_on_the_sample_and_the_papers_setup(capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    module = _reproduce()
    monkeypatch.setattr(sys, "argv", ["reproduce.py", "--json"])
    module.main()
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 9 and all(KEYS <= set(r) for r in rows)
    for r in rows:
        lo, hi = r["paper_range"]
        for column in ("sample", "described"):
            ratio = r[f"ratio_{column}"]
            assert ratio > 0
            assert r[f"inside_{column}"] == (lo * 0.9 <= ratio <= hi * 1.1 if lo == hi else lo <= ratio <= hi)
        assert (REPO / r["described"]).is_file()


def test_orchestrrls_regroups_are_its_own_switches_not_a_colocated_engines_sleep_and_wake() -> None:
    """Every described job carries a colocated layout; OrchestrRL's regroup time was split by it into 'sleep',
    'refit' and 'wake' (0.28, 3.6, 0.28 s a step) on a disaggregated run."""
    runs = rltrace.compare(str(REPO / "examples" / "papers" / "orchestrrl.toml"), ["orchestrrl", "colocated-sync"],
                           steps=2).metrics()
    orchestrrl, colocated = runs.row(0, named=True), runs.row(1, named=True)
    assert orchestrrl["phases_s_per_step.switch"] > 0 and orchestrrl["phases_s_per_step.sleep"] is None
    assert colocated["phases_s_per_step.sleep"] > 0 and colocated["phases_s_per_step.switch"] is None


@pytest.mark.parametrize(("change", "said"), [
    (("arrival_s = 0.0", "arrival_s = -60.0"), "arrival_s must be >= 0 (seconds after the first job), got -60"),
    (("slo = 2.0", "slo = 0.5"), "slo must be >= 1 (a multiple of the job's time alone), got 0.5"),
])
def test_a_job_lists_bad_value_is_named_with_its_file(tmp_path: Path, change: tuple[str, str], said: str) -> None:
    """'arrival_s must be >= 0 and slo >= 1' named neither the key that was wrong, its value, nor the file."""
    text = (REPO / "examples" / "papers" / "rollmux_jobs.toml").read_text()
    assert change[0] in text
    path = tmp_path / "jobs.toml"
    path.write_text(text.replace(change[0], change[1], 1))
    with pytest.raises(ConfigError, match=re.escape(f"{path}: job ")) as refused:
        load_jobs(path)
    assert said in str(refused.value)


def test_a_job_list_given_as_a_described_job_says_to_use_jobs() -> None:
    path = REPO / "examples" / "papers" / "rollmux_jobs.toml"
    with pytest.raises(ConfigError, match=re.escape(f"a job list ([[jobs]] tables), not a described job: replay it "
                                                    f"with --jobs {path}")):
        load_description(path)
