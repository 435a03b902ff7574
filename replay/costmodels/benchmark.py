"""What a serving benchmark reports, from the per-iteration model: TPOT and TTFT at a fixed concurrency, and the
throughput of an offline run. These are the figures public measurements state (vLLM's and SGLang's
``bench_serving``, aiconfigurator's silicon samples), so the validation set holds the model against them.

Steady state of a closed loop of ``concurrency`` requests, each ``prompt`` tokens in and ``output`` tokens out
(vLLM's scheduler: every iteration decodes every running request and fills the rest of its token budget with
prompt chunks of the requests that arrived):

- over one round every request generates ``output`` tokens, i.e. ``output`` iterations at a batch of
  ``concurrency`` and a mean context of ``prompt + output / 2``, and every request is prefilled once: the prefill
  chunks ride in those iterations and stall every running request while they run;
- so ``TPOT = decode(concurrency, prompt + output / 2) + concurrency x added(prompt) / output``, where
  ``added`` is what the prompt's chunks add to the iterations they ride in beside the other requests' decodes
  (:meth:`Roofline.mixed_prefill`: the GEMMs and collectives over decodes plus chunk rows less over the decodes
  alone, and the prompt's causal attention);
- ``TTFT`` = waiting for the iteration in flight (half of one, on average), then the iterations that carry the
  prompt's chunks (the others' decodes plus what each chunk adds), plus,
  when the KV cache holds fewer than ``concurrency`` requests at once, the wait for a free slot: a closed loop
  of c clients over b slots, each request holding its slot for ``S = TTFT + (output - 1) x TPOT``, completes
  b requests per S, so each client cycles in ``c S / b`` and waits ``(c / b - 1) S`` of it (Little's law);
- offline: ``requests`` requests over a batch capped by ``max_num_seqs`` and by the KV cache, the same round
  formula repeated ``requests / batch`` times.

That is vLLM's steady state (``engine="vllm"``): its requests drift apart, since the first prefilled finish first and
their successors arrive one by one. SGLang (``engine="sglang"``) runs a prefill batch alone and before any decode
(:data:`.serving.SCHEDULING`), so a closed loop of identical requests started together stays in lockstep: every
request of a wave is prefilled before any decodes, all decode together and finish at the same step, and the next
wave arrives at once. The wave's prefill ``W`` (:meth:`Roofline.prefill` of its ``concurrency`` prompts, in
``batched_tokens`` chunks) is split by position: request ``i`` of ``c`` sees its first token after ``i / c`` of it
and waits through the rest before its second, so on average ``TTFT = W (c + 1) / 2c`` and ``TPOT = decode +
W (c - 1) / (2c (output - 1))``; a round takes ``W + (output - 1) x decode`` as vLLM's does, only split otherwise.

Prefix sharing (``samples`` > 1: GRPO's n samples of one prompt) prefills each prompt once and the later samples
only their uncached tail (:func:`.serving.shared_prefill_tokens`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from rltrace.replay.costmodels import serving

from rltrace.calibration.defaults import GPU_MEMORY_UTILIZATION
from rltrace.catalog import GPUSpec, ModelSpec
from rltrace.errors import ConfigError


class ServingCosts(Protocol):
    """What a serving benchmark asks of a cost model: :class:`.roofline.Roofline` and
    :class:`.aiconfigurator.KernelDatabase` both answer it."""

    @property
    def model(self) -> ModelSpec: ...
    @property
    def gpu(self) -> GPUSpec: ...
    @property
    def tp(self) -> int: ...
    @property
    def batched_tokens(self) -> int: ...

    def decode_seconds(self, batch: int, context: float) -> float:
        """One decode iteration of ``batch`` requests at a mean context of ``context`` tokens."""
        ...

    def prefill_seconds(self, tokens: int, prompts: int = 1) -> float:
        """A prefill of ``tokens`` tokens in ``prompts`` equal prompts."""
        ...

    def mixed_prefill(self, prompt: int, batch: int, sharing: float = 1.0) -> float:
        """What a prompt's chunks add to the iterations they ride in beside ``batch`` decodes."""
        ...

    def kv_capacity_tokens(self, gpu_memory_utilization: float | None = ..., max_num_seqs: int = ...) -> int:
        """Tokens of KV cache one rank holds."""
        ...


@dataclass(frozen=True, slots=True)
class Serving:
    """Predicted benchmark figures, in seconds (and tokens/s)."""

    tpot_s: float
    ttft_s: float
    decode_s: float
    """one decode iteration at the steady batch"""
    prefill_stall_s: float
    """prefill time per output token that every running request waits through"""
    batch: int
    output_tokens_per_s: float
    queue_s: float = 0.0
    """mean wait for a free slot before the prefill (0 unless the KV cache holds fewer than the concurrency)"""


