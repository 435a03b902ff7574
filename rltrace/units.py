"""Units every layer shares: bytes per element by dtype name, and the bus factors of collectives.

One table and one function, so that the cost models, the network model, the importers and the synthetic-trace
generator agree on them. A module that accepts only some dtype names (a validation set's ``weight_dtype``, the
NCCL dtypes a measured table states) names those it accepts and reads their sizes here.
"""

from __future__ import annotations

DTYPE_BYTES: dict[str, int] = {
    # short names (configs, CLI flags, validation sets)
    "fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1,
    # torch / Hugging Face names ("torch_dtype": "bfloat16")
    "float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int64": 8, "int32": 4, "int16": 2, "uint8": 1, "bool": 1,
    # C/C++ names as profilers and NCCL write them ("float", "c10::BFloat16", "long int", nccl-tests' "half")
    "double": 8, "float": 4, "half": 2, "c10::bfloat16": 2, "c10::half": 2, "int": 4, "long": 8, "long int": 8,
    "short": 2, "char": 1, "signed char": 1, "byte": 1, "unsigned char": 1,
}
"""bytes per element, by every dtype name the project reads (lower case)"""

BUS_FACTORS = {"all_reduce": ("ring", 2.0), "all_gather": ("ring", 1.0), "reduce_scatter": ("ring", 1.0),
               "all_to_all": ("ring", 1.0), "broadcast": ("one", 1.0)}
"""per collective: whether each rank moves a ``(n - 1) / n`` share of the buffer once per pass ("ring") or the
whole buffer once ("one"), and the passes (nccl-tests' doc/PERFORMANCE.md)"""


def dtype_bytes(name: str) -> int | None:
    """Bytes per element of the dtype ``name`` (any case, surrounding blanks ignored), or None for an unknown one."""
    return DTYPE_BYTES.get(name.strip().lower())


def bus_factor(op: str, n: int) -> float:
    """What one rank sends (and receives) per byte of the collective's buffer over ``n`` ranks: ``2 (n - 1) / n``
    for an all-reduce, ``(n - 1) / n`` for an all-gather, reduce-scatter or all-to-all, 1 for a broadcast
    (nccl-tests' bus bandwidth = algorithm bandwidth x this factor). ``op`` outside those: KeyError."""
    kind, passes = BUS_FACTORS[op]
    return passes if kind == "one" else passes * (n - 1) / n if n > 0 else 0.0
