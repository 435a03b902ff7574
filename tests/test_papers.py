"""Each seed system on its own paper's setup: the described setups under examples/papers/ replay under the seed
scheduler and its paper's baseline, and `benchmarks/reproduce.py --json` reports every row on both workloads."""

from __future__ import annotations

import json
import sys
from types import ModuleType

import pytest
from helpers import REPO, load_script
from rltrace.replay.described import is_description, load_description
from rltrace.replay.jobs import load_jobs

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
    assert len(jobs) == 4 and all(is_description(j.bundle) for j in jobs)


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
