"""A real, small RL job on CPU: one vLLM generator process and two DDP trainer ranks over Gloo (GRPO-style).

Every step: the generator samples several responses per prompt with vLLM and scores them; it sends the batch
to the trainers; each trainer takes half, computes group-normalised advantages and a policy-gradient loss,
runs forward/backward (DDP all-reduces the gradients) and an AdamW step; then trainer rank 0 broadcasts every
parameter to the generator over a process group of the two, and the generator reloads them into vLLM.

The job checks that the generator really serves the synced weights: vLLM reports the log-probability of each
sampled response, and trainer rank 0 recomputes it with its own weights before updating them. On-policy, the
two agree to float precision (``logprob_gap``); a generator one update behind would be off by about the
update's own effect on the same log-probability (``update_shift``, measured on the rank's first sample).

    python examples/tiny_rl/train.py [--steps 4] [--prompts 4] [--samples 4] [--model-dir DIR]
    rltrace record -o tiny_run --model DIR/config.json -- python examples/tiny_rl/train.py --model-dir DIR

Each trainer runs its share in ``--micro-batches`` forward/backward passes (DDP all-reduces the gradients of
each), then all-reduces its loss for the log line. Faults to diagnose (``rltrace diagnose``, docs/diagnose.md)
are the job's own options, never the recorder's: ``--straggle RANK:SECONDS`` sleeps on that trainer rank after
each micro-batch's backward, ``--sync-delay SECONDS`` waits before each tensor's weight-sync send, and
``--max-num-seqs N`` caps vLLM's running batch.

Ranks: 0 and 1 train, 2 generates. Two JSON lines go to stdout: the generator's (steps, parameter bytes,
samples per step) and trainer rank 0's (``logprob_gap``, ``update_shift`` and ``step_s`` per step).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import tiny_llama
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rltrace

TRAINERS, GENERATOR = (0, 1), 2
PROMPTS = ["the policy samples", "weights move from", "long rollouts hold", "a group of samples",
           "the reward model", "short ones wait"]
MAX_TOKENS = 96
TARGET = 7  # the reward: how often the response uses this token id (any fixed id works)


def reward(tokens: list[int]) -> float:
    return sum(t == TARGET for t in tokens) / max(len(tokens), 1)


def generator(args: argparse.Namespace, sync_group: dist.ProcessGroup) -> dict:
    with tempfile.TemporaryDirectory(prefix="tiny_rl_weights_") as folder:  # removed when the job ends
        return generate_and_reload(args, sync_group, Path(folder))


def generate_and_reload(args: argparse.Namespace, sync_group: dist.ProcessGroup, weights_dir: Path) -> dict:
    # vLLM's CPU engine runs its OpenMP threads on one core (the default binds one per core). On a small machine
    # shared with two trainer processes, a thread that loses its core holds up every iteration's parallel
    # region; pinned to one core the engine's iteration time stops depending on what the trainers do.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")
    from safetensors import safe_open
    from safetensors.torch import save_file
    from vllm import LLM, SamplingParams

    engine_args = {"max_num_seqs": args.max_num_seqs} if args.max_num_seqs else {}
    by_path = reload_takes_a_path()
    if not by_path:  # an older vLLM rereads its own model folder: serve a copy the job may overwrite
        shutil.copytree(args.model_dir, weights_dir, dirs_exist_ok=True)
    llm = LLM(model=str(args.model_dir if by_path else weights_dir), dtype="float32", max_model_len=256,
              enforce_eager=True, seed=0, **engine_args)
    with safe_open(str(args.model_dir / "model.safetensors"), "pt") as f:
        shapes = {name: f.get_slice(name).get_shape() for name in f.keys()}  # noqa: SIM118 - a safe_open handle
    for step in range(args.steps):
        samples = args.samples[step % len(args.samples)]
        prompts = [PROMPTS[(step * args.prompts + i) % len(PROMPTS)] for i in range(args.prompts)]
        requests = [p for p in prompts for _ in range(samples)]
        params = [SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, stop_token_ids=tiny_llama.STOP_IDS,
                                 logprobs=0, seed=step * 10_000 + i) for i in range(len(requests))]
        outs = llm.generate(requests, params, use_tqdm=False)
        with rltrace.span("reward", name="target_token_rate"):
            batch = [(list(o.prompt_token_ids), list(o.outputs[0].token_ids), reward(list(o.outputs[0].token_ids)),
                      i // samples, o.outputs[0].cumulative_logprob) for i, o in enumerate(outs)]
        dist.broadcast_object_list([batch], src=GENERATOR)
        received = {}
        for name in sorted(shapes):  # the trainers broadcast in the same order
            tensor = torch.empty(shapes[name], dtype=torch.float32)
            dist.broadcast(tensor, src=TRAINERS[0], group=sync_group)
            received[name] = tensor
        save_file(received, str(weights_dir / "model.safetensors"))
        if by_path:
            llm.collective_rpc("reload_weights", kwargs={"weights_path": str(weights_dir)})
        else:
            llm.collective_rpc("reload_weights")
    llm.llm_engine.engine_core.shutdown()  # its engine process is not a daemon: without this, exit waits on it
    param_bytes = sum(torch.Size(s).numel() * 4 for s in shapes.values())
    return {"steps": args.steps, "param_bytes": param_bytes,
            "samples_per_step": [args.prompts * s for s in args.samples], "weights_dir": str(weights_dir)}


def reload_takes_a_path() -> bool:
    """Whether this vLLM's ``reload_weights`` reads a folder it is given; older releases (0.11 among them) take no
    arguments and reread the engine's own model folder."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return "weights_path" in inspect.signature(GPUModelRunner.reload_weights).parameters


