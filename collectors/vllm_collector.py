"""vLLM collector: one requests row per generated sample, engine iterations, generate spans, weight updates.

Attaches by patching, once per process, the few vLLM entry points every front end goes through:

- ``LLMEngine.__init__`` / ``AsyncLLM.__init__``: force ``log_stats=True``, without which vLLM leaves
  ``RequestOutput.metrics`` empty (a server started with ``--disable-log-stats`` then logs its periodic stats);
- ``LLMEngine.step``: finished outputs of ``LLM.generate`` / ``LLM.chat`` and of user step loops, and one
  iterations row per call (its duration and the requests in the engine; the async engine records none);
- ``AsyncLLM.generate``: the async engine RL frameworks use, and the OpenAI-compatible server;
- ``LLM.__init__``: an ``engine_start`` span (start-up is neither generation nor training);
- ``LLM.generate`` / ``LLM.chat``: a ``generate`` span each, and the generator's step count;
- ``LLM.collective_rpc``, any method: a timed, sized weight-sync flow into the engine when the call carries
  weights (a known method name, weight files or tensors in its arguments), else an ``engine_rpc`` span;
- ``RequestState.make_request_output``: older releases (0.11 among them) keep a request's timings
  (``RequestStateStats``) in the front end's request state but attach none to the finished ``RequestOutput``;
  the collector reads them there, so every release gives each request its scheduled, first-token and last-token
  times.

Fields are read with ``getattr`` defaults, so an older vLLM that lacks one records the rest, and says once on
stderr what it could not record. Engine-core timestamps are ``time.monotonic()`` of the engine process (shared
by processes on one host) and are converted to wall-clock ns with this process's offset.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import time
from array import array
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rltrace.collectors import recorder
from rltrace.collectors.api import generation_ended, steps
from rltrace.collectors.weight_files import note_reload

WEIGHT_METHODS = ("update_weight", "update_weights", "reload_weights", "load_weights", "update_weights_from_tensor")
_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}
_MONO_OFFSET_NS = time.time_ns() - time.monotonic_ns()
_engines: dict[int, str] = {}
_late_stats: dict[tuple[str, int], Any] = {}
"""(request id, completion index) -> the front end's RequestStateStats, for a release whose finished outputs carry
no metrics; taken when the output is recorded"""
_LATE_STATS_CAP = 1 << 16
"""timings kept at most; past it the oldest go first (a finished request whose output is never recorded, such as a
streamed child's, must not pile up, nor stop the ones after it)"""


def engine_key(engine: object) -> str:
    """A process-local key per engine instance; the merge turns keys into ``rollout/engine<i>``."""
    key = _engines.get(id(engine))
    if key is None:
        key = _engines[id(engine)] = f"engine:{len(_engines)}"
        rec = recorder.current()
        if rec is not None:
            rec.note_role("rollout")
            rec.meta["engines"][key] = type(engine).__name__
    return key


def _wall_ns(monotonic_s: float) -> int | None:
    return int(monotonic_s * 1e9) + _MONO_OFFSET_NS if monotonic_s else None


def group_of(request_id: str, prompt_ids: Any) -> str:
    """The GRPO group of a request: its prompt's tokens, digested. RL frameworks send a prompt's samples as n > 1
    completions of one request or as one request each (verl, OpenRLHF repeat the prompt), to one engine or to
    several; all share the prompt. Without prompt tokens, the request is its own group."""
    if not prompt_ids:
        return recorder.REQUEST_GROUP + request_id
    return "p" + hashlib.blake2b(array("q", prompt_ids).tobytes(), digest_size=8).hexdigest()


def _times(m: Any) -> tuple[int, int | None, int | None, int]:
    """Arrival, scheduled, first-token and finish wall-clock ns of a request's metrics (None: unknown)."""
    arrival = getattr(m, "arrival_time", 0.0)
    arrival_ns = int(arrival * 1e9) if arrival else time.time_ns()
    scheduled = _wall_ns(getattr(m, "scheduled_ts", 0.0))
    first = _wall_ns(getattr(m, "first_token_ts", 0.0))
    last = _wall_ns(getattr(m, "last_token_ts", 0.0))
    # The frontend stamps arrival with the wall clock, the engine core the rest with the monotonic clock:
    # keep the order the schema promises when the two clocks disagree by a hair.
    if scheduled is not None and arrival_ns > scheduled:
        arrival_ns = scheduled
    return arrival_ns, scheduled, first, last if last is not None else time.time_ns()


def record_output(engine: object, out: Any) -> None:
    """Record a finished RequestOutput: one row per completion; completions of one prompt share a group."""
    if not getattr(out, "finished", False):
        return
    m = getattr(out, "metrics", None)
    prompt_ids = getattr(out, "prompt_token_ids", None) or []
    prompt = len(prompt_ids)
    completions = getattr(out, "outputs", None) or []
    key = engine_key(engine)
    req_id = str(getattr(out, "request_id", ""))
    group = group_of(req_id, prompt_ids)
    for i, c in enumerate(completions):
        stats = m if m is not None else _late_stats.pop((req_id, getattr(c, "index", i)), None)
        if stats is None:
            _cannot("request timings", "this vLLM attaches no timings to finished requests, and its front end "
                                       "keeps none: requests are recorded with no scheduled or first-token time")
        arrival_ns, scheduled, first, finish = _times(stats)
        versions = getattr(c, "weight_versions", None)
        version = max(versions) if versions else (steps.weight_version or None)
        rid = req_id if len(completions) == 1 else f"{req_id}:{i}"
        recorder.record(
            "requests",
            (  # in rltrace.schema.REQUESTS column order; turn 0 and no trajectory_id: vLLM sees single requests
                steps.gen(), rid, group, key, prompt, len(getattr(c, "token_ids", None) or []),
                getattr(out, "num_cached_tokens", None), arrival_ns, scheduled, first, finish,
                _FINISH.get(str(getattr(c, "finish_reason", "") or "abort"), "abort"),
                version if isinstance(version, int) else None, 0, None, getattr(stats, "num_preemptions", 0) or 0,
            ),
        )


def _cannot(what: str, why: str) -> None:
    """Say once per process what this vLLM does not let the collector record (stderr and the manifest)."""
    rec = recorder.current()
    if rec is not None:
        rec.cannot(f"vllm {what}", why)


def _force_log_stats(init: Any) -> Any:
    sig = inspect.signature(init)

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            bound = sig.bind_partial(self, *args, **kwargs)
            if "log_stats" in sig.parameters:
                bound.arguments["log_stats"] = True
            args, kwargs = bound.args[1:], bound.kwargs
        except Exception as e:  # noqa: BLE001
            _report("vllm log_stats", e)
        return init(self, *args, **kwargs)

    return wrapper


def _step(step: Any) -> Any:
    @functools.wraps(step)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        rec = recorder.current()
        # One step call is one engine-core iteration: its duration against the requests in the engine is
        # what resolves decode time per batch size (per-request timings only give averages over a batch).
        in_engine = 0
        if rec is not None:
            with rec.guard("vllm collector"):
                in_engine = int(self.get_num_unfinished_requests())
        start_ns = time.time_ns()
        outputs = step(self, *args, **kwargs)
        if rec is not None:
            with rec.guard("vllm collector"):
                if in_engine > 0:
                    recorder.record("iterations", (steps.gen(), engine_key(self), start_ns, time.time_ns(), in_engine))
                for out in outputs or ():
                    record_output(self, out)
        return outputs

    return wrapper


def _async_generate(gen: Any) -> Any:
    @functools.wraps(gen)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        async for out in gen(self, *args, **kwargs):
            rec = recorder.current()
            if rec is not None:
                with rec.guard("vllm collector"):
                    record_output(self, out)
            yield out

    return wrapper


def _engine_start_span(init: Any) -> Any:
    """``LLM.__init__``: the engine's start-up (model load, profiling run, KV-cache allocation) is its own
    ``engine_start`` span, and its forward passes (an in-process engine's) are not the trainer's."""

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.time_ns()
        try:
            return init(self, *args, **kwargs)
        finally:
            generation_ended()
            rec = recorder.current()
            if rec is not None and getattr(self, "llm_engine", None) is not None:  # a failed start has no engine
                with rec.guard("vllm collector"):
                    key = engine_key(self.llm_engine)
                    rec.add("spans", (steps.gen(), key, "engine_start", "LLM.__init__", start, time.time_ns()))

    return wrapper


def _generate_span(method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.time_ns()
        steps.generate_calls += 1  # this call starts the generator's next step
        try:
            return method(self, *args, **kwargs)
        finally:
            generation_ended()
            rec = recorder.current()
            if rec is not None:
                with rec.guard("vllm collector"):
                    key = engine_key(getattr(self, "llm_engine", self))
                    rec.add("spans", (steps.gen(), key, "generate", f"LLM.{method.__name__}", start, time.time_ns()))

    return wrapper


def _keep_stats(make: Any) -> Any:
    """``RequestState.make_request_output(new_token_ids, pooling_output, finish_reason, ...)`` of a release whose
    finished outputs carry no metrics (vLLM 0.11 among others): when a request state finishes, keep its own timings
    for :func:`record_output`, by request id and completion index (a parent request's n completions are child
    states, each with its index; only the last child's call returns the output)."""

    sig = inspect.signature(make)

    @functools.wraps(make)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        rec = recorder.current()
        if rec is not None:
            with rec.guard("vllm collector"):
                finish = sig.bind(self, *args, **kwargs).arguments.get("finish_reason")
                stats = getattr(self, "stats", None)
                if finish is not None and stats is not None:
                    if len(_late_stats) >= _LATE_STATS_CAP:
                        del _late_stats[next(iter(_late_stats))]  # the oldest (a dict keeps insertion order)
                    parent = getattr(self, "parent_req", None)
                    rid = getattr(parent, "request_id", None) or getattr(self, "request_id", "")
                    _late_stats[(str(rid), int(getattr(self, "request_index", 0) or 0))] = stats
        return make(self, *args, **kwargs)

    return wrapper


_WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth")


def _weight_files(value: Any) -> list[Path]:
    """Weight files a call argument names: a folder holding them, or one such file (other values: none)."""
    if not isinstance(value, (str, Path)) or len(str(value)) > 4096:
        return []
    try:
        path = Path(value)
        if path.is_file():
            return [path] if path.suffix in _WEIGHT_FILES else []
        if path.is_dir():
            return [p for p in path.rglob("*") if p.is_file() and p.suffix in _WEIGHT_FILES]
    except (OSError, ValueError):  # not a path at all (embedded NUL, too long for the file system)
        pass
    return []


def _checkpoint(folder: Any) -> list[Path]:
    """The weight files a model folder's reload reads: its top-level safetensors, else its top-level ``.bin`` or
    ``.pt`` files, as vLLM's loader prefers them (a hub id, not a folder: none)."""
    try:
        top = [p for p in Path(folder).iterdir() if p.is_file()] if Path(folder).is_dir() else []
    except (OSError, ValueError, TypeError):
        return []
    for suffixes in ((".safetensors",), (".bin", ".pt", ".pth")):
        files = sorted(p for p in top if p.suffix in suffixes and not p.name.startswith("training_args"))
        if files:
            return files
    return []


def _payload_bytes(
    args: tuple[Any, ...], kwargs: dict[str, Any], model_dir: Any = None
) -> tuple[int, int, str, list[Path]]:
    """Bytes, tensor count, transport and weight files of a collective_rpc call's arguments: weight files any
    argument names (a worker extension's own reload method names its folder however it likes), else tensors;
    a call with neither (``reload_weights()`` of vLLM 0.11 takes no arguments) reads ``model_dir``'s checkpoint."""
    files = list(dict.fromkeys(f for v in (*kwargs.values(), *args) for f in _weight_files(v)))
    if not files and not args and not kwargs and model_dir is not None:
        files = _checkpoint(model_dir)
    if files:
        return sum(p.stat().st_size for p in files), 0, "disk", files
    tensors = [v for v in (*args, *kwargs.values()) if hasattr(v, "element_size") and hasattr(v, "numel")]
    return sum(t.numel() * t.element_size() for t in tensors), len(tensors), "rpc", []


def _collective_rpc(rpc: Any) -> Any:
    """Time every ``collective_rpc``: it is generator work whatever the method. A call that carries weights
    (a known weight-update method, or any method given weight files or tensors) is a weight sync into the
    engine and advances its policy version; any other call is an ``engine_rpc`` span."""

    @functools.wraps(rpc)
    def wrapper(self: Any, method: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.time_ns()
        result = rpc(self, method, *args, **kwargs)
        rec = recorder.current()
        if rec is not None:
            with rec.guard("vllm collective_rpc"):
                name = method if isinstance(method, str) else getattr(method, "__name__", "") or "callable"
                call_args = kwargs.get("args") or (args[1] if len(args) > 1 else ())
                call_kwargs = kwargs.get("kwargs") or (args[2] if len(args) > 2 else {}) or {}
                engine = getattr(self, "llm_engine", self)
                model_dir = getattr(getattr(engine, "model_config", None), "model", None) if name == "reload_weights" \
                    else None
                size, tensors, transport, files = _payload_bytes(tuple(call_args), dict(call_kwargs), model_dir)
                key = engine_key(engine)
                if name in WEIGHT_METHODS or size > 0:
                    steps.weight_version += 1
                    note_reload(steps.weight_version, [str(f) for f in files])  # the merge finds who wrote them
                    rec.add("weight_syncs", (steps.weight_version, f"{transport}:{name}", key, size, tensors,
                                             transport, start, time.time_ns(), steps.gen()))
                else:
                    rec.add("spans", (steps.gen(), key, "engine_rpc", f"collective_rpc:{name}", start, time.time_ns()))
        return result

    return wrapper


def _report(where: str, e: Exception) -> None:
    rec = recorder.current()
    if rec is not None:
        rec.error(where, e)


def _patch(cls: Any, name: str, make: Any) -> None:
    original = getattr(cls, name, None)
    if original is None or getattr(original, "__rltrace_wrapped__", False):
        return
    wrapped = make(original)
    wrapped.__rltrace_wrapped__ = True
    setattr(cls, name, wrapped)


def install_llm_engine(module: Any) -> None:
    """Patch ``vllm.v1.engine.llm_engine`` once it is imported."""
    with _guard("vllm collector install"):
        _patch(module.LLMEngine, "__init__", _force_log_stats)
        _patch(module.LLMEngine, "step", _step)


def install_async_llm(module: Any) -> None:
    """Patch ``vllm.v1.engine.async_llm`` once it is imported."""
    with _guard("vllm collector install"):
        _patch(module.AsyncLLM, "__init__", _force_log_stats)
        _patch(module.AsyncLLM, "generate", _async_generate)


def install_llm(module: Any) -> None:
    """Patch ``vllm.entrypoints.llm`` once it is imported."""
    with _guard("vllm collector install"):
        _patch(module.LLM, "__init__", _engine_start_span)
        _patch(module.LLM, "generate", _generate_span)
        _patch(module.LLM, "chat", _generate_span)
        _patch(module.LLM, "collective_rpc", _collective_rpc)


def install_output_processor(module: Any) -> None:
    """Patch ``vllm.v1.engine.output_processor`` once it is imported, where its finished outputs carry no metrics
    (a release that passes ``metrics=`` is left alone: nothing runs per output there)."""
    with _guard("vllm collector install"):
        try:
            source = inspect.getsource(module.RequestState)
        except (OSError, TypeError):  # no source shipped: patch, the wrapper only keeps what a finish leaves
            source = ""
        if not re.search(r"\bmetrics=", source):
            _patch(module.RequestState, "make_request_output", _keep_stats)


def _guard(where: str) -> Any:
    rec = recorder.current()
    return nullcontext() if rec is None else rec.guard(where)


MODULES = {
    "vllm.v1.engine.llm_engine": install_llm_engine,
    "vllm.v1.engine.async_llm": install_async_llm,
    "vllm.entrypoints.llm": install_llm,
    "vllm.v1.engine.output_processor": install_output_processor,
}
