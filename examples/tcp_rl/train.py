"""An RL job as a user outside rltrace writes it: three plain processes in one Gloo world joined by TCP.

    python examples/tcp_rl/train.py [--steps 7] [--prompts 6] [--samples 8,4] [--model-dir DIR]
    rltrace record -o run --model DIR/config.json -- python examples/tcp_rl/train.py --model-dir DIR

The launcher starts itself three times (``--rank 0..2``) with ``subprocess.Popen``; the ranks meet through
``init_process_group("gloo", init_method="tcp://127.0.0.1:<port>")`` and the launcher exits with the first
non-zero exit code of its ranks.

- Rank 0 generates with vLLM: one request per prompt with ``SamplingParams(n=samples)`` and a long-tailed
  cap on its new tokens (seeded; each step's longest request runs 24-30x the distribution's median of 8,
  see ``caps``), and sends the batch to the trainers (``broadcast_object_list`` on the world group).
- Ranks 1 and 2 train with DDP in their own subgroup [1, 2]: each takes half of the samples, runs them as
  micro-batches under ``no_sync()`` (only the last one all-reduces) and steps AdamW.
- Trainer rank 1 then sends every parameter to rank 0 in flat buckets with ``dist.send``; rank 0 writes them
  to a safetensors file and reloads vLLM through ``llm.collective_rpc("swap_in_weights")``, a method of its
  own worker extension (``weight_loader.py``).

``--samples 8,4`` alternates samples per prompt step by step. The generator prints one JSON line: per step,
the samples per prompt and every sample's new-token count, the weight buckets sent per step, and the sum of
the engine's parameters before the first step and after each reload (``collective_rpc("weights_checksum")``:
each reload changes it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tiny_rl"))  # the tiny random Llama builder of the other example
import tiny_llama  # after the path line above

GENERATOR, TRAINERS, SENDER = 0, [1, 2], 1
PROMPTS = ["the policy samples", "weights move from", "long rollouts hold", "a group of samples",
           "the reward model", "short ones wait", "one baseline per prompt", "the trainer steps"]
MAX_NEW = 240  # max_model_len 256 less the longest prompt
BUCKET_BYTES = 256 * 1024
TARGET = 7  # the reward: how often a sample uses this token id


def caps(step: int, prompts: int, seed: int) -> list[int]:
    """New-token caps of one step's requests: a long-tailed batch whose longest request runs 24-30x the body's median
    (8 tokens; a step's own median moves with its six draws, 24-32x in one recording).

    One request (the straggler) gets 80-100% of MAX_NEW, as the longest rollout of a real RL batch usually hits
    its response-length cap; the others are Pareto(alpha=1) quantiles from 4 tokens (median 8), one from
    each of the lower strata (i + u) / prompts, so every step holds the same spread of lengths. A real batch of
    thousands of samples has a stable length distribution; six i.i.d. Pareto draws per step do not (10-step
    means of the two settings of one recording differed by 2x, which measures the draw rather than the job)."""
    rng = random.Random(seed * 100_003 + step)
    body = [int(4 / (1 - (i + rng.random()) / prompts)) for i in range(prompts - 1)]
    drawn = [*body, int(MAX_NEW * rng.uniform(0.8, 1.0))]
    rng.shuffle(drawn)
    return [min(MAX_NEW, max(cap, 1)) for cap in drawn]


def buckets(shapes: dict[str, list[int]]) -> list[list[str]]:
    """Parameter names in send order, grouped into flat buckets of about BUCKET_BYTES (float32)."""
    out: list[list[str]] = [[]]
    size = 0
    for name in sorted(shapes):
        n = 4 * int(torch.Size(shapes[name]).numel())
        if out[-1] and size + n > BUCKET_BYTES:
            out.append([])
            size = 0
        out[-1].append(name)
        size += n
    return out


def generator(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="tcp_rl_weights_") as folder:  # removed when the job ends
        generate_and_swap(args, Path(folder))


def generate_and_swap(args: argparse.Namespace, weights_dir: Path) -> None:
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")  # one core: iteration time independent of trainers
    from safetensors import safe_open
    from safetensors.torch import save_file
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(args.model_dir), dtype="float32", max_model_len=256, enforce_eager=True, seed=0,
              worker_extension_cls="weight_loader.WeightLoader")
    with safe_open(str(args.model_dir / "model.safetensors"), "pt") as f:
        shapes = {name: f.get_slice(name).get_shape() for name in f.keys()}  # noqa: SIM118 - a safe_open handle
    plan = buckets(shapes)
    tokens: list[list[int]] = []
    checksums = [llm.collective_rpc("weights_checksum")[0]]
    for step in range(args.steps):
        samples = args.samples[step % len(args.samples)]
        prompts = [PROMPTS[(step * args.prompts + i) % len(PROMPTS)] for i in range(args.prompts)]
        params = [SamplingParams(n=samples, max_tokens=cap, temperature=1.0, ignore_eos=True,
                                 seed=args.seed * 1000 + step * 100 + i)
                  for i, cap in enumerate(caps(step, args.prompts, args.seed))]
        outs = llm.generate(prompts, params, use_tqdm=False)
        batch = [(list(o.prompt_token_ids), list(c.token_ids), i) for i, o in enumerate(outs) for c in o.outputs]
        tokens.append([len(b[1]) for b in batch])
        dist.broadcast_object_list([batch], src=GENERATOR)
        received: dict[str, torch.Tensor] = {}
        for names in plan:
            flat = torch.empty(sum(int(torch.Size(shapes[n]).numel()) for n in names))
            dist.recv(flat, src=SENDER)
            for name, part in zip(names, flat.split([int(torch.Size(shapes[n]).numel()) for n in names])):
                received[name] = part.view(shapes[name]).clone()
        save_file(received, str(weights_dir / "model.safetensors"))
        llm.collective_rpc("swap_in_weights", kwargs={"folder": str(weights_dir)})
        checksums.append(llm.collective_rpc("weights_checksum")[0])  # the engine serves the new weights
    llm.llm_engine.engine_core.shutdown()  # its engine process is not a daemon: without this, exit waits on it
    summary = {"samples": [args.samples[s % len(args.samples)] for s in range(args.steps)],
               "output_tokens": tokens, "buckets_per_step": len(plan), "weights_checksum": checksums,
               "weights_dir": str(weights_dir)}
    os.write(1, (json.dumps(summary) + "\n").encode())


def trainer(rank: int, args: argparse.Namespace, group: dist.ProcessGroup) -> None:
    from torch.nn.parallel import DistributedDataParallel
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)  # two trainers and a generator on a small machine: no oversubscription
    model = LlamaForCausalLM.from_pretrained(str(args.model_dir), dtype=torch.float32)
    ddp = DistributedDataParallel(model, process_group=group)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for _ in range(args.steps):
        box: list = [None]
        dist.broadcast_object_list(box, src=GENERATOR)
        batch = box[0]
        rewards = torch.tensor([sum(t == TARGET for t in b[1]) / max(len(b[1]), 1) for b in batch])
        prompt_of = torch.tensor([b[2] for b in batch])
        advantages = torch.zeros_like(rewards)
        for p in prompt_of.unique():  # GRPO: each sample against its own prompt's samples
            mask = prompt_of == p
            advantages[mask] = (rewards[mask] - rewards[mask].mean()) / (rewards[mask].std(unbiased=False) + 1e-4)
        mine = list(range(TRAINERS.index(rank), len(batch), len(TRAINERS)))
        micro = [mine[i :: args.micro] for i in range(args.micro)]
        opt.zero_grad()
        for k, part in enumerate(micro):
            last = k == len(micro) - 1
            with ddp.no_sync() if not last else nullcontext():  # gradients accumulate; the last one all-reduces
                logp = sequence_logprobs(ddp, [batch[i][0] for i in part], [batch[i][1] for i in part])
                loss = -(advantages[part] * logp).sum() / len(batch)
                loss.backward()
        opt.step()
        if rank == SENDER:
            with torch.no_grad():
                state = model.state_dict()
                shapes = {n: list(t.shape) for n, t in state.items()}
                for names in buckets(shapes):
                    dist.send(torch.cat([state[n].reshape(-1) for n in names]), dst=GENERATOR)


def sequence_logprobs(model: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]]) -> torch.Tensor:
    """Log-probability of each completion after its prompt: one padded forward for the micro-batch."""
    seqs = [p + c for p, c in zip(prompts, completions)]
    width = max(len(s) for s in seqs)
    ids = torch.tensor([s + [2] * (width - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    logps = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits, -1)
    out = []
    for row, (p, c) in enumerate(zip(prompts, completions)):
        picked = logps[row, len(p) - 1 : len(p) - 1 + len(c)].gather(1, torch.tensor(c)[:, None])
        out.append(picked.sum())
    return torch.stack(out)


def rank_main(args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=3)
    group = dist.new_group(TRAINERS)  # every rank creates every group, in the same order
    if args.rank == GENERATOR:
        generator(args)
    else:
        trainer(args.rank, args, group)
    dist.barrier()
    dist.destroy_process_group()


def samples_list(text: str) -> list[int]:
    """``--samples``: one count, or a comma-separated cycle (step k uses entry k mod its length)."""
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"samples per prompt must be integers >= 1, got {text!r}")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--samples", type=samples_list, default=[8, 4])
    parser.add_argument("--micro", type=int, default=2,
                        help="micro-batches per trainer step (no_sync on all but the last)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the token caps and the sampling")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "rltrace_tiny_llama")
    parser.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if args.rank is not None:
        rank_main(args)
        return
    tiny_llama.build(args.model_dir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--rank", str(r), "--port", str(port)])
             for r in range(3)]
    codes = [p.wait() for p in ranks]
    sys.exit(next((c for c in codes if c != 0), 0))


if __name__ == "__main__":
    main()
