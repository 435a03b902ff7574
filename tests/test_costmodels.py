"""Roofline cost model: closed forms, bounds, and a physical check against measured H100 kernels."""

from __future__ import annotations

import dataclasses
import json
import statistics

import polars as pl
import pytest
from helpers import require_shared, run_cli
from rltrace.replay.costmodels import Roofline, serving
from rltrace.replay.costmodels.parallel import tp_allreduce_seconds
from rltrace.replay.costmodels.profile import fit_elementwise_stream, fit_gemm_compute, fit_gemm_stream
from rltrace.replay.costmodels.training import default_mfu, step_seconds

from rltrace.calibration import CALIBRATION
from rltrace.catalog import get_gpu, get_model
from rltrace.catalog.models import ModelSpec
from rltrace.errors import ConfigError

FIGURES = serving.KernelFigures.of(CALIBRATION)
LLAMA, H100 = get_model("Llama-2-7B"), get_gpu("H100")


def _gemm_params(model: ModelSpec) -> int:
    """Every weight a GEMM reads: all but the input embedding and the norms."""
    embedding = model.vocab * model.hidden * (0 if model.tied_embeddings else 1)
    return model.params - embedding - (2 * model.layers + 1) * model.hidden


def test_small_batch_decode_reads_the_weights_once() -> None:
    cost = Roofline(model=LLAMA, gpu=H100, memory_efficiency=0.7, kernel_floors=False)
    est = cost.decode(batch=1, context=1000)
    bandwidth = H100.hbm_bytes_per_s * 0.7
    weights = _gemm_params(LLAMA) * LLAMA.dtype_bytes / bandwidth
    kv = 1000 * LLAMA.kv_bytes_per_token / bandwidth
    sampler = 4 * LLAMA.vocab * 4 / bandwidth  # four passes over the FP32 logits
    assert est.bound == "memory"
    assert est.memory_s == pytest.approx(weights + kv, rel=1e-12)
    assert est.seconds == pytest.approx(weights + kv + sampler, rel=1e-12)


def test_large_batch_short_context_is_compute_bound() -> None:
    cost = Roofline(model=LLAMA, gpu=H100, compute_efficiency=0.6, kernel_floors=False)
    est = cost.decode(batch=4096, context=0)
    assert est.bound == "compute"
    assert est.compute_s == pytest.approx(2 * _gemm_params(LLAMA) * 4096 / (H100.flops * 0.6), rel=1e-12)
    assert est.compute_s < est.seconds < est.compute_s * 1.02  # plus the sampler's passes over the logits


def test_tensor_parallelism_splits_reads_and_prices_all_reduces_on_the_network_model() -> None:
    one = Roofline(model=LLAMA, gpu=H100, tp=1, kernel_floors=False).decode(batch=8, context=512)
    two = Roofline(model=LLAMA, gpu=H100, tp=2, kernel_floors=False).decode(batch=8, context=512)
    assert two.memory_s == pytest.approx(one.memory_s / 2, rel=1e-12)
    per_call = tp_allreduce_seconds(H100, 2, 8, LLAMA.hidden)
    assert 5e-6 < per_call < 50e-6  # NCCL's small-message latency on one NVSwitch node, as measured (~15 us)
    assert two.comm_s == pytest.approx(2 * LLAMA.layers * per_call, rel=1e-12)


def test_batch_64_costs_what_its_kernels_and_collectives_add() -> None:
    """The 70B at TP 8: batch 64 pays the TP all-reduces of 64 tokens, its KV reads and the padded GEMMs; a
    batch of 1 already pays every kernel's floor. The ratio follows from those terms, not from a fit."""
    cost = Roofline(model=get_model("Llama-2-70B"), gpu=H100, tp=8)
    one, sixty_four = cost.decode(1, 512), cost.decode(64, 512)
    assert sixty_four.comm_s > one.comm_s and sixty_four.memory_s > one.memory_s
    assert one.floor_s > 0  # kernel floors: 80 layers x ~10 kernels of >= 2.4 us
    assert sixty_four.seconds / one.seconds > 1.14


