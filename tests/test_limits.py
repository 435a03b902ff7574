"""Impossible parameters are one line on stderr and exit 2, refused before any work (issue 26).

Each case runs the CLI's ``main()`` (in-process, stderr captured: 26 interpreter start-ups would cost a
minute on a loaded 2-core machine); the values that used to run out of memory (``--steps 10^9``, a fat-tree of
k=100000, a 10^8-point grid) also run as real subprocesses, and must be refused in seconds, not after
allocating.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from helpers import REPO, RLTRACE

from rltrace.cli import main
from rltrace.errors import ConfigError
from rltrace.limits import check_output, check_ray_address

SUBPROCESS = {"steps 10^9", "gen-gpus 10^12", "fat-tree k=100000", "10^8-point grid", "synth under a file"}

BUNDLE = str(REPO / "sample_traces" / "tiny_rl_cpu")


def _grids(tmp: Path) -> dict[str, Path]:
    values = ",".join(str(i + 1) for i in range(10_000))
    files = {
        "huge": f'[axes]\nscheduler = ["disagg-sync"]\ngen_gpus = [{values}]\ntrain_gpus = [{values}]\n',
        "steps_two": '[axes]\nscheduler = ["disagg-sync"]\n[fixed]\nsteps = "two"\n',
        "seed_float": '[axes]\nscheduler = ["disagg-sync"]\nseed = [1.5]\n',
    }
    paths = {}
    for name, text in files.items():
        paths[name] = tmp / f"{name}.toml"
        paths[name].write_text(text)
    return paths


# (case id, argv after `rltrace`, fragment the error line must hold). {F} is an existing plain file, {G:x} a grid.
CASES = [
    ("steps 10^9", ["replay", BUNDLE, "-s", "disagg-sync", "--steps", "1000000000"], "limit of 100,000 steps"),
    ("samples 10^8", ["replay", BUNDLE, "-s", "disagg-sync", "--samples", "100000000"], "samples_per_prompt"),
    ("prompts x samples", ["replay", BUNDLE, "-s", "disagg-sync", "--prompts", "100000", "--samples", "1000"],
     "samples per step"),
    ("gen-gpus 10^12", ["replay", BUNDLE, "-s", "disagg-sync", "--gen-gpus", "1000000000000"], "GPUs in a pool"),
    ("train-gpus 0", ["replay", BUNDLE, "-s", "disagg-sync", "--train-gpus", "0"], "train_gpus must be >= 1"),
    ("fat-tree k=100000", ["replay", BUNDLE, "-s", "disagg-sync", "--topology", "fat-tree:k=100000"],
     "GPUs in a topology"),
    ("fabric bench k=100000", ["fabric", "bench", "--topology", "fat-tree:k=100000", "--op", "all_reduce",
                               "--size", "1G"], "GPUs in a topology"),
    ("10^8-point grid", ["sweep", BUNDLE, "--grid", "{G:huge}", "-o", "{T}/sweep"], "limit of 100,000 replays"),
    ("grid steps = two", ["sweep", BUNDLE, "--grid", "{G:steps_two}", "-o", "{T}/sweep"],
     "steps must be an integer, got 'two'"),
    ("grid seed = 1.5", ["sweep", BUNDLE, "--grid", "{G:seed_float}", "-o", "{T}/sweep"], "seed must be an integer"),
    ("seed -1", ["replay", BUNDLE, "-s", "disagg-sync", "--seed", "-1"], "seed must be >= 0"),
    ("scheduler twice", ["replay", BUNDLE, "-s", "disagg-sync,disagg-sync"], "names a scheduler twice"),
    ("negative price", ["replay", BUNDLE, "-s", "disagg-sync", "--set", "prices.H100=-1"], "prices.H100"),
    ("NaN price", ["replay", BUNDLE, "-s", "disagg-sync", "--set", "prices.H100=nan"], "finite"),
    ("NaN cost", ["replay", BUNDLE, "-s", "disagg-sync", "--set", "cost.train_mfu=nan"], "finite"),
    ("sync_gbps 1e-300", ["replay", BUNDLE, "-s", "disagg-sync", "--set", "cost.sync_gbps=1e-300"],
     "cost.sync_gbps"),
    ("advise budget -5", ["advise", BUNDLE, "--budget", "-5"], "--budget must be a positive"),
    ("replay -o under a file", ["replay", BUNDLE, "-s", "disagg-sync", "-o", "{F}/out"], "is a file, not a folder"),
    ("replay --dashboard under a file", ["replay", BUNDLE, "-s", "disagg-sync", "--dashboard", "{F}/r.html"],
     "is a file, not a folder"),
    ("dashboard under a file", ["dashboard", "{T}", "-o", "{F}/r.html"], "is a file, not a folder"),
    ("export under a file", ["export", "perfetto", BUNDLE, "-o", "{F}/t.json"], "is a file, not a folder"),
    ("sweep under a file", ["sweep", BUNDLE, "--grid", "{G:steps_two}", "-o", "{F}/sweep"], "is a file, not a folder"),
    ("synth under a file", ["synth", "--preset", "rollpacker", "-o", "{F}/s"], "is a file, not a folder"),
    ("import under a file", ["import", "csv", "{F}", "-o", "{F}/b"], "is a file, not a folder"),
    ("calibrate under a file", ["calibrate", "--tables", "{T}", "-o", "{F}/p.parquet"], "is a file, not a folder"),
    # calibrate made a missing folder for -o and refused one for --kernels-out: every file output refuses it
    ("calibrate in a missing folder", ["calibrate", "--tables", "{T}", "-o", "{T}/no/p.toml"],
     "/no/p.toml: folder"),
    ("calibrate kernels in a missing folder", ["calibrate", "--tables", "{T}", "-o", "{T}/p.toml", "--kernels-out",
                                               "{T}/no/k.parquet"], "/no does not exist"),
    ("export to a folder", ["export", "perfetto", BUNDLE, "-o", "{T}"], "is a folder, expected a file"),
]


@pytest.mark.parametrize(("case", "argv", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_impossible_parameter_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, argv: list[str], fragment: str
) -> None:
    grids = _grids(tmp_path)
    plain = tmp_path / "plain_file"
    plain.write_text("not a folder\n")
    args = []
    for a in argv:
        a = a.replace("{F}", str(plain)).replace("{T}", str(tmp_path))
        for name, path in grids.items():
            a = a.replace(f"{{G:{name}}}", str(path))
        args.append(a)
    started = time.perf_counter()
    if case in SUBPROCESS:
        # The installed console script, from elsewhere: `python -m rltrace` in the repo root would import the
        # source tree, whose folders are not the installed package's layout.
        done = subprocess.run([RLTRACE, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
        code, stderr = done.returncode, done.stderr
    else:
        code = main(args)
        stderr = capsys.readouterr().err
    elapsed = time.perf_counter() - started
    lines = stderr.strip().splitlines()
    assert code == 2, (case, code, stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("rltrace: error: "), stderr[-2000:]
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in stderr
    # refused before work: no output appeared, and well before any allocation could have grown
    assert not (tmp_path / "sweep").exists()
    assert elapsed < 60, f"{case} took {elapsed:.1f} s to refuse"


def test_an_output_beside_a_bundle_is_written_and_one_inside_it_refused(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "run"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    (bundle / "requests.parquet").write_bytes(b"")
    monkeypatch.chdir(bundle)  # a user working inside their bundle writes next to it with ..
    for ok in (Path("../report.html"), tmp_path / "runs", bundle / ".." / "sibling.html"):
        assert check_output(ok, folder=ok.suffix == "") == ok
    assert check_output(bundle, folder=True, bundle=True) == bundle  # synth/record/import --force replace one
    for inside, said in ((Path("report.html"), "inside the trace bundle"), (bundle, "is the trace bundle"),
                         (bundle / "sub" / "x.html", "inside the trace bundle")):
        with pytest.raises(ConfigError, match=said):
            check_output(inside, make_parents=True)
    with pytest.raises(ConfigError, match="inside the trace bundle"):
        check_output(bundle / "inner", folder=True, bundle=True)  # a bundle inside a bundle


def test_an_output_over_a_replay_runs_own_file_is_refused(tmp_path: Path) -> None:
    """`export perfetto RUN -o RUN/metrics.json` replaced the run's metrics with a trace, and the run was broken."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    for name in ("metrics.json", "requests.parquet", "links.parquet"):
        with pytest.raises(ConfigError, match="is a file of the replay run"):
            check_output(run / name)
    assert check_output(run / "trace.json") == run / "trace.json"  # a new file beside the run's own is fine
    assert check_output(tmp_path / "metrics.json") == tmp_path / "metrics.json"  # no run folder there
    assert check_output(run, folder=True) == run  # a replay writes its run folder again


@pytest.mark.parametrize(("address", "ok"), [
    ("auto", True), ("local", True), ("127.0.0.1:6379", True), ("ray://head:10001", True), ("[::1]:6379", True),
    ("head.example.com:10001", True), ("foo", False), ("::::1", False), ("a:b:c:99999", False), ("head:0", False),
    ("ray://:10001", False), ("head:65536", False), ("my_host:1", True), ("[::::1]:6379", False),
    ("[:]:1", False), ("h\u00e9ad:6379", False), ("h:\uff11\uff12", False),
])
def test_a_ray_address_is_checked_as_ray_reads_one(address: str, ok: bool) -> None:
    if ok:
        assert check_ray_address(address) == address
    else:
        with pytest.raises(ConfigError, match="must be auto, local, HOST:PORT"):
            check_ray_address(address)
