"""A scheduler sees the run through its view: an unfinished request's output length cannot be read, and the
view is the only way in (no scheduler module reaches the engine's own objects)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from replay_helpers import TAU, make
from rltrace.replay.entities.requests import State
from rltrace.replay.events import Notice, NoticeKind, Tag
from rltrace.replay.run import ReplayConfig, replay
from rltrace.replay.schedulers import register
from rltrace.replay.schedulers.view import LengthUnknown, View

SCHEDULERS = Path(__file__).resolve().parents[1] / "replay" / "schedulers"
PEEKS: list[Any] = []  # the test scheduler's instances, to read back what each saw


def attempt(read) -> object:
    """What a read returned, or the exception it raised."""
    try:
        return read()
    except LengthUnknown as e:
        return e


@dataclass(frozen=True, kw_only=True, slots=True)
class PeekConfig:
    quiet: bool = False


@register("test-peek")
class Peek:
    """Submits step 0 and, at start, mid-run (a timer) and at each notice, tries to read every request's
    output length, finish time and next turn through its view; records what it got."""

    Config = PeekConfig

    def __init__(self, config: PeekConfig) -> None:
        self.config = config
        PEEKS.append(self)
        self.seen: list[tuple[str, float, int, object, object, object, int]] = []

    def start(self, sim: View) -> None:
        assert isinstance(sim, View)
        self.sim = sim
        sim.quiet = self.config.quiet
        sim.allocate("generation", 1, "H100")
        self.inst = sim.add_instance("generation", 1, sim.jobs[0].generation)
        sim.submit(self.inst, sim.jobs[0].requests(0))
        sim.timer(15 * TAU, Tag("mid"))
        self._look("start")

    def _look(self, when: str) -> None:
        req = self.sim.requests
        for rid in range(req.n):
            self.seen.append((when, self.sim.now, rid, attempt(lambda r=rid: req.output[r]),
                              attempt(lambda r=rid: req.finish_s[r]), attempt(lambda r=rid: req.next_turn[r]),
                              req.state[rid]))

    def on_event(self, sim: View, notice: Notice) -> None:
        self._look(notice.kind)
        if notice.kind is NoticeKind.GENERATED or (notice.kind is NoticeKind.FINISHED and all(
                sim.requests.state[r] == State.FINISHED for r in sim.jobs[0].requests(0))):
            sim.end_step(0, 0)


LENGTHS = [10, 20, 40] + [30] * 17  # 20 requests: enough for quiet mode to plan the whole queue at once


@pytest.mark.parametrize("quiet", [False, True], ids=["per-request", "quiet (whole queue planned ahead)"])
def test_an_unfinished_requests_output_length_cannot_be_read_through_the_view(quiet: bool) -> None:
    PEEKS.clear()
    result = replay(make([LENGTHS]), "test-peek", ReplayConfig(), {"quiet": quiet})
    seen = PEEKS[0].seen
    if quiet:  # the engine planned the whole queue at once and wrote every finish time at the start
        assert result.events < len(LENGTHS)
    finish = [n * TAU for n in LENGTHS]
    assert result.requests.sort("request")["finish_s"].to_list() == pytest.approx(finish)
    looks = {when for when, *_ in seen}
    assert {"start", "timer"} <= looks
    for when, now, rid, output, finish_s, next_turn, state in seen:
        if now >= finish[rid] - 1e-12:
            assert output == LENGTHS[rid] and finish_s == pytest.approx(finish[rid]) and next_turn == -1, when
            assert state == State.FINISHED
        else:  # even in quiet mode, where the engine has already planned (and written) every finish
            for value in (output, finish_s, next_turn):
                assert isinstance(value, LengthUnknown) and "has not finished" in str(value), (when, rid)
            assert state in (State.WAITING, State.RUNNING)  # as a real system would report it
    # at the mid-run timer (0.15 s) request 0 had finished and 1 and 2 had not
    mid = [(rid, output) for when, _, rid, output, *_ in seen if when == "timer"]
    assert mid[0] == (0, 10) and all(isinstance(o, LengthUnknown) for _, o in mid[1:])
    assert len(mid) == len(LENGTHS)


def test_the_view_offers_no_way_to_the_engine_or_the_true_lengths() -> None:
    hidden = ("spawn", "queue", "segments", "consumed", "pools", "all_instances", "record", "book", "route_turns")
    assert not any(hasattr(View, name) for name in hidden)
    from rltrace.replay.schedulers.view import RequestView

    assert not {"remaining", "recompute", "admit_iter", "env_s", "output_arr", "start_s"} & set(RequestView.__slots__)
    from rltrace.replay.entities.instance import GenerationInstance
    assert "req" not in GenerationInstance.__slots__  # an instance does not hand out the request table


@dataclass(frozen=True, kw_only=True, slots=True)
class OrderConfig:
    quiet: bool = False
    reconfigure: bool = False
    """reconfigure the instance (its batch preempted to the queue) before reading what runs there"""


@register("test-order")
class Order:
    """Submits step 0 to one instance; at a timer reads what runs there and, as requests finish, the trainer
    time of each finished one."""

    Config = OrderConfig

    def __init__(self, config: OrderConfig) -> None:
        self.config = config
        PEEKS.append(self)
        self.running: list[int] = []
        self.train_s: dict[int, float] = {}

    def start(self, sim: View) -> None:
        sim.quiet = self.config.quiet
        sim.allocate("generation", 1, "H100")
        self.inst = sim.add_instance("generation", 1, sim.jobs[0].generation)
        sim.submit(self.inst, sim.jobs[0].requests(0))
        sim.timer(5 * TAU, Tag("look"))

    def on_event(self, sim: View, notice: Notice) -> None:
        job = sim.jobs[0]
        if notice.kind is NoticeKind.TIMER:
            if self.config.reconfigure:
                sim.reconfigure(self.inst)
            self.running = sim.requests_on(self.inst)
        elif notice.kind is NoticeKind.FINISHED:
            for rid in notice.requests:
                self.train_s[rid] = sim.train_seconds(job, 0, [rid])
        if notice.kind is NoticeKind.GENERATED or len(self.train_s) == len(job.requests(0)):
            sim.end_step(0, 0)


@pytest.mark.parametrize("quiet", [False, True], ids=["per-request", "quiet"])
def test_running_requests_come_in_admission_order_not_finish_order(quiet: bool) -> None:
    # requests 0, 1, 2 admitted in that order; they finish 1, 2, 0 (the finish heap's order)
    PEEKS.clear()
    replay(make([[40, 10, 20]]), "test-order", ReplayConfig(), {"quiet": quiet})
    assert PEEKS[-1].running == [0, 1, 2]


def test_a_reconfigured_batch_is_queued_in_admission_order_not_finish_order() -> None:
    """reconfigure re-queued the batch in the finish heap's order: the queue's head was the next request to finish
    ([5, 7, 6, 8, 2, 1, 4, 0, 3]), and re-admission ran shortest-remaining-first."""
    PEEKS.clear()
    replay(make([[90, 80, 70, 60, 50, 10, 20, 30, 40]]), "test-order", ReplayConfig(), {"reconfigure": True})
    assert PEEKS[-1].running == list(range(9))


def test_trainer_time_scales_by_the_tokens_fixed_when_the_replay_was_prepared() -> None:
    # The step's trainer time (2 s) was measured on 1,000 tokens: a 20-token sample (10 prompt + 10 output) costs
    # 2 s x 20 / 1,000, whatever the step's unfinished requests will generate (they sum to 100 tokens here).
    PEEKS.clear()
    prepared = make([[40, 10, 20]], train_s=2.0)
    prepared.jobs[0].step_tokens = [1000.0]
    replay(prepared, "test-order", ReplayConfig())
    assert PEEKS[-1].train_s[1] == pytest.approx(2.0 * 20 / 1000)
    # without a figure from the preparation, the simulator sums the step's requests before the run starts
    PEEKS.clear()
    plain = make([[40, 10, 20]], train_s=2.0)
    replay(plain, "test-order", ReplayConfig())
    assert plain.jobs[0].step_tokens == [100.0]
    assert PEEKS[-1].train_s[1] == pytest.approx(2.0 * 20 / 100)


def _scheduler_modules() -> list[Path]:
    return [p for p in sorted(SCHEDULERS.glob("*.py")) if p.name not in ("view.py", "predict.py")]


UNSEEN = ("drain", "output_arr", "remaining", "spawn", "step_tokens", "busy_s", "last_end_s")
"""attributes no scheduler reads, by name or by getattr (see the test below for what each would tell it)"""


@pytest.mark.parametrize("path", _scheduler_modules(), ids=lambda p: p.name)
def test_no_scheduler_module_reaches_past_its_view(path: Path) -> None:
    """The view (and the predictors, which it builds) are the boundary: a policy module never imports the
    simulator or the request table, never reads another object's private attributes, nor an instance's
    planned drain (which holds future finish times)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = {a.name for a in node.names}
            assert not names & {"Simulator", "Requests", "Drain", "Oracle", "LongTailRanker"}, (path.name, names)
        if isinstance(node, ast.Attribute):
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            assert not (private and not own), (path.name, node.lineno, node.attr)
            # step_tokens: a step's prompt + output tokens, unfinished requests' true lengths included (the view's
            # train_seconds only); a resource's busy_s and last_end_s: the engine books a turn's environment time
            # on "env" when the previous turn finishes, before a real system could know it
            assert node.attr not in UNSEEN, (path.name, node.lineno, node.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            name = node.args[1] if len(node.args) > 1 else None  # an attribute by a string the check cannot read
            assert isinstance(name, ast.Constant) and isinstance(name.value, str) and not name.value.startswith(
                "_") and name.value not in UNSEEN, (path.name, node.lineno, "getattr of a name the check cannot see")
        # notices by kind, tags by field: a string compared by value or a tuple read by position breaks silently
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "kind":
            assert not any(isinstance(c, ast.Constant) and isinstance(c.value, str) for c in node.comparators), \
                (path.name, node.lineno, "compare notice.kind with NoticeKind, not a string")
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
            assert node.value.attr != "tag", (path.name, node.lineno, "read a tag by field, not position")
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Tuple) for t in node.targets):
            value = node.value
            named_tag = (isinstance(value, ast.Attribute) and value.attr == "tag") or (
                isinstance(value, ast.Name) and value.id == "tag")
            assert not named_tag, (path.name, node.lineno, "unpack a tag by field, not position")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("work", "timer"):
            tag = node.args[2] if node.func.attr == "work" and len(node.args) > 2 else (
                node.args[1] if node.func.attr == "timer" and len(node.args) > 1 else None)
            assert not isinstance(tag, ast.Tuple | ast.Constant), (path.name, node.lineno, "tag work with a Tag")


@pytest.mark.parametrize("planted", [
    'if notice.kind == "finished":\n    pass',
    "step = notice.tag[1]",
    "what, _, step = notice.tag",
    'sim.work("sync", 1.0, ("sync", 0, step), kind="weight_sync")',
    'sim.timer(1.0, "look")',
    "total = sim.jobs[0].step_tokens[step]",
    'ahead = sim.resources["env"].last_end_s',
    'plan = getattr(inst, "dr" + "ain")',
    'left = getattr(requests, "remaining")',
])
def test_the_boundary_check_catches_a_planted_string_notice_or_positional_tag(planted: str, tmp_path: Path) -> None:
    path = tmp_path / "planted.py"
    path.write_text(planted + "\n")
    with pytest.raises(AssertionError):
        test_no_scheduler_module_reaches_past_its_view(path)
