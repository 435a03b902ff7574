"""A model's real kernels at replayed shapes: decode and prefill iterations, and training steps.

One transformer layer of the model's own shapes (QKV, output, gate/up and down projections; attention with
its KV heads) runs ``layers`` times per measurement; times are per kernel kind and scaled to the model's
full depth by ``model.layers / layers`` (the scale factor is reported). Decode attends one query per
sequence to a KV cache of the sequence's context; prefill runs causal attention per prompt; a training step
is forward and backward of the layers (autograd), over at most ``max_tokens`` tokens at once and scaled
linearly in tokens beyond that.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from rltrace.replay.execute.timer import measure

from rltrace.catalog import ModelSpec
from rltrace.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Timed:
    """Seconds for the whole model (scaled to its depth), per kernel kind."""

    gemm_s: float
    attention_s: float

    @property
    def seconds(self) -> float:
        return self.gemm_s + self.attention_s


def require_device(device: str) -> None:
    """Refuse a device this machine lacks (one line, before any work)."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device cuda: no CUDA device here (torch {torch.__version__})")


def layer_weight_bytes(model: ModelSpec, device: str) -> int:
    """Bytes of one layer's weights as :class:`ModelKernels` holds them on ``device`` (float32 on CPU, bf16 on
    CUDA): QKV, output, gate/up and down projections."""
    m, hd = model, model.dim_head
    elements = (m.hidden * (m.heads + 2 * m.kv_heads) * hd + m.heads * hd * m.hidden + m.hidden * 2 * m.intermediate
                + m.intermediate * m.hidden)
    return elements * _dtype_bytes(device)


def free_bytes(device: str) -> int | None:
    """Memory free for new tensors on ``device`` (None where it cannot be read): on CPU the machine's available
    memory, or what this process's cgroup (a container's limit) leaves, whichever is less."""
    if device.startswith("cuda"):
        try:
            return int(torch.cuda.mem_get_info()[0])
        except RuntimeError:  # a device held in exclusive mode, say: the allocation itself will tell
            return None
    found = [kib * 1024 for kib in _meminfo_available_kib()] + _cgroup_left()
    return min(found) if found else None