def serving_benchmark(roof: ServingCosts, *, concurrency: int, prompt_tokens: int, output_tokens: int,
                      samples: int = 1, engine: str = "vllm", max_num_seqs: int = serving.MAX_NUM_SEQS,
                      gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION) -> Serving:
    """TPOT, TTFT and output throughput of ``concurrency`` requests kept in flight by ``engine`` (vllm, sglang: its
    scheduling policy, see the module text), its KV cache in ``gpu_memory_utilization`` of each GPU's memory."""
    if concurrency < 1 or prompt_tokens < 1 or output_tokens < 1 or samples < 1:
        raise ConfigError("a serving benchmark needs concurrency, prompt_tokens, output_tokens and samples >= 1")
    if engine not in serving.SCHEDULING:
        raise ConfigError(f"unknown engine {engine!r}; expected one of {', '.join(serving.SCHEDULING)}")
    # vLLM allocates KV blocks as a request grows, so the cache holds requests at their mean length, prompt + half
    # the output, not their final one
    slots = roof_kv_batch(roof, prompt_tokens + output_tokens / 2, gpu_memory_utilization, max_num_seqs)
    if slots < 1:  # the engine that ran such a point held more than that share of memory: the model cannot say how
        raise ConfigError(f"{roof.model.name} on {roof.tp} x {roof.gpu.name}: the weights, activations and buffers "
                          f"leave no KV cache within {gpu_memory_utilization:g} of GPU memory")
    batch = min(concurrency, max_num_seqs, slots)
    per_request = math.ceil(serving.shared_prefill_tokens(prompt_tokens, samples) / samples)
    waves = serving.SCHEDULING[engine] == "prefill_first" and output_tokens > 1
    if not waves:  # past the token budget the requests finish faster than prompts come in: it holds the running batch
        batch = max(1, min(batch, roof.batched_tokens * output_tokens // (per_request + output_tokens)))
    decode = roof.decode_seconds(batch, prompt_tokens + output_tokens / 2)
    if waves:  # lockstep waves
        # a prefill batch of the wave's prompts runs alone, before the decodes
        wave = roof.prefill_seconds(batch * per_request, batch)
        stall = wave * (batch - 1) / (2 * batch * (output_tokens - 1))
        tpot = decode + stall
        ttft = wave * (batch + 1) / (2 * batch)
        rate = batch * output_tokens / (wave + (output_tokens - 1) * decode)
    else:
        # each prompt's chunks ride in iterations beside the other requests' decodes (Roofline.mixed_prefill): a
        # round of `output` iterations carries every running request's prompt once, several chunks an iteration
        # when there are more chunks than iterations, as many as the token budget leaves room for beside the decodes
        others = batch - 1
        room = max(roof.batched_tokens - others, 1)
        n = serving.chunks(per_request, room)
        # chunks of different prompts an iteration carries: as many as the round needs, at most one a request and
        # what the budget holds beside the decodes
        sharing = max(1.0, min(batch * n / output_tokens, batch, room * n / per_request))
        stall = batch * roof.mixed_prefill(per_request, others, sharing) / output_tokens
        tpot = decode + stall
        # its first token: half the iteration in flight, then the iterations that carry its chunks, each the
        # others' decodes plus what its chunk adds
        # (one chunk an iteration here: the closed loop's TTFT is not validated, it hangs on arrival phases the
        # sources do not record, docs/costmodels-misses.md)
        others_s = roof.decode_seconds(others, prompt_tokens + output_tokens / 2) if others else 0.0
        chunks = serving.chunks(prompt_tokens, max(roof.batched_tokens - others, 1))
        ttft = others_s / 2 + chunks * others_s + roof.mixed_prefill(prompt_tokens, others)
        rate = batch / tpot
    queue = (concurrency / batch - 1) * (ttft + (output_tokens - 1) * tpot) if concurrency > batch else 0.0
    return Serving(tpot, ttft + queue, decode, stall, batch, rate, queue)


def roof_kv_batch(roof: ServingCosts, tokens_per_request: float,
                  gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
                  max_num_seqs: int = serving.MAX_NUM_SEQS) -> int:
    """Requests of ``tokens_per_request`` tokens whose KV cache fits in what one rank leaves for it (an engine of
    ``max_num_seqs`` profiles that many sampled rows at start-up)."""
    return int(roof.kv_capacity_tokens(gpu_memory_utilization, max_num_seqs) // tokens_per_request)


def offline_throughput(roof: ServingCosts, *, requests: int, prompt_tokens: int, output_tokens: int,
                       max_num_seqs: int = serving.MAX_NUM_SEQS, samples: int = 1, engine: str = "vllm",
                       request_rate: float = math.inf) -> float:
    """Output tokens per second of ``requests`` identical requests: an offline run (vLLM ``LLM.generate``) or a
    server sent them all at once (``request_rate`` inf), or at ``request_rate`` a second (a benchmark's Poisson
    arrivals), by ``engine``'s scheduling.

    At once, the run is rounds of ``batch`` requests, each round the same. Arriving at a rate, the last request
    comes ``(requests - 1) / request_rate`` seconds in (the expectation, the first sent at once) and still takes a
    request's whole latency in a full batch (TTFT + (output - 1) x TPOT), so the run lasts at least that; it is the
    longer of the two bounds (the measured duration runs from the first send to the last token)."""
    if requests < 1:
        raise ConfigError("an offline run needs requests >= 1")
    if not request_rate > 0:
        raise ConfigError("request_rate must be > 0 (inf: every request at once)")
    fits = roof_kv_batch(roof, prompt_tokens + output_tokens, max_num_seqs=max_num_seqs)
    if fits < 1:
        raise ConfigError(f"{roof.model.name} on {roof.tp} x {roof.gpu.name}: no request of "
                          f"{prompt_tokens + output_tokens} tokens fits beside the weights, activations and buffers")
    batch = min(requests, max_num_seqs, fits)
    one = serving_benchmark(roof, concurrency=batch, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                            samples=samples, engine=engine, max_num_seqs=max_num_seqs)
    seconds = requests * output_tokens / one.output_tokens_per_s  # rounds of ``batch``, every one the same
    if math.isfinite(request_rate):
        latency = one.ttft_s - one.queue_s + (output_tokens - 1) * one.tpot_s
        seconds = max(seconds, (requests - 1) / request_rate + latency)
    return requests * output_tokens / seconds
