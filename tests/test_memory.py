"""vLLM's start-up split of GPU memory (weights, profiling's activation peak, buffers outside torch, KV cache),
pinned on closed forms and on the public vLLM 0.19 log the constants are read from."""

from __future__ import annotations

import dataclasses

import pytest
from rltrace.replay.costmodels import memory
from rltrace.replay.costmodels.generation import RooflineGeneration
from rltrace.replay.costmodels.memory import GIB, activation_peak_bytes, rank_memory

from rltrace.catalog import get_gpu, get_model
from rltrace.errors import ConfigError

H100 = get_gpu("H100")
LLAMA8 = get_model("Llama-3-8B")


def test_fp8_keeps_the_embedding_and_lm_head_in_bf16() -> None:
    fp8 = dataclasses.replace(LLAMA8, dtype_bytes=1)
    tables = 2 * LLAMA8.vocab * LLAMA8.hidden  # untied: the token embedding and the LM head
    assert LLAMA8.weight_bytes == 2 * LLAMA8.params
    assert fp8.weight_bytes == (LLAMA8.params - tables) + 2 * tables
    assert fp8.weight_bytes / GIB == pytest.approx(8.49, abs=0.05)  # vLLM 0.19 logs 8.49 GiB for it on one H100


def test_the_log_the_constants_come_from_is_reproduced() -> None:
    # Llama-3.1-8B, one H100, vLLM 0.19.0, gpu_memory_utilization 0.95: weights 14.99, torch peak 1.89, non-torch
    # 0.25 GiB, 476,000 tokens of KV cache (llm-d-planner @ d3121e05, its v0.19.0 log)
    mem = rank_memory(LLAMA8, H100, 1, gpu_memory_utilization=0.95)
    assert mem.activation_peak == pytest.approx(1.89 * GIB)  # the sampler's 1,024 x 128,256 logits
    assert mem.non_torch == 0.25 * GIB
    assert mem.weights / GIB == pytest.approx(14.99, abs=0.05)
    tokens = mem.kv_tokens(LLAMA8.kv_bytes_per_token)
    assert tokens % 16 == 0 and tokens == pytest.approx(476_000, rel=0.005)


@pytest.mark.parametrize(("seqs", "sampler_wins"), [(1024, True), (256, False), (64, False)])
def test_the_peak_is_the_larger_of_the_forward_and_the_sampler(seqs: int, sampler_wins: bool) -> None:
    # Llama-3-8B over 8,192 tokens: residual, normed input, gate/up and its activation = 2h + 3I values a token
    forward = 8192 * (2 * 4096 + 3 * 14336) * 2
    sampler = seqs * LLAMA8.vocab * memory.sampler_bytes_per_logit()
    peak = activation_peak_bytes(LLAMA8, 1, 8192, seqs)
    assert peak == pytest.approx(sampler if sampler_wins else forward)
    assert (sampler > forward) is sampler_wins
    # the sampler never sees more rows than the profiling run has tokens
    rows_512 = 512 * LLAMA8.vocab * memory.sampler_bytes_per_logit()
    assert activation_peak_bytes(LLAMA8, 1, 512, 1024) == pytest.approx(rows_512)


def test_an_moe_workspace_stays_allocated_through_the_sampler() -> None:
    mixtral = get_model("Mixtral-8x7B")  # top-2 of 8 experts of width 14,336 over tp 2
    workspace = 8192 * 2 * (3 * 14336 / 2 + 4096) * 2
    sampler = 1024 * mixtral.vocab * memory.sampler_bytes_per_logit()
    assert activation_peak_bytes(mixtral, 2) == pytest.approx(workspace + sampler)
    assert activation_peak_bytes(mixtral, 2) / GIB == pytest.approx(1.21, rel=0.05)  # vLLM 0.19's log


@pytest.mark.parametrize(("tp", "non_torch_gib"), [(1, 0.25), (2, 2.07), (8, 2.07)])
def test_tensor_parallel_ranks_hold_communication_buffers(tp: int, non_torch_gib: float) -> None:
    assert rank_memory(get_model("Llama-3-70B"), get_gpu("H200"), tp).non_torch == non_torch_gib * GIB


def test_no_room_for_a_kv_cache_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"leaves no KV cache on 1 x H100: .* activations and buffers"):
        RooflineGeneration(model=get_model("Llama-3-70B"), gpu=H100).kv_capacity_tokens(1)


def test_a_replays_engine_cap_sets_the_rows_profiling_samples() -> None:
    # --max-seqs 256 (the replay's default) profiles 256 rows: the forward, not the sampler, is the peak
    wide, narrow = (RooflineGeneration(model=LLAMA8, gpu=H100, max_num_seqs=n).kv_capacity_tokens(1)
                    for n in (1024, 256))
    freed = activation_peak_bytes(LLAMA8, 1, max_num_seqs=1024) - activation_peak_bytes(LLAMA8, 1, max_num_seqs=256)
    assert freed > 0
    assert narrow - wide == pytest.approx(freed / LLAMA8.kv_bytes_per_token, abs=16)  # whole 16-token blocks