def _meminfo_available_kib() -> list[int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return [int(line.split()[1]) for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        return []


def _cgroup_left() -> list[int]:
    """Bytes this process's cgroup (v2) may still use, where it sets a limit."""
    try:
        groups = Path("/proc/self/cgroup").read_text(encoding="ascii").splitlines()
        relative = next(line.split(":", 2)[2] for line in groups if line.startswith("0::"))
        folder = Path("/sys/fs/cgroup") / relative.lstrip("/")
        limit = (folder / "memory.max").read_text(encoding="ascii").strip()
        used = int((folder / "memory.current").read_text(encoding="ascii"))
    except (OSError, StopIteration, ValueError, IndexError):
        return []
    return [] if limit == "max" else [max(int(limit) - used, 0)]


def decode_kv_bytes(model: ModelSpec, device: str, batch: int, context: int) -> int:
    """Bytes of the keys and values one decode iteration of ``batch`` sequences at ``context`` cached tokens attends
    to, as :meth:`ModelKernels.decode` holds them on ``device`` (one layer's, reused for every layer)."""
    return 2 * batch * model.kv_heads * max(context, 1) * model.dim_head * _dtype_bytes(device)


def _dtype_bytes(device: str) -> int:
    return 2 if device.startswith("cuda") else 4


def max_tokens_of(device: str) -> int:
    """Tokens one prefill or training kernel call takes at most on ``device`` (longer work is timed by parts)."""
    return 8192 if device.startswith("cuda") else 512


def peak_bytes(model: ModelSpec, device: str, layers: int = 1, decode: tuple[int, int] | None = None, *,
               train: bool = True, tokens: int | None = None) -> dict[str, int]:
    """An estimate of the memory each kind of kernel :class:`ModelKernels` runs holds at its peak on ``device``,
    by kind: with ``train``, a training step (weights, their copies and gradients, and every measured layer's
    activations kept for the backward pass, twice for their gradients); a prefill (one layer's activations); and
    with ``decode`` (batch, context), a decode iteration (its keys and values); each beside one layer's weights.
    ``tokens``: the most one call takes (None: :func:`max_tokens_of` the device)."""
    m, one, tokens = model, layer_weight_bytes(model, device), tokens or max_tokens_of(device)
    per_token = ((m.heads + 2 * m.kv_heads) * m.dim_head + 2 * m.heads * m.dim_head + 3 * m.hidden
                 + 4 * m.intermediate) * _dtype_bytes(device)
    peaks = {"a prefill": one + tokens * per_token}
    if train:
        peaks["a training step"] = 3 * one + 2 * max(1, min(layers, m.layers)) * tokens * per_token
    if decode is not None:
        batch, context = decode
        peaks[f"a decode iteration of {batch} sequences at {context:,} tokens of context"] = (
            one + decode_kv_bytes(model, device, batch, context))
    return peaks


def check_fits(model: ModelSpec, device: str, layers: int = 1, decode: tuple[int, int] | None = None, *,
               train: bool = True, tokens: int | None = None) -> None:
    """Refuse, before any work, kernels of ``model`` that would not fit in ``device``'s free memory
    (:func:`peak_bytes`, with the same arguments): the allocation would fail, or swap for minutes, after the whole
    replay."""
    free = free_bytes(device)
    if free is None:
        return
    peaks = peak_bytes(model, device, layers, decode, train=train, tokens=tokens)
    what, need = max(peaks.items(), key=lambda item: item[1])
    if need > free:
        one = layer_weight_bytes(model, device)
        raise ConfigError(f"one layer of {model.name} holds {one / 1e9:,.1f} GB of weights on {device}, and "
                          f"{what} needs about {need / 1e9:,.1f} GB: {device} has {free / 1e9:,.1f} GB free")


class ModelKernels:
    """Weights of ``layers`` layers of ``model`` on ``device``; timing of its kernels at given shapes."""

    def __init__(self, model: ModelSpec, device: str = "cpu", layers: int = 1, max_tokens: int | None = None) -> None:
        self.model, self.device, self.layers = model, device, max(1, min(layers, model.layers))
        self.dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        self.max_tokens = max_tokens or max_tokens_of(device)
        require_device(device)
        m = model
        self.hd = m.dim_head
        self.w_qkv = self._randn(m.hidden, (m.heads + 2 * m.kv_heads) * self.hd) * 0.02
        self.w_o = self._randn(m.heads * self.hd, m.hidden) * 0.02
        self.w_gu = self._randn(m.hidden, 2 * m.intermediate) * 0.02
        self.w_d = self._randn(m.intermediate, m.hidden) * 0.02

    def _randn(self, *shape: int) -> torch.Tensor:
        """Random values of ``shape`` on this device, in the kernels' dtype."""
        return torch.randn(*shape, device=self.device, dtype=self.dtype)

    @property
    def scale(self) -> float:
        """Measured layers -> the model's layers."""
        return self.model.layers / self.layers

    def _mlp_and_projections(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The layers' GEMMs on input rows ``x``; ``h`` stands for the attention's output (random values made
        outside the timing: an uninitialised buffer's NaNs and denormals made a CPU GEMM up to 400x slower)."""
        for _ in range(self.layers):
            x @ self.w_qkv
            x = h @ self.w_o
            gu = x @ self.w_gu
            x = F.silu(gu[:, : self.model.intermediate]) * gu[:, self.model.intermediate:] @ self.w_d
        return x

    def decode(self, batch: int, context: int) -> Timed:
        """One decode iteration of ``batch`` sequences, each attending to ``context`` cached tokens."""
        m = self.model
        x = self._randn(batch, m.hidden)
        q = self._randn(batch, m.heads, 1, self.hd)
        k = self._randn(batch, m.kv_heads, max(context, 1), self.hd)
        v = torch.randn_like(k)
        gqa = m.heads != m.kv_heads

        def attention() -> None:
            for _ in range(self.layers):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

        h = self._randn(batch, m.heads * self.hd)
        gemm = measure(lambda: self._mlp_and_projections(x, h), self.device)
        att = measure(attention, self.device)
        return Timed(gemm * self.scale, att * self.scale)

    def attention_only(self, batch: int, context: int) -> float:
        """Seconds of one layer's decode attention alone (calibration grids)."""
        m = self.model
        q = self._randn(batch, m.heads, 1, self.hd)
        k = self._randn(batch, m.kv_heads, max(context, 1), self.hd)
        v = torch.randn_like(k)
        return measure(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=m.heads != m.kv_heads), self.device)

    def prefill(self, tokens: int, prompts: int = 1) -> Timed:
        """One prefill of ``prompts`` prompts holding ``tokens`` tokens together (causal attention each)."""
        m = self.model
        chunk = min(tokens, self.max_tokens)
        per = max(1, chunk // max(prompts, 1))
        x = self._randn(chunk, m.hidden)
        q = self._randn(max(1, chunk // per), m.heads, per, self.hd)
        k = self._randn(q.shape[0], m.kv_heads, per, self.hd)
        gqa = m.heads != m.kv_heads

        def attention() -> None:
            for _ in range(self.layers):
                F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=gqa)

        factor = self.scale * tokens / chunk
        h = self._randn(chunk, m.heads * self.hd)
        return Timed(measure(lambda: self._mlp_and_projections(x, h), self.device) * factor,
                     measure(attention, self.device) * factor)

    def train(self, tokens: int, sequence: int = 1024) -> Timed:
        """Forward and backward of a training step over ``tokens`` tokens in sequences of ``sequence``."""
        m = self.model
        chunk = min(tokens, self.max_tokens)
        seq = max(1, min(sequence, chunk))
        weights = [w.detach().clone().requires_grad_(True) for w in (self.w_qkv, self.w_o, self.w_gu, self.w_d)]
        x0 = self._randn(chunk // seq * seq or seq, m.hidden)
        gqa = m.heads != m.kv_heads

        def step(attend: bool) -> None:
            x = x0
            w_qkv, w_o, w_gu, w_d = weights
            for _ in range(self.layers):
                qkv = x @ w_qkv
                if attend:
                    q = qkv[:, : m.heads * self.hd].reshape(-1, seq, m.heads, self.hd).transpose(1, 2)
                    kv = qkv[:, m.heads * self.hd:].reshape(-1, seq, 2 * m.kv_heads, self.hd).transpose(1, 2)
                    a = F.scaled_dot_product_attention(q, kv[:, : m.kv_heads], kv[:, m.kv_heads:], is_causal=True,
                                                       enable_gqa=gqa)
                    h = a.transpose(1, 2).reshape(x.shape[0], m.heads * self.hd)
                else:
                    h = qkv[:, : m.heads * self.hd]
                x = h @ w_o
                gu = x @ w_gu
                x = (F.silu(gu[:, : m.intermediate]) * gu[:, m.intermediate:]) @ w_d
            x.float().sum().backward()

        factor = self.scale * tokens / x0.shape[0]
        total = measure(lambda: step(True), self.device, warmup=1, repeat=3)
        gemm = measure(lambda: step(False), self.device, warmup=1, repeat=3)
        return Timed(gemm * factor, max(total - gemm, 0.0) * factor)
