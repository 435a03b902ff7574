"""Accelerator catalog: datasheet figures (see ``gpus.toml`` for each source), extendable from TOML."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from rltrace.catalog._toml import build_entry, load_catalog, load_toml, lookup
from rltrace.errors import ConfigError

NCCL_ARCHS = ("", "volta", "ampere", "hopper", "blackwell")
MEMORY_TOTAL_RATIO = 0.99
"""CUDA's device total over the datasheet's GB read in GiB: H100 0.990, H20 0.990, A100 0.991, B200 0.991, H200 0.992"""


@dataclass(frozen=True, kw_only=True, slots=True)
class GPUSpec:
    """One accelerator kind; units in the field names."""

    name: str
    bf16_tflops: float
    hbm_gbps: float
    memory_gb: float
    nvlink_gbps: float
    nvls_efficiency: float = 0.0
    """share of NVLink bandwidth NVLink SHARP reaches (NCCL's nvlsEfficiency; 0: no NVLS)"""
    nvlink_domain: int = 8
    """GPUs one NVLink switch fabric joins (an HGX baseboard: 8; a GB200 NVL72 rack: 72)"""
    source: str = ""
    usd_per_hour: float = 0.0
    """on-demand rental price of one GPU (0: unknown)"""
    price_source: str = ""
    host_link_gbps: float = 0.0
    """host interface (PCIe) bandwidth per direction in GB/s, the datasheet's figure (0: unknown)"""
    host_link_source: str = ""
    memory_total_mib: float = 0.0
    """device memory as CUDA reports it (MiB; ``torch.cuda.get_device_properties(0).total_memory``): what vLLM's
    ``gpu_memory_utilization`` multiplies (0: unknown, then 0.99 x ``memory_gb`` GiB, the ratio of every cited total)"""
    memory_total_source: str = ""
    fp8_tflops: float = 0.0
    """dense (no sparsity) FP8 tensor-core TFLOP/s (0: no FP8 tensor cores; FP8 weights then run at BF16 rate)"""
    nccl_arch: str = ""
    """the row of NCCL's per-architecture tuner tables the part takes (volta, ampere, hopper, blackwell; "": none,
    its per-channel bandwidth ceilings are then not applied)"""
    sm_count: int = 0
    """streaming multiprocessors CUDA exposes (deviceQuery's "Multiprocessors"; 0: unknown)"""
    sm_clock_mhz: float = 0.0
    """maximum SM clock, MHz (deviceQuery's "GPU Max Clock rate"; 0: unknown)"""
    sm_source: str = ""
    """where ``sm_count`` and ``sm_clock_mhz`` come from (program output or a document, cited)"""
    moe_compute_efficiency: float = 0.0
    """the ceiling of the rate the serving engine's fused-MoE kernel computes at when compute-bound, as a fraction of
    the part's FP8 peak (BF16's on a part without FP8 cores) whatever the experts' type (the public kernel tables'
    block-FP8 rows, BF16 rows on the A100: benchmarks/moe_kernel_efficiency.py); 0: unknown, the routed experts'
    GEMMs then take the cost model's compute efficiency like every other GEMM"""
    moe_half_width: float = 0.0
    """the expert width on one rank (``expert_intermediate / tp``; whole experts under expert parallelism) at which the
    fused-MoE kernel reaches half its ceiling: its rate is ``ceiling x w / (w + moe_half_width)`` of that peak (0:
    the ceiling at every width)"""
    moe_fixed_us: float = 0.0
    """GPU time of one fused-MoE layer beyond its weight reads, in a CUDA graph: routing from the router's logits,
    align and permute, the activations' quantization, the two grouped GEMMs' fill, the weighted sum (0: unknown,
    the routed experts are then priced as two GEMMs and three elementwise floors)"""
    moe_stream_efficiency: float = 0.0
    """fraction of HBM bandwidth the fused-MoE kernel reads the touched experts' weights at when memory-bound (each
    touched expert sees about one token); with ``moe_fixed_us`` from the same public table: both or neither"""
    moe_source: str = ""

    @property
    def flops(self) -> float:
        """Peak dense BF16 FLOP/s."""
        return self.bf16_tflops * 1e12

    def flops_for(self, weight_bytes: int) -> float:
        """Peak dense FLOP/s of GEMMs on weights of ``weight_bytes`` bytes per element.

        1 byte means FP8, at the part's FP8 peak where it has one.
        """
        return self.fp8_tflops * 1e12 if weight_bytes == 1 and self.fp8_tflops > 0 else self.flops

    def moe_flops(self, width: float) -> float | None:
        """FLOP/s of the fused-MoE kernel's grouped GEMMs on experts ``width`` wide on each rank, when compute-bound
        (None: the catalog has no figure for the part)."""
        if not self.moe_compute_efficiency:
            return None
        share = width / (width + self.moe_half_width) if width > 0 else 1.0
        return self.flops_for(1) * self.moe_compute_efficiency * share

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes as CUDA reports it: the catalog's cited total, else 0.99 x the datasheet's GB read
        in GiB (each cited H100, H200, H20, A100 and B200 total is within 0.2% of that)."""
        return self.memory_total_mib * 2**20 if self.memory_total_mib else MEMORY_TOTAL_RATIO * self.memory_gb * 2**30

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbps * 1e9

    @property
    def sm_cycles_per_s(self) -> float:
        """SMs x their maximum clock, cycles per second (0: either unknown)."""
        return self.sm_count * self.sm_clock_mhz * 1e6

    @property
    def host_link_bytes_per_s(self) -> float:
        """Host interface bandwidth per direction, bytes/s (0: unknown)."""
        return self.host_link_gbps * 1e9


def _spec(name: str, raw: dict[str, Any], where: str) -> GPUSpec:
    spec = build_entry(GPUSpec, name, raw, where, "gpu")
    for key in ("bf16_tflops", "hbm_gbps", "memory_gb", "nvlink_gbps"):
        value = getattr(spec, key)
        if not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"{where}: gpu {name!r}: {key} must be a positive number")
    if not isinstance(spec.nvls_efficiency, (int, float)) or not 0 <= spec.nvls_efficiency <= 1:
        raise ConfigError(f"{where}: gpu {name!r}: nvls_efficiency must be in [0, 1]")
    if not isinstance(spec.fp8_tflops, (int, float)) or spec.fp8_tflops < 0:
        raise ConfigError(f"{where}: gpu {name!r}: fp8_tflops must be a number >= 0")
    if spec.nccl_arch not in NCCL_ARCHS:
        raise ConfigError(f"{where}: gpu {name!r}: nccl_arch must be empty or one of {', '.join(NCCL_ARCHS[1:])}")
    if not isinstance(spec.memory_total_mib, (int, float)) or spec.memory_total_mib < 0:
        raise ConfigError(f"{where}: gpu {name!r}: memory_total_mib must be a number >= 0")
    if isinstance(spec.sm_count, bool) or not isinstance(spec.sm_count, int) or spec.sm_count < 0:
        raise ConfigError(f"{where}: gpu {name!r}: sm_count must be a whole number >= 0")
    if isinstance(spec.sm_clock_mhz, bool) or not isinstance(spec.sm_clock_mhz, (int, float)) or spec.sm_clock_mhz < 0:
        raise ConfigError(f"{where}: gpu {name!r}: sm_clock_mhz must be a number >= 0")
    moe = spec.moe_compute_efficiency
    if isinstance(moe, bool) or not isinstance(moe, (int, float)) or not 0 <= moe <= 1:
        raise ConfigError(f"{where}: gpu {name!r}: moe_compute_efficiency must be in [0, 1]")
    if not isinstance(spec.moe_fixed_us, (int, float)) or isinstance(spec.moe_fixed_us, bool) or spec.moe_fixed_us < 0:
        raise ConfigError(f"{where}: gpu {name!r}: moe_fixed_us must be a number >= 0")
    stream = spec.moe_stream_efficiency
    if isinstance(stream, bool) or not isinstance(stream, (int, float)) or not 0 <= stream <= 1:
        raise ConfigError(f"{where}: gpu {name!r}: moe_stream_efficiency must be in [0, 1]")
    if (spec.moe_fixed_us > 0) != (stream > 0):  # one without the other would silently keep the two-GEMM pricing
        raise ConfigError(f"{where}: gpu {name!r}: moe_fixed_us and moe_stream_efficiency come together (both or "
                          "neither)")
    half = spec.moe_half_width
    if isinstance(half, bool) or not isinstance(half, (int, float)) or half < 0:
        raise ConfigError(f"{where}: gpu {name!r}: moe_half_width must be a number >= 0")
    if not isinstance(spec.host_link_gbps, (int, float)) or spec.host_link_gbps < 0:
        raise ConfigError(f"{where}: gpu {name!r}: host_link_gbps must be a number >= 0")
    return spec


_BUILTIN = Path(__file__).with_name("gpus.toml")
_FUSED_MOE = Path(__file__).with_name("fused_moe.toml")


@cache
def _fused_moe() -> dict[str, dict[str, Any]]:
    """The fitted fused-MoE figures by GPU kind (fused_moe.toml)."""
    data = load_toml(_FUSED_MOE)
    if not isinstance(data.get("version"), int):
        raise ConfigError(f"{_FUSED_MOE}: needs an integer version")
    return dict(data.get("gpus") or {})


def _entry(name: str, raw: dict[str, Any], where: str) -> GPUSpec:
    """A GPU kind; a built-in one with its fitted fused-MoE figures merged in (a user's table is taken as given)."""
    fitted = _fused_moe().get(name, {}) if where == str(_BUILTIN) else {}
    return _spec(name, {**fitted, **raw}, where)


def load_gpus(extra: str | Path | None = None) -> dict[str, GPUSpec]:
    """Built-in GPUs plus (overriding by name) the [gpus.NAME] tables of a user TOML file."""
    if extra is None:
        return dict(_builtin())
    return load_catalog(_BUILTIN, "gpus", extra, _entry)


@cache
def _builtin() -> dict[str, GPUSpec]:
    return load_catalog(_BUILTIN, "gpus", None, _entry)


def get_gpu(name: str, extra: str | Path | None = None) -> GPUSpec:
    """Look a GPU kind up by name, case-insensitively."""
    return lookup(load_gpus(extra), name, "GPU kind")