def test_train_step_is_six_flops_per_parameter_per_token() -> None:
    est = Roofline(model=LLAMA, gpu=H100, train_mfu=0.4).train(tokens=10**6, gpus=8)
    assert est.seconds == pytest.approx(6 * LLAMA.params * 1e6 / (8 * H100.flops * 0.4), rel=1e-12)


def test_training_counts_causal_attention_and_runs_fp8_linear_layers_at_the_fp8_peak() -> None:
    """A step at sequence length s adds 3 x (s + 1) / 2 query-key pairs per token at the BF16 peak; an FP8 run
    moves only the 6N part to the FP8 peak (Transformer Engine casts the linear layers, not attention)."""
    tokens, seq, mfu = 8 * 4096, 4096, 0.4
    linear = 6 * LLAMA.active_params * tokens
    attention = 3 * LLAMA.prefill_attention_flops_per_token * (seq + 1) / 2 * tokens
    bf16 = step_seconds(LLAMA, H100, tokens=tokens, gpus=8, mfu=mfu, seq_len=seq)
    assert bf16.seconds == pytest.approx((linear + attention) / (8 * mfu * H100.flops), rel=1e-12)
    fp8 = step_seconds(LLAMA, H100, tokens=tokens, gpus=8, mfu=mfu, seq_len=seq, precision="fp8")
    assert fp8.seconds == pytest.approx(linear / (8 * mfu * H100.flops_for(1)) + attention / (8 * mfu * H100.flops),
                                        rel=1e-12)
    assert step_seconds(LLAMA, H100, tokens=tokens, gpus=8, mfu=mfu).flops == linear  # no length: 6N only
    with pytest.raises(ConfigError, match="precision"):
        step_seconds(LLAMA, H100, tokens=tokens, gpus=8, precision="int4")
    # the published dense MFU of the GPU's kind: A100 runs reach a higher share of their peak than Hopper
    assert default_mfu(LLAMA, get_gpu("A100")) == CALIBRATION["dense_train_mfu_a100"] > default_mfu(LLAMA, H100)
    # the A800 is the A100's die and HBM (its NVLink cut): the same MFU, where it took Hopper's (1.30x the time)
    assert default_mfu(LLAMA, get_gpu("A800")) == default_mfu(LLAMA, get_gpu("A100"))
    assert step_seconds(LLAMA, get_gpu("A800"), tokens=tokens, gpus=8).seconds == \
        step_seconds(LLAMA, get_gpu("A100"), tokens=tokens, gpus=8).seconds


def test_time_grows_with_batch_and_context() -> None:
    cost = Roofline(model=LLAMA, gpu=H100)
    times = [cost.decode(b, c).seconds for b in (1, 8, 64, 512) for c in (0, 512, 4096)]
    grid = [times[i : i + 3] for i in range(0, 12, 3)]
    assert all(row == sorted(row) for row in grid)
    assert all(list(col) == sorted(col) for col in zip(*grid))


def test_impossible_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="tp 3 does not split"):
        Roofline(model=LLAMA, gpu=H100, tp=3)
    with pytest.raises(ConfigError, match="memory_efficiency must be in"):
        Roofline(model=LLAMA, gpu=H100, memory_efficiency=1.5)
    with pytest.raises(ConfigError, match="decode needs batch >= 1"):
        Roofline(model=LLAMA, gpu=H100).decode(0, 10)
    assert Roofline(model=get_model("Qwen2.5-7B"), gpu=H100, tp=4).tp == 4  # 4 KV heads, 28 heads


