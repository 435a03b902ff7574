"""Model and GPU catalogs: computed parameter counts hold against published totals; user extensions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rltrace.catalog import get_gpu, get_model, load_gpus, load_models
from rltrace.errors import ConfigError

MODELS = sorted(load_models())


def test_catalog_has_the_models_replay_needs() -> None:
    need = {"Llama-2-7B", "Llama-2-70B", "Llama-3-8B", "Llama-3-70B", "Qwen2.5-7B", "Qwen2.5-14B",
            "Qwen2.5-32B", "Qwen2.5-72B", "Qwen3-8B", "Qwen3-14B", "Qwen3-32B"}
    assert need <= set(MODELS)
    assert {"H100", "H800", "H20", "H200", "A100", "B200"} <= set(load_gpus())


@pytest.mark.parametrize("name", MODELS)
def test_computed_params_match_published_totals(name: str) -> None:
    spec = get_model(name)
    assert spec.published_params is not None and spec.source
    assert abs(spec.params / spec.published_params - 1) < 0.01


@pytest.mark.parametrize(
    ("name", "kv_bytes"),
    [("Llama-2-7B", 2 * 32 * 32 * 128 * 2), ("Qwen2.5-7B", 2 * 28 * 4 * 128 * 2), ("Qwen3-32B", 2 * 64 * 8 * 128 * 2)],
)
def test_kv_cache_bytes_per_token(name: str, kv_bytes: int) -> None:
    assert get_model(name).kv_bytes_per_token == kv_bytes


def test_lookups_are_case_insensitive_and_errors_list_the_known_names() -> None:
    assert get_gpu("h100").name == "H100"
    assert get_model("qwen2.5-7b").name == "Qwen2.5-7B"
    with pytest.raises(ConfigError, match=r"unknown GPU kind 'V100' \(known: A100, A800, B200, GB200"):
        get_gpu("V100")


def test_user_toml_extends_and_overrides(tmp_path: Path) -> None:
    extra = tmp_path / "mine.toml"
    extra.write_text(
        '[gpus.MI300X]\nbf16_tflops = 1307.4\nhbm_gbps = 5300\nmemory_gb = 192\nnvlink_gbps = 896\n'
        '[models.Tiny]\nhidden = 128\nlayers = 2\nheads = 2\nkv_heads = 2\nintermediate = 256\nvocab = 1000\n'
    )
    assert get_gpu("MI300X", extra).memory_gb == 192
    assert get_gpu("MI300X", extra).memory_bytes == 0.99 * 192 * 2**30  # no total given: 0.99 x the datasheet's GiB
    assert get_model("Tiny", extra).params == 2 * (4 * 128 * 128 + 3 * 128 * 256 + 2 * 128) + 2 * 1000 * 128 + 128
    bad = tmp_path / "bad.toml"
    bad.write_text("[gpus.X]\nbf16_tflops = -1\nhbm_gbps = 1\nmemory_gb = 1\nnvlink_gbps = 1\n")
    with pytest.raises(ConfigError, match="bf16_tflops must be a positive number"):
        load_gpus(bad)
    bad.write_text('[gpus.X]\nbf16_tflops = 1\nhbm_gbps = 1\nmemory_gb = 1\nnvlink_gbps = 1\nnccl_arch = "kepler"\n')
    with pytest.raises(ConfigError, match="nccl_arch must be empty or one of volta, ampere, hopper, blackwell"):
        load_gpus(bad)
    assert {get_gpu(g).nccl_arch for g in ("H100", "H800", "H20", "H200")} == {"hopper"}
    assert (get_gpu("A100").nccl_arch, get_gpu("B200").nccl_arch) == ("ampere", "blackwell")
    bad.write_text('[gpus.X]\nbf16_tflops = 1\nhbm_gbps = 1\nmemory_gb = 1\nnvlink_gbps = 1\nmemory_total_mib = -1\n')
    with pytest.raises(ConfigError, match="memory_total_mib must be a number >= 0"):
        load_gpus(bad)
    bad.write_text("[models.X]\nhiden = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'hiden'"):
        load_models(bad)
    bad.write_text("not = [toml")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_models(bad)


def test_hugging_face_config_json(tmp_path: Path) -> None:
    cfg = {
        "_name_or_path": "Qwen/Qwen2.5-7B", "model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
        "tie_word_embeddings": False,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert get_model(str(path)).params == get_model("Qwen2.5-7B").params
    path.write_text(json.dumps({"hidden_size": 1}))
    with pytest.raises(ConfigError, match="missing key 'num_hidden_layers'"):
        get_model(str(path))


MOE_CONFIG = {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 4,
              "intermediate_size": 6144, "vocab_size": 151936, "num_experts": 64, "num_experts_per_tok": 4,
              "moe_intermediate_size": 768}


@pytest.mark.parametrize(("change", "message"), [
    ({"num_experts": -4}, "num_experts must be an integer >= 0, got -4"),
    ({"num_experts_per_tok": 65}, "num_experts_per_tok (65) must be at most num_experts (64)"),
    ({"moe_intermediate_size": 0}, "moe_intermediate_size must be an integer >= 1, got 0"),
    ({"mlp_only_layers": [100]}, "mlp_only_layers must list layer indices 0..23, got [100]"),
    ({"mlp_only_layers": list(range(24))}, "num_experts 64, but first_k_dense_replace, mlp_only_layers"),
    ({"num_key_value_heads": 64}, "num_key_value_heads (64) must divide num_attention_heads (32)"),
    ({"num_attention_heads": 30}, "num_key_value_heads (4) must divide num_attention_heads (30)"),
    ({"num_hidden_layers": "24"}, "num_hidden_layers must be an integer >= 1, got '24'"),
    ({"kv_lora_rank": -1}, "kv_lora_rank must be an integer >= 0, got -1"),
    ({"kv_lora_rank": 512}, "missing key 'qk_rope_head_dim'"),
    ({"n_shared_experts": -1}, "n_shared_experts must be an integer >= 0, got -1"),
    ({"quantization_config": "fp8"}, "quantization_config must be an object, got 'fp8'"),
    ({"quantization_config": {"quant_method": "awq", "bits": 4}}, "quant_method 'awq' is not priced"),
    ({"quantization_config": {"quant_method": "mxfp4"}}, "quant_method 'mxfp4' is not priced"),
    ({"quantization_config": {"quant_method": "compressed-tensors",
                              "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}}},
     "quant_method 'compressed-tensors' is not priced"),
])
def test_a_config_json_no_model_can_have_names_its_key(tmp_path: Path, change: dict, message: str) -> None:
    """What a config.json cannot mean is refused in the config's own key names, not read as another model."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MOE_CONFIG, **change}))
    with pytest.raises(ConfigError) as refused:
        get_model(str(path))
    assert message in str(refused.value) and str(path) in str(refused.value)
    path.write_text(json.dumps(MOE_CONFIG))  # the same config, unchanged, is an MoE of 64 experts
    assert (get_model(str(path)).experts, get_model(str(path)).experts_per_token) == (64, 4)


