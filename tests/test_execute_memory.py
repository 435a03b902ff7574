"""What replay --execute and calibrate --device hold in memory, priced before any kernel runs: the estimates the
refusals rest on and the decode-attention grid a calibration leaves out for memory (no kernel runs here)."""

from __future__ import annotations

import pytest
from rltrace.replay.execute.calibrate_device import attention_grid
from rltrace.replay.execute.kernels import check_fits, decode_kv_bytes, layer_weight_bytes, peak_bytes

from rltrace.catalog import get_gpu, get_model
from rltrace.errors import ConfigError


def test_a_decode_iterations_keys_and_values_count_against_free_memory() -> None:
    """The decode kernel holds one layer's keys and values for its batch and context: 2 x batch x kv heads x
    context x head size values (float32 on CPU), beside one layer's weights."""
    spec = get_model("Qwen2.5-72B")
    kv = 2 * 4096 * spec.kv_heads * 131072 * spec.dim_head * 4
    assert decode_kv_bytes(spec, "cpu", 4096, 131072) == kv  # 4.4 TB: no machine running these tests has it
    peaks = peak_bytes(spec, "cpu", decode=(4096, 131072))
    assert peaks["a decode iteration of 4096 sequences at 131,072 tokens of context"] == (
        kv + layer_weight_bytes(spec, "cpu"))
    with pytest.raises(ConfigError, match=r"a decode iteration of 4096 sequences at 131,072 tokens of context "
                                          r"needs about 4,4\d\d\.\d GB: cpu has"):
        check_fits(spec, "cpu", decode=(4096, 131072))


def test_calibrations_attention_grid_leaves_out_what_does_not_fit_and_says_so() -> None:
    """A 72B's largest grid shape holds 17.2 GB of keys and values in float32: measured on a 16 GB machine, it
    would swap or be killed. The grid leaves out what does not fit beside one layer's weights, one line each."""
    spec, cpu = get_model("Qwen2.5-72B"), get_gpu("H100")
    everything = attention_grid(spec, "cpu", cpu, None)
    assert (256, 8192) in everything
    free = layer_weight_bytes(spec, "cpu") + decode_kv_bytes(spec, "cpu", 128, 8192)
    said: list[str] = []
    kept = attention_grid(spec, "cpu", cpu, free, said.append)
    assert kept == [(b, c) for b, c in everything if b * c <= 128 * 8192]
    assert len(said) == len(everything) - len(kept) and all("GB free" in line for line in said)
    assert said[-1].startswith("left out decode attention at batch=256,context=8192: its keys and values hold 17.2 GB")


def test_a_calibration_prices_its_own_gemms_not_a_training_step() -> None:
    """calibrate --device never trains, yet was refused on a training step's peak at 512 tokens while its GEMMs
    run 1,024 rows on a CPU: it prices the prefill-shaped GEMM activations at the grid's largest row count."""
    spec = get_model("Qwen2.5-7B")
    calibrating = peak_bytes(spec, "cpu", train=False, tokens=1024)
    replaying = peak_bytes(spec, "cpu")
    assert set(calibrating) == {"a prefill"} and set(replaying) == {"a prefill", "a training step"}
    one = layer_weight_bytes(spec, "cpu")
    assert calibrating["a prefill"] - one == 2 * (replaying["a prefill"] - one)  # twice the rows of 512
