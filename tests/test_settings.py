"""Configuration as typed objects end to end: settings resolve onto dataclasses (never back through text), and
one grammar reads topology specs wherever they are given."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import run_cli
from rltrace.replay.jobs import JobSpec, load_jobs
from rltrace.replay.network.network import NetworkConfig
from rltrace.replay.run import ReplayConfig
from rltrace.replay.schedulers import lookup
from rltrace.replay.settings import resolve
from rltrace.replay.topologies import TopologySpec, parse

from rltrace.config import build, override, parse_set, to_dict
from rltrace.errors import ConfigError


def test_schedulers_configs_come_out_as_their_dataclasses() -> None:
    settings = resolve(["rollpacker", "disagg-sync"], ["rollpacker.eta=1.5", "cost.train_mfu=0.4", "prices.H100=3"])
    packer = settings.per_scheduler["rollpacker"]
    assert type(packer) is lookup("rollpacker").Config and packer.eta == 1.5
    assert settings.per_scheduler["disagg-sync"] == lookup("disagg-sync").Config()
    assert settings.config.cost.train_mfu == 0.4 and settings.prices["H100"] == 3.0


def test_a_price_names_its_gpu_kind_in_any_case() -> None:
    # as --gpu h800 and rollart.prefill_gpu=h800 do; prices.h800 was an unknown key
    assert resolve(["disagg-sync"], ["prices.h800=3.5"]).prices["H800"] == 3.5


def test_typed_values_reach_the_config_as_they_are() -> None:
    spec = TopologySpec.parse("rail:nodes=4,gpu=H100")
    settings = resolve(["disagg-sync"], values={"network.topology": spec, "cost.sync_gbps": 25})
    assert settings.config.network.topology is spec  # not formatted and read again
    assert settings.config.cost.sync_gbps == 25.0


def test_a_flag_and_a_set_of_its_key_are_refused_together() -> None:
    """The flag won without a word: the --set value was dropped."""
    with pytest.raises(ConfigError, match=r"^--topology and --set 'network.topology=\"nvswitch:gpus=8\"' both set "
                                          r"network.topology: give one$"):
        resolve(["disagg-sync"], ['network.topology="nvswitch:gpus=8"'], {"network.topology": "rail:nodes=2"},
                where="--topology")
    settings = resolve(["disagg-sync"], [], {"network.topology": "rail:nodes=2"})
    assert str(settings.config.network.topology) == "rail:nodes=2"


def test_checks_across_fields_see_the_final_values() -> None:
    # each dataclass is replaced once with all its new values: the order of two --set items cannot matter
    both = resolve(["disagg-sync"], ["cost.memory_efficiency=0.5", "cost.compute_efficiency=0.5"]).config.cost
    assert (both.memory_efficiency, both.compute_efficiency) == (0.5, 0.5)


def test_one_grammar_for_topology_specs() -> None:
    text = "fat-tree:k=8,nic_gbps=200.0,gpu=H800"
    spec = TopologySpec.parse(text)
    assert spec.name == "fat-tree" and dict(spec.params) == {"k": 8, "nic_gbps": 200.0, "gpu": "H800"}
    assert str(spec) == text and TopologySpec.parse(str(spec)) == spec
    # the same spec from every door: --set text, a grid value, code, fabric bench
    from_set = resolve(["disagg-sync"], [f'network.topology="{text}"']).config.network.topology
    from_grid = resolve(["disagg-sync"], values={"network.topology": text}).config.network.topology
    assert from_set == from_grid == NetworkConfig(topology=text).topology == spec
    assert parse(text).links().names == spec.build().links().names
    assert NetworkConfig(topology="").topology is None and NetworkConfig().topology is None


def test_a_config_goes_to_json_and_back_unchanged() -> None:
    config = resolve(["disagg-sync"], ['network.topology="rail:nodes=2,gpu=H100"', "metrics.tail_quantile=0.9"]).config
    plain = json.loads(json.dumps(to_dict(config)))  # config.json
    assert plain["network"]["topology"] == "rail:nodes=2,gpu=H100"
    assert build(ReplayConfig, plain, "replay") == config


@pytest.mark.parametrize("sets, message", [
    (["nokey=1"], "--set 'nokey=1': unknown key 'nokey'"),
    (["nokey"], "--set 'nokey': expected key=value"),
    (["disagg-sync.bogus=1"], "unknown key 'disagg-sync.bogus'"),
    (["rollpacker.eta=1.5"], "unknown key 'rollpacker.eta' (rollpacker is not among the chosen schedulers"),
    (["cost.ep=8"], "unknown key 'cost.ep' (known under cost: calibration, compute_efficiency"),
    (["cost.ep=8"], "did you mean cost.train_ep?"),
    (["cost.trian_ep=8"], "did you mean cost.train_ep?"),
    (["disagg-sync.bogus=1"], "disagg-sync takes no settings"),
    (["cost.train_mfu=abc"], "replay.cost.train_mfu: expected a number, got 'abc'"),
    (["cost.train_mfu.x=1"], "unknown key 'cost.train_mfu.x'"),
    (["prices.NOSUCH=1"], "unknown key 'prices.NOSUCH' (GPU kinds: A100, A800, B200"),
    (["prices.H100=-1"], "--set 'prices.H100=-1': prices.H100 must be in 0..10,000 USD per GPU-hour, got -1"),
    (['network.topology="mesh:n=3"'], "unknown topology 'mesh'"),
    (['network.topology="rail:radix=3"'], "topology rail: unknown key 'radix'"),
    (['network.topology="rail:nodes=two"'], "topology rail.nodes: expected an integer"),
    (["network.topology=3"], "expected a topology spec"),
    (["cost.train_mfu=inf"], "replay.cost.train_mfu: expected a finite number"),
    (["cost.train_mfu=true"], "replay.cost.train_mfu: expected a number, got true"),  # TOML's spelling, not True
    (["network.topology=true"],
     "replay.network.topology: expected a topology spec such as fat-tree:k=8,gpu=H100, got true"),
    (["network=true"], "replay.network: expected a table, got true"),
])
def test_bad_settings_are_one_clear_error(sets: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")) as err:
        resolve(["disagg-sync"], sets)
    assert "\n" not in str(err.value)


def test_override_and_parse_set_on_any_config_dataclass() -> None:
    key, value = parse_set("cost.train_mfu=0.5")
    assert (key, value) == ("cost.train_mfu", 0.5)
    config = override(ReplayConfig(), [(key, value, "test")], "replay")
    assert config.cost.train_mfu == 0.5 and ReplayConfig().cost.train_mfu != 0.5  # a new object; the old unchanged
    with pytest.raises(ConfigError, match="--price 'x': expected key=value"):
        parse_set("x", "--price")


def test_a_check_across_fields_names_the_assignments_it_judged(tmp_path: Path) -> None:
    """A value refused by a config's own check (__post_init__) says where it came from, like a badly typed one."""
    grid = tmp_path / "g.toml"
    grid.write_text('[axes]\nscheduler = ["disagg-sync"]\n[fixed]\nsteps = 1\n"cost.train_mfu" = 2.0\n')
    done = run_cli("sweep", "rollpacker_qwen7b", "--grid", str(grid), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"rltrace: error: {grid}: cost.train_mfu must be in (0, 1], got 2.0"


def test_a_table_missing_a_required_key_names_the_key() -> None:
    """A [[jobs]] entry without its name said "JobSpec.__init__() missing 1 required keyword-only argument"."""
    with pytest.raises(ConfigError, match=r"^jobs\[0\]: missing key 'name'$"):
        build(JobSpec, {"bundle": "rollpacker_qwen7b"}, "jobs[0]")
    assert build(JobSpec, {"name": "a", "bundle": "b"}, "jobs[0]").name == "a"


JOB = '[[jobs]]\nname = "a"\nbundle = "rollpacker_qwen7b"\n'


@pytest.mark.parametrize("text, said", [
    # a mistyped table dropped job b without a word
    (JOB + '[[job]]\nname = "b"\nbundle = "rollpacker_qwen7b"\n',
     "unknown key 'job' (a job list holds [[jobs]] tables only)"),
    ('title = "x"\n' + JOB, "unknown key 'title'"),
    (JOB + JOB, "job names must be unique ('a' names two jobs)"),
    (JOB.replace('"a"', '""'), "a job's name is empty"),
])
def test_a_job_list_is_refused_whole_not_in_part(text: str, said: str, tmp_path: Path) -> None:
    (tmp_path / "jobs.toml").write_text(text)
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_jobs(tmp_path / "jobs.toml")


@pytest.mark.parametrize("scheduler, key", [("colocated-sync", "to_train_s"), ("orchestrrl", "switch_s"),
                                            ("rollart", "reward_usd_per_s")])
def test_a_duration_past_any_run_is_refused(scheduler: str, key: str) -> None:
    # 1e300 s was taken and printed samples/s of 1e-297; a rate per second that large is no price either
    assert resolve([scheduler], [f"{scheduler}.{key}=1e9"]).per_scheduler[scheduler] is not None
    message = (rf"^--set '{scheduler}\.{key}=1e300': .*{scheduler}\.{key}=1e\+300 is past the limit of 1e\+09 "
               r"\(either sign\) for a value in seconds or per second$")
    with pytest.raises(ConfigError, match=message):
        resolve([scheduler], [f"{scheduler}.{key}=1e300"])
