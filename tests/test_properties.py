"""Properties over generated inputs (hypothesis): the event loop is deterministic and its fast path changes nothing,
and a bundle reads back what was written."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import polars as pl
from helpers import small_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_helpers import make
from rltrace.replay.run import ReplayConfig, replay

import rltrace
from rltrace.synth import synthesize

LENGTHS = st.lists(st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=24), min_size=1,
                   max_size=3)
"""output lengths per step: one to three steps of one to 24 requests"""
SCHEDULERS = st.sampled_from(["disagg-sync", "colocated-sync", "one-step-async", "fully-async", "as-recorded"])
QUICK = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@QUICK
@given(lengths=LENGTHS, scheduler=SCHEDULERS, max_seqs=st.integers(min_value=1, max_value=32))
def test_the_same_inputs_give_the_same_event_log(lengths: list[list[int]], scheduler: str, max_seqs: int) -> None:
    runs = [replay(make(lengths, train_s=0.05, sync_s=0.01, max_seqs=max_seqs), scheduler, ReplayConfig(),
                   keep_log=True) for _ in range(2)]
    assert runs[0].event_log == runs[1].event_log and runs[0].event_log
    assert runs[0].requests.equals(runs[1].requests)


@QUICK
@given(lengths=LENGTHS, scheduler=SCHEDULERS, max_seqs=st.integers(min_value=1, max_value=32))
def test_the_fast_path_finishes_each_request_when_the_per_event_path_does(lengths: list[list[int]], scheduler: str,
                                                                          max_seqs: int) -> None:
    def finishes(fast: bool) -> list[float]:
        result = replay(make(lengths, train_s=0.05, max_seqs=max_seqs), scheduler, ReplayConfig(fast_path=fast))
        return result.requests.sort("request")["finish_s"].to_list()

    fast, slow = finishes(True), finishes(False)  # (fully-async answers prompts again past the recorded steps)
    assert len(fast) == len(slow) >= sum(len(step) for step in lengths)
    # (a request still running when the run ends has no finish on either path)
    assert all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) or (math.isnan(a) and math.isnan(b))
               for a, b in zip(fast, slow, strict=True))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**31 - 1), steps=st.integers(min_value=1, max_value=4),
       prompts=st.integers(min_value=1, max_value=8), samples=st.integers(min_value=1, max_value=4))
def test_a_written_bundle_reads_back_every_row(seed: int, steps: int, prompts: int, samples: int) -> None:
    result = synthesize(small_config(f"steps={steps}", f"prompts_per_step={prompts}",
                                     f"samples_per_prompt={samples}", seed=seed))
    with tempfile.TemporaryDirectory() as tmp:
        bundle = rltrace.open(rltrace.write_bundle(Path(tmp) / "b", result.manifest, result.tables))
        for name, table in result.tables.items():
            written = table if isinstance(table, pl.DataFrame) else pl.DataFrame(table)
            read = bundle.table(name).collect()
            assert read.height == written.height, name
            assert read.select(written.columns).equals(written), name
        assert bundle.manifest.run_id == result.manifest.run_id