def test_no_measured_h100_kernel_beats_the_full_efficiency_roofline() -> None:
    """Vidur's measured Llama-2-7B projections on H100 (microsoft/vidur, MIT; ../shared/data/README.md).

    Per layer, the four projection GEMMs can be no faster than the roofline at 100% efficiency; the ratio is
    the efficiency the kernels achieve (reported in docs/costmodels-roofline.md)."""
    mlp = pl.read_csv(require_shared("kernels/h100/vidur_llama-2-7b_mlp.csv"))
    ops = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"]
    measured = mlp.select(
        "num_tokens", "num_tensor_parallel_workers",
        (pl.sum_horizontal(*[pl.col(f"time_stats.{op}.median") for op in ops]) / 1e3).alias("measured_s"),
    ).drop_nulls()
    linear_params = LLAMA.layer_params - 2 * LLAMA.hidden  # norms are not GEMMs
    ratios = []
    for tokens, tp, seconds in measured.iter_rows():
        peak = Roofline(model=LLAMA, gpu=H100, tp=tp, memory_efficiency=1.0, compute_efficiency=1.0)
        bound = max(2 * linear_params * tokens / (tp * H100.flops), linear_params * 2 / (tp * H100.hbm_bytes_per_s))
        assert peak.tp == tp
        ratios.append(bound / seconds)
    assert len(ratios) > 100
    assert max(ratios) <= 1.0, max(ratios)
    assert 0.3 < sorted(ratios)[len(ratios) // 2] < 1.0  # median achieved efficiency


def test_a_gpu_gemm_is_a_ramp_plus_its_bytes_at_the_streaming_fraction_fitted_to_the_h100_table() -> None:
    """The gemm_stream figures are the fit of aiconfigurator's H100 GEMMs with m <= 16 (re-fitted here); a tiny kernel
    is all ramp, a large one nearly all bytes; a GPU decode of one token pays one ramp per GEMM plus its weights
    at the streaming fraction, where a CPU device (no floors) keeps the single memory efficiency."""
    fit = fit_gemm_stream(require_shared("kernels/h100/aic_gemm_perf.parquet"))
    for row in fit.iter_rows(named=True):
        ramp, fraction = FIGURES.gemm_stream[row["weight_bytes"]]
        assert row["ramp_s"] == pytest.approx(ramp, rel=0.01)
        assert row["efficiency"] == pytest.approx(fraction, abs=0.001)
        assert row["median_abs_error"] < 0.1 and row["kernels"] > 1000
    ramp, fraction = FIGURES.gemm_stream[2]
    hbm = H100.hbm_bytes_per_s
    assert float(serving.stream_seconds(1e3, 2, hbm, FIGURES)) == pytest.approx(ramp + 1e3 / (fraction * hbm))
    assert float(serving.stream_seconds(1e9, 2, hbm, FIGURES)) == pytest.approx(1e9 / (fraction * hbm), rel=0.01)
    gemms = 7 * LLAMA.layers + 1  # q/k/v, o, gate, up, down per layer; the LM head
    weights = _gemm_params(LLAMA) * LLAMA.dtype_bytes
    gpu = Roofline(model=LLAMA, gpu=H100).decode(batch=1, context=0)
    assert gpu.seconds > gemms * ramp + weights / (fraction * hbm)
    cpu_like = Roofline(model=LLAMA, gpu=H100, kernel_floors=False, memory_efficiency=0.6).decode(batch=1, context=0)
    assert cpu_like.seconds == pytest.approx(weights / (0.6 * hbm) + 4 * LLAMA.vocab * 4 / (0.6 * hbm), rel=1e-6)


def test_elementwise_stream_is_the_median_of_vidurs_h100_elementwise_ops() -> None:
    """The elementwise_stream figure is the median over the ops of Vidur's H100 norms, rotary, activation and residual
    add once they stream (re-fitted here); each op lands where its kind should (the add above 1 where L2 holds its
    inputs)."""
    fit = {row["op"]: row for row in fit_elementwise_stream(
        require_shared("kernels/h100/vidur_llama-2-7b_mlp.csv")).iter_rows(named=True)}
    assert set(fit) == {"input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add"}
    assert statistics.median(row["median"] for row in fit.values()) == pytest.approx(FIGURES.elementwise_stream,
                                                                                      abs=0.005)
    assert all(row["rows"] == 780 for row in fit.values())
    assert 0.3 < fit["input_layernorm"]["median"] < 0.45 and fit["add"]["median"] > 0.9


@pytest.mark.parametrize("tp", [1, 2])
def test_a_prefill_chunk_streams_its_norms_rotary_and_activation_and_tp_shards_all_but_the_norms(tp: int) -> None:
    """One 8,192-token chunk of Llama-2-7B: every layer's two fused residual-add RMSNorms read and write 4 x hidden
    BF16 values a token on every rank, rotary 2 x (heads + kv heads) x head_dim / tp, SiLU-and-mul 3 x intermediate /
    tp; their bytes at elementwise_stream of HBM run in series with the compute-bound GEMMs, so the report counts
    them as work, not as fixed parts."""
    tokens, m = 8192, LLAMA
    est = Roofline(model=m, gpu=H100, tp=tp).prefill(tokens)
    per_token = 2 * m.layers * 4 * m.hidden + m.layers * 2 * (m.heads + m.kv_heads) * m.dim_head / tp
    per_token += m.layers * 3 * m.intermediate / tp
    elementwise = tokens * per_token * 2
    weights = _gemm_params(m) * m.dtype_bytes / tp
    kv_write = tokens * m.kv_bytes_per_token / tp
    assert est.bytes == pytest.approx(weights + elementwise + kv_write, rel=1e-9)
    streamed = elementwise / (H100.hbm_bytes_per_s * FIGURES.elementwise_stream)
    assert est.bound == "compute"
    assert est.seconds >= est.compute_s + streamed + est.comm_s
    assert est.floor_s < 0.02 * est.seconds
    norms = tokens * 2 * m.layers * 4 * m.hidden * 2 / (H100.hbm_bytes_per_s * FIGURES.elementwise_stream)
    assert norms > 0.05 * est.seconds  # not sharded by TP: a share that grows as TP shards the GEMMs


def test_a_short_chunk_at_high_tp_is_labelled_by_its_gemms_not_by_the_elementwise_bytes_beside_them() -> None:
    """At TP 8 a 512-token chunk's memory term (weights, activations) outweighs its FLOPs, but the weights stream
    under compute-bound GEMMs and only the elementwise kernels add to them: compute holds the larger share."""
    est = Roofline(model=LLAMA, gpu=H100, tp=8).prefill(512)
    assert est.memory_s > est.compute_s and est.bound == "compute"


def _dsv3_elementwise(tp: int) -> float:
    """DeepSeek-V3's BF16 values a token moves through its elementwise kernels on one rank: two residual-add norms
    a layer, q's rope dimensions (128 heads) and the shared k's, the q (1,536) and KV (512) latent norms, the 3 dense
    layers' SiLU-and-mul (18,432 wide) and the 58 MoE layers' shared expert's (2,048 wide; routed ones are inside the
    fused op on H200)."""
    return (2 * 61 * 4 * 7168 + 61 * 2 * (128 / tp + 1) * 64 + 61 * 2 * 1536 + 61 * 2 * 512
            + 3 * 3 * 18432 / tp + 58 * 3 * 2048 / tp)


@pytest.mark.parametrize(("model", "gpu", "tp", "values_per_token"), [
    # GQA: rotary on the rank's q heads and KV heads (Llama's 8 KV heads one a rank at TP 8; Qwen3-30B-A3B's 4 are
    # replicated past TP 4, one a rank, as its KV cache is)
    ("Llama-3-70B", "H200", 8, 2 * 80 * 4 * 8192 + 80 * 2 * (64 / 8 + 1) * 128 + 80 * 3 * 28672 / 8),
    ("Qwen3-30B-A3B", "H100", 8, 2 * 48 * 4 * 2048 + 48 * 2 * (32 / 8 + 1) * 128),  # routed SiLU inside the fused op
    # no fused-MoE table on H20: the routed experts' SiLU-and-mul is a kernel of its own, each token's top-8
    ("Qwen3-30B-A3B", "H20", 1, 2 * 48 * 4 * 2048 + 48 * 2 * (32 + 4) * 128 + 48 * 3 * 8 * 768),
    ("DeepSeek-V3", "H200", 8, _dsv3_elementwise(8)),
])
def test_each_architectures_elementwise_bytes_grow_with_the_tokens_as_its_kernels_move_them(
        model: str, gpu: str, tp: int, values_per_token: float) -> None:
    """Two single-chunk prefills of 4,096 and 8,192 tokens (every expert touched in both) read the same weights, so
    their bytes differ by 4,096 tokens' KV-cache writes and elementwise traffic: the latter is each architecture's
    own per-token sum (BF16, two bytes a value)."""
    roof = Roofline(model=get_model(model), gpu=get_gpu(gpu), tp=tp)
    small, large = roof.prefill(4096), roof.prefill(8192)
    per_token = (large.bytes - small.bytes) / 4096 - roof.kv_bytes_per_token
    assert per_token == pytest.approx(values_per_token * 2, rel=1e-9)


def test_fp8_gemm_share_is_the_h100_tables_fp8_median_over_its_bf16_median() -> None:
    """The fp8_gemm_share figure is the public H100 table's compute-bound FP8 median over its BF16 one (re-fitted here);
    the table held against another part's peaks is refused, not fitted."""
    table = require_shared("kernels/h100/aic_gemm_perf.parquet")
    fit = {row["dtype"]: row for row in fit_gemm_compute(table).iter_rows(named=True)}
    assert fit["bfloat16"]["share"] == pytest.approx(0.750, abs=0.001)  # the calibration's BF16 compute factor
    assert fit["fp8"]["share"] / fit["bfloat16"]["share"] == pytest.approx(FIGURES.fp8_gemm_share, abs=0.001)
    assert min(fit["fp8"]["kernels"], fit["bfloat16"]["kernels"]) > 9000
    with pytest.raises(ConfigError, match="A100 has no FP8 peak"):
        fit_gemm_compute(table, "A100")
    with pytest.raises(ConfigError, match="2.26x A100's peak: timed on another part"):
        fit_gemm_compute(table, "A100", {"bfloat16": 2})


def test_a_compute_bound_fp8_gemm_runs_at_the_fp8_peak_times_the_share() -> None:
    """An FP8 prefill runs its projections at the FP8 peak x compute_efficiency x fp8_gemm_share, a BF16 one at the
    BF16 peak x compute_efficiency; FP8 weights on a part without FP8 cores (A100) compute at BF16's rate."""
    layers = 2 * 8192 * (_gemm_params(LLAMA) - LLAMA.vocab * LLAMA.hidden)  # one chunk's projections; not the LM head
    a100 = get_gpu("A100")
    for gpu, rate in [(H100, H100.fp8_tflops * 1e12 * 0.7 * FIGURES.fp8_gemm_share), (a100, a100.flops * 0.7)]:
        bf16, fp8 = (Roofline(model=dataclasses.replace(LLAMA, dtype_bytes=wb), gpu=gpu, kernel_floors=False,
                              compute_efficiency=0.7).prefill(8192) for wb in (2, 1))
        # compute-bound: only the projections' rate differs (attention, the LM head and the KV stay BF16)
        assert bf16.seconds - fp8.seconds == pytest.approx(layers / (gpu.flops * 0.7) - layers / rate, rel=1e-6)
        assert bf16.compute_s - fp8.compute_s == pytest.approx(bf16.seconds - fp8.seconds, rel=1e-6)  # as reported


@pytest.mark.parametrize(("share", "fits"), [(0.85, True), (0.899, True), (0.901, False), (0.95, False)])
def test_fits_is_what_vllms_share_leaves_for_the_kv_cache(share: float, fits: bool) -> None:
    # 0.9 of CUDA's 81,106 MiB, less the weights, profiling's activation peak and the buffers outside torch
    roof = Roofline(model=LLAMA, gpu=H100)
    mem = roof.rank_memory()
    assert mem.share == 0.9 * 81_106 * 2**20
    kv_tokens = (share * 81_106 * 2**20 - mem.weights - mem.activation_peak - mem.non_torch) / roof.kv_bytes_per_token
    assert roof.fits(kv_tokens) is fits
    assert roof.kv_capacity_tokens() == int(mem.kv_cache // (16 * roof.kv_bytes_per_token)) * 16  # whole blocks


def test_estimate_cli() -> None:
    result = run_cli("estimate", "decode", "--model", "Llama-2-7B", "--gpu", "H100", "--batch", "1", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["bound"] == "memory" and 0.004 < info["seconds"] < 0.008 and info["fits"] is True
    big = run_cli("estimate", "decode", "--model", "Llama-2-7B", "--gpu", "H100", "--batch", "256", "--context", "2048")
    assert "note: needs" in big.stdout
    bad = run_cli("estimate", "decode", "--model", "Llama-2-7B", "--gpu", "H100", "--tp", "3")
    assert bad.returncode == 2 and bad.stderr.startswith("rltrace: error: tp 3 does not split")
    for kind in ("prefill", "train"):
        ok = run_cli("estimate", kind, "--model", "Qwen2.5-7B", "--gpu", "H800", "--json")
        assert ok.returncode == 0 and json.loads(ok.stdout)["bound"] == "compute"


def test_estimate_train_and_replay_training_price_the_validated_step() -> None:
    """`estimate train` and a replay without a measured trainer time run the step estimate validate checks:
    attention at the sequence length, FP8 linear layers when asked, the published MFU when none is given."""
    from rltrace.replay.costmodels.training import TrainingCost

    roof = Roofline(model=LLAMA, gpu=H100)
    for precision in ("bf16", "fp8"):
        est = roof.train(10**6, 8, seq_len=4096, precision=precision)
        ref = step_seconds(LLAMA, H100, tokens=10**6, gpus=8, seq_len=4096, precision=precision)
        assert est.seconds == ref.seconds and est.flops == ref.flops
    assert roof.train(10**6, 8, seq_len=4096, precision="fp8").seconds < roof.train(10**6, 8, seq_len=4096).seconds
    assert roof.train(10**6, 8, seq_len=4096).seconds > roof.train(10**6, 8).seconds  # attention costs
    cost = TrainingCost(model=LLAMA, gpu=H100, gpus=8, recorded_gpus=8, recorded_gpu=H100)
    assert cost.train_seconds(None, 10**6, 1024) == step_seconds(LLAMA, H100, tokens=10**6, gpus=8,
                                                                 seq_len=1024).seconds
    assert cost.train_seconds(2.0, 10**6, 1024) == 2.0  # measured seconds are kept on the recorded GPUs


@pytest.mark.parametrize(("args", "message"), [
    (["--precision", "fp4"], "--precision must be one of bf16, fp16, fp8, got 'fp4'"),
    (["--context", "0"], "train needs tokens, gpus and a sequence length >= 1"),
    (["--tp", "4"], "--tp is for decode and prefill"),
    (["--ep", "8"], "--ep 8: expert parallelism needs an MoE; Llama-2-7B has no experts"),
    (["--model", "Qwen3-30B-A3B", "--gpus", "16", "--ep", "32"], "--ep 32 must divide the 16 training GPUs"),
    (["--model", "Qwen3-30B-A3B", "--gpus", "12", "--ep", "8"], "--ep 8 must divide the 12 training GPUs"),
    (["--model", "Qwen3-30B-A3B", "--gpus", "12", "--ep", "5"], "--ep 5 must divide Qwen3-30B-A3B's 128 experts"),
    (["--gpu", "A100", "--precision", "fp8"], "A100 has no FP8 tensor cores"),
    # a 0.203 ms step "of 100 tokens in 4,096-token sequences" on 64 GPUs
    (["--tokens", "100", "--context", "4096", "--gpus", "64"], "--tokens 100 is less than one --context 4,096-token"),
])
def test_estimate_train_refuses_bad_values_in_one_line(args: list[str], message: str) -> None:
    done = run_cli("estimate", "train", "--model", "Llama-2-7B", "--gpu", "H100", *args)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0], done.stderr


def test_estimate_precision_sets_the_served_weights_and_is_checked() -> None:
    """decode and prefill take the weights' type from --precision when given (FP8: half the bytes to stream),
    else the model's own; an unknown precision is one line and exit 2 for every kind."""
    def decode(*extra: str) -> dict[str, float]:
        done = run_cli("estimate", "decode", "--model", "Llama-3-70B", "--gpu", "H100", "--tp", "8", "--batch", "32",
                       "--context", "2048", "--json", *extra)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    own, bf16, fp8 = decode(), decode("--precision", "bf16"), decode("--precision", "fp8")
    assert own == bf16
    expected = dataclasses.replace(get_model("Llama-3-70B"), dtype_bytes=1)
    assert fp8["seconds"] == Roofline(model=expected, gpu=H100, tp=8).decode(32, 2048).seconds < own["seconds"]
    for kind in ("decode", "prefill"):
        done = run_cli("estimate", kind, "--model", "Llama-3-70B", "--gpu", "H100", "--precision", "garbage")
        assert done.returncode == 2 and "--precision must be one of bf16, fp16, fp8" in done.stderr
    # the header names the weights priced: the one asked for, else the model's own (a config.json's FP8 kept)
    for extra, label in ((("--precision", "fp16"), "fp16 weights"), ((), "bf16 weights")):
        done = run_cli("estimate", "decode", "--model", "Llama-3-70B", "--gpu", "H100", *extra)
        assert done.returncode == 0 and f"(tp 1, {label})" in done.stdout, done.stdout + done.stderr


def test_a_config_jsons_fp8_is_priced_as_fp8_without_precision(tmp_path) -> None:
    cfg = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "vocab_size": 128256, "quantization_config": {"quant_method": "fp8"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    done = run_cli("estimate", "decode", "--model", str(path), "--gpu", "H100", "--json")
    assert done.returncode == 0, done.stderr
    own = json.loads(done.stdout)["seconds"]
    assert own == Roofline(model=get_model(str(path)), gpu=H100).decode(1, 1024).seconds
    assert get_model(str(path)).dtype_bytes == 1
    printed = run_cli("estimate", "decode", "--model", str(path), "--gpu", "H100")
    assert "fp8 weights" in printed.stdout


def test_estimate_train_trains_a_sequence_per_gpu_by_default_and_says_when_it_has_fewer() -> None:
    """Its default step (4,096 tokens of 1,024 on 8 GPUs) was half a sequence per GPU, priced as if split evenly."""
    default = run_cli("estimate", "train", "--model", "Llama-2-7B", "--gpu", "H100", "--context", "2048")
    assert default.returncode == 0, default.stderr
    assert "training step of 16,384 tokens in 2,048-token sequences on 8 GPUs" in default.stdout
    assert "note:" not in default.stdout
    fewer = run_cli("estimate", "train", "--model", "Llama-2-7B", "--gpu", "H100", "--tokens", "8192", "--gpus", "16")
    assert fewer.returncode == 0, fewer.stderr
    assert "note: 8 sequences on 16 GPUs: priced as if each GPU trained an equal share of the tokens" in fewer.stdout


def test_estimate_train_shows_all_to_alls_only_for_an_expert_parallel_moe() -> None:
    dense = run_cli("estimate", "train", "--model", "Llama-2-7B", "--gpu", "H100")
    moe = run_cli("estimate", "train", "--model", "Qwen3-30B-A3B", "--gpu", "H800", "--gpus", "16", "--ep", "8")
    assert dense.returncode == 0 and moe.returncode == 0
    assert "all-to-all" not in dense.stdout and "expert all-to-alls" in moe.stdout and "ep 8" in moe.stdout
