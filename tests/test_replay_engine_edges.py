"""The engine at its edges: work booked past a run's end, a batch admitted when a switch ends, requests moved
behind a queue, an oracle a scheduler read; each through a small scheduler registered here."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from replay_helpers import TAU, make
from rltrace.replay.entities.requests import Requests, State
from rltrace.replay.events import Notice, NoticeKind, Tag
from rltrace.replay.run import Prepared, ReplayConfig, replay
from rltrace.replay.schedulers import create, register
from rltrace.replay.schedulers.view import View
from rltrace.replay.simulator import Simulator

from rltrace.errors import ConfigError


def _requests(lengths: list[list[int]]) -> tuple[Requests, Prepared]:
    """The request table a simulator runs, and the workload it comes from (one job, ``lengths`` per step)."""
    prepared = make(lengths)
    f = prepared.requests_frame
    return Requests(f["job"].to_numpy(), f["step"].to_numpy(), f["group"].to_numpy(), f["prompt_tokens"].to_numpy(),
                    f["output_tokens"].to_numpy()), prepared


@dataclass(frozen=True, kw_only=True, slots=True)
class StopConfig:
    end_s: float = 0.5


class Edge:
    """What the schedulers below share: a StopConfig, what they saw, and a timer that ends the run."""

    Config = StopConfig

    def __init__(self, config: StopConfig) -> None:
        self.config, self.seen = config, dict[str, object]()

    def on_event(self, sim: View, notice: Notice) -> None:
        if notice.kind is NoticeKind.TIMER:
            sim.stop()


@register("test-stops-early")
class StopsEarly(Edge):
    """Books 2 s of serverless reward and two 1 s turns of a one-lane worker at 0, then ends the run at 0.5 s."""

    def start(self, sim: View) -> None:
        sim.allocate("generation", 1, "H100")
        sim.add_resource("reward", "serverless", slots=0, usd_per_s=2.0)
        sim.add_resource("worker", "cpu")
        sim.work("reward", 2.0, Tag("reward"), kind="reward", step=0)
        for turn in range(2):
            sim.work("worker", 1.0, Tag("turn"), kind="environment", step=0, item=turn)
        sim.timer(self.config.end_s, Tag("end"))


def test_work_booked_past_the_runs_end_is_cut_there_on_the_timeline_and_the_bill() -> None:
    """rollart's environment queue ran 78 s past its run's end on the timeline (52 turns of step 0 starting after
    the step had ended): what a resource had not started when the run ends never runs, and what ran is cut."""
    requests, prepared = _requests([[5]])
    sim = Simulator(requests, prepared.jobs, prepared.cluster)
    policy, _ = create("test-stops-early")
    record = sim.run(policy)
    spans = sorted((s[0], s[3], s[4], s[5]) for s in record.segments if s[0] in ("reward", "worker"))
    assert spans == [("reward", -1, 0.0, 0.5), ("worker", 0, 0.0, 0.5)]  # the second turn never started
    assert sim.resources["reward"].busy_s == 0.5 and sim.resources["worker"].busy_s == 0.5  # billed to the end
    with pytest.raises(ConfigError, match="'reward' is a resource; a mark goes on a track of its own name"):
        sim.mark("reward", "decision", 0, 0.0, 9.0)  # the end would cut its 9 s from what reward bills


@register("test-switch-then-update")
class SwitchThenUpdate(Edge):
    """Submits four requests, switches the instance for 1 s, and publishes version 7 half way through the switch."""

    def start(self, sim: View) -> None:
        sim.allocate("generation", 1, "H100")
        self.inst = sim.add_instance("generation", 1, sim.jobs[0].generation)
        sim.submit(self.inst, range(4))
        sim.reconfigure(self.inst, switch_s=1.0)
        sim.timer(self.config.end_s, Tag("update"))

    def on_event(self, sim: View, notice: Notice) -> None:
        if notice.kind is NoticeKind.TIMER:
            self.seen["during the switch"] = State(sim.requests.state[0]).name
            sim.set_version(7)
        elif notice.kind is NoticeKind.FINISHED and 0 in notice.requests:
            self.seen["version"] = sim.requests.version[0]
            sim.stop()


def test_requests_admitted_when_a_switch_ends_wait_until_then_and_take_the_version_served_then() -> None:
    """The switch's end admitted the batch when it was planned: the requests read as running while the instance
    was still switching, and kept version 0 though version 7 was published before they were admitted."""
    requests, prepared = _requests([[20] * 4])
    policy, _ = create("test-switch-then-update")
    Simulator(requests, prepared.jobs, prepared.cluster).run(policy)
    assert policy.seen == {"during the switch": "WAITING", "version": 7}


@register("test-migrate-behind")
class MigrateBehind(Edge):
    """Four long requests run on instance a; at 5 iterations they move to the back of b's queue of twenty."""

    def start(self, sim: View) -> None:
        sim.allocate("generation", 2, "H100")
        self.a, self.b = (sim.add_instance("generation", 1, sim.jobs[0].generation, max_seqs=4) for _ in range(2))
        sim.submit(self.a, range(4))
        sim.timer(5 * TAU, Tag("move"))
        sim.timer(8 * TAU, Tag("look"))

    def on_event(self, sim: View, notice: Notice) -> None:
        if notice.kind is NoticeKind.TIMER and notice.tag.what == "move":
            sim.quiet = True  # one notice per step: the fast path plans b's whole drain at once
            sim.submit(self.b, range(4, 24))
            sim.migrate(range(4), self.b, front=False)
        elif notice.kind is NoticeKind.TIMER:
            self.seen = {"states": [State(sim.requests.state[r]).name for r in range(4)],
                         "place": sim.requests_on(self.b).index(0)}
            sim.stop()


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_moved_request_still_queued_reads_as_waiting_on_either_path(fast_path: bool) -> None:
    """A planned drain admits the moved requests later; they kept their first start, which the view read as
    "started by now": running, while they queued behind twenty others."""
    requests, prepared = _requests([[100] * 24])
    policy, _ = create("test-migrate-behind")
    Simulator(requests, prepared.jobs, prepared.cluster, fast_path=fast_path).run(policy)
    assert policy.seen == {"states": ["WAITING"] * 4, "place": 20}


@register("test-hides-its-oracle")
class HidesItsOracle(Edge):
    """Reads true lengths through the oracle, then tries to erase the record of it."""

    def start(self, sim: View) -> None:
        sim.allocate("generation", 1, "H100")
        sim.oracle()
        sim.ranker(recall=0.9, seed=0)
        sim.extra.clear()
        sim.extra["oracle"] = 0.0
        sim.submit(sim.add_instance("generation", 1, sim.jobs[0].generation), [0])
        sim.timer(self.config.end_s, Tag("end"))


def test_an_oracle_a_scheduler_read_is_reported_whatever_it_writes() -> None:
    """The oracle's flag lived in the scheduler's own extra metrics, which it could clear: an upper bound would
    then read as what a real system achieves."""
    result = replay(make([[5]]), "test-hides-its-oracle", ReplayConfig())
    assert result.metrics["extra"] == {"oracle": 1.0, "ranker_recall": 0.9}
    assert any("read true output lengths before they were generated" in n for n in result.config["notes"])
