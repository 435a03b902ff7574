"""Hugging Face ``generate`` collector: one requests row per returned sequence, one ``generate`` span per call.

Patches ``transformers.generation.utils.GenerationMixin.generate`` once per process, which every decoder-only
and encoder-decoder model's ``generate`` goes through (TRL's default generation, most research RL loops).
Only the outermost call of a thread is recorded (assisted generation calls its assistant's ``generate``).

Per call, after it returns, a few vectorized torch ops over the whole batch read the returned sequences:

- the prompt of row ``i`` is input row ``i // num_return_sequences``; its length is the attention mask's sum
  (left or right padding alike), else its tokens other than the pad token;
- a sequence's output length is its new tokens up to and including the first EOS token (any of the
  generation config's ``eos_token_id``), as TRL counts a completion; a sequence without EOS ran to the end
  (``length``), except that, when stop strings or custom stopping criteria can end a sequence, the trailing
  pad tokens the loop appended after it stopped are not counted (``stop``);
- the group is a 64-bit digest of the prompt's unpadded tokens (the same prompt on any rank or call is one
  GRPO group, as in the vLLM collector), computed as one hash over the batch.

Times: every row arrives and is scheduled at the call's start (HF runs the whole batch at once). The model's
forward passes during the call are timed by a forward pre/post hook on the generating model, held only for the
call (two clock reads per forward, nothing per token): forward ``k`` produces every row's token ``k``, so a
row's first token is forward 0's end and its last token forward ``L-1``'s end, and each forward is one
``iterations`` row whose batch is the call's rows (HF keeps finished rows in the batch). Where the forwards do
not match the tokens one to one (beam search, assisted decoding) or the call may be compiled, the rows keep the
call's start and end only.
The step is the trainer's optimizer step in a process that trains (generation opens the step, so the train
span starts after it, :func:`rltrace.collectors.api.generation_ended`), else the count of generate calls.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import torch
from rltrace.collectors import recorder
from rltrace.collectors.api import SELF, generation_ended, steps
from rltrace.collectors.vllm_collector import engine_key

_tls = threading.local()
# splitmix64's multipliers (Steele et al., "Fast splittable pseudorandom number generators", OOPSLA 2014), as
# signed int64: they spread token id and position over all 64 bits before the row sum
_MIX_A = 0x9E3779B97F4A7C15 - 2**64
_MIX_B = 0xBF58476D1CE4E5B9 - 2**64
_MIX_C = 0x94D049BB133111EB - 2**64


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.flatten().tolist()]
    return [int(v) for v in value if v is not None]


def prompt_digests(input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One int64 digest per row of its masked tokens in order, independent of where the padding is."""
    ids = input_ids.to(torch.int64)
    mask = mask.to(torch.int64)
    position = (mask.cumsum(1) - 1).clamp_min(0)  # index within the unpadded prompt
    x = ids * _MIX_A + (position + 1) * _MIX_B
    x = (x ^ (x >> 31)) * _MIX_C
    x = x ^ (x >> 29)
    return (x * mask).sum(1) + mask.sum(1) * _MIX_A


def output_lengths(
    new: torch.Tensor, eos: list[int], pad: int | None, early_stop: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens generated per row, whether the row stopped) for ``new``, the rows' tokens after the prompt."""
    rows, width = new.shape
    if width == 0:
        return torch.zeros(rows, dtype=torch.int64), torch.zeros(rows, dtype=torch.bool)
    positions = torch.arange(width, device=new.device)
    if eos:
        is_eos = torch.isin(new, torch.tensor(eos, device=new.device, dtype=new.dtype))
        has_eos = is_eos.any(1)
        first = torch.where(is_eos, positions, width).amin(1)
        lengths = torch.where(has_eos, first + 1, width)
    else:
        has_eos = torch.zeros(rows, dtype=torch.bool, device=new.device)
        lengths = torch.full((rows,), width, dtype=torch.int64, device=new.device)
    if early_stop and pad is not None and pad not in eos:
        # a row another criterion stopped is followed by pad tokens to the batch's end: drop that run
        not_pad = new != pad
        last = torch.where(not_pad, positions, -1).amax(1)
        trailing = (last + 1 < width) & ~has_eos
        lengths = torch.where(trailing, last + 1, lengths)
        has_eos = has_eos | trailing
    return lengths.cpu(), has_eos.cpu()


def _config_of(model: Any, kwargs: dict[str, Any]) -> tuple[list[int], int | None, int, bool]:
    """(EOS ids, pad id, num_return_sequences, early stopping possible) of this call."""
    config = kwargs.get("generation_config")
    default = getattr(model, "generation_config", None)

    def pick(name: str) -> Any:
        # the call's keyword, else its generation config, else the model's (transformers fills unset fields so)
        if name in kwargs:
            return kwargs[name]
        value = getattr(config, name, None)
        return value if value is not None else getattr(default, name, None)

    pad = pick("pad_token_id")
    pad = _ids(pad)[0] if _ids(pad) else None
    early = bool(pick("stop_strings")) or bool(kwargs.get("stopping_criteria"))
    return _ids(pick("eos_token_id")), pad, int(pick("num_return_sequences") or 1), early