def trainer(rank: int, args: argparse.Namespace, train_group: dist.ProcessGroup, sync_group: dist.ProcessGroup) -> None:
    from torch.nn.parallel import DistributedDataParallel
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)  # two trainer ranks share the machine's cores: one thread each, no oversubscription
    model = LlamaForCausalLM.from_pretrained(str(args.model_dir), dtype=torch.float32)
    ddp = DistributedDataParallel(model, process_group=train_group)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    gaps, shifts, step_s, losses = [], [], [], []
    straggle_rank, straggle_s = args.straggle
    for _ in range(args.steps):
        started = time.perf_counter()
        box: list = [None]
        dist.broadcast_object_list(box, src=GENERATOR)
        batch = box[0]
        rewards = torch.tensor([b[2] for b in batch])
        groups = torch.tensor([b[3] for b in batch])
        advantages = torch.zeros_like(rewards)
        for g in groups.unique():  # GRPO: each response against its own prompt's group
            mask = groups == g
            advantages[mask] = (rewards[mask] - rewards[mask].mean()) / (rewards[mask].std(unbiased=False) + 1e-4)
        mine = list(range(TRAINERS.index(rank), len(batch), len(TRAINERS)))
        logps, total = [], torch.zeros(())
        opt.zero_grad()
        for part in range(args.micro_batches):  # each backward all-reduces its gradients (DDP), accumulating
            loss = torch.zeros(())
            for i in mine[part :: args.micro_batches]:
                logp = sequence_logprob(ddp, batch[i][0], batch[i][1])
                logps.append(float(logp))
                loss = loss - advantages[i] * logp / len(batch)
            loss.backward()
            total += loss.detach()
            if rank == straggle_rank:
                time.sleep(straggle_s)  # the injected straggler: slow after every backward
        dist.all_reduce(total, group=train_group)  # the step's loss over both trainers, for the log line
        losses.append(float(total))
        opt.step()
        if rank == TRAINERS[0]:
            with torch.no_grad():
                for _, tensor in sorted(model.state_dict().items()):
                    if args.sync_delay:
                        time.sleep(args.sync_delay)  # the injected slow transfer: a wait before every send
                    dist.broadcast(tensor.contiguous(), src=rank, group=sync_group)
        step_s.append(time.perf_counter() - started)  # generation wait + train + sync, as the trainer sees it
        order = [i for part in range(args.micro_batches) for i in mine[part :: args.micro_batches]]
        gaps.append(max(abs(lp - batch[i][4]) for lp, i in zip(logps, order)))
        with torch.no_grad():  # after the sync: rltrace counts a forward after an update as the next step's work
            # One sample is evidence enough, and keeps the trainers off the CPU while the next step generates.
            first = order[0]
            shifts.append(abs(float(sequence_logprob(model, batch[first][0], batch[first][1])) - logps[0]))
    if rank == TRAINERS[0]:
        emit({"logprob_gap": gaps, "update_shift": shifts, "step_s": step_s, "loss": losses})


def sequence_logprob(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """Log-probability of ``completion`` after ``prompt`` under ``model``."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None]).sum()


def samples_list(text: str) -> list[int]:
    """``--samples``: one count, or a comma-separated cycle (step k uses entry k mod its length)."""
    counts = [int(x) for x in text.split(",")]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"samples per prompt must be >= 1, got {text!r}")
    return counts


def straggler(text: str) -> tuple[int, float]:
    """``--straggle RANK:SECONDS``: the trainer rank that sleeps, and for how long after each backward."""
    rank, _, seconds = text.partition(":")
    try:
        parsed = int(rank), float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--straggle takes RANK:SECONDS, got {text!r}") from None
    if parsed[0] not in TRAINERS or parsed[1] < 0:
        raise argparse.ArgumentTypeError(f"--straggle: a trainer rank {TRAINERS} and seconds >= 0, got {text!r}")
    return parsed


def emit(summary: dict) -> None:
    """One JSON line on stdout in a single write, so two ranks' lines never interleave on a pipe."""
    os.write(1, (json.dumps(summary) + "\n").encode())


def run(rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=3)
    train_group = dist.new_group(list(TRAINERS))
    sync_group = dist.new_group([TRAINERS[0], GENERATOR])
    if rank == GENERATOR:
        emit(generator(args, sync_group))
    else:
        trainer(rank, args, train_group, sync_group)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=samples_list, default=[4],
                        help="samples per prompt (the GRPO group); a list such as 8,4 cycles through it step by step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "rltrace_tiny_llama")
    parser.add_argument("--micro-batches", type=int, default=1, help="forward/backward passes per trainer step")
    parser.add_argument("--straggle", type=straggler, default=(-1, 0.0), metavar="RANK:SECONDS",
                        help="fault: this trainer rank sleeps SECONDS after each micro-batch's backward")
    parser.add_argument("--sync-delay", type=float, default=0.0, metavar="SECONDS",
                        help="fault: trainer rank 0 waits SECONDS before each tensor's weight-sync send")
    parser.add_argument("--max-num-seqs", type=int, default=None, help="vLLM's max_num_seqs (default: vLLM's)")
    args = parser.parse_args()
    if args.micro_batches < 1 or args.prompts * min(args.samples) < args.micro_batches * len(TRAINERS):
        parser.error("--micro-batches must be >= 1 and leave each trainer a sample per micro-batch")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    tiny_llama.build(args.model_dir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(args, port), nprocs=3)


if __name__ == "__main__":
    main()
