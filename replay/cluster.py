"""The hardware a replay may use: pool sizes, GPU kinds, TP, batch limits (a scheduler lays it out)."""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.catalog import get_gpu
from rltrace.errors import ConfigError
from rltrace.limits import MAX_GPUS


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """GPUs for generation and training (disaggregated schedulers use both pools; colocated ones their sum)."""

    gen_gpus: int
    train_gpus: int
    gen_gpu: str
    train_gpu: str
    tp: int = 1
    max_seqs: int = 256
    """vLLM's max_num_seqs per instance"""
    price_per_gpu_hour: dict[str, float] | None = None
    """$/GPU-hour by GPU kind (the catalog's when None)"""

    def __post_init__(self) -> None:
        if self.gen_gpus < 1 or self.train_gpus < 1:
            raise ConfigError(f"pools need at least one GPU each, got {self.gen_gpus} generation and "
                              f"{self.train_gpus} training GPUs")
        if max(self.gen_gpus, self.train_gpus) > MAX_GPUS:  # a recorded pool may be larger than --gen-gpus allows
            raise ConfigError(f"pools of {self.gen_gpus:,} generation and {self.train_gpus:,} training GPUs: above "
                              f"the limit of {MAX_GPUS:,} GPUs in a pool")
        if self.tp < 1 or self.gen_gpus % self.tp:
            raise ConfigError(f"{self.gen_gpus} generation GPUs do not split into instances of tp {self.tp}")
        if self.max_seqs < 1:
            raise ConfigError(f"max_seqs must be >= 1, got {self.max_seqs}")

    @property
    def instances(self) -> int:
        return self.gen_gpus // self.tp

    def usd_per_gpu_hour(self, gpu: str) -> float:
        """The price of one ``gpu`` per hour: ``price_per_gpu_hour``'s, else the catalog's, else 0 ("cpu" or
        an uncatalogued device)."""
        prices = self.price_per_gpu_hour or {}
        if gpu in prices:
            return prices[gpu]
        try:
            return get_gpu(gpu).usd_per_hour
        except ConfigError:
            return 0.0
