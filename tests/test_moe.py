"""Mixture-of-experts and MLA architectures: expected experts, compressed KV bytes, prefix sharing, configs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli
from rltrace.replay.costmodels import serving
from rltrace.replay.costmodels.benchmark import offline_throughput, roof_kv_batch, serving_benchmark
from rltrace.replay.costmodels.generation import RooflineGeneration
from rltrace.replay.costmodels.memory import rank_memory
from rltrace.replay.costmodels.roofline import Roofline
from rltrace.replay.costmodels.training import default_mfu, step_seconds

import rltrace
from rltrace.calibration import CALIBRATION
from rltrace.calibration.defaults import COMPUTE_EFFICIENCY as COMPUTE
from rltrace.catalog import from_info, get_gpu, get_model, load_models
from rltrace.catalog.models import ARCHITECTURE, ModelSpec, differences
from rltrace.errors import ConfigError, ValidationError
from rltrace.manifest import Manifest

H100 = get_gpu("H100")
# A small MoE: 4 experts, top-2, width 64, one dense layer then three MoE layers.
FIGURES = serving.KernelFigures.of(CALIBRATION)
TINY = ModelSpec(name="tiny-moe", hidden=128, layers=4, heads=4, kv_heads=2, intermediate=256, vocab=1000,
                 experts=4, experts_per_token=2, expert_intermediate=64, dense_layers=1)
# DeepSeek-V3's config.json (deepseek-ai/DeepSeek-V3), the keys the catalog reads
DEEPSEEK_V3_CONFIG = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "intermediate_size": 18432, "vocab_size": 129280, "n_routed_experts": 256,
    "num_experts_per_tok": 8, "n_shared_experts": 1, "moe_intermediate_size": 2048, "first_k_dense_replace": 3,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                                       "weight_block_size": [128, 128]}}


def test_expected_experts_closed_form() -> None:
    # E = 4, k = 2: one token touches 2; two tokens miss a given expert with (1/2)^2, so 4 x 3/4 = 3
    assert TINY.expected_experts(1) == pytest.approx(2.0)
    assert TINY.expected_experts(2) == pytest.approx(3.0)
    assert TINY.expected_experts(3) == pytest.approx(3.5)
    assert TINY.expected_experts(10_000) == pytest.approx(4.0)
    assert serving.expected_experts(128, 8, np.array([0, 1, 16])).tolist() == pytest.approx(
        [0.0, 8.0, 128 * (1 - (15 / 16) ** 16)])


def test_decode_reads_only_the_experts_the_batch_touches() -> None:
    roof = Roofline(model=TINY, gpu=H100, kernel_floors=False)
    one, two = roof.decode(1, 0), roof.decode(2, 0)
    expert_bytes = TINY.expert_params * TINY.dtype_bytes
    # one more expert per MoE layer read (3 instead of 2); the other GEMMs read the same weights
    assert two.bytes - one.bytes == pytest.approx(TINY.moe_layers * 1.0 * expert_bytes)
    assert (one.experts, two.experts) == pytest.approx((2.0, 3.0))


def test_params_count_only_the_routed_experts_a_token_runs_through() -> None:
    attn = 128 * 128 + 2 * 128 * 64 + 128 * 128
    dense = attn + 3 * 128 * 256 + 2 * 128
    moe = attn + 4 * 3 * 128 * 64 + 128 * 4 + 2 * 128
    assert TINY.params == dense + 3 * moe + 2 * 1000 * 128 + 128
    assert TINY.active_params == TINY.params - 3 * (4 - 2) * 3 * 128 * 64


@pytest.mark.parametrize(("name", "active"), [("Qwen3-30B-A3B", 3.3e9), ("Qwen3-235B-A22B", 22e9),
                                              ("DeepSeek-V3", 37e9), ("Mixtral-8x7B", 12.9e9)])
def test_catalog_moe_matches_published_totals_and_active(name: str, active: float) -> None:
    spec = get_model(name)
    assert abs(spec.params / spec.published_params - 1) < 0.01
    assert abs(spec.active_params / active - 1) < 0.03  # model cards round the active count


def test_mla_kv_bytes_are_the_compressed_latent() -> None:
    ds = get_model("DeepSeek-V3")
    assert ds.kv_bytes_per_token == 61 * (512 + 64) * 2  # 70,272 B: one latent and rope key per layer, BF16
    assert ds.kv_bytes_per_token_rank(8) == ds.kv_bytes_per_token  # replicated on every TP rank
    fp8 = dataclasses.replace(ds, kv_dtype_bytes=1)
    assert fp8.kv_bytes_per_token == 61 * 576
    # GQA: 4 KV heads over 8 ranks are replicated, one per rank
    qwen = get_model("Qwen3-30B-A3B")
    assert qwen.kv_bytes_per_token_rank(8) == 48 * 2 * 1 * 128 * 2
    assert qwen.kv_bytes_per_token_rank(2) == qwen.kv_bytes_per_token / 2
    cap1 = RooflineGeneration(model=ds, gpu=get_gpu("H200")).kv_capacity_tokens(8)
    mem = rank_memory(ds, get_gpu("H200"), 8)  # H200: CUDA's 143,156 MiB, not the datasheet's 141 GB
    assert mem.share == 143_156 * 2**20 * 0.9 and mem.weights == ds.weight_bytes / 8
    blocks = (mem.share - mem.weights - mem.activation_peak - mem.non_torch) // (16 * ds.kv_bytes_per_token)
    assert cap1 == int(blocks) * 16  # vLLM allocates whole 16-token blocks


def test_prefix_sharing_prefills_a_prompt_once() -> None:
    # 100-token prompt, 4 samples: 96 tokens in whole cached blocks, each later sample recomputes 4
    assert serving.prefix_cached_tokens(100) == 96
    assert serving.shared_prefill_tokens(100, 4) == 100 + 3 * 4
    # a prompt of whole blocks: the last token is always computed, so its whole last block is
    assert serving.shared_prefill_tokens(96, 4) == 96 + 3 * 16
    assert serving.shared_prefill_tokens(1, 8) == 8
    # KV: 6 shared full blocks; each sample its own partial block plus what it generated
    assert serving.shared_kv_blocks(100, np.array([10, 20])) == 6 + 1 + 2
    roof = Roofline(model=get_model("Qwen3-8B"), gpu=H100)
    shared = roof.prefill(4 * 1000, 4, samples=8).seconds
    separate = roof.prefill(32 * 1000, 32).seconds
    assert shared < separate / 4


def test_prefill_computes_logits_once_per_request() -> None:
    # vLLM samples at each scheduled request's last token, so a prefill's LM head has one row per prompt in the
    # chunk: its FLOPs are the layers' per token plus vocab x hidden x 2 per prompt, not per token
    roof = Roofline(model=TINY, gpu=H100, kernel_floors=False)
    head = 2 * TINY.vocab * TINY.hidden
    per_token = roof.decode(1, 0).flops - head  # a decode row runs every GEMM once, LM head included
    attention = TINY.prefill_attention_flops_per_token * 100 * 100 / 2
    one = roof.prefill(100, 1)
    assert one.flops == pytest.approx(100 * per_token + head + attention, rel=1e-9)
    two = roof.prefill(200, 2)  # two prompts of 100: two logit rows, each prompt's own causal pairs
    assert two.flops == pytest.approx(200 * per_token + 2 * head + 2 * attention, rel=1e-9)


def test_cuda_graph_padding_follows_vllm_capture_sizes() -> None:
    assert serving.capture_sizes()[:5].tolist() == [1, 2, 4, 8, 16]
    assert serving.capture_sizes()[-1] == 512
    assert serving.padded_tokens(np.array([1, 3, 5, 9, 255, 257, 600])).tolist() == [1, 4, 8, 16, 256, 272, 600]


def test_engine_closed_form_matches_the_estimate() -> None:
    for name, tp, ep in (("Qwen3-30B-A3B", 1, 1), ("Mixtral-8x7B", 2, 2), ("Llama-2-70B", 8, 1)):
        roof = Roofline(model=get_model(name), gpu=H100, tp=tp, ep=ep)
        it = roof.iteration_model()
        for b, c in ((1, 100), (7, 2048), (64, 512), (300, 1000)):
            assert it.iteration(b, b * c) == pytest.approx(roof.decode(b, c).seconds, rel=1e-9)


@pytest.mark.parametrize(("name", "tp"), [("Mixtral-8x7B", 2), ("MiniMax-M2.5", 4)])
def test_serving_expert_parallelism_inside_the_tp_group_all_reduces_like_tp(name: str, tp: int) -> None:
    """Without data parallelism vLLM takes no all-to-all kernels (use_all2all_kernels needs dp_size > 1): every rank
    holds every token, runs its own experts and the MoE output is all-reduced, so EP's collectives are TP's."""
    model = get_model(name)
    for batch in (1, 64, 512):
        with_ep = Roofline(model=model, gpu=H100, tp=tp, ep=tp).decode(batch, 1024)
        without = Roofline(model=model, gpu=H100, tp=tp).decode(batch, 1024)
        assert with_ep.comm_s == pytest.approx(without.comm_s, rel=1e-12) and with_ep.comm_s > 0


def test_minimax_m2_matches_its_published_totals_and_all_reduces_its_qk_norm(tmp_path: Path) -> None:
    """MiniMax-M2.5 (aiconfigurator's copy of its config.json): 229.9B, 9.8B active without the embeddings; its QK
    norm spans every head, so each TP rank all-reduces each token's q and k variance once a layer."""
    spec = get_model("MiniMax-M2.5")
    assert abs(spec.params / 229.9e9 - 1) < 0.01
    assert abs((spec.active_params - 2 * spec.vocab * spec.hidden) / 9.8e9 - 1) < 0.01
    cfg = {"model_type": "minimax_m2", "num_hidden_layers": 62, "hidden_size": 3072, "num_attention_heads": 48,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 1536, "vocab_size": 200064,
           "num_experts_per_tok": 8, "num_local_experts": 256, "tie_word_embeddings": False, "use_qk_norm": True,
           "qk_norm_type": "per_layer", "shared_intermediate_size": 0,
           "quantization_config": {"quant_method": "fp8", "fmt": "float8_e4m3fn", "weight_block_size": [128, 128]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    read = get_model(str(path))
    assert read.params == spec.params and read.dtype_bytes == 1 and read.tp_norm_allreduces == 1
    plain = dataclasses.replace(spec, tp_norm_allreduces=0)
    for tp in (1, 4):
        gap = (Roofline(model=spec, gpu=H100, tp=tp).decode(16, 2048).seconds
               - Roofline(model=plain, gpu=H100, tp=tp).decode(16, 2048).seconds)
        # tp 1: nothing to reduce; tp 4: 62 small all-reduces, each some microseconds (NCCL's latency)
        assert gap == 0 if tp == 1 else 62 * 5e-6 < gap < 62 * 30e-6


def test_hf_config_of_an_moe_and_an_mla_model(tmp_path: Path) -> None:
    ds = get_model("DeepSeek-V3")
    path = tmp_path / "DeepSeek-V3" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    spec = get_model(str(path))
    assert spec.params == ds.params and spec.active_params == ds.active_params
    assert spec.dtype_bytes == 1 and spec.kv_bytes_per_token == ds.kv_bytes_per_token
    qwen = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
            "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
            "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "vocab_size": 151936, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    qpath = tmp_path / "config.json"
    qpath.write_text(json.dumps(qwen))
    assert get_model(str(qpath)).params == get_model("Qwen3-30B-A3B").params
    mixtral = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
               "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
               "sliding_window": None}
    qpath.write_text(json.dumps(mixtral))
    assert get_model(str(qpath)).params == get_model("Mixtral-8x7B").params
    result = run_cli("estimate", "decode", "--model", str(path), "--gpu", "H200", "--tp", "8", "--batch", "32",
                     "--context", "2048", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert 0 < info["experts"] < 256 and info["bound"] in ("memory", "launch") and 0.005 < info["seconds"] < 0.2


def test_refusals_are_one_line() -> None:
    with pytest.raises(ConfigError, match="expert parallelism needs an MoE"):
        Roofline(model=get_model("Llama-2-7B"), gpu=H100, ep=2)
    with pytest.raises(ConfigError, match="runs its experts over its own TP group"):
        Roofline(model=TINY, gpu=H100, tp=2, ep=4).decode(1, 10)
    with pytest.raises(ConfigError, match="runs its experts over its own TP group"):
        Roofline(model=TINY, gpu=H100, ep=2).decode(1, 10)


def test_a_catalog_moe_entry_is_checked(tmp_path: Path) -> None:
    extra = tmp_path / "models.toml"
    extra.write_text('[models.bad]\nhidden = 8\nlayers = 2\nheads = 2\nkv_heads = 2\nintermediate = 8\n'
                     'vocab = 8\nexperts = 4\nexperts_per_token = 5\nexpert_intermediate = 8\n')
    with pytest.raises(ConfigError, match="an MoE needs 0 < experts_per_token <= experts"):
        get_model("bad", extra)


def test_training_counts_active_params_and_prices_expert_all_to_alls() -> None:
    qwen = get_model("Qwen3-30B-A3B")
    h800 = get_gpu("H800")
    plain = step_seconds(qwen, h800, tokens=65536, gpus=8)
    assert default_mfu(qwen) == CALIBRATION["moe_train_mfu"]
    mfu = CALIBRATION["moe_train_mfu"]
    assert plain.seconds == pytest.approx(6 * qwen.active_params * 65536 / (8 * h800.flops * mfu))
    ep = step_seconds(qwen, h800, tokens=65536, gpus=8, ep=8)
    assert ep.comm_s > 0 and ep.seconds == pytest.approx(plain.seconds + ep.comm_s)
    # every rank sends 7/8 of its 8,192 tokens x 8 experts x 2,048 x 2 B, four times per MoE layer
    assert ep.alltoall_bytes == pytest.approx(4 * 48 * 8192 * 8 * 2048 * 2 * 7 / 8)


@pytest.mark.parametrize(("tp", "ep", "width"), [(1, 1, 64), (2, 1, 32), (4, 1, 16), (2, 2, 64)])
def test_the_fused_moe_kernel_slows_as_tensor_parallelism_narrows_each_experts_slice(tp: int, ep: int,
                                                                                     width: int) -> None:
    """vLLM's fused-MoE grouped GEMMs run at ceiling x w / (w + half width) of the FP8 peak, w the expert width on one
    rank: TP splits each expert's intermediate over the ranks, expert parallelism keeps experts whole."""
    gpu = dataclasses.replace(H100, moe_compute_efficiency=0.3, moe_half_width=48.0)
    assert gpu.moe_flops(width) == pytest.approx(H100.fp8_tflops * 1e12 * 0.3 * width / (width + 48))
    assert dataclasses.replace(gpu, moe_compute_efficiency=0.0).moe_flops(width) is None
    tokens = 8192
    ideal = dataclasses.replace(gpu, moe_half_width=0.0)
    slow = Roofline(model=TINY, gpu=gpu, tp=tp, ep=ep, kernel_floors=False).prefill(tokens)
    fast = Roofline(model=TINY, gpu=ideal, tp=tp, ep=ep, kernel_floors=False).prefill(tokens)
    expert_flops = 2 * tokens * TINY.expert_params * TINY.experts_per_token * TINY.moe_layers / tp
    rate = H100.fp8_tflops * 1e12 * 0.3
    assert slow.seconds - fast.seconds == pytest.approx(expert_flops / rate * 48 / width, rel=1e-9)


@pytest.mark.parametrize("floors", [True, False])
def test_fp8_experts_without_a_moe_curve_run_at_the_dense_fp8_gemm_rate(floors: bool) -> None:
    """A part with no fused-MoE curve (H20, a user's part) computes its FP8 experts as any FP8 GEMM: at the FP8 peak
    x compute_efficiency x fp8_gemm_share, i.e. as a flat curve at that share would, in the fused op (kernel floors
    on, the table's fixed part and streaming rate kept) and as two GEMMs (floors off)."""
    fp8 = dataclasses.replace(get_model("Qwen3-30B-A3B"), dtype_bytes=1)  # experts large enough to be compute-bound
    none = dataclasses.replace(H100, moe_compute_efficiency=0.0, moe_half_width=0.0)
    flat = dataclasses.replace(H100, moe_compute_efficiency=COMPUTE * FIGURES.fp8_gemm_share, moe_half_width=0.0)
    for tokens in (16, 8192):
        without, with_flat = (Roofline(model=fp8, gpu=g, kernel_floors=floors).prefill(tokens) for g in (none, flat))
        assert without.seconds == pytest.approx(with_flat.seconds, rel=1e-12)
    curve = Roofline(model=fp8, gpu=H100, kernel_floors=floors).prefill(8192)
    assert curve.seconds > without.seconds  # H100's curve at 768 columns: 0.21 of the FP8 peak, not 0.45
    # the report counts the experts at the rate they ran at: what it calls fixed parts is not the curve's slowdown
    assert curve.floor_s < 0.02 * curve.seconds


@pytest.mark.parametrize(("gpu", "peak_tflops"), [("H100", 1978.9), ("A100", 312.0)])
def test_the_fused_moe_curve_runs_on_the_fp8_peak_or_bf16_without_fp8_cores(gpu: str, peak_tflops: float) -> None:
    """The catalog's fused-MoE curve is a share of the FP8 peak; an A100 has no FP8 cores, so its curve (SGLang's
    Triton table, BF16 rows) is a share of the BF16 peak, and a BF16 prompt's experts run at it, not at the dense
    compute efficiency."""
    part = get_gpu(gpu)
    width = 352.0  # GLM-4.5-Air's 1,408-wide experts at TP 4
    share = part.moe_compute_efficiency * width / (width + part.moe_half_width)
    assert part.moe_flops(width) == pytest.approx(peak_tflops * 1e12 * share)
    assert 0.25 < part.moe_flops(width) / part.flops_for(2) < 0.32  # of the BF16 peak: under the dense GEMMs' 0.7
    bf16 = dataclasses.replace(TINY, expert_intermediate=1408, dtype_bytes=2)
    with_curve = Roofline(model=bf16, gpu=part, tp=4, kernel_floors=False).prefill(8192)
    dense_rate = Roofline(model=bf16, gpu=dataclasses.replace(part, moe_compute_efficiency=0.0, moe_half_width=0.0),
                          tp=4, kernel_floors=False).prefill(8192)
    expert_flops = 2 * 8192 * bf16.expert_params * bf16.experts_per_token * bf16.moe_layers / 4
    extra = expert_flops / part.moe_flops(width) - expert_flops / (part.flops_for(2) * COMPUTE)
    assert with_curve.seconds - dense_rate.seconds == pytest.approx(extra, rel=1e-9)


def test_a_memory_bound_moe_layer_is_the_fused_ops_fixed_time_plus_its_experts_streamed() -> None:
    """Where the GPU's kernel table gives them, a memory-bound MoE layer's routed experts cost moe_fixed_us (routing,
    align, quantization, the grouped GEMMs' fill, the weighted sum: one fused op in a CUDA graph) plus the touched
    experts' weights at moe_stream_efficiency of HBM, in place of two GEMMs and three elementwise floors."""
    gpu = dataclasses.replace(H100, moe_fixed_us=40.0, moe_stream_efficiency=0.9)
    quicker = dataclasses.replace(gpu, moe_fixed_us=10.0)
    batch, context = 4, 100
    slow, fast = (Roofline(model=TINY, gpu=g).decode(batch, context) for g in (gpu, quicker))
    assert slow.seconds - fast.seconds == pytest.approx(TINY.moe_layers * 30e-6, rel=1e-9)
    # the streamed part: the experts the batch touches, read once, at 0.9 of HBM
    faster = dataclasses.replace(gpu, moe_stream_efficiency=0.45)
    touched = TINY.expected_experts(batch) * TINY.expert_params * TINY.dtype_bytes
    extra = TINY.moe_layers * touched * (1 / 0.45 - 1 / 0.9) / H100.hbm_bytes_per_s
    assert Roofline(model=TINY, gpu=faster).decode(batch, context).seconds - slow.seconds == pytest.approx(extra)
    # without a table the layer is two GEMMs and three floors, as before
    plain = dataclasses.replace(gpu, moe_fixed_us=0.0, moe_stream_efficiency=0.0)
    assert Roofline(model=TINY, gpu=plain).decode(batch, context).seconds != slow.seconds
    # compute-bound (a long prompt), the op runs at the width curve's rate, or the dense efficiency without one
    wide, tokens = dataclasses.replace(TINY, hidden=4096, expert_intermediate=2048), 8192  # one chunk, compute-bound
    flops = 2 * tokens * wide.expert_params * wide.experts_per_token * wide.moe_layers
    no_curve = dataclasses.replace(gpu, moe_compute_efficiency=0.0)
    dense_s, curve_s = (Roofline(model=wide, gpu=g).prefill(tokens).seconds for g in (no_curve, gpu))
    expected = flops / (H100.flops * COMPUTE) - flops / gpu.moe_flops(wide.expert_intermediate)
    assert dense_s - curve_s == pytest.approx(expected, rel=1e-6)


def test_a_decodes_reported_memory_share_streams_the_fused_experts_at_the_ops_own_fraction_of_hbm() -> None:
    """``decode``'s ``memory_s`` (the memory-bound share in ``--json`` and the bound label) counts the fused op's
    expert bytes at moe_stream_efficiency, the other GEMMs' at the GEMM stream fraction; the op's fixed part is not
    streaming, so it stays out of memory_s (it shows in the floor). Until 2026-11-26 every byte took the GEMMs'
    0.822 of HBM: a few percent off on MoE models, the priced seconds unchanged."""
    gpu = dataclasses.replace(H100, moe_fixed_us=40.0, moe_stream_efficiency=0.9)
    batch, context = 4, 100
    roof = Roofline(model=TINY, gpu=gpu)
    est = roof.decode(batch, context)
    rows = float(serving.padded_tokens(np.array([batch]))[0])
    experts = TINY.moe_layers * TINY.expected_experts(rows) * TINY.expert_params * TINY.dtype_bytes
    kv = batch * TINY.attended(context) * roof.kv_bytes_per_token
    # norms (two a layer), rotary (4 q + 2 kv heads of 32), the dense layer's SiLU-and-mul: BF16 in and out
    per_token = 2 * TINY.layers * 4 * TINY.hidden + TINY.layers * 2 * 6 * 32 + TINY.dense_layers * 3 * TINY.intermediate
    elementwise = rows * per_token * 2
    others = est.bytes - experts - kv - elementwise
    gemm_bw = H100.hbm_bytes_per_s * FIGURES.stream(TINY.dtype_bytes)[1]
    read_bw = H100.hbm_bytes_per_s * (roof.attention_efficiency or roof.memory_efficiency)
    expected = (others / gemm_bw + experts / (H100.hbm_bytes_per_s * 0.9) + kv / read_bw
                + elementwise / (H100.hbm_bytes_per_s * FIGURES.elementwise_stream))
    assert est.memory_s == pytest.approx(expected, rel=1e-9)
    # the fixed part moves the priced time, not the memory share
    quicker = Roofline(model=TINY, gpu=dataclasses.replace(gpu, moe_fixed_us=10.0)).decode(batch, context)
    assert quicker.memory_s == pytest.approx(est.memory_s, rel=1e-12) and quicker.seconds < est.seconds


def test_serving_benchmark_adds_prefill_stalls_to_decode() -> None:
    roof = Roofline(model=dataclasses.replace(get_model("Llama-3-70B"), dtype_bytes=1), gpu=H100, tp=8)
    short = serving_benchmark(roof, concurrency=64, prompt_tokens=1024, output_tokens=1024)
    long = serving_benchmark(roof, concurrency=64, prompt_tokens=8192, output_tokens=1024)
    assert long.tpot_s > short.tpot_s and long.prefill_stall_s > short.prefill_stall_s
    assert short.tpot_s == pytest.approx(short.decode_s + short.prefill_stall_s)
    assert offline_throughput(roof, requests=256, prompt_tokens=512, output_tokens=512) > 1000


def test_a_prompt_riding_beside_decodes_costs_what_its_rows_add_to_their_iteration() -> None:
    """vLLM runs a prompt chunk and the running decodes as one forward: the chunk costs the iteration's GEMMs over
    decodes plus chunk rows less over the decodes alone, one more logits row, and the prompt's causal attention."""
    model = dataclasses.replace(TINY, experts=0, experts_per_token=0, expert_intermediate=0, dense_layers=0)
    roof = Roofline(model=model, gpu=H100, kernel_floors=False, batched_tokens=16_384)
    flop_s = H100.flops * roof.compute_efficiency
    read_s = H100.hbm_bytes_per_s * roof.memory_efficiency
    head = 2 * model.vocab * model.hidden
    per_token = roof.decode(1, 0).flops - head  # every GEMM once for one row, the LM head aside
    prompt = 1000
    attention = max(model.prefill_attention_flops_per_token * prompt * prompt / 2 / flop_s,
                    prompt * model.kv_bytes_per_token / read_s)
    sampler = serving.SAMPLER_PASSES * model.vocab * 4 / read_s  # the chunk's one logits row
    # 4,096 decodes leave no GEMM of this small model memory-bound: the chunk adds exactly its FLOPs
    expected = (prompt * per_token + head) / flop_s + sampler + attention
    assert roof.mixed_prefill(prompt, 4096) == pytest.approx(expected, rel=1e-9)
    # with no decodes the chunk is an iteration of its own: the prefill's time
    assert roof.mixed_prefill(prompt, 0) == pytest.approx(roof.prefill(prompt).seconds, rel=1e-9)
    # a memory-bound decode iteration (8 rows) has compute to spare, which the chunk takes first
    assert roof.mixed_prefill(prompt, 8) < roof.mixed_prefill(prompt, 0)
    with pytest.raises(ConfigError, match="mixed_prefill"):
        roof.mixed_prefill(0, 8)
    # chunks sharing an iteration: where the GEMMs are compute-bound each still adds its FLOPs; beside a
    # memory-bound decode the spare compute is spent once, so each of 4 chunks pays more than one riding alone (with
    # floors on, an iteration's fixed costs are also paid once, which can make a shared chunk the cheaper)
    assert roof.mixed_prefill(prompt, 4096, sharing=4) == pytest.approx(roof.mixed_prefill(prompt, 4096), rel=1e-9)
    assert roof.mixed_prefill(prompt, 8, sharing=4) > roof.mixed_prefill(prompt, 8)
    with pytest.raises(ConfigError, match="sharing >= 1"):
        roof.mixed_prefill(prompt, 8, sharing=0.5)


@pytest.mark.parametrize(("concurrency", "prompt", "output", "batch"), [
    (1000, 128, 4, 16_384 * 4 // 132),  # the budget holds 4 decodes' worth of 132-token requests per 132 rows
    (64, 128, 4, 64),  # within the budget: every request runs
    (1000, 2000, 100, 16_384 * 100 // 2100),
    (256, 8192, 1024, 256),  # long outputs: the prompts' chunks are fewer than the round's iterations
])
def test_vllms_running_batch_is_what_its_token_budget_holds(concurrency: int, prompt: int, output: int,
                                                            batch: int) -> None:
    """A round of vLLM's steady state carries each running request's prompt once: past max_num_batched_tokens
    the requests finish faster than their prompts come in, so the running batch is budget x output / (prompt +
    output); below it every request of the concurrency runs (here the KV cache holds them all)."""
    model = dataclasses.replace(TINY, experts=0, experts_per_token=0, expert_intermediate=0, dense_layers=0)
    roof = Roofline(model=model, gpu=H100, batched_tokens=16_384)
    result = serving_benchmark(roof, concurrency=concurrency, prompt_tokens=prompt, output_tokens=output)
    assert result.batch == batch
    # each prompt's chunks alone beside the decodes (one chunk an iteration), summed over the round
    alone = roof.decode(batch, prompt + output / 2).seconds + batch * roof.mixed_prefill(prompt, batch - 1) / output
    if batch * serving.chunks(prompt, 16_384 - batch + 1) <= output:  # no more chunks than iterations: no sharing
        assert result.tpot_s == pytest.approx(alone, rel=1e-12)
    assert result.output_tokens_per_s == pytest.approx(batch / result.tpot_s, rel=1e-12)


def test_routed_experts_run_at_the_fused_moe_kernels_own_rate() -> None:
    """A compute-bound MoE layer (a prompt's tokens) runs its routed experts' GEMMs at the engine's fused-MoE kernel's
    rate (the catalog's share of the FP8 peak, from the public kernel table, whatever the experts' type: these are
    BF16), every other GEMM at the model's efficiency of its own peak."""
    plain = dataclasses.replace(H100, moe_compute_efficiency=0.0)
    tabled = dataclasses.replace(H100, moe_compute_efficiency=0.25, moe_half_width=0.0)
    tokens = 8192  # every expert's GEMM compute-bound on this small model
    fast = Roofline(model=TINY, gpu=plain, kernel_floors=False).prefill(tokens)
    slow = Roofline(model=TINY, gpu=tabled, kernel_floors=False).prefill(tokens)
    expert_flops = 2 * tokens * TINY.expert_params * TINY.experts_per_token * TINY.moe_layers
    extra = expert_flops / (H100.fp8_tflops * 1e12 * 0.25) - expert_flops / (H100.flops * COMPUTE)
    assert slow.seconds - fast.seconds == pytest.approx(extra, rel=1e-9)
    assert slow.flops == fast.flops  # the same work, done slower
    dense = dataclasses.replace(TINY, experts=0, experts_per_token=0, expert_intermediate=0, dense_layers=0)
    assert (Roofline(model=dense, gpu=tabled, kernel_floors=False).prefill(tokens).seconds
            == Roofline(model=dense, gpu=plain, kernel_floors=False).prefill(tokens).seconds)


def test_sglang_runs_a_closed_loop_of_identical_requests_in_lockstep_waves() -> None:
    """SGLang prefills a wave alone and first: request i of c gets its first token after i / c of the wave's prefill
    and waits through the rest before its second; a round is vLLM's work (the wave plus output - 1 decodes)."""
    roof = Roofline(model=get_model("Qwen3-32B"), gpu=H100, tp=2)
    c, prompt, out = 16, 2048, 128
    mixed = serving_benchmark(roof, concurrency=c, prompt_tokens=prompt, output_tokens=out)
    waves = serving_benchmark(roof, concurrency=c, prompt_tokens=prompt, output_tokens=out, engine="sglang")
    assert waves.decode_s == mixed.decode_s and waves.batch == mixed.batch == c
    wave = roof.prefill(c * prompt, c).seconds  # the wave's prompts, a prefill batch of their own
    assert waves.ttft_s == pytest.approx(wave * (c + 1) / (2 * c))
    assert waves.tpot_s == pytest.approx(mixed.decode_s + wave * (c - 1) / (2 * c * (out - 1)))
    assert waves.ttft_s + (out - 1) * waves.tpot_s == pytest.approx(wave + (out - 1) * mixed.decode_s)
    assert waves.output_tokens_per_s == pytest.approx(c * out / (wave + (out - 1) * mixed.decode_s))
    assert waves.tpot_s < mixed.tpot_s and waves.ttft_s > mixed.ttft_s  # the stall moves into the first token
    with pytest.raises(ConfigError, match="unknown engine"):
        serving_benchmark(roof, concurrency=c, prompt_tokens=prompt, output_tokens=out, engine="tgi")


def test_requests_sent_at_a_rate_end_no_sooner_than_the_last_arrival_plus_its_latency() -> None:
    """A serving benchmark's Poisson arrivals (vLLM benchmark_serving --request-rate): the last of n requests is sent
    (n - 1) / rate seconds in and still takes a request's latency in the full batch; all at once, rounds of a batch."""
    roof = Roofline(model=dataclasses.replace(get_model("Llama-3-8B"), dtype_bytes=1), gpu=get_gpu("H200"), tp=1)
    n, prompt, out = 50, 1000, 2000
    burst = offline_throughput(roof, requests=n, prompt_tokens=prompt, output_tokens=out)
    one = serving_benchmark(roof, concurrency=n, prompt_tokens=prompt, output_tokens=out)
    assert burst == pytest.approx(one.output_tokens_per_s)
    latency = one.ttft_s + (out - 1) * one.tpot_s
    for rate in (10.0, 0.01):  # a ramp shorter than the work, and an arrival-bound trickle
        paced = offline_throughput(roof, requests=n, prompt_tokens=prompt, output_tokens=out, request_rate=rate)
        assert paced == pytest.approx(n * out / max(n * out / burst, (n - 1) / rate + latency))
        assert paced < burst
    with pytest.raises(ConfigError, match="request_rate"):
        offline_throughput(roof, requests=n, prompt_tokens=prompt, output_tokens=out, request_rate=0)


def test_clients_beyond_the_kv_cache_wait_for_a_slot_by_littles_law() -> None:
    """c clients over b KV slots: each request holds its slot for S = TTFT + (output - 1) x TPOT, so a client's
    cycle is c S / b and its TTFT grows by (c / b - 1) S; within the cache nobody waits."""
    roof = Roofline(model=get_model("Qwen3-32B"), gpu=H100, tp=2)
    slots = roof_kv_batch(roof, 4000 + 1000 / 2)  # vLLM allocates blocks as a request grows: mean occupancy
    inside = serving_benchmark(roof, concurrency=slots, prompt_tokens=4000, output_tokens=1000)
    assert inside.queue_s == 0 and inside.batch == slots
    beyond = serving_benchmark(roof, concurrency=3 * slots, prompt_tokens=4000, output_tokens=1000)
    assert beyond.batch == slots and beyond.tpot_s == pytest.approx(inside.tpot_s)
    service = inside.ttft_s + 999 * inside.tpot_s
    assert beyond.queue_s == pytest.approx(2 * service) and beyond.ttft_s == pytest.approx(inside.ttft_s + 2 * service)


# ---- a bundle's model: the manifest records the architecture, replay rebuilds it ----------------------------------


@pytest.mark.parametrize("name", sorted(load_models()))
def test_a_manifest_carries_every_catalog_model_through_json(name: str) -> None:
    spec = get_model(name)
    info = Manifest.from_json(Manifest(run_id="r", model=spec.info()).to_json()).model
    assert info is not None and from_info(info) == spec


def _acme_moe(tmp_path: Path) -> Path:
    """DeepSeek-V3's config.json under a name the catalog does not hold."""
    path = tmp_path / "acme" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**DEEPSEEK_V3_CONFIG, "_name_or_path": "acme/MoE-X"}))
    return path


def test_a_bundle_of_a_model_the_catalog_lacks_replays_as_the_moe_it_recorded(tmp_path: Path) -> None:
    config = _acme_moe(tmp_path)
    bundle = tmp_path / "bundle"
    made = run_cli("synth", "--preset", "rollpacker", "--set", "steps=1", "--set", f"model={config}", "-o",
                   str(bundle))
    assert made.returncode == 0, made.stderr
    info = rltrace.open(bundle).manifest.model
    assert info is not None and info.experts == 256 and info.kv_lora_rank == 512 and info.dtype_bytes == 1
    shown = run_cli("inspect", str(bundle))
    assert shown.returncode == 0 and "acme/MoE-X (671B params, MoE: 256 experts, top-8, MLA, FP8)" in shown.stdout
    spec = from_info(info)
    assert spec.name == "acme/MoE-X" and spec.is_mla and differences(spec, get_model(str(config))) == []
    assert spec == dataclasses.replace(get_model(str(config)), source="")  # all but where the config was read
    # before format 1.4 the manifest's dense fields were all replay had: a 38.6B dense model, which fits on 8 H800s;
    # the recorded MoE's 671B FP8 weights (84.1 GB a GPU at TP 8) do not, and the replay says so as --model would
    replay = run_cli("replay", str(bundle), "--gen-gpus", "8", "--tp", "8", "-s", "disagg-sync", "-o",
                     str(tmp_path / "out"))
    assert replay.returncode == 2
    assert replay.stderr.strip().splitlines() == [
        ("rltrace: error: acme/MoE-X leaves no KV cache on 8 x H800: vLLM's 0.9 share is 76.5 GB a GPU, the "
         "weights take 84.1 GB, activations and buffers 3.8 GB; raise tp")]
    legacy = dataclasses.replace(info, **dict.fromkeys(ARCHITECTURE))
    assert not from_info(legacy).is_moe  # a 1.3 manifest of an unknown name: only its dense fields


def test_a_manifest_from_before_the_architecture_names_a_catalog_model() -> None:
    info = dataclasses.replace(get_model("DeepSeek-V3").info(), **dict.fromkeys(ARCHITECTURE), dtype_bytes=2)
    assert from_info(info) == get_model("DeepSeek-V3")  # 1.3 writers set no dtype from the run: the name decides


def test_a_recorded_architecture_other_than_the_catalogs_is_replayed_and_noted(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    assert run_cli("synth", "--preset", "rollpacker", "--set", "steps=1", "-o", str(bundle)).returncode == 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["model"]["dtype_bytes"] = 1  # an FP8 run of the catalog's BF16 Qwen2.5-7B
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    assert from_info(rltrace.open(bundle).manifest.model).dtype_bytes == 1
    replay = run_cli("replay", str(bundle), "-s", "disagg-sync", "-o", str(tmp_path / "out"))
    assert replay.returncode == 0, replay.stderr
    assert ("note: model Qwen2.5-7B: the bundle records another architecture than the catalog's entry of that name "
            "(dtype_bytes 2 -> 1); replayed as recorded") in " ".join((replay.stdout + replay.stderr).split())
    manifest["model"]["qkv_bias"] = None  # part of the architecture, as no writer leaves it
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    partial = run_cli("replay", str(bundle), "-s", "disagg-sync", "-o", str(tmp_path / "partial"))
    assert partial.returncode == 2 and partial.stderr.strip().splitlines() == [
        ("rltrace: error: the bundle's manifest: model 'Qwen2.5-7B': field 'qkv_bias' is null while other "
         "architecture fields are set (a format 1.4 writer sets all of them)")]
    manifest["model"].update(qkv_bias=True, experts=8, experts_per_token=300, expert_intermediate=64)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    bad = run_cli("replay", str(bundle), "-s", "disagg-sync", "-o", str(tmp_path / "bad"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "the bundle's manifest: model 'Qwen2.5-7B': an MoE needs 0 < experts_per_token <= experts" in bad.stderr


def test_a_manifest_flag_must_be_a_boolean() -> None:
    text = Manifest(run_id="r", model=get_model("Qwen2.5-7B").info()).to_json().replace(
        '"qkv_bias": true', '"qkv_bias": "yes"')
    with pytest.raises(ValidationError, match="field 'model.qkv_bias' must be true or false"):
        Manifest.from_json(text)


def test_an_engine_allowed_more_than_1024_sequences_prices_each_batch_as_the_estimate() -> None:
    """The engine's per-batch table stopped at 1024 and clamped: with --max-seqs 2048 a batch of 2048 Qwen2.5-7B
    sequences on an H100 took 43.5 ms an iteration in the replay and 69.1 ms in `rltrace estimate decode`."""
    model, tp = get_model("Qwen2.5-7B"), 1
    generation = RooflineGeneration(model=model, gpu=H100, max_num_seqs=2048)
    roof = Roofline(model=model, gpu=H100, tp=tp)
    it = generation.iteration_model(tp)
    for b, c in ((1024, 300), (1500, 300), (2048, 300)):
        assert it.iteration(b, b * c) == pytest.approx(roof.decode(b, c).seconds, rel=1e-9)