@pytest.mark.parametrize("quant", [
    {"quant_method": "fp8", "fmt": "e4m3"},
    {"quant_method": "fbgemm_fp8"},
    {"quant_method": "modelopt", "quant_algo": "FP8"},
    {"quant_method": "compressed-tensors",
     "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}, "input_activations": None}}},
    {},
])
def test_fp8_weights_are_read_from_every_fp8_scheme(tmp_path: Path, quant: dict) -> None:
    """The FP8 schemes vLLM loads price weights at one byte; no quantization_config prices them at two."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MOE_CONFIG, "quantization_config": quant}))
    assert get_model(str(path)).dtype_bytes == (1 if quant else 2)


def test_every_gpu_has_a_price_with_its_source() -> None:
    from rltrace.catalog import load_gpus

    for name, gpu in load_gpus().items():
        assert gpu.usd_per_hour > 0 and gpu.price_source, name


def test_a_stray_top_level_key_in_a_user_catalog_is_an_error(tmp_path) -> None:
    from rltrace.catalog import load_gpus
    from rltrace.errors import ConfigError

    bad = tmp_path / "mine.toml"
    bad.write_text('usd_per_hour = 2.0\n[gpus.X1]\nbf16_tflops = 1\nhbm_gbps = 1\nmemory_gb = 1\nnvlink_gbps = 1\n')
    with pytest.raises(ConfigError, match="unexpected top-level key 'usd_per_hour'"):
        load_gpus(bad)


@pytest.mark.parametrize(("gpu", "mib"), [
    ("H100", 81_106), ("H200", 143_156), ("A100", 81_158), ("B200", 182_642), ("H20", 97_285),  # CUDA's, cited
    ("H800", 0.99 * 80 * 1024),  # no citable total: 0.99 x the datasheet's GB read in GiB
])
def test_gpu_memory_is_cudas_total_not_the_datasheets_gb(gpu: str, mib: float) -> None:
    spec = get_gpu(gpu)
    assert spec.memory_bytes == pytest.approx(mib * 2**20, rel=1e-12)
    assert bool(spec.memory_total_source) == bool(spec.memory_total_mib)
    # the fallback's premise: every cited total is within 0.2% of 0.99 x its datasheet figure read in GiB
    assert spec.memory_bytes / (spec.memory_gb * 2**30) == pytest.approx(0.99, abs=0.002)


def test_every_sm_figure_carries_its_source_and_bad_ones_are_refused(tmp_path) -> None:
    from rltrace.catalog import load_gpus
    from rltrace.errors import ConfigError

    for name, gpu in load_gpus().items():
        assert (gpu.sm_count > 0) == bool(gpu.sm_source), name  # a figure, then its source
    assert (get_gpu("B200").sm_count, get_gpu("B200").sm_clock_mhz) == (148, 1965)
    assert get_gpu("H20").sm_cycles_per_s == 0  # 78 SMs cited, no clock: the network model's HBM rule
    for name, gpu in load_gpus().items():  # the fused-MoE kernel's share of the peak, then its kernel table
        assert (gpu.moe_compute_efficiency > 0) == bool(gpu.moe_source) == (gpu.moe_half_width > 0), name
        assert (gpu.moe_fixed_us > 0) == (gpu.moe_stream_efficiency > 0) == bool(gpu.moe_source), name
    h800, h100 = get_gpu("H800"), get_gpu("H100")  # the same die
    assert (h800.moe_compute_efficiency, h800.moe_half_width) == (h100.moe_compute_efficiency, h100.moe_half_width)
    base = "[gpus.X1]\nbf16_tflops = 1\nhbm_gbps = 1\nmemory_gb = 1\nnvlink_gbps = 1\n"
    for line, message in (("sm_count = 1.5", "sm_count must be a whole number"),
                          ("sm_count = true", "sm_count must be a whole number"),
                          ("sm_clock_mhz = -1", "sm_clock_mhz must be a number >= 0"),
                          ("moe_compute_efficiency = 1.5", r"moe_compute_efficiency must be in \[0, 1\]"),
                          ("moe_compute_efficiency = true", r"moe_compute_efficiency must be in \[0, 1\]"),
                          ("moe_half_width = -8", "moe_half_width must be a number >= 0"),
                          ('moe_half_width = "wide"', "moe_half_width must be a number >= 0"),
                          ("moe_fixed_us = -1", "moe_fixed_us must be a number >= 0"),
                          ("moe_stream_efficiency = 1.2", r"moe_stream_efficiency must be in \[0, 1\]"),
                          ("moe_fixed_us = 30", "moe_fixed_us and moe_stream_efficiency come together")):
        bad = tmp_path / "mine.toml"
        bad.write_text(base + line + "\n")
        with pytest.raises(ConfigError, match=message):
            load_gpus(bad)
