"""Catalogs of model architectures and accelerators, shipped as TOML with a source for every figure."""

from rltrace.catalog.gpus import GPUSpec, get_gpu, load_gpus
from rltrace.catalog.models import ModelSpec, from_info, get_model, load_models

__all__ = ["GPUSpec", "ModelSpec", "from_info", "get_gpu", "get_model", "load_gpus", "load_models"]