class _ForwardTimes:
    """Start and end of every forward of one model during one generate call (hooks removed by ``close``)."""

    def __init__(self, model: Any) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.handles = [model.register_forward_pre_hook(self._pre), model.register_forward_hook(self._post)]

    def _pre(self, module: Any, args: Any) -> None:
        self.starts.append(time.time_ns())

    def _post(self, module: Any, args: Any, output: Any) -> None:
        self.ends.append(time.time_ns())

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def _may_compile(model: Any, kwargs: dict[str, Any]) -> bool:
    """Whether transformers may compile this call's forward (hooks inside a compiled graph are not timed)."""
    config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    cache = kwargs.get("cache_implementation", getattr(config, "cache_implementation", None))
    disabled = kwargs.get("disable_compile", getattr(config, "disable_compile", False))
    return bool(cache) and cache not in ("dynamic", "offloaded") and not disabled


def record_call(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any, start_ns: int, end_ns: int,
                forwards: _ForwardTimes | None = None) -> None:
    """Record one finished generate call: a requests row per returned sequence, a generate span."""
    rec = recorder.current()
    if rec is None:
        return
    sequences = getattr(output, "sequences", output)
    if not isinstance(sequences, torch.Tensor) or sequences.dim() != 2:
        return
    inputs = kwargs.get("input_ids", kwargs.get("inputs", args[0] if args else None))
    eos, pad, n, early = _config_of(model, kwargs)
    mask = kwargs.get("attention_mask")
    encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    if isinstance(inputs, torch.Tensor) and inputs.dim() == 2 and inputs.dtype in (torch.int64, torch.int32):
        if not isinstance(mask, torch.Tensor) or mask.shape != inputs.shape:
            mask = inputs != pad if pad is not None else torch.ones_like(inputs, dtype=torch.bool)
        prompt_width = 0 if encoder_decoder else inputs.shape[1]
        prompt = mask.to(torch.int64).sum(1)
        digest = prompt_digests(inputs, mask)
    else:  # inputs_embeds, or no prompt at all: the call's width only
        embeds = kwargs.get("inputs_embeds")
        width = embeds.shape[1] if isinstance(embeds, torch.Tensor) and embeds.dim() == 3 else 0
        rows = sequences.shape[0] // max(n, 1)
        prompt = mask.to(torch.int64).sum(1) if isinstance(mask, torch.Tensor) else torch.full((rows,), width)
        digest = torch.arange(rows, dtype=torch.int64) - (start_ns & 0x7FFFFFFF) * 4096  # one group per row
        prompt_width = 0
    if n > 1:
        prompt, digest = prompt.repeat_interleave(n), digest.repeat_interleave(n)
    if prompt.shape[0] != sequences.shape[0]:
        rec.skip("generate calls whose outputs do not match their inputs")
        return
    new = sequences[:, prompt_width:]
    if encoder_decoder and new.shape[1] > 0:
        new = new[:, 1:]  # the decoder start token is not generated
    lengths, stopped = output_lengths(new, eos, pad, early)
    key = engine_key(model)
    rec.meta["engines"][key] = "hf:" + type(model).__name__
    step = steps.rollout()
    call = rec.meta["hf_generate_calls"] = rec.meta.get("hf_generate_calls", 0) + 1
    version = steps.weight_version or None
    rows, width = new.shape
    timed = forwards is not None and width > 0 and len(forwards.ends) == width == len(forwards.starts)
    if timed:
        assert forwards is not None
        ends = torch.tensor(forwards.ends, dtype=torch.int64)
        finish = ends[(lengths - 1).clamp(0, width - 1)].tolist()
        first: list[int | None] = [int(ends[0])] * rows
        for k in range(width):  # one row per forward: per decode step, not per token
            rec.add("iterations", (step, key, forwards.starts[k], forwards.ends[k], rows))
    else:
        finish, first = [end_ns] * rows, [None] * rows
    for i, (p, o, s, d, f, t) in enumerate(zip(prompt.tolist(), lengths.tolist(), stopped.tolist(),
                                                digest.tolist(), finish, first)):
        rec.add("requests", (step, f"gen{call}:{i}", f"h{d & 0xFFFFFFFFFFFFFFFF:016x}", key, p, o, None,
                             start_ns, start_ns, t if o > 0 else None, f if o > 0 else end_ns,
                             "stop" if s else "length", version, 0, None, 0))
    rec.add("spans", (step, SELF, "generate", f"{type(model).__name__}.generate", start_ns, end_ns))


def _generate(generate: Any) -> Any:
    @functools.wraps(generate)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        rec = recorder.current()
        if rec is None or getattr(_tls, "inside", False):
            return generate(self, *args, **kwargs)
        _tls.inside = True
        if not steps.trains:
            steps.generate_calls += 1  # a generate-only process: each call is the generator's next step
        forwards = None
        with rec.guard("hf generate collector"):
            if not _may_compile(self, kwargs) and not kwargs.get("assistant_model"):
                forwards = _ForwardTimes(self)
        start_ns = time.time_ns()
        try:
            output = generate(self, *args, **kwargs)
        finally:
            _tls.inside = False
            if forwards is not None:
                with rec.guard("hf generate collector"):
                    forwards.close()
            generation_ended()
        end_ns = time.time_ns()
        with rec.guard("hf generate collector"):
            record_call(self, args, kwargs, output, start_ns, end_ns, forwards)
        return output

    return wrapper


def install(module: Any) -> None:
    """Patch ``transformers.generation.utils`` once it is imported."""
    rec = recorder.current()
    if rec is None:
        return
    with rec.guard("hf generate collector install"):
        mixin = module.GenerationMixin
        original = mixin.generate
        if getattr(original, "__rltrace_wrapped__", False):
            return
        wrapped = _generate(original)
        wrapped.__rltrace_wrapped__ = True
        mixin.generate = wrapped


MODULE = "transformers.generation.utils"
