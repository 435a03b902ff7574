"""Training-side durations of a step: train (forward and backward), forward-only passes, optimizer, sync.

Measured spans win when the bundle has them: they are scaled to the replay's training GPUs by count
(perfect data-parallel scaling) and kind (peak BF16 FLOP/s ratio). Without spans the step is FLOPs over
``MFU x peak``: ``6 x active params x tokens`` to train and ``2 x active params x tokens`` per forward-only
pass (reference and old-logprob); an MoE counts only the experts a token runs through. Expert parallelism
(``ep`` > 1) adds its all-to-alls (dispatch and combine, forward and backward) priced by the network model and
not overlapped: the MoE figure below is of a run that hid them behind compute (DualPipe), which an RL trainer
without that overlap does not. Weight sync without a measurement is one model copy
over the sync link.

Given the sequence length, the step also counts causal attention (``3 x`` the forward's query-key pairs: each
token attends to ``seq / 2`` earlier ones on average), which 6N leaves out and which the published MFUs below
include (Llama 3's and Megatron's FLOP counts both do). Given the precision, an FP8 run (Transformer Engine's
recipes, as Megatron-LM and Megatron-Bridge run them) does its linear layers, i.e. the 6N part, at the GPU's FP8
tensor peak (datasheet), while attention stays at the BF16 peak (TE's FP8 recipes cast only ``Linear``/
``GroupedLinear`` GEMMs; ``DotProductAttention`` runs in BF16 unless ``fp8_dpa`` is set, which those runs do not).

MFU defaults, one home (``default_mfu``, calibration entries ``dense_train_mfu``, ``dense_train_mfu_a100`` and
``moe_train_mfu``), each from a published run, of BF16 dense peak:

- dense: 0.40, Llama 3 405B on 8,192-16,384 H100s, BF16 MFU 38-43% (Llama 3 paper, arXiv 2407.21783, Table 4);
  the Hopper and Blackwell parts take it. A100: 0.52, MosaicML's FSDP runs of 7B-70B models at 2k-8k tokens on
  8-64 A100 80GB (mosaicml/llm-foundry @ 061f2c7c, ``scripts/train/benchmarking/README.md``, "A100 80GB" table:
  MFU 49-60%, median 55% with attention counted non-causally, i.e. about 52% with causal attention): the
  A100's lower FLOP/s per byte of HBM and of network lets the same software reach a higher share of its peak
  (the same table's H100 rows: 30-46%, median 40%, as Llama 3); the A800 (no published MFU) takes the A100's;
- MoE: 0.35, DeepSeek-V3 pre-training: 2.664M H800 GPU-hours for 14.8T tokens (DeepSeek-V3 technical report,
  arXiv 2412.19437, Table 1) at 6 x 37B active parameters per token is 3.29e24 FLOPs over 2.664e6 x 3,600 s x
  989.4 TFLOP/s = 0.346 of BF16 peak (its GEMMs ran in FP8; the figure is what the run achieved end to end).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from rltrace.replay.costmodels.parallel import ACTIVATION_BYTES, ep_alltoall_seconds

from rltrace.calibration import CALIBRATION, CostCalibration
from rltrace.calibration.defaults import SYNC_GBPS
from rltrace.catalog import GPUSpec, ModelSpec
from rltrace.errors import ConfigError
from rltrace.units import bus_factor

PRECISIONS = ("bf16", "fp16", "fp8")  # the linear layers' (Transformer Engine's FP8 recipes for fp8)
DENSE_MFU_BY_GPU = {"A100": "dense_train_mfu_a100", "A800": "dense_train_mfu_a100"}
"""GPU kinds with a dense MFU of their own (MosaicML's A100 table, module text): the calibration entry; others take
Llama 3's ``dense_train_mfu``. No A800 MFU is published; it takes the A100's, whose die and HBM it is, with NVLink
cut to 400 GB/s: on both ratios the module text names it sits nearer the A100 than Hopper (BF16 FLOP/s per byte/s
of HBM 153 as the A100's 153, H100 295; per byte/s of NVLink 780 against the A100's 520 and the H100's 1,099)"""


def default_mfu(model: ModelSpec | None, gpu: GPUSpec | None = None,
                calibration: CostCalibration = CALIBRATION) -> float:
    """The published MFU for ``model``'s kind (MoE or dense) on ``gpu``'s kind (see the module text)."""
    if model is not None and model.is_moe:
        return calibration["moe_train_mfu"]
    return calibration[DENSE_MFU_BY_GPU.get(gpu.name if gpu is not None else "", "dense_train_mfu")]


@dataclass(frozen=True, slots=True)
class Step:
    """One training step's time and what it is made of."""

    seconds: float
    compute_s: float
    comm_s: float
    flops: float
    alltoall_bytes: float
    """bytes every rank sends in expert-parallel all-to-alls over the step"""


def training_state_bytes(model: ModelSpec, gpus: int, calibration: CostCalibration = CALIBRATION) -> float:
    """Bytes per GPU of a fully sharded (FSDP / ZeRO-3) mixed-precision Adam trainer's state: BF16 weights plus
    ``adam_bytes_per_param`` per parameter, over ``gpus``; activations come on top."""
    return model.params * (ACTIVATION_BYTES + calibration["adam_bytes_per_param"]) / max(gpus, 1)


def attention_pairs_per_token(model: ModelSpec, seq_len: float) -> float:
    """Mean query-key pairs per token of a causal sequence of ``seq_len`` tokens (a sliding window caps them)."""
    w = model.sliding_window
    if w and w < seq_len:
        return (w * (w + 1) / 2 + (seq_len - w) * w) / seq_len
    return (seq_len + 1) / 2


def step_seconds(model: ModelSpec, gpu: GPUSpec, *, tokens: float, gpus: int, mfu: float | None = None, ep: int = 1,
                 passes: float = 3.0, seq_len: float | None = None, precision: str = "bf16",
                 calibration: CostCalibration = CALIBRATION, gpus_per_node: int | None = None) -> Step:
    """One step over ``tokens`` tokens on ``gpus`` GPUs: ``2 x passes x active params x tokens`` FLOPs (3 passes:
    forward and backward, i.e. the 6N rule; 1: a forward-only pass), plus causal attention over ``seq_len``-token
    sequences when given, at ``mfu`` (None: :func:`default_mfu`) of the BF16 peak, the linear layers at the FP8
    peak instead when ``precision`` is "fp8"; plus ``2 x passes`` all-to-alls per MoE layer across ``ep``
    expert-parallel ranks (each rank's share of the tokens sent to their top-k experts, BF16; ``gpus_per_node`` of
    them share a node's NVLink, None: the GPU kind's NVLink domain). ``calibration`` gives the MFU defaults and the
    collectives' fallback latency."""
    if precision not in PRECISIONS:
        raise ConfigError(f"training precision must be {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp8" and not gpu.fp8_tflops > 0:
        raise ConfigError(f"{gpu.name} has no FP8 tensor cores: train it in bf16")
    check_expert_parallel(model, ep, gpus)
    linear = 2.0 * passes * model.active_params * tokens
    attention = (passes * model.prefill_attention_flops_per_token * attention_pairs_per_token(model, seq_len) * tokens
                 if seq_len else 0.0)
    flops = linear + attention
    linear_peak = gpu.flops_for(1) if precision == "fp8" else gpu.flops
    achieved = gpus * (mfu or default_mfu(model, gpu, calibration))
    compute = linear / (achieved * linear_peak) + attention / (achieved * gpu.flops)
    a2a = alltoalls(model, gpu, tokens=tokens, gpus=gpus, ep=ep, passes=passes, calibration=calibration,
                    gpus_per_node=gpus_per_node)
    comm, volume = (a2a.seconds, a2a.sent_bytes) if a2a else (0.0, 0.0)
    return Step(compute + comm, compute, comm, flops, volume)


def check_expert_parallel(model: ModelSpec, ep: int, gpus: int, name: str = "ep") -> None:
    """``ep`` names expert parallelism a trainer of ``model`` on ``gpus`` GPUs can run (Megatron: the EP size divides
    the experts and the data-parallel ranks); ``name`` is the option the message names."""
    if ep < 1:
        raise ConfigError(f"{name} must be >= 1, got {ep}")
    if ep == 1:
        return
    if not model.is_moe:
        raise ConfigError(f"{name} {ep}: expert parallelism needs an MoE; {model.name} has no experts")
    if model.experts % ep:
        raise ConfigError(f"{name} {ep} must divide {model.name}'s {model.experts} experts")
    if gpus % ep:
        raise ConfigError(f"{name} {ep} must divide the {gpus} training GPUs")


def _alltoall_calls(model: ModelSpec, passes: float) -> int:
    """Expert all-to-alls of one pass over the tokens: a dispatch and a combine per MoE layer, forward (and backward
    when ``passes`` > 1)."""
    return 2 * (2 if passes > 1 else 1) * model.moe_layers


def alltoall_volume(model: ModelSpec, *, tokens: float, gpus: int, ep: int, passes: float = 3.0) -> float:
    """Bytes each of ``gpus`` ranks sends in expert-parallel all-to-alls over ``tokens`` tokens (0 for a dense model
    or ``ep`` 1): its share of the tokens, each as top-k BF16 hidden states, (ep - 1) / ep of them leaving the rank,
    once per dispatch and combine (:func:`step_seconds` prices them)."""
    if ep <= 1 or not model.is_moe:
        return 0.0
    per_message = (tokens / gpus * model.experts_per_token * model.hidden * ACTIVATION_BYTES
                   * bus_factor("all_to_all", ep))
    return _alltoall_calls(model, passes) * per_message


class AllToAll(NamedTuple):
    """One kind of expert all-to-all a training step runs, all its calls: what a network model re-times."""

    span: str
    """the trainer time it sits in: "train" (the trained tokens, forward and backward) or "forward" (the
    forward-only passes; for a described PPO job, its critic's update too, which the replay runs in that span)"""
    size_bytes: float
    """each rank's send buffer per call (nccl-tests' message size): its share of the tokens, top-k hidden states"""
    calls: int
    ranks: int
    """the expert-parallel group each call spans"""
    seconds: float
    """all calls, as :func:`step_seconds` priced them (an NVSwitch node, leaf-spine nodes past 8 GPUs), times
    ``scale``"""
    sent_bytes: float
    """all calls, the bytes leaving each rank"""
    scale: float = 1.0
    """the factor the step's price puts on the calls' network time (a described job's framework factor and pipeline
    bubble, which ``seconds`` holds): a network model's time for them takes it too"""


def alltoalls(model: ModelSpec, gpu: GPUSpec, *, tokens: float, gpus: int, ep: int,
              passes: float = 3.0, calibration: CostCalibration = CALIBRATION,
              gpus_per_node: int | None = None) -> AllToAll | None:
    """The expert all-to-alls :func:`step_seconds` prices for these arguments (None: a dense model or ``ep`` 1)."""
    if ep <= 1 or not model.is_moe:
        return None
    calls, per_rank = _alltoall_calls(model, passes), tokens / gpus
    seconds = calls * ep_alltoall_seconds(gpu, ep, per_rank, model.hidden, model.experts_per_token, calibration,
                                          gpus_per_node)
    return AllToAll("train" if passes > 1 else "forward", per_rank * model.experts_per_token * model.hidden * 2,
                    calls, ep, seconds, alltoall_volume(model, tokens=tokens, gpus=gpus, ep=ep, passes=passes))


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingCost:
    """Per-step training-side seconds for ``model`` on ``gpus`` GPUs of kind ``gpu``."""

    model: ModelSpec | None
    gpu: GPUSpec | None
    gpus: int
    recorded_gpus: int
    recorded_gpu: GPUSpec | None
    train_mfu: float | None = None
    """model FLOPs utilisation (None: the published figure for the model's kind, :func:`default_mfu`)"""
    ep: int = 1
    """expert-parallel ranks of the trainer (MoE): adds the all-to-alls the MFU figure does not cover"""
    forward_passes: int = 2
    """forward-only passes per sample without a measurement (GRPO: reference and old log-probabilities)"""
    sync_gbps: float = SYNC_GBPS
    """weight-sync link bandwidth (GB/s) when the bundle has no measured sync time"""
    calibration: CostCalibration = CALIBRATION
    """the constants it prices with (MFU defaults, Adam's bytes, the collectives' fallback latency)"""

    @property
    def _scale(self) -> float:
        """Measured seconds on the recorded GPUs -> seconds on the replay's training GPUs."""
        scale = self.recorded_gpus / self.gpus
        if self.gpu is not None and self.recorded_gpu is not None:
            scale *= self.recorded_gpu.flops / self.gpu.flops
        return scale

    def _step(self, tokens: float, passes: float, seq_len: float | None) -> float:
        if self.model is None or self.gpu is None:
            return 0.0
        return step_seconds(self.model, self.gpu, tokens=tokens, gpus=self.gpus, mfu=self.train_mfu, ep=self.ep,
                            passes=passes, seq_len=seq_len, calibration=self.calibration).seconds

    def train_seconds(self, measured: float | None, tokens: float, seq_len: float | None = None) -> float:
        """A step's trainer seconds: the measured ones rescaled, else the model's over ``tokens`` tokens in
        sequences of ``seq_len`` (a sample's prompt + output: its causal attention, as validated)."""
        if measured is not None:
            return measured * self._scale
        return self._step(tokens, 3.0, seq_len)

    def forward_seconds(self, measured: float | None, tokens: float, seq_len: float | None = None) -> float:
        """Forward-only passes (reference and old log-probabilities), like :meth:`train_seconds`."""
        if measured is not None:
            return measured * self._scale
        return self._step(tokens * self.forward_passes, 1.0, seq_len)

    def alltoalls(self, tokens: float, *, train: bool = True, forward: bool = True) -> tuple[AllToAll, ...]:
        """The expert all-to-alls a step of ``tokens`` tokens runs in its modelled spans: the trained tokens' (forward
        and backward, with ``train``: :meth:`train_seconds` modelled), then the forward-only passes' (with
        ``forward``: :meth:`forward_seconds` modelled); empty for a dense model or ep 1."""
        if self.model is None or self.gpu is None:
            return ()
        cal = self.calibration
        parts = (alltoalls(self.model, self.gpu, tokens=tokens, gpus=self.gpus, ep=self.ep, calibration=cal)
                 if train else None,
                 alltoalls(self.model, self.gpu, tokens=tokens * self.forward_passes, gpus=self.gpus, ep=self.ep,
                           passes=1.0, calibration=cal) if forward and self.forward_passes else None)
        return tuple(p for p in parts if p is not None)

    def alltoall_bytes(self, tokens: float) -> float:
        """Bytes each trainer rank sends in expert-parallel all-to-alls over one step of ``tokens`` tokens, its
        forward-only passes included (0 for a dense model or ep 1): what a report shows beside the weight-sync
        volume."""
        return sum(p.sent_bytes for p in self.alltoalls(tokens))

    def optimizer_seconds(self, measured: float | None) -> float:
        if measured is not None:
            return measured * self._scale
        if self.model is None or self.gpu is None:
            return 0.0
        return self.calibration["adam_bytes_per_param"] * self.model.params / self.gpus / self.gpu.hbm_bytes_per_s

    def sync_seconds(self, measured: float | None) -> float:
        if measured is not None:
            return measured
        return self.model.weight_bytes / (self.sync_gbps * 1e9) if self.model else 0.0
