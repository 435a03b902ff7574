"""A described RL job: the setup of a run as its publisher states it (model, cluster, batch, lengths, parallelism),
read from a TOML file instead of a recording (docs/described.md).

Every key has a stated default except the ones a run cannot do without (``model``, ``[cluster] gpu`` and ``gpus``
or ``gen_gpus`` + ``train_gpus``, ``[batch] prompts``, ``samples``, ``max_seq`` or ``max_response``,
``mean_response``). A wrong key, type or value is one :class:`~rltrace.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rltrace.replay.described.frameworks import get_framework

from rltrace.catalog import get_gpu, get_model
from rltrace.catalog._toml import load_toml, paths_from_folder
from rltrace.config import build
from rltrace.errors import ConfigError
from rltrace.limits import (
    MAX_EPOCHS,
    MAX_GPUS,
    MAX_NEW_TOKENS,
    MAX_PER_STEP,
    MAX_REQUESTS,
    MAX_SEED,
    MAX_STEPS,
    MAX_TOKENS,
    check_int,
)

PRECISIONS = ("bf16", "fp8")
MODES = ("colocated", "disaggregated")
BACKENDS = ("megatron", "fsdp")
LENGTH_KINDS = ("clipped_lognormal", "empirical")


_NONE: Any = dataclasses.MISSING


def key(default: Any = _NONE, meaning: str = "") -> Any:
    """A description key: its default (none: required) and what it means (``rltrace schema`` prints both)."""
    if default is _NONE:
        return field(metadata={"meaning": meaning})
    return field(default=default, metadata={"meaning": meaning})


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterDescription:
    gpu: str = key(meaning="GPU kind of the run (a catalog name: H100, H800, H20, H200, A100, A800, B200, GB200)")
    gpus: int = key(0, "GPUs of a colocated run (0: gen_gpus + train_gpus)")
    gen_gpus: int = key(0, "generation GPUs of a disaggregated run, given with train_gpus (both 0: half of gpus, "
                           "whole instances)")
    train_gpus: int = key(0, "training GPUs of a disaggregated run, given with gen_gpus (both 0: the rest of gpus)")
    train_gpu: str = key("", "GPU kind of the training pool when it differs (empty: gpu)")
    gpus_per_node: int = key(0, "GPUs one NVLink fabric joins (0: the GPU kind's, 8 on HGX, 72 on GB200 NVL72)")


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchDescription:
    prompts: int = key(meaning="prompts per step")
    samples: int = key(meaning="responses per prompt")
    mean_response: float = key(meaning="mean generated tokens per response, after the cap")
    train_batch: int = key(0, "samples per optimizer step (0: the whole rollout batch, one optimizer step a step)")
    max_seq: int = key(0, "prompt + response cap in tokens (NeMo-RL's max_total_sequence_length; 0: none)")
    max_response: int = key(0, "response cap in tokens (verl's max_response_length; 0: max_seq less each prompt)")
    mean_prompt: float = key(256.0, "mean prompt tokens (256, a short math problem, when the source gives none)")
    steps: int = key(4, "steps to replay")


@dataclass(frozen=True, kw_only=True, slots=True)
class LengthsDescription:
    kind: str = key("clipped_lognormal", "clipped_lognormal (responses lognormal, clipped at the cap, median solved "
                    "for mean_response) or empirical (lengths from path's column)")
    sigma: float = key(1.0, "log-space spread of the responses")
    group_correlation: float = key(0.5, "share of the latent a prompt's responses have in common")
    prompt_sigma: float = key(0.5, "log-space spread of the prompts")
    path: str = key("", "empirical: a CSV, JSON-lines or Parquet file of response lengths")
    column: str = key("", "empirical: its column")
    scale_to_mean: bool = key(True, "empirical: scale the lengths to mean_response")


@dataclass(frozen=True, kw_only=True, slots=True)
class GenerationDescription:
    tp: int = key(1, "tensor parallelism of each rollout engine")
    pp: int = key(1, "pipeline parallelism of each rollout engine (an engine spans tp x pp GPUs)")
    engine: str = key("vllm", "vllm or sglang")
    max_num_seqs: int = key(0, "the engine's running-sequence limit (0: the framework's)")
    gpu_memory_utilization: float = key(0.0, "the engine's share of GPU memory (0: the framework's)")


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingDescription:
    backend: str = key("", "megatron or fsdp (empty: the framework's)")
    tp: int = key(1, "tensor parallelism")
    cp: int = key(1, "context parallelism")
    ep: int = key(1, "expert parallelism (MoE)")
    pp: int = key(1, "pipeline parallelism")
    micro_batch: int = key(1, "samples per micro-batch (fills the pipeline stages)")
    micro_batch_tokens: int = key(0, "tokens one packed micro-batch holds (0: one sequence's room, max_seq or "
                                  "mean_prompt + max_response); FSDP gathers the weights once a micro-batch")
    epochs: int = key(1, "passes over the rollout batch per step (PPO epochs)")


@dataclass(frozen=True, kw_only=True, slots=True)
class AlgorithmDescription:
    name: str = key("grpo", "grpo (no critic) or ppo (a critic of the policy's size)")
    reference: bool = key(True, "a reference-model log-prob pass (a KL term); false for DAPO-style runs")
    recompute_logprobs: bool = key(True, "an old-policy log-prob pass before the update")


@dataclass(frozen=True, kw_only=True, slots=True)
class Description:
    """A whole described run (the TOML file's top level)."""

    model: str = key(meaning="a catalog name or a Hugging Face config.json path (relative to the file)")
    cluster: ClusterDescription = field(metadata={"meaning": "[cluster] table"})
    batch: BatchDescription = field(metadata={"meaning": "[batch] table"})
    precision: str = key("bf16", "bf16 or fp8 (FP8 linear layers in training, FP8 weights in the engine)")
    framework: str = key("verl", "a framework profile: verl, nemo-rl, openrlhf, areal, nemo-aligner, relax "
                         "(replay/described/frameworks.toml)")
    name: str = key("", "a name for reports")
    mode: str = key("", "how the run was measured, colocated or disaggregated (empty: colocated unless gen_gpus is "
                    "given); the replay's schedulers choose how it is replayed")
    seed: int = key(0, "seed of the length draw")
    source: str = key("", "where the setup comes from")
    generation: GenerationDescription = field(default_factory=GenerationDescription,
                                              metadata={"meaning": "[generation] table"})
    training: TrainingDescription = field(default_factory=TrainingDescription,
                                          metadata={"meaning": "[training] table"})
    algorithm: AlgorithmDescription = field(default_factory=AlgorithmDescription,
                                            metadata={"meaning": "[algorithm] table"})
    lengths: LengthsDescription = field(default_factory=LengthsDescription, metadata={"meaning": "[lengths] table"})

    @property
    def colocated(self) -> bool:
        return self.mode == "colocated" if self.mode else not self.cluster.gen_gpus

    @property
    def total_gpus(self) -> int:
        c = self.cluster
        return c.gpus or c.gen_gpus + c.train_gpus

    @property
    def pools(self) -> tuple[int, int]:
        """(generation, training) GPUs for the disaggregated schedulers: as given, else ``gpus`` split in half
        (the generation half rounded to whole instances)."""
        c = self.cluster
        if c.gen_gpus and c.train_gpus:
            return c.gen_gpus, c.train_gpus
        instance = self.generation.tp * self.generation.pp
        gen = max(instance, (c.gpus // 2) // instance * instance)
        return gen, max(c.gpus - gen, 1)

    @property
    def train_batch(self) -> int:
        return self.batch.train_batch or self.batch.prompts * self.batch.samples

    def check(self) -> Description:
        """Refuse impossible values, naming the key; returns self."""
        c, b, g, t, a, n = self.cluster, self.batch, self.generation, self.training, self.algorithm, self.lengths
        _choice("precision", self.precision, PRECISIONS)
        if self.mode:
            _choice("mode", self.mode, MODES)
        _choice("lengths.kind", n.kind, LENGTH_KINDS)
        if n.kind != "empirical" and (n.path or n.column):  # a file the draw would not read, without a word
            raise ConfigError(f"lengths.{'path' if n.path else 'column'} is read by lengths.kind = \"empirical\" only "
                              f"(lengths.kind is {n.kind!r})")
        if t.backend:
            _choice("training.backend", t.backend, BACKENDS)
        _choice("algorithm.name", a.name, ("grpo", "ppo"))
        _choice("generation.engine", g.engine, ("vllm", "sglang"))
        for key, value in (("cluster.gpus", c.gpus), ("cluster.gen_gpus", c.gen_gpus),
                           ("cluster.train_gpus", c.train_gpus), ("batch.train_batch", b.train_batch),
                           ("batch.max_seq", b.max_seq), ("batch.max_response", b.max_response),
                           ("generation.max_num_seqs", g.max_num_seqs), ("cluster.gpus_per_node", c.gpus_per_node),
                           ("training.micro_batch_tokens", t.micro_batch_tokens)):
            if value < 0:
                raise ConfigError(f"{key} must be >= 0, got {value}")
        for key, value in (("batch.prompts", b.prompts), ("batch.samples", b.samples), ("batch.steps", b.steps),
                           ("generation.tp", g.tp),
                           ("generation.pp", g.pp), ("training.tp", t.tp), ("training.cp", t.cp),
                           ("training.ep", t.ep), ("training.pp", t.pp), ("training.micro_batch", t.micro_batch),
                           ("training.epochs", t.epochs)):
            if value < 1:
                raise ConfigError(f"{key} must be >= 1, got {value}")
        # the replay's own limits (rltrace.limits), before the length draw allocates
        for key, value, hi in (("cluster.gpus", c.gpus, MAX_GPUS), ("cluster.gen_gpus", c.gen_gpus, MAX_GPUS),
                               ("cluster.train_gpus", c.train_gpus, MAX_GPUS), ("batch.steps", b.steps, MAX_STEPS),
                               ("batch.prompts", b.prompts, MAX_PER_STEP), ("batch.samples", b.samples, MAX_PER_STEP),
                               ("seed", self.seed, MAX_SEED), ("batch.max_seq", b.max_seq, MAX_NEW_TOKENS),
                               ("batch.max_response", b.max_response, MAX_NEW_TOKENS),
                               ("generation.max_num_seqs", g.max_num_seqs, MAX_PER_STEP),
                               ("cluster.gpus_per_node", c.gpus_per_node, MAX_GPUS),
                               ("training.micro_batch", t.micro_batch, MAX_PER_STEP),
                               ("training.micro_batch_tokens", t.micro_batch_tokens, MAX_TOKENS),
                               ("training.epochs", t.epochs, MAX_EPOCHS)):
            check_int(key, value, 0, hi)
        check_int("batch.prompts x batch.samples", b.prompts * b.samples, 1, MAX_PER_STEP, what=" samples a step")
        check_int("batch.steps x batch.prompts x batch.samples", b.steps * b.prompts * b.samples, 1, MAX_REQUESTS,
                  what=" requests in one replay")
        if bool(c.gen_gpus) != bool(c.train_gpus):
            raise ConfigError("cluster: give gen_gpus and train_gpus together (or neither, with gpus)")
        if not c.gpus and not c.gen_gpus:
            raise ConfigError("cluster: give gpus (colocated) or gen_gpus and train_gpus (disaggregated)")
        if c.gpus and c.gen_gpus and c.gpus != c.gen_gpus + c.train_gpus:
            raise ConfigError(f"cluster.gpus {c.gpus} is not gen_gpus + train_gpus ({c.gen_gpus} + {c.train_gpus})")
        instance = g.tp * g.pp
        gen, train = self.pools
        if self.colocated and self.total_gpus % instance:
            raise ConfigError(f"cluster.gpus {self.total_gpus} does not split into generation instances of "
                              f"generation.tp x generation.pp = {instance} GPUs")
        if gen % instance:
            raise ConfigError(f"cluster.gen_gpus {gen} does not split into generation instances of generation.tp x "
                              f"generation.pp = {instance} GPUs")
        model_parallel = t.tp * t.cp * t.pp
        trainers = self.total_gpus if self.colocated else train
        # a colocated run trains on the whole cluster: a split given to reshape it (gen_gpus, train_gpus) is that
        # cluster too, whichever schedulers replay it
        where = (f"{trainers} GPUs of the colocated cluster (gen_gpus + train_gpus), on which a colocated run trains"
                 if self.colocated and self.cluster.gen_gpus else f"{trainers} training GPUs")
        if trainers % model_parallel:
            raise ConfigError(f"training.tp x training.cp x training.pp = {model_parallel} does not divide the {where}")
        if trainers % t.ep:
            raise ConfigError(f"training.ep {t.ep} does not divide the {where}")
        if not b.max_seq and not b.max_response:
            raise ConfigError("batch: give max_seq (prompt + response cap) or max_response (response cap)")
        if not 0 < b.mean_prompt < MAX_NEW_TOKENS:  # prompt lengths are int32, as in a bundle
            raise ConfigError(f"batch.mean_prompt must be in (0, {MAX_NEW_TOKENS:,}) tokens, got {b.mean_prompt:g}")
        if b.max_seq and b.mean_prompt >= b.max_seq:
            raise ConfigError(f"batch.max_seq {b.max_seq} leaves no room for a response after the mean prompt "
                              f"(batch.mean_prompt {b.mean_prompt:g} tokens)")
        cap = self.response_cap
        if not 0 < b.mean_response < cap:
            raise ConfigError(f"batch.mean_response must be in (0, {cap:g}) (the response cap), got "
                              f"{b.mean_response:g}")
        if b.train_batch and (b.prompts * b.samples) % b.train_batch:
            raise ConfigError(f"batch.train_batch {b.train_batch} does not divide the {b.prompts * b.samples} "
                              "samples of a step")
        if not 0 < n.sigma <= 4 or not 0 <= n.group_correlation < 1 or not 0 < n.prompt_sigma <= 4:
            raise ConfigError("lengths: sigma and prompt_sigma must be in (0, 4], group_correlation in [0, 1)")
        if n.kind == "empirical" and not (n.path and n.column):
            raise ConfigError("lengths: kind = \"empirical\" needs path and column")
        if g.gpu_memory_utilization and not 0 < g.gpu_memory_utilization <= 1:
            raise ConfigError(f"generation.gpu_memory_utilization must be in (0, 1], got {g.gpu_memory_utilization}")
        return self

    @property
    def response_cap(self) -> float:
        """The cap a mean response is held against: ``max_response`` and ``max_seq`` less the mean prompt, the
        lower of those given (the draw clips at both)."""
        b = self.batch
        caps = [float(b.max_response)] if b.max_response else []
        return min([*caps, b.max_seq - b.mean_prompt] if b.max_seq else caps)


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")


def parse_description(data: dict[str, Any], where: str) -> Description:
    """A description from a parsed table; ``where`` names it in messages."""
    if "jobs" in data:  # "unknown key 'jobs'", with no word of what the file is
        raise ConfigError(f"{where}: a job list ([[jobs]] tables), not a described job: replay it with --jobs {where} "
                          "(-s rollmux)")
    try:
        described = build(Description, data, where)
    except ConfigError as e:  # "run.toml.batch.prompts: ..." reads as one name: the file, then the key
        text = str(e)
        raise ConfigError(f"{where}: {text[len(where) + 1:]}" if text.startswith(where + ".") else text) from None
    try:
        checked = described.check()
        get_framework(checked.framework)  # its message names the key
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    # the names it gives, each with the file's name and its key, before anything is priced
    names: list[tuple[str, Callable[[str], object], str]] = [
        ("model", get_model, checked.model), ("cluster.gpu", get_gpu, checked.cluster.gpu),
        ("cluster.train_gpu", get_gpu, checked.cluster.train_gpu)]
    for key, lookup, name in names:
        if name:  # an empty train_gpu: the cluster's gpu
            try:
                lookup(name)
            except ConfigError as e:
                raise ConfigError(f"{where}: {key}: {e}") from None
    return checked


def load_description(path: str | Path) -> Description:
    """Read and check a description TOML file; a relative model path is taken from the file's folder."""
    p = Path(path)
    return parse_description(paths_from_folder(load_toml(p), p.parent, tables=("lengths",)), str(p))


def is_description(path: str | Path | None) -> bool:
    """Whether a replay source names a described job (a .toml file) rather than a bundle."""
    return path is not None and str(path).endswith(".toml")


def markdown_reference() -> str:
    """Every key of a description, its type, default and meaning, as markdown (``rltrace schema``)."""
    intro = ("`rltrace replay RUN.toml` replays a run from its stated setup (docs/described.md). Keys, by table "
             "(required: no default):")
    lines = ["## Described jobs (RUN.toml)", "", intro, "", "| key | type | default | meaning |", "|---|---|---|---|"]

    def walk(cls: Any, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{prefix}{f.name}.")
                continue
            default = ("required" if f.default is dataclasses.MISSING else str(f.default).lower()
                       if isinstance(f.default, bool) else repr(f.default).replace("'", '"'))
            kind = getattr(hints[f.name], "__name__", str(hints[f.name]))
            lines.append(f"| `{prefix}{f.name}` | {kind} | {default} | {f.metadata.get('meaning', '')} |")

    walk(Description, "")
    return "\n".join(lines) + "\n"
