"""The trainer side of an RL step as frameworks run it, for a described job (docs/described.md).

After generation a step runs, in order, on the training GPUs:

- reward: ``reward_s_per_sample`` for each sample (a rule-based scorer on the host);
- old-policy log-probs (``algorithm.recompute_logprobs``) and reference log-probs (``algorithm.reference``): one
  forward pass each over every token of the step;
- critic (PPO): a value forward pass, then the critic's own update, the policy's size and shape;
- policy update: ``training.epochs`` passes of forward and backward over every token, in ``samples / train_batch``
  optimizer steps, each an Adam update of the rank's shard plus the data-parallel gradient reduce-scatter and
  weight all-gather;
- the weights' way back to the engine: a colocated run's refit (the new weights into the sleeping engine, then its
  wake), a disaggregated run's NCCL broadcast (:func:`rltrace.replay.network.weight_sync.reprice_syncs`).

Compute is :func:`rltrace.replay.costmodels.training.step_seconds` (6N plus causal attention at the published MFU,
FP8 linear layers at the FP8 peak, expert all-to-alls for ``ep`` > 1) times the framework's measured factor
(:class:`.frameworks.Calibration`); pipeline parallelism adds its 1F1B bubble, ``(pp - 1) / m`` of the compute for
``m`` micro-batches a data-parallel rank runs per optimizer step. An FSDP backend adds its parameter traffic per
micro-batch (``training.micro_batch_tokens`` packed tokens): two all-gathers and a reduce-scatter of the rank's
shard for a forward and backward, one all-gather for a forward-only pass, over the data- and context-parallel
ranks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from rltrace.replay.costmodels.parallel import collective_seconds
from rltrace.replay.costmodels.switching import ModelState, move_seconds
from rltrace.replay.costmodels.training import AllToAll, alltoalls, step_seconds
from rltrace.replay.described.description import Description
from rltrace.replay.described.frameworks import Framework

from rltrace.calibration import CALIBRATION, CostCalibration
from rltrace.catalog import GPUSpec, ModelSpec

GRAD_BYTES = 2  # BF16 gradients and weights on the wire (Megatron's distributed optimizer, FSDP's mixed precision)


@dataclass(frozen=True, slots=True)
class Phases:
    """One step's trainer-side seconds, phase by phase."""

    reward: float
    old_logprob: float
    reference: float
    critic: float
    train: float
    optimizer: float

    @property
    def trainer(self) -> float:
        """What the training GPUs do after the reward: every phase but the reward."""
        return self.old_logprob + self.reference + self.critic + self.train + self.optimizer

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Switch:
    """A colocated run's role switches, seconds each way."""

    sleep: float
    """the engine goes to sleep (KV cache freed, weights offloaded) and the training state comes in"""
    refit: float
    """the new weights into the engine (gathered from the trainer's layout, handed over in-process)"""
    wake: float
    """the engine wakes (weights back, KV cache rebuilt) and the training state goes out"""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepModel:
    """Prices a described job's trainer-side phases on ``gpus`` GPUs."""

    description: Description
    framework: Framework
    model: ModelSpec
    gpu: GPUSpec
    mfu: float | None = None
    """training MFU (None: the published figure for the model's kind, ``training.default_mfu``)"""
    constants: CostCalibration = CALIBRATION
    """the cost constants it prices with (the framework's own measured corrections are ``framework.calibration``)"""

    def _compute(self, tokens: float, gpus: int, seq_len: float, passes: float, samples: float) -> float:
        t, d = self.description.training, self.description
        seconds = step_seconds(self.model, self.gpu, tokens=tokens, gpus=gpus, mfu=self.mfu, ep=t.ep, passes=passes,
                               seq_len=seq_len, precision=d.precision, calibration=self.constants,
                               gpus_per_node=self._per_node).seconds
        return seconds * self._bubble(gpus, samples)

    def _bubble(self, gpus: int, samples: float) -> float:
        """Pipeline parallelism's 1F1B bubble as a factor on the compute: (m + pp - 1) / m of the ideal for m
        micro-batches per data-parallel rank (1 without PP)."""
        t = self.description.training
        if t.pp <= 1:
            return 1.0
        micro = max(samples / self._dp(gpus) / t.micro_batch, 1.0)
        return 1.0 + (t.pp - 1) / micro

    def _fsdp_traffic(self, tokens: float, gpus: int, passes: float) -> float:
        """FSDP's parameter traffic over ``tokens`` tokens: every micro-batch all-gathers each rank's model-parallel
        shard (BF16) over the data- and context-parallel ranks for its forward, again for its backward, and
        reduce-scatters its gradients (a forward-only pass: the one all-gather), not overlapped with compute; 0 for
        Megatron, whose distributed optimizer moves them once an optimizer step (:meth:`_optimizer_step`)."""
        d = self.description
        group = self._shard_group(gpus)
        if self.backend != "fsdp" or group < 2:
            return 0.0
        t = d.training
        shard = GRAD_BYTES * self.model.params / (t.tp * t.pp)
        per_node = self._shard_group_per_node()
        gather = collective_seconds(self.gpu, "all_gather", group, shard, per_node, calibration=self.constants)
        scatter = collective_seconds(self.gpu, "reduce_scatter", group, shard, per_node, calibration=self.constants)
        per_rank = tokens / self._dp(gpus)
        micro = max(math.ceil(per_rank / self.micro_batch_tokens), 1)
        return micro * (2 * gather + scatter if passes > 1 else gather)

    @property
    def backend(self) -> str:
        return self.description.training.backend or self.framework.backend

    @property
    def micro_batch_tokens(self) -> float:
        """Tokens one micro-batch packs: ``training.micro_batch_tokens``, else one sequence's room (``max_seq``, or
        the mean prompt and the response cap)."""
        d = self.description
        return float(d.training.micro_batch_tokens or d.batch.max_seq or d.batch.mean_prompt + d.batch.max_response)

    def _dp(self, gpus: int) -> int:
        """Data-parallel ranks: each takes its own share of the samples."""
        t = self.description.training
        return max(gpus // (t.tp * t.cp * t.pp), 1)

    def _shard_group(self, gpus: int) -> int:
        """Ranks that hold the same parameters, so shard the gradients and optimizer state between them: the
        data-parallel ranks times the context-parallel ones (Megatron's distributed optimizer reduce-scatters over
        ``get_data_parallel_group(with_context_parallel=True)``; FSDP shards over its dp x cp mesh)."""
        return self._dp(gpus) * self.description.training.cp

    @property
    def _per_node(self) -> int:
        """GPUs one NVLink fabric joins: the description's ``cluster.gpus_per_node``, else the GPU kind's."""
        return self.description.cluster.gpus_per_node or self.gpu.nvlink_domain

    def _shard_group_per_node(self) -> int:
        """Ranks of one :meth:`_shard_group` on one NVLink node: the model-parallel ranks (TP innermost, as Megatron
        and FSDP+TP lay them out) fill a node first, so a group spans nodes once they fill it."""
        t = self.description.training
        return max(self._per_node // (t.tp * t.pp), 1)

    def _optimizer_step(self, gpus: int) -> float:
        """One optimizer step: Adam over the rank's shard, gradients reduce-scattered and weights all-gathered over
        the ranks that hold the same parameters (:meth:`_shard_group`; each rank's model-parallel shard in BF16)."""
        t, group = self.description.training, self._shard_group(gpus)
        adam = self.constants["adam_bytes_per_param"] * self.model.params / gpus / self.gpu.hbm_bytes_per_s
        shard = GRAD_BYTES * self.model.params / (t.tp * t.pp)
        per_node = self._shard_group_per_node()
        comm = (collective_seconds(self.gpu, "reduce_scatter", group, shard, per_node, calibration=self.constants)
                + collective_seconds(self.gpu, "all_gather", group, shard, per_node, calibration=self.constants))
        return adam + comm

    def phases(self, gpus: int, tokens: float, samples: int) -> Phases:
        """The phases of a step of ``samples`` samples holding ``tokens`` tokens (prompts and responses) on ``gpus``
        training GPUs."""
        d, f = self.description, self.framework.calibration
        a, t = d.algorithm, d.training
        kind = "moe" if self.model.is_moe else "dense"
        seq = tokens / max(samples, 1)
        forward = (self._compute(tokens, gpus, seq, 1.0, samples) * f.factor("logprob", kind)
                   + self._fsdp_traffic(tokens, gpus, 1.0))
        update = t.epochs * (self._compute(tokens, gpus, seq, 3.0, samples) * f.factor("update", kind)
                             + self._fsdp_traffic(tokens, gpus, 3.0))
        steps = t.epochs * max(samples // d.train_batch, 1)
        optimizer = steps * self._optimizer_step(gpus)
        critic = forward + update + optimizer if a.name == "ppo" else 0.0
        return Phases(reward=samples * self.framework.reward_s_per_sample,
                      old_logprob=forward if a.recompute_logprobs else 0.0,
                      reference=forward if a.reference else 0.0,
                      critic=critic, train=update, optimizer=optimizer)

    def alltoalls(self, gpus: int, tokens: float, samples: int) -> tuple[AllToAll, ...]:
        """The expert all-to-alls that :meth:`phases` holds for a step of ``samples`` samples and ``tokens`` tokens
        on ``gpus`` training GPUs, each kind with all its calls and the seconds the phases priced for them (the
        framework's factor and the pipeline bubble included, as ``scale``): ``forward`` for the spans the replay runs as
        forward-only (old-policy and reference log-probs, and PPO's critic, its update included), ``train`` for the
        policy's updates. A network model (``--topology``) re-times them; empty for a dense model or EP 1."""
        d, t, f = self.description, self.description.training, self.framework.calibration
        kind = "moe" if self.model.is_moe else "dense"
        ppo = d.algorithm.name == "ppo"
        forwards = d.algorithm.recompute_logprobs + d.algorithm.reference + ppo
        # (span, passes a call, how many such passes, the phases' factor on their compute)
        kinds = (("forward", 1.0, forwards, f.factor("logprob", kind)),
                 ("forward", 3.0, t.epochs if ppo else 0, f.factor("update", kind)),  # the critic's update
                 ("train", 3.0, t.epochs, f.factor("update", kind)))
        bubble, out = self._bubble(gpus, samples), []
        for span, passes, count, factor in kinds:
            a2a = alltoalls(self.model, self.gpu, tokens=tokens, gpus=gpus, ep=t.ep, passes=passes,
                            calibration=self.constants, gpus_per_node=self._per_node)
            if a2a is not None and count:
                out.append(a2a._replace(span=span, calls=a2a.calls * count,
                                        seconds=a2a.seconds * count * factor * bubble,
                                        sent_bytes=a2a.sent_bytes * count, scale=factor * bubble))
        return tuple(out)

    def alltoall_bytes(self, gpus: int, tokens: float, samples: int) -> float:
        """Bytes each of ``gpus`` training GPUs sends in a step's expert all-to-alls (:meth:`alltoalls`; 0 for a
        dense model or EP 1): what the replay reports beside the weight-sync volume."""
        return sum(p.sent_bytes for p in self.alltoalls(gpus, tokens, samples))

    def switch(self, gpus: int, gen_tp: int, gen_gpu: str) -> Switch:
        """A colocated run's switches on ``gpus`` GPUs, engines of ``gen_tp``: host-link moves of the serving weights
        and (when the framework offloads it) the training state; the refit hands each GPU its serving shard at the
        framework's measured refit rate (gathered from the trainer's layout, passed as IPC handles, loaded by the
        engine: :class:`.frameworks.Calibration`)."""
        state = ModelState(params=float(self.model.params), weight_bytes=float(self.model.weight_bytes))
        training = state.training_bytes(gpus, self.constants) if self.framework.offload_training_state else 0.0
        serving = state.rollout_bytes(gen_tp)
        sleep = move_seconds(training, serving, gen_gpu, calibration=self.constants)
        wake = move_seconds(serving, training, gen_gpu, calibration=self.constants)
        refit = serving / (self.framework.calibration.refit_gbps * 1e9)
        return Switch(sleep=sleep, refit=refit, wake=wake)
